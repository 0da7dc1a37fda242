"""Helpers of the folder formats (YOLO, Pascal VOC): image ids from file stems, image sizes,
class-name files, and text lines parsed into numbers with one-line errors naming file and line."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.data.kitti import read_image_size

IMAGE_SUFFIXES: tuple[str, ...] = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
"""Image files an image folder is scanned for."""


def stem_ids(stems: Iterable[str]) -> dict[str, int]:
    """Image id of each file stem: the number itself when every stem is a decimal number
    (``000000397133`` -> 397133, as COCO and VOC-style names are), else 1, 2, ... in sorted stem order."""
    ordered = sorted(set(stems))
    if ordered and all(s.isdecimal() for s in ordered):
        ids = {s: int(s) for s in ordered}
        if len(set(ids.values())) == len(ids):
            return ids
    return {s: i + 1 for i, s in enumerate(ordered)}


def read_sizes(path: Path) -> dict[str, tuple[float, float]]:
    """A sizes file: one ``<stem> <width> <height>`` line per image (``#`` comments)."""
    out: dict[str, tuple[float, float]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):
        tok = line.split()
        if not tok or tok[0].startswith("#"):
            continue
        try:
            if len(tok) != 3:
                raise ValueError
            w, h = float(tok[1]), float(tok[2])
        except ValueError:
            raise DetcalInputError("expected '<image> <width> <height>'", file=path, record=f"line {n}") from None
        if not (w > 0 and h > 0):
            raise DetcalInputError(f"image size {w:g} x {h:g} is not positive", file=path, record=f"line {n}")
        out[Path(tok[0]).stem] = (w, h)
    return out


def folder_sizes(image_dir: Path) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """Sizes and file names of the images in ``image_dir`` (by stem), read from their headers."""
    sizes: dict[str, tuple[float, float]] = {}
    names: dict[str, str] = {}
    for p in sorted(image_dir.iterdir()):
        if p.suffix.lower() in IMAGE_SUFFIXES:
            w, h = read_image_size(p)
            sizes[p.stem] = (float(w), float(h))
            names[p.stem] = p.name
    return sizes, names


def read_names(path: Path) -> list[str] | dict[int, str]:
    """Class names from a YOLO ``data.yaml`` (``names:`` a list or an ``{index: name}`` map) or a text
    file with one name per line."""
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # lazy: only a YOLO data.yaml needs it (about 6 ms kept out of every command's start-up)

        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
        except yaml.YAMLError as e:
            raise DetcalInputError(f"not valid YAML: {str(e).splitlines()[0]}", file=path) from None
        names = doc.get("names") if isinstance(doc, dict) else None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return list(names)
        if isinstance(names, dict) and all(isinstance(k, int) for k in names):
            return {int(k): str(v) for k, v in names.items()}
        raise DetcalInputError(
            "expected 'names:' as a list of names or a map of index to name", file=path, field="names"
        )
    return [s.strip() for s in path.read_text(encoding="utf-8-sig").splitlines() if s.strip()]


def parse_rows(text: str, path: Path, widths: tuple[int, ...], what: str) -> tuple[np.ndarray, np.ndarray]:
    """The non-blank lines of ``text`` as float rows of one of ``widths`` tokens -> ``(rows [n, w], line numbers
    [n])``, padded with NaN to the widest; a line of another width or a non-number is a one-line error."""
    lines = text.splitlines()
    numbered = [(i + 1, ln.split()) for i, ln in enumerate(lines) if ln.strip()]
    wide = max(widths)
    rows = np.full((len(numbered), wide), np.nan)
    for r, (n, tok) in enumerate(numbered):  # per line: the token count decides the layout
        if len(tok) not in widths:
            raise DetcalInputError(
                f"expected {what} ({' or '.join(map(str, widths))} values), got {len(tok)}",
                file=path,
                record=f"line {n}",
            )
        try:
            rows[r, : len(tok)] = [float(t) for t in tok]
        except ValueError:
            raise DetcalInputError(
                f"not a number in {what}: {' '.join(tok)!r}", file=path, record=f"line {n}"
            ) from None
    if not np.isfinite(rows[:, : min(widths)]).all():
        r = int(np.flatnonzero(~np.isfinite(rows[:, : min(widths)]).all(axis=1))[0])
        raise DetcalInputError(f"a non-finite value in {what}", file=path, record=f"line {numbered[r][0]}")
    return rows, np.array([n for n, _ in numbered], dtype=np.int64)


def one_of(fields: dict[str, Any] | Any, *keys: str) -> Any:
    """The first of ``keys`` set in ``fields`` (None if none)."""
    for k in keys:
        v = fields.get(k)
        if v not in (None, "", "???"):
            return v
    return None
