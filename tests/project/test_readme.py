"""The README's Python lines run as written (on a generated COCO pair)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from detcal.data.synthetic import write_synthetic

REPO = Path(__file__).resolve().parents[2]


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_api_lines_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = _python_blocks((REPO / "README.md").read_text())
    assert blocks, "the README shows the Python API"
    code = blocks[0]
    assert len([ln for ln in code.splitlines() if ln.strip() and not ln.startswith("#")]) <= 7
    p = write_synthetic(tmp_path / "set", n_images=60, seed=0, render=False)
    (tmp_path / "instances.json").write_bytes(Path(p["coco_instances"]).read_bytes())
    (tmp_path / "results.json").write_bytes(Path(p["coco_results"]).read_bytes())
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - the README's own lines
    out = capsys.readouterr().out
    assert out.startswith("# detcal-evaluate summary")
    m = json.loads((tmp_path / "my_eval" / "metrics.json").read_text())
    assert m["headline"]["ece"] == ns["ece"]
    assert {"metrics.json", "summary.md", "detections.csv"} <= set(os.listdir(tmp_path / "my_eval"))
    assert any(f.endswith(".png") for f in os.listdir(tmp_path / "my_eval"))
