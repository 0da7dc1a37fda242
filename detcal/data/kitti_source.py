"""The KITTI format: ``label_2/`` + a results directory (one ``<frame>.txt`` per image), image
sizes from ``image_2/`` or a sizes file; written back as ``results/`` (+ ``label_2/``, ``sizes.txt``).

Matching by default: the devkit's rules (``kitti``: per-class IoU 0.7/0.5/0.5, difficulty,
DontCare; docs/matching.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_CATEGORIES, Dataset, Detections
from detcal.data.formats import LoadedData, MatchDefaults, need_path
from detcal.data.kitti import (
    kitti_rules,
    load_kitti_labels,
    load_kitti_results,
    write_kitti_labels,
    write_kitti_results,
)
from detcal.utils.io import write_text

__all__ = ["ADAPTER", "load_kitti"]


def load_kitti(
    label_dir: Any, results_dir: Any, image_dir: Any = None, sizes: Any = None, difficulty: str = "moderate"
) -> LoadedData:
    """KITTI labels and results with the devkit rules of ``difficulty``; sizes from ``image_dir``,
    ``sizes`` or the ``image_2/`` folder beside ``label_dir``."""
    labels = need_path(label_dir, "data.label_dir")
    results = need_path(results_dir, "data.results_dir")
    images = None if image_dir is None else need_path(image_dir, "data.image_dir")
    sizes_p = None if sizes is None else need_path(sizes, "data.sizes")
    if images is None and sizes_p is None:
        beside = labels.parent / "image_2"
        if beside.is_dir():
            images = beside
        else:
            raise DetcalInputError(
                f"KITTI needs image sizes: no image_2/ folder beside {labels}; give "
                f"data.image_dir=<image_2 folder> or data.sizes=<file of '<frame> <width> <height>'>",
                field="data.image_dir",
            )
    ds = load_kitti_labels(labels, image_dir=images, sizes=sizes_p, difficulty=difficulty)
    dets = load_kitti_results(results, dataset=ds)
    prov = {
        "source": "kitti",
        "label_dir": str(labels.resolve()),
        "results_dir": str(results.resolve()),
        "image_dir": None if images is None else str(images.resolve()),
        "sizes": None if sizes_p is None else str(sizes_p.resolve()),
        "difficulty": difficulty,
    }
    return LoadedData(ds, dets, kitti_rules(difficulty), prov)


class KittiAdapter:
    """KITTI ``data.label_dir`` + ``data.results_dir`` (sizes: ``data.image_dir`` or ``data.sizes``)."""

    name = "kitti"
    gt_field = "label_dir"
    results_field = "results_dir"
    fields = ("label_dir", "results_dir", "image_dir", "sizes", "difficulty")
    matching = MatchDefaults(mode="kitti", iou="kitti", max_dets=None)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_kitti` of the fields (``shard`` is not used: the whole set is read)."""
        return load_kitti(
            fields.get("label_dir"),
            fields.get("results_dir"),
            fields.get("image_dir"),
            fields.get("sizes"),
            str(fields.get("difficulty") or "moderate"),
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """``results/`` (+ ``label_2/`` and ``sizes.txt`` when ``write_gt``)."""
        write_kitti_results(out_dir / "results", dets, categories=KITTI_CATEGORIES, dataset=dataset)
        paths = {"results": str(out_dir / "results")}
        if write_gt:
            write_kitti_labels(out_dir / "label_2", dataset)
            im = dataset.images
            lines = [
                f"{Path(n).stem if n else f'{int(i):06d}'} {w:g} {h:g}"
                for i, w, h, n in zip(im.id.tolist(), im.width.tolist(), im.height.tolist(), im.file_name)
            ]
            write_text(out_dir / "sizes.txt", "\n".join(lines) + ("\n" if lines else ""))
            paths["gt"] = str(out_dir / "label_2")
            paths["sizes"] = str(out_dir / "sizes.txt")
        return paths


ADAPTER = KittiAdapter()
