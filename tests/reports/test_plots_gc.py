"""The figures are drawn with Python's cyclic garbage collector paused (detcal.reports.plots.paused_gc)."""

from __future__ import annotations

import gc

import pytest

from detcal.reports.plots import paused_gc


def test_paused_gc_pauses_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("a drawing error")
    assert gc.isenabled()  # restored on an error too


def test_paused_gc_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
