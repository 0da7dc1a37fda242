"""The figures of a run are drawn in a forked child while the other files are written (issue 29):
the same files and the same errors as drawing them inline (detcal.utils.background)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from detcal.core.errors import DetcalInputError
from detcal.utils import background


class _Unpicklable(Exception):
    def __init__(self) -> None:
        super().__init__("cannot travel")
        self.handle = lambda: None  # a lambda does not pickle


def _inline(monkeypatch: pytest.MonkeyPatch, inline: bool) -> None:
    if inline:
        monkeypatch.setenv("DETCAL_INLINE_WRITERS", "1")
    else:
        monkeypatch.delenv("DETCAL_INLINE_WRITERS", raising=False)


@pytest.mark.parametrize("inline", [False, True])
def test_job_runs_the_work_and_reraises_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inline: bool
) -> None:
    _inline(monkeypatch, inline)
    out = tmp_path / "pid.txt"
    job = background.start(lambda: out.write_text(str(os.getpid())))
    job.join()
    forked = background.forking()
    assert forked is (not inline and os.name == "posix" and os.uname().sysname == "Linux")
    assert (int(out.read_text()) != os.getpid()) is forked  # a child drew it where forking is on

    def fail() -> None:
        raise DetcalInputError("bad panel", record="plot input", field="gap")

    with pytest.raises(DetcalInputError, match="bad panel"):
        background.start(fail).join()
    with pytest.raises(RuntimeError, match="_Unpicklable: cannot travel") if forked else pytest.raises(_Unpicklable):
        background.start(lambda: (_ for _ in ()).throw(_Unpicklable())).join()


def _files(d: Path) -> dict[str, bytes]:
    skip = {"metrics.json", "report.html"}  # both carry the time of the run
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name not in skip}


def test_evaluation_files_equal_inline_and_figure_errors_reach_the_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec
    from detcal.reports import plots

    res = detcal.evaluate(DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)), workdir=tmp_path)
    written = {}
    for inline in (False, True):
        _inline(monkeypatch, inline)
        d = tmp_path / f"inline{inline}"
        content = res.write(d, plots=True, report=True)
        written[inline] = _files(d)
        assert sorted(content["files"]) == sorted(p.name for p in d.iterdir())  # every listed file is there
        assert json.loads((d / "metrics.json").read_text())["files"] == content["files"]
        assert any(f.endswith(".png") for f in content["files"]) and "report.html" in content["files"]
    assert written[False] == written[True]

    def broken(*a: object, **k: object) -> None:
        raise DetcalInputError("has length 3, expected 4", record="plot input", field="precision")

    monkeypatch.setattr(plots, "reliability_diagram", broken)
    for inline in (False, True):
        _inline(monkeypatch, inline)
        with pytest.raises(DetcalInputError, match="expected 4"):
            res.write(tmp_path / f"broken{inline}", plots=True, report=True)
        assert not (tmp_path / f"broken{inline}" / "report.html").exists()
