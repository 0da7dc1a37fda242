"""Print the KDE calibration errors of Popordanoska et al.'s own evaluation code on the bundled COCO sets.

Usage (needs torch and pycocotools; the authors' repository checked out at the pinned commit):

    python scripts/kde_reference.py --repo /path/to/calibration-object-detection --out tests/data/kde_reference/reference.json

The authors' ``code/evaluation.py`` imports detectron2 and TensorBoard at module level for its
training-side functions; this script does not import it. It reads that file, takes the six
functions the KDE evaluation consists of (``evaluate_ece_from_coco_eval``,
``evaluate_ece_at_cat_scale_and_iou``, ``evaluate_split``, ``split_in_two``, ``get_matched``,
``get_matched_ious``) unchanged from its syntax tree, and runs them in a namespace holding what
that module would have given them: numpy, torch, json, ``tqdm`` (a pass-through), their
``code/losses/ece_kde.py`` and ``code/utils/constants.py`` (executed unchanged). The COCOeval
object is pycocotools' official one after ``evaluate()`` and ``accumulate()`` with default
parameters, as their ``COCOEvaluator`` builds it (detectron2's fast C++ evaluator is not built in
their code). Nothing of theirs is copied into detcal.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.metadata
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

FUNCTIONS = (
    "evaluate_ece_from_coco_eval",
    "evaluate_ece_at_cat_scale_and_iou",
    "evaluate_split",
    "split_in_two",
    "get_matched",
    "get_matched_ious",
)
COMMIT = "3586d2904dd25080257566257e92637f0e5a993e"
DETECTORS = ("ssd-inception-v2", "ssd-resnet-50-v1", "faster-rcnn-resnet-50", "rfcn-resnet-101")


def _their_namespace(repo: Path) -> dict[str, Any]:
    import numpy as np
    import torch

    ns: dict[str, Any] = {"np": np, "torch": torch, "json": json, "tqdm": lambda x: x, "__name__": "their_code"}
    for rel in ("code/utils/constants.py", "code/losses/ece_kde.py"):
        exec(compile((repo / rel).read_text(), str(repo / rel), "exec"), ns)  # noqa: S102 - the reference itself
    src = (repo / "code/evaluation.py").read_text()
    tree = ast.parse(src)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in FUNCTIONS]
    missing = set(FUNCTIONS) - {n.name for n in keep}
    if missing:
        raise SystemExit(f"code/evaluation.py lacks {sorted(missing)}: another commit than {COMMIT}?")
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(repo / "code/evaluation.py"), "exec"), ns)  # noqa: S102
    return ns


def _coco_eval(gt_path: Path, dt_path: Path) -> Any:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(gt_path))
        dt = gt.loadRes(str(dt_path))
        ev = COCOeval(gt, dt, "bbox")
        ev.evaluate()
        ev.accumulate()
    return ev


def crowd_first(gt_path: Path, out: Path) -> Path:
    """The ground truth with its crowd annotations moved to the front of the file (the rest in file order).

    pycocotools lists crowd objects last in ``gtIds``; with a crowd object first in the file the
    authors' IoU-link lookup reads another object's IoU column, which this set exercises.
    """
    d = json.loads(gt_path.read_text())
    anns = d["annotations"]
    d["annotations"] = [a for a in anns if a.get("iscrowd")] + [a for a in anns if not a.get("iscrowd")]
    out.write_text(json.dumps(d))
    return out


def _gt_path(name: str, tmp: Path) -> Path:
    from detcal.data import bundled

    if name == "coco_mini79_crowd_first":
        return crowd_first(bundled.path("coco_mini79"), tmp / "gt_crowd_first.json")
    return bundled.path(name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, required=True, help="checkout of tpopordanoska/calibration-object-detection")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--sets",
        nargs="+",
        default=["coco_mini79", "coco_mini79_crowd_first"],
        help="coco_mini79, coco_mini79_crowd_first (crowd annotations moved first), coco_tfzoo",
    )
    ap.add_argument("--detectors", nargs="+", default=list(DETECTORS))
    args = ap.parse_args(argv)
    head = subprocess.run(["git", "-C", str(args.repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    commit = head.stdout.strip() or "unknown (not a git checkout)"
    if commit != COMMIT:
        print(f"warning: checkout at {commit}, the figures were recorded at {COMMIT}", file=sys.stderr)
    import tempfile

    import torch

    from detcal.data import bundled

    tmp = tempfile.mkdtemp(prefix="kde_reference_")
    ns = _their_namespace(args.repo)
    out: dict[str, Any] = {
        "reference": "tpopordanoska/calibration-object-detection",
        "commit": commit,
        "torch": torch.__version__,
        "pycocotools": importlib.metadata.version("pycocotools"),
        "sets": {},
    }
    for name in args.sets:
        for det in args.detectors:
            src = "coco_mini79" if name == "coco_mini79_crowd_first" else name
            ev = _coco_eval(_gt_path(name, Path(tmp)), bundled.path(src, det))
            rec = {}
            for link in ("thresh", "id"):
                log = io.StringIO()
                res = ns["evaluate_ece_from_coco_eval"](ev, log, link)
                rec[link] = {k: float(v) for k, v in res.items()}
            out["sets"][f"{name}/{det}"] = rec
            print(name, det, {k: round(v["ECE"], 6) for k, v in rec.items()}, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
