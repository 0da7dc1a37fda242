"""The studies behind ``detcal-study``: each returns (numbers, Markdown table, figure files)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from detcal.data import bundled
from detcal.pipeline.spec import ConfigError
from detcal.studies import kueppers2020 as k, kuzucu2024 as z
from detcal.studies.lakara_retention import lakara_retention

__all__ = ["run_study"]


def _detectors(names: list[str]) -> list[str]:
    bad = [n for n in names if n not in bundled.DETECTORS]
    if bad:
        raise ConfigError("detectors", f"{bad} not among {', '.join(bundled.DETECTORS)}")
    return list(names) or list(bundled.DETECTORS)


def _printer(app: Any) -> Any:
    """One progress line on stderr per part of a study (none with ``output.progress=false``)."""
    if not getattr(app.output, "progress", True):
        return None

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return say


def run_study(app: Any, out: Path) -> tuple[dict[str, Any], str, list[str]]:
    """Run the study ``app.study`` (a :class:`detcal.apps.schema.StudyApp`) writing its figure under ``out``."""
    if app.study == "kueppers2020":
        res = k.run(detectors=_detectors(app.detectors), n_splits=app.n_splits, seed=app.seed, progress=_printer(app))
        files = []
        if app.output.plots:
            k.plot(res, out / "kueppers2020.png")
            files.append("kueppers2020.png")
        text = "# Küppers et al. 2020 on the bundled COCO detectors\n\n" + k.markdown_table(res)
        gain = k.position_gain(res)
        return (
            {"study": "kueppers2020", "rows": res.rows, "full": res.full, "params": res.params, "position_gain": gain},
            text,
            files,
        )
    if app.study == "kuzucu2024":
        ds = bundled.load_dataset("coco_tfzoo")
        per: dict[str, Any] = {}
        parts = ["# Kuzucu et al. 2024 protocol on the bundled COCO detectors", ""]
        for det in _detectors(app.detectors):
            r = z.run(ds, bundled.load_detections("coco_tfzoo", det), fraction=app.fraction, seed=app.seed, name=det)
            per[det] = {k: v for k, v in r.items() if k != "markdown"}
            parts += [f"## {det}", "", r["markdown"], ""]
        return {"study": "kuzucu2024", "detectors": per}, "\n".join(parts), []
    fig = out / "lakara_retention.png" if app.output.plots else None
    r = lakara_retention(None, source=app.source, n_images=app.n_images, seed=app.seed, figure=fig)
    body = {k: v for k, v in r.items() if k not in ("text", "figure")}
    return (
        {"study": "lakara_retention", **body},
        "# Lakara et al. 2022 retention study\n\n" + r["text"],
        (["lakara_retention.png"] if fig else []),
    )
