"""The official Open Images V7 CSV files (docs/formats.md, "Open Images V7").

Ground truth:

* boxes (``data.gt``, a ``.csv``): ``ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,
  IsTruncated,IsGroupOf,IsDepiction,IsInside``, coordinates relative to the image size in [0, 1];
* image-level labels (``data.labels``, optional): ``ImageID,Source,LabelName,Confidence``, Confidence 1 a
  verified present class, 0 a verified absent one;
* class descriptions (``data.names``): ``LabelName,DisplayName`` lines (a header line is optional), the
  categories in file order, ids 1, 2, ...;
* the hierarchy JSON (``data.hierarchy``, optional), label names matched to the ``LabelName`` column;
* image sizes (``data.sizes``, lines ``<ImageID> <width> <height>``, or ``data.image_dir``, the images).

Detections (``data.results``): the challenge submission, ``ImageId,PredictionString`` with the prediction
string ``LabelName Score XMin YMin XMax YMax ...``, or a box CSV with a ``Score`` (or ``Confidence``)
column: ``ImageID,LabelName,Score,XMin,XMax,YMin,YMax``. Columns are found by their header names, in any
order; other columns are ignored. A box is ``[XMin * W, YMin * H, XMax * W, YMax * H]`` in pixels. Image ids
are the ImageIDs where every one is a decimal number, else 1, 2, ... in sorted ImageID order.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data._folders import folder_sizes, read_sizes, stem_ids
from detcal.data.formats import LoadedData, need_path

__all__ = ["BOX_COLUMNS", "LABEL_COLUMNS", "OpenImagesCsv", "read_classes", "read_openimages_csv"]

BOX_COLUMNS = ("ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax", "IsGroupOf")
"""The columns of the boxes CSV detcal reads (the file's other columns are ignored)."""
LABEL_COLUMNS = ("ImageID", "LabelName", "Confidence")
"""The columns of the image-level labels CSV detcal reads."""


@dataclass
class OpenImagesCsv:
    """What the CSVs hold: the records (``data``), each category's ``LabelName`` (``label_names``, the
    names the hierarchy JSON uses), the group-of flag of each box [G] and the verified present (``pos``)
    and absent (``neg``) (image id, category id) pairs."""

    data: LoadedData
    label_names: dict[int, str]
    group_of: np.ndarray
    pos: list[tuple[int, int]]
    neg: list[tuple[int, int]]


class _Table:
    """A CSV file with a header: its rows (text, parsed by the C reader) and, for errors, their line numbers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as e:
            raise DetcalInputError(f"cannot read: {e}", file=path) from None
        reader = csv.reader(io.StringIO(self._text))
        self.header = [h.strip() for h in next(reader, [])]
        self.rows: list[list[str]] = list(filter(None, reader))  # blank lines left out
        self._lines: list[int] | None = None
        self.row_of: list[int] | None = None  # a submission: the row of each detection
        n = len(self.header)
        if self.rows and min(map(len, self.rows)) < n:
            i = next(i for i, r in enumerate(self.rows) if len(r) < n)
            raise self.fail(f"{len(self.rows[i])} values where the header has {n}", i, None)

    @property
    def lines(self) -> list[int]:
        """The line number of each row (worked out only when an error names one)."""
        if self._lines is None:
            reader = csv.reader(io.StringIO(self._text))
            next(reader, None)
            self._lines = [reader.line_num for row in reader if row]
        return self._lines

    def has(self, name: str) -> bool:
        return name in self.header

    def column(self, name: str) -> list[str]:
        """The text of column ``name`` (an error naming the file when the header lacks it)."""
        if name not in self.header:
            raise DetcalInputError(f"no column {name!r} in the header {','.join(self.header)!r}", file=self.path)
        return list(map(str.strip, map(itemgetter(self.header.index(name)), self.rows)))

    def numbers(self, name: str) -> np.ndarray:
        """Column ``name`` as finite float64 (an error naming the first line that is not a number)."""
        return _numbers(self.column(name), lambda i: self.fail("", i, name), name)

    def fail(self, message: str, i: int, field: str | None) -> DetcalInputError:
        """The error of record ``i`` (a row; a detection's row once ``row_of`` is set)."""
        row = i if self.row_of is None else self.row_of[i]
        return DetcalInputError(message, file=self.path, record=f"line {self.lines[row]}", field=field)


def _numbers(values: Sequence[str], fail: Callable[[int], DetcalInputError], name: str) -> np.ndarray:
    """``values`` as finite float64; else ``fail(i)`` (its file and line) for the first bad one."""
    try:
        out = np.fromiter(map(float, values), dtype=np.float64, count=len(values))
        bad = ~np.isfinite(out)
    except ValueError:
        bad = np.array([not _is_number(v) for v in values])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        e = fail(i)
        raise DetcalInputError(f"expected a finite number, got {values[i]!r}", file=e.file, record=e.record, field=name)
    return out


def _is_number(v: str) -> bool:
    try:
        return bool(np.isfinite(float(v)))
    except ValueError:
        return False


def read_classes(path: Path) -> dict[str, tuple[int, str]]:
    """{LabelName: (category id, DisplayName)} of a class descriptions CSV (ids 1, 2, ... in file order)."""
    try:
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    except (OSError, UnicodeDecodeError) as e:
        raise DetcalInputError(f"cannot read: {e}", file=path) from None
    out: dict[str, tuple[int, str]] = {}
    for n, row in enumerate(rows, 1):  # per class
        if not row or (n == 1 and row[0].strip() == "LabelName"):
            continue
        if len(row) < 2 or not row[0].strip():
            raise DetcalInputError("expected 'LabelName,DisplayName'", file=path, record=f"line {n}")
        if row[0].strip() in out:
            raise DetcalInputError(f"{row[0].strip()!r} is listed twice", file=path, record=f"line {n}")
        out[row[0].strip()] = (len(out) + 1, row[1].strip())
    if not out:
        raise DetcalInputError("lists no class", file=path)
    return out


def _sizes(sizes: Any, image_dir: Any) -> tuple[dict[str, tuple[float, float]], dict[str, str], dict[str, str]]:
    """Image sizes and file names by ImageID, and where they came from."""
    if sizes not in (None, ""):
        p = need_path(sizes, "data.sizes")
        return read_sizes(p), {}, {"sizes": str(p.resolve())}
    if image_dir not in (None, ""):
        d = need_path(image_dir, "data.image_dir")
        s, names = folder_sizes(d)
        return s, names, {"image_dir": str(d.resolve())}
    raise DetcalInputError(
        "the Open Images CSV coordinates are relative: give data.sizes=<file of '<ImageID> <width> <height>'> "
        "or data.image_dir=<image folder>",
        field="data.sizes",
    )


def _lookup(t: _Table, values: list[str], known: dict[str, int], field: str, what: str) -> np.ndarray:
    """Each value's id in ``known``, or an error naming the first unknown one."""
    ids = np.fromiter(map(known.get, values, repeat(-1)), dtype=np.int64, count=len(values))
    if (ids < 0).any():
        i = int(np.flatnonzero(ids < 0)[0])
        raise t.fail(f"{values[i]!r} is not {what}", i, field)
    return ids


def _pixels(t: _Table, image: np.ndarray, wh: np.ndarray, unit: bool) -> np.ndarray:
    """[N, 4] pixel xyxy from the relative XMin, XMax, YMin, YMax columns of ``t``."""
    x0, x1, y0, y1 = (t.numbers(c) for c in ("XMin", "XMax", "YMin", "YMax"))
    return _scale(t, np.stack([x0, y0, x1, y1], axis=1), image, wh, unit)


def _scale(t: _Table, rel: np.ndarray, image: np.ndarray, wh: np.ndarray, unit: bool) -> np.ndarray:
    bad = (rel[:, 2] < rel[:, 0]) | (rel[:, 3] < rel[:, 1])
    if unit:
        bad |= ((rel < 0) | (rel > 1)).any(axis=1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        rule = "0 <= XMin <= XMax <= 1 and 0 <= YMin <= YMax <= 1" if unit else "XMin <= XMax and YMin <= YMax"
        raise t.fail(f"box {rel[i].tolist()} (XMin, YMin, XMax, YMax) breaks {rule}", i, "XMin")
    size = wh[image]
    return rel * np.concatenate([size, size], axis=1)


def _group_of(t: _Table) -> np.ndarray:
    """IsGroupOf as bool: 1 a group-of box, 0 or -1 (unknown, as the challenge's evaluator reads it) not."""
    g = t.numbers("IsGroupOf")
    bad = ~np.isin(g, (-1.0, 0.0, 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise t.fail(f"expected 0, 1 or -1, got {t.column('IsGroupOf')[i]!r}", i, "IsGroupOf")
    return g == 1


def _labels(path: Path, index: dict[str, int], classes: dict[str, int]) -> tuple[list[Any], list[Any]]:
    """Verified present and absent (image, category) pairs of an image-level labels CSV."""
    t = _Table(path)
    image = _lookup(t, t.column("ImageID"), index, "ImageID", "an image with a size")
    cat = _lookup(t, t.column("LabelName"), classes, "LabelName", "in the class descriptions")
    conf = t.numbers("Confidence")
    bad = ~np.isin(conf, (0.0, 1.0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise t.fail(f"expected 1 (verified present) or 0 (verified absent), got {conf[i]:g}", i, "Confidence")
    pairs = np.stack([image, cat], axis=1)
    return [tuple(p) for p in pairs[conf == 1].tolist()], [tuple(p) for p in pairs[conf == 0].tolist()]


def _submission(t: _Table) -> tuple[list[str], list[str], np.ndarray, list[int]]:
    """ImageIDs, LabelNames, [N, 5] (score, XMin, YMin, XMax, YMax) and rows of a submission's detections."""
    ids: list[str] = []
    labels: list[str] = []
    nums: list[str] = []
    rows: list[int] = []
    for i, (im, pred) in enumerate(zip(t.column("ImageId"), t.column("PredictionString"))):  # per image
        tok = pred.split()
        if len(tok) % 6:
            raise t.fail(
                f"{len(tok)} values, not groups of 'LabelName Score XMin YMin XMax YMax'", i, "PredictionString"
            )
        k = len(tok) // 6
        ids += [im] * k
        labels += tok[0::6]
        nums += [tok[j] for g in range(k) for j in range(6 * g + 1, 6 * g + 6)]
        rows += [i] * k
    v = _numbers(nums, lambda j: t.fail("", rows[j // 5], "PredictionString"), "PredictionString")
    return ids, labels, v.reshape(-1, 5), rows


def _detections(
    path: Path, index: dict[str, int], classes: dict[str, int], wh: np.ndarray, unknown: str
) -> tuple[Detections, int]:
    """The detections of a submission or box CSV with scores, and how many of unknown classes were dropped."""
    t = _Table(path)
    if t.has("PredictionString"):
        stems, labels, v, t.row_of = _submission(t)  # errors below name each detection's line
        rel = v[:, 1:]
        score = v[:, 0]
    else:
        stems, labels = t.column("ImageID"), t.column("LabelName")
        rel = np.zeros((len(stems), 4))
        score = t.numbers("Score" if t.has("Score") or not t.has("Confidence") else "Confidence")
    image = _lookup(t, stems, index, "ImageID", "an image with a size")
    cat = np.fromiter(map(classes.get, labels, repeat(-1)), dtype=np.int64, count=len(labels))
    drop = cat < 0
    if drop.any() and unknown == "error":
        i = int(np.flatnonzero(drop)[0])
        raise t.fail(f"{labels[i]!r} is not in the class descriptions", i, "LabelName")
    if not t.has("PredictionString"):
        x0, x1, y0, y1 = (t.numbers(c) for c in ("XMin", "XMax", "YMin", "YMax"))
        rel = np.stack([x0, y0, x1, y1], axis=1)
    box = _scale(t, rel, image, wh, unit=False)
    keep = ~drop
    dets = Detections(image_id=image[keep], box=box[keep], score=score[keep], category=cat[keep])
    return dets, int(drop.sum())


def read_openimages_csv(
    gt: Path,
    results: Any,
    unknown_category: str = "drop",
    labels: Any = None,
    names: Any = None,
    sizes: Any = None,
    image_dir: Any = None,
) -> OpenImagesCsv:
    """The Open Images CSVs (module docstring), not yet expanded over the hierarchy
    (:func:`detcal.data.openimages.load_openimages` expands them as it does the JSON files)."""
    res = need_path(results, "data.results")
    cls_path = need_path(names, "data.names")
    described = read_classes(cls_path)
    classes = {k: c for k, (c, _) in described.items()}
    size_of, file_names, where = _sizes(sizes, image_dir)
    ids = stem_ids(size_of)
    stems = sorted(size_of, key=lambda s: ids[s])
    index = {s: i for i, s in enumerate(stems)}  # row of each ImageID in the image table
    wh = np.array([size_of[s] for s in stems], dtype=np.float64).reshape(-1, 2)
    image_ids = np.array([ids[s] for s in stems], dtype=np.int64)
    t = _Table(gt)
    row = _lookup(t, t.column("ImageID"), index, "ImageID", "an image with a size")
    cat = _lookup(t, t.column("LabelName"), classes, "LabelName", "in the class descriptions")
    box = _pixels(t, row, wh, unit=True)
    flags = _group_of(t)
    g = GroundTruth(image_id=image_ids[row], box=box, category=cat, id=np.arange(1, len(row) + 1, dtype=np.int64))
    pos, neg = _labels(need_path(labels, "data.labels"), index, classes) if labels not in (None, "") else ([], [])
    pos = [(int(image_ids[i]), c) for i, c in pos]
    neg = [(int(image_ids[i]), c) for i, c in neg]
    dets, dropped = _detections(res, index, classes, wh, unknown_category)
    dets = Detections(image_id=image_ids[dets.image_id], box=dets.box, score=dets.score, category=dets.category)
    images = Images(id=image_ids, width=wh[:, 0], height=wh[:, 1], file_name=[file_names.get(s, s) for s in stems])
    cats = {c: n for c, n in described.values()}
    prov: dict[str, Any] = {
        "source": "openimages",
        "gt": str(gt.resolve()),
        "results": str(res.resolve()),
        "names": str(cls_path),
    }
    prov.update(where, labels=None if labels in (None, "") else str(labels))
    data = LoadedData(
        Dataset(images, g, cats, str(gt)), dets, None, prov, {"unknown_category": dropped} if dropped else {}
    )
    return OpenImagesCsv(data, {c: k for k, c in classes.items()}, flags, pos, neg)
