"""A background child (detcal.utils.background) does its one piece of work with Python's cyclic garbage
collector off, and leaves the parent's collector as it was (issue 29: the figure process's CPU)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from detcal.utils import background


def _write_collector_state(path: Path) -> None:
    path.write_text(str(gc.isenabled()))


@pytest.mark.skipif(not background.forking(), reason="forking is off here")
def test_children_run_without_the_collector_and_the_parent_keeps_it(tmp_path: Path) -> None:
    assert gc.isenabled()
    background.start(lambda: _write_collector_state(tmp_path / "start.txt")).join()
    w = background.prestart(lambda: _write_collector_state(tmp_path / "prepare.txt"))
    assert w is not None
    w.submit(_write_collector_state, tmp_path / "work.txt").join()
    assert {p.name: p.read_text() for p in sorted(tmp_path.iterdir())} == {
        "prepare.txt": "False",
        "start.txt": "False",
        "work.txt": "False",
    }
    assert gc.isenabled()
