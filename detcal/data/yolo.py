"""The YOLO format: text folders with one ``<image>.txt`` per image, normalised boxes.

Ground truth (``data.label_dir``): lines ``class cx cy w h``; detections
(``data.results_dir``, as ``yolo predict save_txt=True save_conf=True``
writes them): lines ``class cx cy w h score``. ``cx cy w h`` are fractions of
the image width and height; pixel boxes are ``x1 = (cx - w/2) * W`` etc. (in
float64). Class names come from the ``data.yaml`` (``data.names``; ``names:``
a list or an ``{index: name}`` map), the class index is the category id.
Image sizes come from the images (``data.image_dir``, or an ``images/`` folder
beside the labels folder) or a sizes file (``data.sizes``: ``<image> <width>
<height>`` per line). Every image of the sizes file or image folder is in the
set (an image without a label file has no objects, as YOLO reads it). Image
ids: the stems' numbers where every stem is a number, else 1, 2, ... in
sorted stem order (:func:`detcal.data._folders.stem_ids`).

Matching by default: COCO's rules (YOLO validators report COCO-style
mAP50-95): ``exclusive``, IoU 0.5 and 0.75, 100 detections per image.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data._folders import folder_sizes, one_of, parse_rows, read_names, read_sizes, stem_ids
from detcal.data.formats import LoadedData, MatchDefaults, need_path
from detcal.utils.io import write_text

__all__ = ["ADAPTER", "load_yolo", "write_yolo"]


def _categories(names_path: Path) -> dict[int, str]:
    names = read_names(names_path)
    return dict(enumerate(names)) if isinstance(names, list) else dict(names)


def _images(
    label_dir: Path, image_dir: Any, sizes: Any
) -> tuple[dict[str, tuple[float, float]], dict[str, str], dict[str, Any]]:
    """Sizes and file names by stem, and where they came from."""
    if sizes is not None:
        p = need_path(sizes, "data.sizes")
        return read_sizes(p), {}, {"sizes": str(p.resolve())}
    folder = need_path(image_dir, "data.image_dir") if image_dir is not None else label_dir.parent / "images"
    if not folder.is_dir():
        raise DetcalInputError(
            f"YOLO needs image sizes: no images/ folder beside {label_dir}; give data.image_dir=<image folder> "
            "or data.sizes=<file of '<image> <width> <height>'>",
            field="data.image_dir",
        )
    s, names = folder_sizes(folder)
    return s, names, {"image_dir": str(folder.resolve())}


def _read_folder(
    folder: Path,
    width: int,
    what: str,
    cats: dict[int, str],
    ids: dict[str, int],
    sizes: dict[str, tuple[float, float]],
) -> dict[str, np.ndarray]:
    """Every ``*.txt`` of ``folder`` -> image ids, pixel xyxy boxes, classes (and scores with ``width`` 6)."""
    parts: list[tuple[int, np.ndarray]] = []
    for p in sorted(folder.glob("*.txt")):  # one file per image
        if p.stem not in ids:
            raise DetcalInputError("has no image (not in the image folder or sizes file)", file=p)
        rows, lines = parse_rows(p.read_text(encoding="utf-8-sig"), p, (width,), what)
        cls = rows[:, 0]
        bad = (cls != np.round(cls)) | ~np.isin(cls, list(cats))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DetcalInputError(
                f"class {cls[i]:g} is not in the names", file=p, record=f"line {lines[i]}", field="class"
            )
        wh = rows[:, 3:5]
        if (wh < 0).any():
            i = int(np.flatnonzero((wh < 0).any(axis=1))[0])
            raise DetcalInputError("negative box width or height", file=p, record=f"line {lines[i]}", field="w h")
        parts.append((ids[p.stem], rows))
    n = sum(len(r) for _, r in parts)
    rows = np.concatenate([r for _, r in parts]) if parts else np.zeros((0, width))
    image = (
        np.repeat([i for i, _ in parts], [len(r) for _, r in parts]).astype(np.int64)
        if parts
        else np.zeros(0, np.int64)
    )
    known = np.array([ids[s] for s in sizes], dtype=np.int64)
    table = np.array(list(sizes.values()), dtype=np.float64).reshape(-1, 2)
    o = np.argsort(known)
    size = table[o[np.searchsorted(known[o], image)]].reshape(n, 2)
    w, h = size[:, 0], size[:, 1]
    cx, cy, bw, bh = rows[:, 1], rows[:, 2], rows[:, 3], rows[:, 4]
    box = np.stack([(cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w, (cy + bh / 2) * h], axis=1)
    out = {"image_id": image, "box": box, "category": rows[:, 0].astype(np.int64)}
    if width == 6:
        out["score"] = rows[:, 5]
    return out


def load_yolo(label_dir: Any, results_dir: Any, names: Any, image_dir: Any = None, sizes: Any = None) -> LoadedData:
    """YOLO labels and detections folders with the class names of ``names`` (module docstring)."""
    labels = need_path(label_dir, "data.label_dir")
    results = need_path(results_dir, "data.results_dir")
    names_p = need_path(names, "data.names")
    cats = _categories(names_p)
    size_of, file_names, where = _images(labels, image_dir, sizes)
    for p in sorted(labels.glob("*.txt")):
        if p.stem not in size_of:
            raise DetcalInputError("has no image (not in the image folder or sizes file)", file=p)
    ids = stem_ids(size_of)
    stems = sorted(size_of, key=lambda s: ids[s])
    images = Images(
        id=np.array([ids[s] for s in stems], dtype=np.int64),
        width=np.array([size_of[s][0] for s in stems]),
        height=np.array([size_of[s][1] for s in stems]),
        file_name=[file_names.get(s, s) for s in stems],
    )
    g = _read_folder(labels, 5, "'class cx cy w h'", cats, ids, size_of)
    gt = GroundTruth(image_id=g["image_id"], box=g["box"], category=g["category"])
    d = _read_folder(results, 6, "'class cx cy w h score'", cats, ids, size_of)
    dets = Detections(image_id=d["image_id"], box=d["box"], score=d["score"], category=d["category"])
    ds = Dataset(images=images, gt=gt, categories=cats, source=str(labels))
    prov = {
        "source": "yolo",
        "label_dir": str(labels.resolve()),
        "results_dir": str(results.resolve()),
        "names": str(names_p.resolve()),
        **where,
    }
    return LoadedData(ds, dets, None, prov)


def _stem(image_id: int, file_name: str) -> str:
    return Path(file_name).stem if file_name else f"{image_id:012d}"


def _lines(rows: np.ndarray, cols: int) -> list[str]:
    """``class v1 v2 ...`` lines, each float in its shortest exact form (``repr``: read back bit for bit)."""
    return [" ".join([str(int(r[0]))] + [repr(v) for v in r[1:]]) for r in rows.tolist()]


def _write_txt_folder(folder: Path, dataset: Dataset, image_id: np.ndarray, rows: np.ndarray, all_images: bool) -> None:
    """One ``<stem>.txt`` per image (every image with ``all_images``, else those with rows)."""
    folder.mkdir(parents=True, exist_ok=True)
    order = np.argsort(image_id, kind="stable")
    ids_sorted = image_id[order]
    im = dataset.images
    for i, name in zip(im.id.tolist(), im.file_name):  # one file per image
        lo, hi = np.searchsorted(ids_sorted, [i, i + 1])
        if hi == lo and not all_images:
            continue
        text = "\n".join(_lines(rows[order[lo:hi]], rows.shape[1]))
        write_text(folder / f"{_stem(i, name)}.txt", text + ("\n" if hi > lo else ""))


def _normalised(dataset: Dataset, image_id: np.ndarray, box: np.ndarray) -> np.ndarray:
    row = dataset.images.index_of(image_id)
    w, h = dataset.images.width[row], dataset.images.height[row]
    cx, cy = (box[:, 0] + box[:, 2]) / 2 / w, (box[:, 1] + box[:, 3]) / 2 / h
    return np.stack([cx, cy, (box[:, 2] - box[:, 0]) / w, (box[:, 3] - box[:, 1]) / h], axis=1)


def write_yolo(out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
    """``detections/`` (+ ``labels/``, ``data.yaml`` and ``sizes.txt`` when ``write_gt``) under ``out_dir``.

    Class indices are the category ids when those are 0..K-1, else the position of each category in sorted
    id order (``data.yaml`` names them); numbers in their shortest exact form, so reading back gives
    the same normalised values (pixel boxes to rounding)."""
    ids = sorted(dataset.categories)
    index = {c: c for c in ids} if ids == list(range(len(ids))) else {c: k for k, c in enumerate(ids)}
    lut = np.vectorize(index.__getitem__, otypes=[np.int64])
    out = Path(out_dir)
    cls = lut(dets.category) if len(dets) else np.zeros(0, np.int64)
    rows = np.column_stack([cls, _normalised(dataset, dets.image_id, dets.box), dets.score])
    _write_txt_folder(out / "detections", dataset, dets.image_id, rows, all_images=False)
    paths = {"results": str(out / "detections")}
    if write_gt:
        g = dataset.gt
        gcls = lut(g.category) if len(g) else np.zeros(0, np.int64)
        _write_txt_folder(
            out / "labels", dataset, g.image_id, np.column_stack([gcls, _normalised(dataset, g.image_id, g.box)]), True
        )
        names = "\n".join(f"  {index[c]}: {_yaml_str(dataset.categories[c])}" for c in ids)
        write_text(out / "data.yaml", f"# class index: name\nnames:\n{names}\n")
        im = dataset.images
        sizes = [
            f"{_stem(i, n)} {w:.17g} {h:.17g}"
            for i, w, h, n in zip(im.id.tolist(), im.width.tolist(), im.height.tolist(), im.file_name)
        ]
        write_text(out / "sizes.txt", "\n".join(sizes) + "\n")
        paths.update(gt=str(out / "labels"), names=str(out / "data.yaml"), sizes=str(out / "sizes.txt"))
    return paths


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a YAML string


class YoloAdapter:
    """YOLO ``data.label_dir`` + ``data.results_dir`` text folders, ``data.names`` (data.yaml), sizes from
    ``data.image_dir`` or ``data.sizes``."""

    name = "yolo"
    gt_field = "label_dir"
    results_field = "results_dir"
    fields = ("label_dir", "results_dir", "names", "image_dir", "sizes")
    matching = MatchDefaults(mode="exclusive", iou=(0.5,), max_dets=100)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_yolo` of the fields (``shard`` is not used: the whole set is read)."""
        return load_yolo(
            fields.get("label_dir"),
            fields.get("results_dir"),
            fields.get("names"),
            one_of(fields, "image_dir"),
            one_of(fields, "sizes"),
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """:func:`write_yolo`."""
        return write_yolo(out_dir, dets, dataset, write_gt)


ADAPTER = YoloAdapter()
