"""scripts/compare_metrics.py, the number-for-number check of a refactor: it finds a changed number, a lost
one, and passes equal files whose layout moved a skipped block."""

from __future__ import annotations

import json
from pathlib import Path

from support.scripts import load_script

cm = load_script("scripts/compare_metrics.py")


def _write(d: Path, doc: dict) -> Path:
    d.mkdir()
    (d / "run.json").write_text(json.dumps(doc))
    return d


def test_equal_runs_pass_and_timings_are_ignored(tmp_path: Path, capsys) -> None:
    a = _write(tmp_path / "a", {"ece": {"value": 0.1, "ci": [0.05, 0.2]}, "timing_s": {"all": 3.0}})
    b = _write(tmp_path / "b", {"ece": {"value": 0.1, "ci": [0.05, 0.2]}, "timing_s": {"all": 9.0}})
    assert cm.main([str(a), str(b)]) == 0
    assert "every number equal" in capsys.readouterr().out


def test_a_changed_number_fails_unless_within_the_tolerance(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", {"ece": {"value": 0.1}})
    b = _write(tmp_path / "b", {"ece": {"value": 0.1 + 1e-15}})
    assert cm.main([str(a), str(b)]) == 1
    assert cm.main([str(a), str(b), "--rtol", "1e-13"]) == 0


def test_a_lost_number_fails_and_nan_equals_null(tmp_path: Path) -> None:
    a = _write(tmp_path / "a", {"x": [1.5, float("nan")], "y": 2.0})
    b = _write(tmp_path / "b", {"x": [1.5, None]})
    r = cm.compare(dict(cm.numbers(json.loads((a / "run.json").read_text()))), dict(cm.numbers({"x": [1.5, None]})), 0)
    assert r == {"differ": [], "gone": ["/y"], "lost": ["2.0"]}
    assert cm.main([str(a), str(b)]) == 1
