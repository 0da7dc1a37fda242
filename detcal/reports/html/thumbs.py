"""Thumbnails of the worst-calibrated detections: the image around the box, detection and ground truth drawn.

The image is read with Pillow, cropped around the detection (with a margin),
scaled to at most :data:`SIZE` pixels and embedded as JPEG data; the boxes are
an SVG layer on top (detection red, its ground truth green, other ground truth
of the class dashed green).
"""

from __future__ import annotations

import base64
import io
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from detcal.reports.html.fmt import esc

__all__ = ["find_image", "inside", "thumbnail", "thumbnails"]

SIZE = 180
_EXT = (".jpg", ".png", ".jpeg", ".JPEG", ".JPG", ".PNG")
log = logging.getLogger("detcal")


def _inside(image_dir: Path, p: Path) -> bool:
    """True when ``p``, every symlink followed, is a file inside ``image_dir`` (itself resolved)."""
    try:
        return p.is_file() and p.resolve().is_relative_to(image_dir.resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a name the OS refuses
        return False


def inside(root: Path, name: str) -> Path | None:
    """``root / name`` when it is a file inside ``root`` (no absolute path, no ``..``, no symlink out), else None."""
    if not name or _refused(name, Path(name).parts):
        return None
    p = root / name
    return p if _inside(root, p) else None


def _refused(name: str, parts: tuple[str, ...]) -> str:
    if "\x00" in name:
        return "a name with a NUL byte"
    if Path(name).is_absolute() or Path(name).drive or name.startswith(("/", "\\")):
        return "an absolute path"
    if ".." in parts or ".." in name.replace("\\", "/").split("/"):
        return "a path that climbs out with '..'"
    return ""


def find_image(image_dir: Path, file_name: str, image_id: Any) -> Path | None:
    """The image file of a detection, inside ``image_dir`` only: ``file_name`` there, else ``<id>`` /
    ``<id:06d>`` / ``<id:012d>`` with a usual extension (KITTI image_2, COCO val2017); None when none exists.
    A ``file_name`` that is absolute, climbs out with ``..`` or is a symlink leading out of the folder is
    refused (a warning names the file and the image id): a report never shows a file the user did not
    point it at."""
    name = str(file_name or "")
    if name:
        parts = Path(name).parts
        p = image_dir / name
        why = _refused(name, parts)
        if why:
            log.warning(
                "report: no thumbnail for image id %s: its file_name %r is %s (images are read inside data.image_dir only)",
                str(image_id)[:40],
                name[:200],
                why,
            )
            return None
        if p.is_file():
            if _inside(image_dir, p):
                return p
            log.warning(
                "report: no thumbnail for image id %s: its file_name %r leads out of data.image_dir (a symlink)",
                str(image_id)[:40],
                name[:200],
            )
            return None
    try:
        iid = int(image_id)
    except (TypeError, ValueError, OverflowError):
        return None
    for stem in (str(iid), f"{iid:06d}", f"{iid:012d}"):
        for ext in _EXT:
            p = image_dir / f"{stem}{ext}"
            if p.is_file() and _inside(image_dir, p):
                return p
    return None


def _rect(b: Sequence[float], x0: float, y0: float, s: float, cls: str) -> str:
    return (
        f'<rect x="{(b[0] - x0) * s:.1f}" y="{(b[1] - y0) * s:.1f}" width="{(b[2] - b[0]) * s:.1f}" '
        f'height="{(b[3] - b[1]) * s:.1f}" class="{cls}"/>'
    )


def thumbnails(items: Sequence[tuple[Path, Mapping[str, Any]]]) -> list[str]:
    """HTML of the thumbnail of each (image path, row), in order; each image is opened and decoded once
    however many rows show it (an unreadable image gives empty strings, logged once)."""
    try:
        from PIL import Image  # lazy: Pillow kept out of start-up (thumbnails only)
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        return ["" for _ in items]
    out = ["" for _ in items]
    by_path: dict[Path, list[int]] = {}
    for i, (path, _) in enumerate(items):
        by_path.setdefault(path, []).append(i)
    for path, rows in by_path.items():
        try:
            with Image.open(path) as im:
                rgb = im.convert("RGB")
        except Exception as exc:  # noqa: BLE001 - an unreadable image only loses its thumbnails
            log.warning("report: cannot read image %s for a thumbnail (%s)", path, exc)
            continue
        for i in rows:
            try:
                out[i] = _crop_html(rgb, items[i][1])
            except Exception as exc:  # noqa: BLE001 - a row with a box that cannot be drawn only loses it
                log.warning("report: no thumbnail of image %s (%s)", path, exc)
    return out


def thumbnail(path: Path, row: Mapping[str, Any]) -> str:
    """HTML of one thumbnail (empty when the image cannot be read: logged)."""
    return thumbnails([(path, row)])[0]


def _crop_html(im: Any, row: Mapping[str, Any]) -> str:
    """The thumbnail of one row from a decoded RGB image."""
    box = [float(v) for v in row["box"]]
    boxes = [box] + ([row["gt_box"]] if row.get("gt_box") else []) + list(row.get("image_gt_boxes") or [])
    w, h = im.size
    bw, bh = max(box[2] - box[0], 1.0), max(box[3] - box[1], 1.0)
    m = 0.6 * max(bw, bh)
    x0, y0 = max(0.0, min(b[0] for b in boxes[:2]) - m), max(0.0, min(b[1] for b in boxes[:2]) - m)
    x1, y1 = min(float(w), max(b[2] for b in boxes[:2]) + m), min(float(h), max(b[3] for b in boxes[:2]) + m)
    crop = im.crop((int(x0), int(y0), int(max(x1, x0 + 1)), int(max(y1, y0 + 1))))
    s = SIZE / max(crop.size)
    crop = crop.resize((max(1, round(crop.size[0] * s)), max(1, round(crop.size[1] * s))))
    buf = io.BytesIO()
    crop.save(buf, format="JPEG", quality=80)
    x0, y0 = int(x0), int(y0)
    tw, th = crop.size
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    layers = [_rect(b, x0, y0, s, "gtother") for b in row.get("image_gt_boxes") or [] if b != row.get("gt_box")]
    if row.get("gt_box"):
        layers.append(_rect(row["gt_box"], x0, y0, s, "gtbox"))
    layers.append(_rect(box, x0, y0, s, "detbox"))
    return (
        f'<svg class=thumb viewBox="0 0 {tw} {th}" width="{tw}" height="{th}" role="img">'
        f'<title>image {esc(row["image_id"])}: {esc(row["class"])}</title>'
        f'<image href="data:image/jpeg;base64,{data}" width="{tw}" height="{th}"/>{"".join(layers)}</svg>'
    )
