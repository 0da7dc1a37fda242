"""The Pascal VOC format: one XML annotation per image, the devkit's per-class result files.

Ground truth (``data.label_dir``, the ``Annotations/`` folder): ``<image>.xml``
with ``<size><width>``/``<height>`` and one ``<object>`` per box (``<name>``,
``<difficult>`` 0/1, ``<bndbox>`` ``xmin ymin xmax ymax``). Detections
(``data.results_dir``): the devkit's result files, one per class, named
``comp<N>_det_<set>_<class>.txt`` (or ``<class>.txt``), lines ``<image> <score>
<xmin> <ymin> <xmax> <ymax>``. Coordinates are the devkit's one-based,
inclusive pixels: a box spans ``xmax - xmin + 1`` pixels, so it is read as the
continuous box ``[xmin - 1, ymin - 1, xmax, ymax]`` (and written back with the
``+1``), which makes the plain IoU the devkit's ``+1`` IoU. ``difficult`` boxes
are ``GroundTruth.ignore``: a detection on one is neither true nor false
positive and they are not counted as positives (:mod:`detcal.matching.voc`).

Categories: the order of ``data.names`` (a text file or data.yaml) where given;
else the 20 VOC classes in the devkit's order when every name is one of them;
else the names sorted. Ids are 1, 2, ... in that order. Image ids: the stems'
numbers where every stem is a number, else 1, 2, ... in sorted stem order.

Matching by default: the devkit's (``voc``: IoU > 0.5, no cap on detections);
AP as VOC2007's 11-point and the area variant (:mod:`detcal.metrics.voc_ap`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data._folders import parse_rows, read_names, stem_ids
from detcal.data.formats import LoadedData, MatchDefaults, need_path
from detcal.utils.io import write_text

__all__ = ["ADAPTER", "VOC_CLASSES", "load_voc", "write_voc"]

VOC_CLASSES: tuple[str, ...] = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)  # fmt: skip
"""The 20 Pascal VOC classes in the devkit's order."""

_RESULT_NAME = re.compile(r"^comp\d+_det_[^_]+_(?P<cls>.+)$")


def _text(node: ET.Element, path: str, file: Path, record: str, default: str | None = None) -> str:
    el = node.find(path)
    if el is None or el.text is None or not el.text.strip():
        if default is not None:
            return default
        raise DetcalInputError(f"missing <{path}>", file=file, record=record, field=path)
    return el.text.strip()


def _number(node: ET.Element, path: str, file: Path, record: str) -> float:
    s = _text(node, path, file, record)
    try:
        v = float(s)
    except ValueError:
        raise DetcalInputError(f"not a number: {s!r}", file=file, record=record, field=path) from None
    if not np.isfinite(v):
        raise DetcalInputError(f"not a finite number: {s!r}", file=file, record=record, field=path)
    return v


def _read_xml(p: Path) -> tuple[tuple[float, float], str, list[tuple[str, bool, list[float]]]]:
    """One annotation file -> (width, height), file name, [(name, difficult, [xmin, ymin, xmax, ymax])]."""
    try:
        root = ET.parse(p).getroot()
    except ET.ParseError as e:
        raise DetcalInputError(f"not valid XML: {e}", file=p) from None
    size = (_number(root, "size/width", p, "annotation"), _number(root, "size/height", p, "annotation"))
    if not (size[0] > 0 and size[1] > 0):
        raise DetcalInputError(f"image size {size[0]:g} x {size[1]:g} is not positive", file=p, field="size")
    objs = []
    for k, obj in enumerate(root.findall("object")):  # one XML element per box
        rec = f"object {k + 1}"
        diff = _text(obj, "difficult", p, rec, default="0")
        if diff not in ("0", "1"):
            raise DetcalInputError(f"<difficult> must be 0 or 1, got {diff!r}", file=p, record=rec, field="difficult")
        box = [_number(obj, f"bndbox/{c}", p, rec) for c in ("xmin", "ymin", "xmax", "ymax")]
        if box[2] < box[0] - 1 or box[3] < box[1] - 1:
            raise DetcalInputError(
                f"box {box} has xmax < xmin - 1 or ymax < ymin - 1", file=p, record=rec, field="bndbox"
            )
        objs.append((_text(obj, "name", p, rec), diff == "1", box))
    return size, _text(root, "filename", p, "annotation", default=p.stem), objs


def _category_names(found: set[str], names: Any) -> list[str]:
    if names is not None:
        given = read_names(need_path(names, "data.names"))
        listed = list(given) if isinstance(given, list) else [given[k] for k in sorted(given)]
        missing = sorted(found - set(listed))
        if missing:
            raise DetcalInputError(
                f"class {missing[0]!r} of the annotations is not in the names", file=names, field="names"
            )
        return listed
    if found <= set(VOC_CLASSES):
        return list(VOC_CLASSES)
    return sorted(found)


def _read_results(folder: Path, cat_of: dict[str, int], ids: dict[str, int]) -> tuple[Detections, int]:
    """The per-class result files -> Detections (files of classes not in the names are counted, not read)."""
    parts: list[tuple[int, np.ndarray, np.ndarray]] = []
    unknown = 0
    for p in sorted(folder.glob("*.txt")):  # one file per class
        m = _RESULT_NAME.match(p.stem)
        cls = m.group("cls") if m else p.stem
        text = p.read_text(encoding="utf-8-sig")
        names = [ln.split(None, 1)[0] for ln in text.splitlines() if ln.strip()]
        if cls not in cat_of:
            unknown += len(names)
            continue
        rows, lines = parse_rows(
            re.sub(r"^\s*\S+", "0", text, flags=re.M), p, (6,), "'<image> <score> <xmin> <ymin> <xmax> <ymax>'"
        )
        image = np.array([ids.get(Path(n).stem, -1) for n in names], dtype=np.int64)
        if (image < 0).any():
            i = int(np.flatnonzero(image < 0)[0])
            raise DetcalInputError(f"image {names[i]!r} has no annotation file", file=p, record=f"line {lines[i]}")
        parts.append((cat_of[cls], image, rows))
    if not parts:
        return Detections(np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64)), unknown
    rows = np.concatenate([r for _, _, r in parts])
    box = rows[:, 2:6] - np.array([1.0, 1.0, 0.0, 0.0])
    cat = np.repeat([c for c, _, _ in parts], [len(r) for _, _, r in parts]).astype(np.int64)
    return Detections(np.concatenate([i for _, i, _ in parts]), box, rows[:, 1], cat), unknown


def load_voc(label_dir: Any, results_dir: Any, names: Any = None, unknown_category: str = "drop") -> LoadedData:
    """VOC annotations and the devkit's per-class result files (module docstring)."""
    labels = need_path(label_dir, "data.label_dir")
    results = need_path(results_dir, "data.results_dir")
    files = sorted(labels.glob("*.xml"))
    if not files:
        raise DetcalInputError("holds no annotation files (*.xml)", file=labels, field="data.label_dir")
    ids = stem_ids(p.stem for p in files)
    read = {p.stem: _read_xml(p) for p in files}
    cat_names = _category_names({o[0] for _, _, objs in read.values() for o in objs}, names)
    cat_of = {n: i + 1 for i, n in enumerate(cat_names)}
    stems = sorted(read, key=lambda s: ids[s])
    images = Images(
        id=np.array([ids[s] for s in stems], dtype=np.int64),
        width=np.array([read[s][0][0] for s in stems]),
        height=np.array([read[s][0][1] for s in stems]),
        file_name=[read[s][1] for s in stems],
    )
    objs = [(ids[s], o) for s in stems for o in read[s][2]]
    gt = GroundTruth(
        image_id=np.array([i for i, _ in objs], dtype=np.int64),
        box=np.array([o[2] for _, o in objs], dtype=np.float64).reshape(-1, 4) - np.array([1.0, 1.0, 0.0, 0.0]),
        category=np.array([cat_of[o[0]] for _, o in objs], dtype=np.int64),
        ignore=np.array([o[1] for _, o in objs], dtype=bool),
    )
    dets, unknown = _read_results(results, cat_of, ids)
    if unknown and unknown_category == "error":
        raise DetcalInputError("holds a result file of a class not in the annotations' names", file=results)
    ds = Dataset(images=images, gt=gt, categories={i + 1: n for i, n in enumerate(cat_names)}, source=str(labels))
    prov = {"source": "voc", "label_dir": str(labels.resolve()), "results_dir": str(results.resolve()), "names": names}
    return LoadedData(ds, dets, None, prov, {"unknown_category": unknown} if unknown else {})


def _xml(name: str, w: float, h: float, objs: list[str]) -> str:
    return (
        f"<annotation>\n  <filename>{_esc(name)}</filename>\n  <size>\n    <width>{_num(w)}</width>\n"
        f"    <height>{_num(h)}</height>\n    <depth>3</depth>\n  </size>\n{''.join(objs)}</annotation>\n"
    )


def _num(v: float) -> str:
    """A whole number as an integer (the devkit's pixels), another in its shortest exact form."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _esc(s: str) -> str:
    return escape(s)


def write_voc(out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
    """``results/comp4_det_test_<class>.txt`` (+ ``Annotations/<image>.xml`` and ``names.txt``, the classes in
    category id order, when ``write_gt``) under
    ``out_dir``: the devkit's one-based coordinates (``xmin = x1 + 1``), numbers in their shortest exact form."""
    out = Path(out_dir)
    im = dataset.images
    stem = {i: (Path(n).stem if n else f"{i:06d}") for i, n in zip(im.id.tolist(), im.file_name)}
    (out / "results").mkdir(parents=True, exist_ok=True)
    one = np.array([1.0, 1.0, 0.0, 0.0])
    for c, name in dataset.categories.items():  # one file per class
        if not name or any(ch in name for ch in "/\\\0") or name in (".", ".."):
            raise DetcalInputError(  # the devkit names each result file by its class: never a path out of results/
                f"category {c} is named {name[:60]!r}, which cannot name a VOC result file "
                "(comp4_det_test_<class>.txt): rename the class",
                field="categories",
            )
        sel = np.flatnonzero(dets.category == c)
        b = dets.box[sel] + one
        lines = [
            f"{stem[i]} {s!r} {_num(x0)} {_num(y0)} {_num(x1)} {_num(y1)}"
            for i, s, (x0, y0, x1, y1) in zip(dets.image_id[sel].tolist(), dets.score[sel].tolist(), b.tolist())
        ]
        if lines:
            write_text(out / "results" / f"comp4_det_test_{name}.txt", "\n".join(lines) + "\n")
    paths = {"results": str(out / "results")}
    if write_gt:
        _write_annotations(out / "Annotations", dataset, stem)
        names = [dataset.categories[c] for c in sorted(dataset.categories)]
        write_text(out / "names.txt", "\n".join(names) + "\n")
        paths.update(gt=str(out / "Annotations"), names=str(out / "names.txt"))
    return paths


def _write_annotations(folder: Path, dataset: Dataset, stem: dict[int, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    g, im = dataset.gt, dataset.images
    difficult = g.ignore | g.iscrowd
    order = np.argsort(g.image_id, kind="stable")
    ids_sorted = g.image_id[order]
    for i, w, h, n in zip(im.id.tolist(), im.width.tolist(), im.height.tolist(), im.file_name):  # one file per image
        lo, hi = np.searchsorted(ids_sorted, [i, i + 1])
        objs = [
            f"  <object>\n    <name>{_esc(dataset.categories[int(g.category[r])])}</name>\n"
            f"    <difficult>{int(difficult[r])}</difficult>\n    <bndbox>\n"
            + "".join(
                f"      <{k}>{_num(v)}</{k}>\n"
                for k, v in zip(("xmin", "ymin", "xmax", "ymax"), (g.box[r] + [1, 1, 0, 0]).tolist())
            )
            + "    </bndbox>\n  </object>\n"
            for r in order[lo:hi].tolist()
        ]
        write_text(folder / f"{stem[i]}.xml", _xml(n or f"{stem[i]}.jpg", w, h, objs))


class VocAdapter:
    """Pascal VOC ``data.label_dir`` (Annotations) + ``data.results_dir`` (per-class result files)."""

    name = "voc"
    gt_field = "label_dir"
    results_field = "results_dir"
    fields = ("label_dir", "results_dir", "names", "unknown_category")
    matching = MatchDefaults(mode="voc", iou=(0.5,), max_dets=None)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_voc` of the fields (``shard`` is not used: the whole set is read)."""
        return load_voc(
            fields.get("label_dir"),
            fields.get("results_dir"),
            fields.get("names"),
            str(fields.get("unknown_category") or "drop"),
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """:func:`write_voc`."""
        return write_voc(out_dir, dets, dataset, write_gt)


ADAPTER = VocAdapter()
