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

__all__ = ["find_image", "thumbnail"]

SIZE = 180
_EXT = (".jpg", ".png", ".jpeg", ".JPEG", ".JPG", ".PNG")
log = logging.getLogger("detcal")


def find_image(image_dir: Path, file_name: str, image_id: int) -> Path | None:
    """The image file of a detection: ``file_name`` in ``image_dir``, else ``<id>`` / ``<id:06d>`` / ``<id:012d>``
    with a usual extension (KITTI image_2, COCO val2017); None when none exists."""
    if file_name:
        p = image_dir / file_name
        if p.is_file():
            return p
    for stem in (str(image_id), f"{image_id:06d}", f"{image_id:012d}"):
        for ext in _EXT:
            p = image_dir / f"{stem}{ext}"
            if p.is_file():
                return p
    return None


def _rect(b: Sequence[float], x0: float, y0: float, s: float, cls: str) -> str:
    return (
        f'<rect x="{(b[0] - x0) * s:.1f}" y="{(b[1] - y0) * s:.1f}" width="{(b[2] - b[0]) * s:.1f}" '
        f'height="{(b[3] - b[1]) * s:.1f}" class="{cls}"/>'
    )


def thumbnail(path: Path, row: Mapping[str, Any]) -> str:
    """HTML of one thumbnail (empty when the image cannot be read: logged once per image)."""
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        return ""
    box = row["box"]
    boxes = [box] + ([row["gt_box"]] if row.get("gt_box") else []) + list(row.get("image_gt_boxes") or [])
    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
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
    except Exception as exc:  # noqa: BLE001 - an unreadable image only loses its thumbnail
        log.warning("report: cannot read image %s for a thumbnail (%s)", path, exc)
        return ""
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
