"""KITTI 2-D object adapter: ``label_2`` ground truth, results, writers, splits.

File format (KITTI object devkit ``readme.txt``): one ``<frame>.txt`` per image,
one object per line, whitespace separated::

    type truncated occluded alpha left top right bottom h w l x y z rotation_y [score]

15 columns for labels, 16 for results (score last). Image id = ``int(frame)``.
``left top right bottom`` become the internal ``xyxy`` box unchanged
(docs/formats.md). Category ids are fixed across detcal:
:data:`detcal.core.types.KITTI_CATEGORIES` (Car=1 ... DontCare=9); type names are
matched case-insensitively, as the devkit does (``strcasecmp``).

Unknown values use the devkit's sentinels: truncated -1 (read as NaN),
occluded -1, alpha -10, h w l -1, x y z -1000, rotation_y -10.

Difficulty (devkit ``cleanData``): a box is within level L when
``occluded <= max_occlusion(L)``, ``truncated <= max_truncation(L)`` and
``bottom - top > min_height(L)`` (strict: the devkit ignores
``height <= MIN_HEIGHT``); levels easy 40 px / 0 / 0.15, moderate 25 / 1 / 0.30,
hard 25 / 2 / 0.50 (:data:`detcal.core.types.KITTI_DIFFICULTY`). ``difficulty`` is
the easiest level the box is within (0, 1, 2, or -1 for none and for
DontCare).

Writers format numbers the way the original files are written: ``%.2f``, with
``occluded`` as ``%d`` and the sentinels above as integers (``-1 -1 -10 ...
-1000 -10``, as on DontCare rows). A value that ``%.2f`` would not give back
exactly is written at ``repr`` precision instead, so records -> files ->
records is always exact, and files in the standard 2-decimal format come back
byte for byte.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import (
    KITTI_CATEGORIES,
    KITTI_DIFFICULTY,
    KITTI_TYPES,
    Dataset,
    Detections,
    GroundTruth,
    Images,
    KittiRules,
)
from detcal.data._json import MAX_ABS, MIN_SCALE, first_true as _first_true
from detcal.data._kitti_text import (
    KITTI_COLUMNS,
    KITTI_STD_COLUMNS,
    file_tokens as _file_tokens,
    is_number as _is_number,
)

_COLS = KITTI_COLUMNS + KITTI_STD_COLUMNS

PathLike = str | os.PathLike[str]

__all__ = [
    "KITTI_COLUMNS",
    "load_kitti_labels",
    "load_kitti_results",
    "write_kitti_labels",
    "write_kitti_results",
    "kitti_rules",
    "kitti_difficulty",
    "read_image_size",
    "split_frames",
]


DONTCARE: int = KITTI_TYPES.index("DontCare") + 1
_TYPE_ID: dict[str, int] = {name.lower(): i + 1 for i, name in enumerate(KITTI_TYPES)}
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".PNG", ".JPG", ".JPEG")


# --------------------------------------------------------------------------- parsing
class _Rows:
    """Rows of several KITTI files: ``types [R]``, ``num [R, C-1]``, file index and line number per row."""

    def __init__(self, paths: list[Path], ncols: int | tuple[int, ...]) -> None:
        self.paths = paths
        tokens: list[list[bytes]] = []
        file_idx: list[int] = []
        line_no: list[int] = []
        underscore = False
        for fi, path in enumerate(paths):
            rows, has_underscore = _file_tokens(path)
            underscore |= has_underscore
            for ln, parts in rows:
                tokens.append(parts)
                file_idx.append(fi)
                line_no.append(ln)
        self.file_idx = np.asarray(file_idx, dtype=np.int64)
        self.line_no = np.asarray(line_no, dtype=np.int64)
        counts = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        allowed = (ncols,) if isinstance(ncols, int) else tuple(ncols)
        ncols = int(counts[0]) if len(counts) and int(counts[0]) in allowed else allowed[0]
        bad = _first_true(counts != ncols)
        if bad >= 0:
            what = " or ".join(str(a) for a in allowed)
            self.error(
                bad,
                "columns",
                f"expected {what} whitespace-separated columns (the same in every row), found {counts[bad]}",
            )
        self.ncols = ncols
        self.types = [t[0].decode("ascii") for t in tokens]
        text = np.array([t[1:] for t in tokens], dtype=np.bytes_).reshape(len(tokens), self.ncols - 1)
        try:
            self.num = text.astype(np.float64)
        except ValueError:
            self.num = None  # type: ignore[assignment]
        # numpy also reads '1_0' as 10: strict decimal numbers only ('_' is common in type names)
        if self.num is None or (underscore and bool((np.char.find(text, b"_") >= 0).any())):
            for r, c in zip(*np.nonzero(~np.vectorize(_is_number, otypes=[bool])(text))):
                self.error(int(r), _COLS[int(c) + 1], f"not a number: {text[r, c].decode('ascii')!r}")
        bad_rc = np.argwhere(~np.isfinite(self.num))
        if len(bad_rc):
            r, c = (int(v) for v in bad_rc[0])
            self.error(r, _COLS[c + 1], f"not a finite number: {tokens[r][c + 1].decode('ascii')!r}")
        bad_rc = np.argwhere(np.abs(self.num) > MAX_ABS)
        if len(bad_rc):
            r, c = (int(v) for v in bad_rc[0])
            self.error(
                r,
                _COLS[c + 1],
                f"number out of range (|value| must be at most {MAX_ABS:g}): {tokens[r][c + 1].decode('ascii')!r}",
            )

    def __len__(self) -> int:
        return len(self.types)

    def error(self, row: int, field: str, message: str) -> None:
        raise DetcalInputError(
            message, file=self.paths[self.file_idx[row]], record=f"line {self.line_no[row]}", field=field
        )

    def check(self, bad_mask: np.ndarray, field: str, message: str) -> None:
        bad = _first_true(bad_mask)
        if bad >= 0:
            self.error(bad, field, message)

    def categories(self) -> np.ndarray:
        """Category id per row from the type names (case-insensitive)."""
        if not self.types:
            return np.zeros(0, dtype=np.int64)
        uniq, inverse = np.unique(np.asarray(self.types), return_inverse=True)
        ids = np.array([_TYPE_ID.get(u.lower(), 0) for u in uniq], dtype=np.int64)
        cat = ids[inverse.reshape(-1)]
        bad = _first_true(cat == 0)
        if bad >= 0:
            self.error(bad, "type", f"unknown type {self.types[bad]!r}; expected one of {', '.join(KITTI_TYPES)}")
        return cat

    def fields(self, results: bool) -> dict[str, np.ndarray]:
        """Validated columns: category, truncation (NaN for -1), occlusion, alpha, box, dimensions, location, rotation_y (, score)."""
        cat = self.categories()
        n = self.num
        dontcare = cat == DONTCARE
        lenient = np.ones_like(dontcare) if results else dontcare  # where the -1 sentinels are allowed
        trunc, occ, box = n[:, 0], n[:, 1], n[:, 3:7]
        self.check(box[:, 2] < box[:, 0], "right", "negative box width (right < left)")
        self.check(box[:, 3] < box[:, 1], "bottom", "negative box height (bottom < top)")
        occ_ok = (occ == np.round(occ)) & (((occ >= 0) & (occ <= 3)) | (lenient & (occ == -1)))
        self.check(~occ_ok, "occluded", "occlusion must be an integer in 0..3 (-1 only for DontCare or results)")
        trunc_ok = ((trunc >= 0) & (trunc <= 1)) | (lenient & (trunc == -1))
        self.check(~trunc_ok, "truncated", "truncation must be in [0, 1] (-1 only for DontCare or results)")
        out = {
            "category": cat,
            "truncation": np.where(trunc == -1, np.nan, trunc),
            "occlusion": occ.astype(np.int64),
            "alpha": n[:, 2].copy(),
            "box": box.copy(),
            "dimensions": n[:, 7:10].copy(),
            "location": n[:, 10:13].copy(),
            "rotation_y": n[:, 13].copy(),
        }
        if self.ncols >= 16:
            out["score"] = n[:, 14].copy()
        if self.ncols == 16 + len(KITTI_STD_COLUMNS):
            std = n[:, 15:19].copy()
            bad = ~(std > 0)
            if bad.any():
                r, c = (int(v) for v in np.argwhere(bad)[0])
                self.error(r, KITTI_STD_COLUMNS[c], f"a standard deviation must be > 0, got {std[r, c]!r}")
            out["box_std"] = std
        return out


def _frame_files(directory: PathLike, what: str) -> tuple[list[str], np.ndarray]:
    """Frame names (stems of ``*.txt``) and image ids, sorted by id."""
    d = Path(directory)
    if not d.is_dir():
        raise DetcalInputError(f"{what} directory does not exist", file=d)
    stems = [p.stem for p in d.glob("*.txt")]
    ids = np.empty(len(stems), dtype=np.int64)
    for i, s in enumerate(stems):
        ids[i] = _frame_number(
            s, "file name is not a frame number like 000123.txt", file=d / f"{s}.txt", record="file name", field="frame"
        )
    order = np.argsort(ids, kind="stable")
    stems = [stems[i] for i in order]
    ids = ids[order]
    if len(ids) > 1 and (ids[1:] == ids[:-1]).any():
        i = int(np.flatnonzero(ids[1:] == ids[:-1])[0]) + 1
        raise DetcalInputError(
            f"two files name image id {ids[i]}", file=d / f"{stems[i]}.txt", record="file name", field="frame"
        )
    return stems, ids


def _frame_number(token: str, message: str, **where) -> int:
    """``int(token)`` for a frame number: ASCII digits only, below 2**63; else a DetcalInputError."""
    if not (token.isascii() and token.isdigit()):
        raise DetcalInputError(message, **where)
    value = int(token)
    if value >= 2**63:
        raise DetcalInputError(f"frame number out of range (must be below 2**63): {token!r}", **where)
    return value


def _row_image_ids(rows: _Rows, ids: np.ndarray) -> np.ndarray:
    return ids[rows.file_idx] if len(rows) else np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------------------- sizes
def read_image_size(path: PathLike) -> tuple[int, int]:
    """``(width, height)`` of an image file from its header, without decoding pixels.

    PNG: the IHDR chunk (bytes 16..24, big-endian width and height, PNG spec
    section 11.2.2); other formats (JPEG): PIL's lazy ``Image.open(...).size``.
    """
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            head = fh.read(24)
    except OSError as e:
        raise DetcalInputError(
            f"cannot read image: {getattr(e, 'strerror', None) or e}", file=p, field="image header"
        ) from e
    if len(head) == 24 and head[:8] == _PNG_SIGNATURE and head[12:16] == b"IHDR":
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    try:
        from PIL import Image  # lazy: Pillow only when images are drawn or read

        with Image.open(p) as im:
            w, h = im.size
    except Exception as e:  # PIL raises several types for unreadable images
        raise DetcalInputError(f"cannot read the image size: {e}", file=p, field="image header") from e
    return int(w), int(h)


def _read_sizes_file(path: Path) -> dict[int, tuple[float, float]]:
    """Lines ``<frame> <width> <height>`` -> {image_id: (W, H)}."""
    names = ("frame", "width", "height")
    rows, _ = _file_tokens(path, names)
    out: dict[int, tuple[float, float]] = {}
    for ln, raw in rows:
        parts = [t.decode("ascii") for t in raw]
        if len(parts) != 3:
            raise DetcalInputError(
                f"expected '<frame> <width> <height>', found {len(parts)} columns",
                file=path,
                record=f"line {ln}",
                field="columns",
            )
        for name, tok in zip(names, parts):
            if name == "frame":
                _frame_number(tok, f"not a frame number: {tok!r}", file=path, record=f"line {ln}", field=name)
            elif not (_is_number(tok.encode()) and np.isfinite(float(tok)) and MIN_SCALE <= float(tok) <= MAX_ABS):
                raise DetcalInputError(
                    f"{name} must be a positive number in [{MIN_SCALE:g}, {MAX_ABS:g}], got {tok!r}",
                    file=path,
                    record=f"line {ln}",
                    field=name,
                )
        out[int(parts[0])] = (float(parts[1]), float(parts[2]))
    return out


def _image_table(
    stems: list[str],
    ids: np.ndarray,
    image_dir: PathLike | None,
    sizes: Mapping[int, tuple[float, float]] | PathLike | None,
) -> Images:
    n = len(ids)
    width = np.full(n, np.nan)
    height = np.full(n, np.nan)
    names = [f"{s}.png" for s in stems]
    if image_dir is not None:
        d = Path(image_dir)
        for i, s in enumerate(stems):
            found = next((d / f"{s}{ext}" for ext in _IMAGE_EXTENSIONS if (d / f"{s}{ext}").is_file()), None)
            if found is None:
                raise DetcalInputError(
                    "no image file for this frame (.png or .jpg)",
                    file=d / f"{s}.png",
                    record=f"frame {s}",
                    field="image",
                )
            names[i] = found.name
            if sizes is None:
                width[i], height[i] = read_image_size(found)
    if sizes is not None:
        table = _read_sizes_file(Path(sizes)) if isinstance(sizes, (str, os.PathLike)) else dict(sizes)
        src = str(sizes) if isinstance(sizes, (str, os.PathLike)) else None
        for i, (s, image_id) in enumerate(zip(stems, ids.tolist())):
            if image_id not in table:
                raise DetcalInputError("no size given for this image", file=src, record=f"frame {s}", field="sizes")
            width[i], height[i] = table[image_id]
    return Images(id=ids, width=width, height=height, file_name=names)


# --------------------------------------------------------------------------- labels
def kitti_difficulty(box: np.ndarray, truncation: np.ndarray, occlusion: np.ndarray) -> np.ndarray:
    """KITTI difficulty per box [G]: 0 easy, 1 moderate, 2 hard, -1 none.

    The easiest level L with ``occlusion <= max_occlusion(L)``,
    ``truncation <= max_truncation(L)`` and ``y2 - y1 > min_height(L)``
    (KITTI devkit ``cleanData``: GT is ignored when ``height <= MIN_HEIGHT``;
    Geiger et al. 2012). NaN truncation is within no level.
    """
    box = np.asarray(box, dtype=np.float64).reshape(-1, 4)
    height = box[:, 3] - box[:, 1]
    trunc = np.asarray(truncation, dtype=np.float64)
    occ = np.asarray(occlusion)
    out = np.full(len(box), -1, dtype=np.int64)
    for rule in sorted(KITTI_DIFFICULTY.values(), key=lambda r: -r["level"]):  # hard first, easiest wins
        within = (occ <= rule["max_occlusion"]) & (trunc <= rule["max_truncation"]) & (height > rule["min_height"])
        out[within] = int(rule["level"])
    return out


def kitti_rules(difficulty: str = "moderate") -> KittiRules:
    """The devkit's matching rules at ``difficulty`` (easy/moderate/hard): min height 40/25/25 px.

    Neighbours (Van for Car, Person_sitting for Pedestrian), DontCare id 9,
    strict overlap ``>``, IoU thresholds Car 0.7, Pedestrian/Cyclist 0.5 are
    the :class:`KittiRules` defaults. Note the devkit ignores a *detection*
    when ``int(y2 - y1) < min_height`` (truncated to int, ``<``), while a GT
    needs ``y2 - y1 > min_height``.
    """
    _check_difficulty(difficulty)
    return KittiRules(difficulty=difficulty, min_height=float(KITTI_DIFFICULTY[difficulty]["min_height"]))


def _check_difficulty(difficulty: str) -> None:
    if difficulty not in KITTI_DIFFICULTY:
        raise DetcalInputError(
            f"unknown difficulty {difficulty!r}; expected one of {', '.join(KITTI_DIFFICULTY)}", field="difficulty"
        )


def _select_frames(
    stems: list[str], ids: np.ndarray, image_ids: Iterable[int | str] | PathLike | None, label_dir: Path
) -> tuple[list[str], np.ndarray]:
    if image_ids is None:
        return stems, ids
    split_file: Path | None = None
    if isinstance(image_ids, (str, os.PathLike)):
        split_file = Path(image_ids)
        try:
            wanted_tokens = split_file.read_text(encoding="utf-8-sig").split()
        except (OSError, UnicodeDecodeError) as e:
            raise DetcalInputError(
                f"cannot read frame list: {getattr(e, 'strerror', None) or e}", file=split_file
            ) from e
    else:
        wanted_tokens = [str(v) for v in image_ids]
    wanted = np.empty(len(wanted_tokens), dtype=np.int64)
    for i, tok in enumerate(wanted_tokens):
        wanted[i] = _frame_number(tok, f"not a frame number: {tok!r}", file=split_file, record=i, field="image_ids")
    wanted = np.unique(wanted)
    pos = np.searchsorted(ids, wanted)
    pos_c = np.minimum(pos, max(len(ids) - 1, 0))
    missing = (len(ids) == 0) | (ids[pos_c] != wanted) if len(ids) else np.ones(len(wanted), bool)
    if missing.any():
        m = int(wanted[_first_true(missing)])
        raise DetcalInputError(
            "no label file for a requested frame",
            file=label_dir / f"{m:06d}.txt",
            record=f"frame {m}",
            field="image_ids",
        )
    return [stems[i] for i in pos_c.tolist()], ids[pos_c]


def load_kitti_labels(
    label_dir: PathLike,
    image_dir: PathLike | None = None,
    sizes: Mapping[int, tuple[float, float]] | PathLike | None = None,
    difficulty: str = "moderate",
    results: bool = False,
    image_ids: Iterable[int | str] | PathLike | None = None,
) -> Dataset:
    """Load a KITTI ``label_2`` directory as a ground-truth :class:`Dataset`.

    One image per ``<frame>.txt`` (an empty file is an image without
    objects); ``image_ids`` restricts to some frames (ints, frame names, or
    the path of a frame list such as ``val.txt``). Image sizes come from
    ``sizes`` (a dict {image_id: (W, H)} or a file of ``<frame> <W> <H>``
    lines), else from the headers of ``image_dir/<frame>.png|.jpg``
    (:func:`read_image_size`), else NaN.

    Per box: ``difficulty`` from :func:`kitti_difficulty`;
    ``ignore = difficulty == -1 or difficulty > level(difficulty arg)``, i.e.
    outside the evaluated level (KITTI devkit ``cleanData``); DontCare boxes
    stay as GT (category 9, difficulty -1, ignore True) for the matcher's
    DontCare regions (:func:`kitti_rules`). The 3-D fields (alpha,
    dimensions h w l, location x y z, rotation_y) are kept for round trips.
    ``results=True`` reads 16-column files (the score is dropped).

    Errors (:class:`DetcalInputError`, naming file, ``line N`` and column):
    wrong column count, non-numeric or non-finite field, unknown type,
    negative box size, occlusion outside 0..3, truncation outside [0, 1]
    (-1 allowed on DontCare rows).
    """
    _check_difficulty(difficulty)
    label_dir = Path(label_dir)
    stems, ids = _frame_files(label_dir, "label")
    stems, ids = _select_frames(stems, ids, image_ids, label_dir)
    images = _image_table(stems, ids, image_dir, sizes)
    rows = _Rows([label_dir / f"{s}.txt" for s in stems], 16 if results else 15)
    f = rows.fields(results=False)
    diff = kitti_difficulty(f["box"], f["truncation"], f["occlusion"])
    dontcare = f["category"] == DONTCARE
    diff[dontcare] = -1
    level = int(KITTI_DIFFICULTY[difficulty]["level"])
    ignore = (diff < 0) | (diff > level)
    gt = GroundTruth(
        image_id=_row_image_ids(rows, ids),
        box=f["box"],
        category=f["category"],
        ignore=ignore,
        truncation=f["truncation"],
        occlusion=f["occlusion"],
        difficulty=diff,
        alpha=f["alpha"],
        dimensions=f["dimensions"],
        location=f["location"],
        rotation_y=f["rotation_y"],
    )
    return Dataset(images=images, gt=gt, categories=dict(KITTI_CATEGORIES), source=str(label_dir))


def load_kitti_results(result_dir: PathLike, dataset: Dataset | None = None) -> Detections:
    """Load a directory of KITTI results (16 columns, score last) as :class:`Detections`.

    Box uncertainty: every row may carry 4 more columns after the score,
    ``std_cx std_cy std_w std_h`` (pixel standard deviations of the box centre,
    width and height, > 0; docs/formats.md), read as ``box_std``; all rows of
    a directory then have 20 columns.

    Order: by frame (image id), then line order. Image ids from the file
    names. With ``dataset``, a frame that is not one of its images is an
    error; its images without a file have no detections. The KITTI fields
    (truncation, occlusion, alpha, dimensions, location, rotation_y) are kept;
    -1 truncation/occlusion and the other sentinels are allowed. Scores must
    be finite (the devkit does not require [0, 1]). Same errors as
    :func:`load_kitti_labels`.
    """
    result_dir = Path(result_dir)
    stems, ids = _frame_files(result_dir, "result")
    if dataset is not None and len(ids):
        unknown = dataset.images.index_of(ids) < 0
        if unknown.any():
            i = _first_true(unknown)
            raise DetcalInputError(
                f"frame is not an image of {dataset.source or 'the dataset'}",
                file=result_dir / f"{stems[i]}.txt",
                record=f"frame {stems[i]}",
                field="image_id",
            )
    rows = _Rows([result_dir / f"{s}.txt" for s in stems], (16, 16 + len(KITTI_STD_COLUMNS)))
    f = rows.fields(results=True)
    return Detections(
        image_id=_row_image_ids(rows, ids),
        box=f["box"],
        score=f.get("score", np.zeros(0)),
        category=f["category"],
        truncation=f["truncation"],
        occlusion=f["occlusion"],
        alpha=f["alpha"],
        dimensions=f["dimensions"],
        location=f["location"],
        rotation_y=f["rotation_y"],
        box_std=f.get("box_std"),
    )


# --------------------------------------------------------------------------- splits
def split_frames(frames: Sequence[str | int], val_size: int | float, seed: int = 0) -> tuple[list[str], list[str]]:
    """Seeded split of frames into (recalibration, validation), both sorted.

    ``val_size``: a count (int, 0..n) or a fraction in (0, 1) (rounded to the
    nearest count). The validation frames are the first ``val_size`` of
    ``numpy.random.default_rng(seed).permutation(n)`` applied to the sorted
    frames; the rest are the recalibration set (Levi et al. 2019 split KITTI
    training into ~6K recalibration and ~1.5K validation images). The two are
    disjoint and together complete. Frames are returned as strings
    (ints as ``%06d``).
    """
    names = sorted(f"{f:06d}" if isinstance(f, (int, np.integer)) else str(f) for f in frames)
    n = len(names)
    if len(set(names)) != n:
        raise DetcalInputError("frames must be unique", field="frames")
    if isinstance(val_size, (float, np.floating)) and not float(val_size).is_integer():
        if not 0 < val_size < 1:
            raise DetcalInputError(f"a fractional val_size must be in (0, 1), got {val_size}", field="val_size")
        k = int(round(val_size * n))
    else:
        k = int(val_size)
        if not 0 <= k <= n:
            raise DetcalInputError(f"val_size must be in 0..{n}, got {k}", field="val_size")
    perm = np.random.default_rng(seed).permutation(n)
    is_val = np.zeros(n, dtype=bool)
    is_val[perm[:k]] = True
    recal = [f for f, v in zip(names, is_val.tolist()) if not v]
    val = [f for f, v in zip(names, is_val.tolist()) if v]
    return recal, val


from detcal.data.kitti_write import write_kitti_labels, write_kitti_results  # noqa: E402  (re-exported)
