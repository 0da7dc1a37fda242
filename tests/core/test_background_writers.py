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


def _write_pid(path: Path, extra: str = "") -> None:
    path.write_text(f"{os.getpid()}{extra}")


def _fail_with(message: str) -> None:
    raise DetcalInputError(message, record="plot input", field="gap")


def _prepared_marker(path: Path) -> None:
    path.write_text("prepared")


def _boom() -> None:
    raise ValueError("a failed preparation is only a lost saving")


@pytest.mark.skipif(not background.forking(), reason="forking is off here")
def test_prestarted_worker_prepares_runs_one_work_and_reraises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _inline(monkeypatch, False)
    marker = tmp_path / "prepared.txt"
    w = background.prestart(lambda: _prepared_marker(marker))
    assert w is not None and w.waiting
    out = tmp_path / "pid.txt"
    job = w.submit(_write_pid, out, "!")
    assert not w.waiting
    job.join()
    assert out.read_text().endswith("!") and int(out.read_text()[:-1]) != os.getpid()  # drawn in the worker
    assert marker.read_text() == "prepared"  # the preparation ran before the work
    with pytest.raises(RuntimeError, match="already used"):
        w.submit(_write_pid, out)
    w.close()  # nothing left to end: no error

    w2 = background.prestart(_boom)  # the preparation's error is not the work's
    assert w2 is not None
    with pytest.raises(DetcalInputError, match="bad record"):
        w2.submit(_fail_with, "bad record").join()

    with background.prestart() as w3:  # closed without work: the child ends and is reaped
        assert w3 is not None and w3.waiting
        pid = w3._pid
    assert not w3.waiting
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped


@pytest.mark.skipif(not background.forking(), reason="forking is off here")
def test_run_falls_back_when_the_worker_is_gone_used_or_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import time

    _inline(monkeypatch, False)
    w = background.prestart()
    assert w is not None
    os.kill(w._pid, signal.SIGKILL)  # type: ignore[arg-type]
    time.sleep(0.2)
    out = tmp_path / "a.txt"
    background.run(w, _write_pid, out).join()  # a child forked now does it
    assert int(out.read_text()) != os.getpid() and not w.waiting
    background.run(None, _write_pid, tmp_path / "b.txt").join()
    assert (tmp_path / "b.txt").exists()
    background.run(w, _write_pid, tmp_path / "c.txt").join()  # used (gone): forked again
    assert (tmp_path / "c.txt").exists()
    with pytest.raises(DetcalInputError, match="late"):
        background.run(None, _fail_with, "late").join()


def test_prestart_is_off_where_forking_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _inline(monkeypatch, True)
    assert background.prestart() is None
    out = tmp_path / "pid.txt"
    background.run(None, _write_pid, out).join()
    assert int(out.read_text()) == os.getpid()  # inline


@pytest.mark.skipif(not background.forking(), reason="forking is off here")
def test_evaluation_figures_from_a_prestarted_worker_equal_a_forked_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec
    from detcal.reports.plots import import_matplotlib_for_drawing

    _inline(monkeypatch, False)
    res = detcal.evaluate(DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)), workdir=tmp_path)
    res.write(tmp_path / "forked", plots=True)
    res.figure_worker = background.prestart(import_matplotlib_for_drawing)
    assert res.figure_worker is not None
    content = res.write(tmp_path / "worker", plots=True)
    assert not res.figure_worker.waiting  # the worker drew them
    assert "reliability_per_class.png" in content["files"]
    assert _files(tmp_path / "worker") == _files(tmp_path / "forked")
