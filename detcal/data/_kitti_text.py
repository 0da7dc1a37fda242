"""Reading the text of a KITTI file: byte-order mark, line ends, ASCII-only fields.

KITTI files are ASCII. A UTF-8 byte-order mark at the start is skipped (as
the COCO reader does); lines end at LF, CR LF or CR; fields are separated by
ASCII whitespace only (space, tab, vertical tab, form feed). Every other
character outside ASCII (a no-break space, U+2028 LINE SEPARATOR, a
superscript digit) is an error naming the file, the line and the column,
instead of being read as a separator or a digit.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from detcal.core.errors import DetcalInputError

KITTI_COLUMNS: tuple[str, ...] = (
    "type",
    "truncated",
    "occluded",
    "alpha",
    "left",
    "top",
    "right",
    "bottom",
    "height",
    "width",
    "length",
    "x",
    "y",
    "z",
    "rotation_y",
    "score",
)
"""Column names of a KITTI row (labels: the first 15, results: all 16)."""

KITTI_STD_COLUMNS: tuple[str, ...] = ("std_cx", "std_cy", "std_w", "std_h")
"""Optional 4 columns after the score of a results row: the pixel standard deviations of the box
centre, width and height (as COCO ``bbox_std``), so box-uncertainty metrics run on KITTI too."""

_BOM = b"\xef\xbb\xbf"
_NUMBER = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?i:nan|inf|infinity))")
"""A decimal number as C ``strtod`` reads it (no ``_`` separators, no hex); nan/inf are refused later."""


def file_tokens(path: Path, columns: tuple[str, ...] = KITTI_COLUMNS) -> tuple[list[tuple[int, list[bytes]]], bool]:
    """Non-empty lines of a KITTI file as (line number, tokens), and whether it holds a ``_``.

    A UTF-8 byte-order mark is skipped. Lines end at LF, CR LF or CR; fields
    are separated by ASCII whitespace (space, tab, VT, FF) only. Any other
    byte outside ASCII (a no-break space, U+2028, a non-ASCII digit) is an
    error naming the line and the character.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DetcalInputError(f"cannot read file: {e.strerror or e}", file=path) from e
    if data.startswith(_BOM):
        data = data[3:]
    lines = data.splitlines()
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DetcalInputError("the file is not UTF-8 text", file=path, record=f"byte {e.start}") from e
        for ln, line in enumerate(lines, 1):
            if not line.isascii():
                text = line.decode("utf-8")
                ch = next(c for c in text if ord(c) > 127)
                raise DetcalInputError(
                    f"non-ASCII character U+{ord(ch):04X} ({unicodedata.name(ch, 'unnamed')}): KITTI fields are "
                    "ASCII, separated by spaces or tabs",
                    file=path,
                    record=f"line {ln}",
                    field=column_at(text, ch, columns),
                )
    rows = [(ln, parts) for ln, parts in enumerate(map(bytes.split, lines), 1) if parts]
    return rows, b"_" in data


def column_at(text: str, ch: str, columns: tuple[str, ...] = KITTI_COLUMNS) -> str:
    """Name of the KITTI column holding the first ``ch`` of a line (columns split on ASCII whitespace)."""
    prefix = text[: text.index(ch)]
    k = len(prefix.encode("utf-8").split())
    if prefix and prefix[-1] not in " \t\v\f\r":
        k -= 1  # the character continues the token before it
    return columns[min(k, len(columns) - 1)]


def is_number(token: bytes) -> bool:
    """Whether ``token`` is a decimal number (or nan/inf, refused later as non-finite)."""
    return _NUMBER.fullmatch(token) is not None
