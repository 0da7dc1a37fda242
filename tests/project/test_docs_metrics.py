"""Every metric name the apps can write into metrics.json has an entry in docs/metrics.md."""

from __future__ import annotations

import re
from pathlib import Path

import detcal
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

REPO = Path(__file__).resolve().parents[2]


def _doc_names() -> set[str]:
    text = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    names = set()
    for line in text.splitlines():
        m = re.match(r"^#{2,4}\s+(.*)$", line)
        if m:
            names |= {t.strip("`* ").lower() for t in re.split(r"[,/]| and ", m.group(1))}
            names |= {t.lower() for t in re.findall(r"`([A-Za-z0-9_]+)`", m.group(1))}
    return names


def test_every_metric_name_in_metrics_json_is_documented(tmp_path: Path) -> None:
    res = detcal.evaluate(DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)), workdir=tmp_path)
    m = res.to_dict()
    written: set[str] = set()
    for block in m["confidence"].values():
        written |= {k.removesuffix("_per_class") for k in block if not k.startswith("_")}
    written |= {k for k in m["regression"] if not k.startswith("_")}
    documented = _doc_names()
    missing = sorted(n for n in written if n.lower() not in documented)
    assert not missing, f"metrics without a docs/metrics.md entry: {missing}"
    assert len(written) >= 20
