"""``detcal-match``: match a results file to ground truth and write one CSV row per detection.

Usage::

    detcal-match --gt instances.json --results results.json --format coco \\
        --iou 0.5 0.75 --mode exclusive --max-dets 100 --out matches.csv
    detcal-match --gt label_2/ --results results/ --format kitti \\
        --sizes sizes.txt --difficulty moderate --iou kitti --out matches.csv
    detcal-match --gt Annotations/ --results results/ --format voc --out matches.csv

Every format of the registry (:mod:`detcal.data.formats`: coco, kitti, yolo, voc,
lvis, openimages) is read by its adapter, and its default matching rules apply
unless ``--mode``/``--iou``/``--max-dets`` say otherwise.

Output (written atomically), one row per input detection, in the input order
(COCO: results-file order; KITTI: frame, then line order)::

    image_id,category,score,considered,iou,matched@T,ignored@T,gt_id@T,...

``matched@T``/``ignored@T`` are 0/1, ``gt_id@T`` is the annotation id of the
GT the detection took at threshold T (COCO ``id``; KITTI running number),
-1 for none; ``iou`` is the best IoU with a GT of its group; ``considered``
is 0 for detections cut by the score threshold or ``--max-dets``. With
``--iou kitti`` the one threshold column set is named ``@kitti`` (each
detection uses its class's devkit threshold). A sidecar
``<out>.json`` records every parameter (mode, thresholds, score threshold,
max dets, class-agnostic, KITTI rules, inputs) and the counts.

Matching rules: docs/matching.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from detcal.core.errors import DetcalError, DetcalInputError
from detcal.data.formats import LoadedData, format_names, get_format
from detcal.matching.engine import GT_IGNORE, MODES
from detcal.pipeline.matcher import run_match
from detcal.pipeline.sources import load_data, unknown_category_warning
from detcal.pipeline.spec import DataSpec, MatchingSpec
from detcal.reports.match_outputs import match_summary, write_match_outputs


def _max_dets(text: str) -> int:
    """``--max-dets`` value: a positive int, or 0 for 'none' (no limit)."""
    if text.lower() in ("none", "all", "0"):
        return 0
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-dets must be a positive int or 'none', got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"--max-dets must be a positive int or 'none', got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The ``detcal-match`` argument parser."""
    ap = argparse.ArgumentParser(
        prog="detcal-match",
        description="Match detections to ground truth (COCO exclusive / netcal max / KITTI rules) and write per-detection targets as CSV.",
    )
    ap.add_argument(
        "--gt", required=True, help="COCO instances JSON, or the labels folder (KITTI label_2, YOLO labels, VOC XML)"
    )
    ap.add_argument("--results", required=True, help="COCO results JSON, or the results folder of the format")
    ap.add_argument("--format", choices=format_names(), default="coco", help="data format (docs/formats.md)")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--sizes", help="KITTI/YOLO: file of '<frame> <W> <H>' lines with the image sizes")
    size.add_argument("--images", help="KITTI/YOLO: image folder (sizes read from the image headers)")
    ap.add_argument("--names", help="YOLO: data.yaml with the class names (VOC: optional class order)")
    ap.add_argument("--hierarchy", help="Open Images: the class hierarchy JSON")
    ap.add_argument("--labels", help="Open Images CSV: the image-level labels CSV")
    ap.add_argument(
        "--iou",
        nargs="+",
        default=None,
        help="IoU thresholds (default 0.5 for coco, 'kitti' = per-class devkit thresholds for kitti)",
    )
    ap.add_argument(
        "--mode",
        choices=(*MODES, "voc", "lvis", "openimages"),
        default=None,
        help="exclusive (pycocotools; default for coco and yolo), kitti (the devkit's walk; default for kitti), "
        "voc (the VOC devkit's rule; default for voc), lvis (LVISEval's rules; default for lvis), "
        "openimages (the Open Images challenge's; default for openimages), max",
    )
    ap.add_argument(
        "--gt-ignore",
        choices=GT_IGNORE,
        default="pycocotools",
        help="COCO 'ignore' key: overwritten by iscrowd as pycocotools does, or ignore_or_crowd",
    )
    ap.add_argument("--class-agnostic", action="store_true", help="match regardless of category")
    ap.add_argument(
        "--score-threshold", type=float, default=0.0, help="detections with a lower score are not considered"
    )
    ap.add_argument(
        "--max-dets",
        type=_max_dets,
        default=None,
        help="keep the best N per image and category ('none' = all; default 100 for coco, none for kitti)",
    )
    ap.add_argument("--difficulty", choices=("easy", "moderate", "hard"), default="moderate", help="KITTI difficulty")
    ap.add_argument(
        "--unknown-category",
        choices=("drop", "error"),
        default="drop",
        help="detections of a category absent from the ground truth: drop (counted) or error",
    )
    ap.add_argument("--out", required=True, help="output CSV path")
    return ap


def _thresholds(values: list[str] | None, fmt: str) -> tuple[float, ...] | str:
    if values is None:
        return get_format(fmt).matching.iou
    if len(values) == 1 and values[0].lower() == "kitti":
        if fmt != "kitti":
            raise DetcalInputError("--iou kitti needs --format kitti", field="--iou")
        return "kitti"
    out = []
    for v in values:
        try:
            out.append(float(v))
        except ValueError:
            raise DetcalInputError(f"not an IoU threshold: {v!r}", field="--iou") from None
    return tuple(out)


def _load(args: argparse.Namespace) -> LoadedData:
    adapter = get_format(args.format)
    given = {
        adapter.gt_field: args.gt,
        adapter.results_field: args.results,
        "image_dir": args.images,
        "sizes": args.sizes,
        "names": args.names,
        "hierarchy": args.hierarchy,
        "labels": args.labels,
        "difficulty": args.difficulty,
        "unknown_category": args.unknown_category,
    }
    for key, flag in (
        ("sizes", "--sizes"),
        ("image_dir", "--images"),
        ("names", "--names"),
        ("hierarchy", "--hierarchy"),
        ("labels", "--labels"),
    ):
        if given[key] is not None and key not in adapter.fields:
            raise DetcalInputError(f"is not read by --format {args.format}", field=flag)
    spec = DataSpec(source=args.format, **{k: v for k, v in given.items() if k in adapter.fields})
    data = load_data(spec, ".")
    for cause, n in data.dropped.items():
        src = args.results
        why = (
            unknown_category_warning(src, n)
            if cause == "unknown_category"
            else f"{src}: left out {n} detections ({cause.replace('_', ' ')})"
        )
        print(f"detcal-match: warning: {why}", file=sys.stderr)
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``detcal-match``; returns the exit status (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    t0 = time.perf_counter()
    try:
        iou = _thresholds(args.iou, args.format)
        data = _load(args)
        ds, dets = data.dataset, data.detections
        if len(dets) == 0:
            raise DetcalInputError("holds no detections: nothing to match", file=args.results)
        defaults = get_format(args.format).matching
        if args.max_dets is None:  # the format's default: COCO maxDets 100, the KITTI and VOC devkits no cap
            max_dets = defaults.max_dets
        else:
            max_dets = args.max_dets or None
        t1 = time.perf_counter()
        spec = MatchingSpec(
            mode=args.mode or defaults.mode,
            iou_thresholds=iou if isinstance(iou, str) else list(iou),
            class_agnostic=args.class_agnostic,
            score_threshold=args.score_threshold,
            max_dets=max_dets,
            gt_ignore=args.gt_ignore,
        )
        result = run_match(spec, dets, data)  # the pipeline's one dispatch over the matching modes
        t2 = time.perf_counter()
        per_class = isinstance(iou, str)
        inputs = {
            "format": args.format,
            "gt": str(args.gt),
            "results": str(args.results),
            "difficulty": args.difficulty if "difficulty" in get_format(args.format).fields else None,
        }
        counts = write_match_outputs(args.out, ds, dets, result, per_class, inputs, {"load": t1 - t0, "match": t2 - t1})
    except (DetcalError, OSError) as e:
        print(f"detcal-match: error: {e}", file=sys.stderr)
        return 2
    print(
        f"detcal-match: {match_summary(counts, result, per_class)}; load {t1 - t0:.2f}s, "
        f"match {t2 - t1:.3f}s -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
