"""Writing a synthetic set in COCO and KITTI formats."""

from __future__ import annotations

import inspect
import io
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.types import KITTI_CATEGORIES, Dataset
from detcal.data.coco import write_coco_instances, write_coco_results
from detcal.data.kitti import write_kitti_labels, write_kitti_results
from detcal.data.synthetic._common import STREAM_DETECTOR, STREAM_PIXELS, STREAM_SCENES, check
from detcal.data.synthetic.detector import detector_defaults, detector_params, simulate
from detcal.data.synthetic.render import render_scene
from detcal.data.synthetic.scenes import generate_scenes
from detcal.utils.fresh_dir import fresh_dir
from detcal.utils.io import write_bytes, write_json, write_text

# --------------------------------------------------------------------------- writer


def _png_bytes(img: np.ndarray) -> bytes:
    from PIL import Image  # lazy: Pillow only when images are drawn or read

    buf = io.BytesIO()
    Image.fromarray(img, mode="RGB").save(buf, format="PNG")
    return buf.getvalue()


def write_synthetic(
    out_dir: str | Path,
    n_images: int = 200,
    seed: int = 0,
    detector_kwargs: dict[str, Any] | None = None,
    image_size: tuple[int, int] = (160, 120),
    render: bool = True,
    scene_kwargs: dict[str, Any] | None = None,
    kitti_images: bool = False,
) -> dict[str, Path]:
    """Write a seeded synthetic benchmark; ``out_dir`` is replaced whole (see :func:`_write_into`),
    so no file of an earlier, larger set survives beside the new one. Returns the paths by role."""
    final = Path(out_dir)
    with fresh_dir(final) as tmp:
        paths = _write_into(tmp, n_images, seed, detector_kwargs, image_size, render, scene_kwargs, kitti_images)
    return {k: final / v.relative_to(tmp) if v != tmp else final for k, v in paths.items()}


def _meta(
    dataset: Dataset,
    info: dict[str, Any],
    seed: int,
    scene_params: dict[str, Any],
    det_params: dict[str, Any],
    paths: dict[str, Path],
    out: Path,
) -> dict[str, Any]:
    """The content of meta.json: seed and random streams, every generator parameter, the planted truth, counts."""
    public_info = {k: v for k, v in info.items() if not isinstance(v, np.ndarray)}
    return {
        "generator": "detcal.data.synthetic",
        "seed": seed,
        "random_streams": {
            "scenes": [seed, STREAM_SCENES],
            "detector": [seed, STREAM_DETECTOR],
            "pixels": [seed, STREAM_PIXELS, "<image id>"],
        },
        "scene_params": scene_params,
        "detector_params": det_params,
        "planted": {
            "confidence": "score = q away from the border; q ** (1 - border_overconfidence) when the box centre "
            "is within border_width (relative) of an image edge; P(TP | q) = q",
            "regression": "reported std = true std * std_scale[k]; std scaling should learn 1 / std_scale[k]",
            "std_scaling_target": [1.0 / s for s in det_params["std_scale"]],
        },
        "counts": {
            "images": len(dataset.images),
            "gt": len(dataset.gt),
            "gt_per_category": {
                dataset.categories.get(int(c), str(int(c))): int((dataset.gt.category == c).sum())
                for c in np.unique(dataset.gt.category)
            },
            **public_info,
        },
        "categories": {str(k): v for k, v in dataset.categories.items()},
        "files": {k: str(v.relative_to(out)) if v != out else "." for k, v in paths.items()},
    }


def _write_into(
    out_dir: str | Path,
    n_images: int = 200,
    seed: int = 0,
    detector_kwargs: dict[str, Any] | None = None,
    image_size: tuple[int, int] = (160, 120),
    render: bool = True,
    scene_kwargs: dict[str, Any] | None = None,
    kitti_images: bool = False,
) -> dict[str, Path]:
    """Write a seeded synthetic benchmark under ``out_dir`` (atomic writes).

    Layout: ``images/<id:06d>.png`` (when ``render``), ``annotations/
    instances.json`` (COCO), ``kitti/label_2/<id:06d>.txt``, ``kitti/sizes.txt``
    (lines ``<frame> <W> <H>``, so the PNGs need not be duplicated; with
    ``kitti_images`` they are also copied to ``kitti/image_2``),
    ``results/detections.json`` (COCO results with the uncertainty fields),
    ``kitti/results/<id:06d>.txt`` and ``meta.json`` (seed, every generator and
    planted-miscalibration parameter, realised counts). ``scene_kwargs`` go to
    :func:`generate_scenes`, ``detector_kwargs`` to :func:`simulate_detector`
    (same ``seed``; independent random streams). Returns the paths by role.
    """
    out = Path(out_dir)
    scene_kwargs = dict(scene_kwargs or {})
    scene_sig = inspect.signature(generate_scenes).parameters
    for k in scene_kwargs:
        check(
            k in scene_sig and k not in ("n_images", "seed", "image_size", "render"),
            f"unknown scene argument {k!r}",
            "scene_kwargs",
        )
    det_defaults = detector_defaults()
    detector_kwargs = dict(detector_kwargs or {})
    for k in detector_kwargs:
        check(k in det_defaults, f"unknown detector argument {k!r}; known: {sorted(det_defaults)}", "detector_kwargs")
    dataset, _ = generate_scenes(n_images, seed, image_size, render=False, **scene_kwargs)
    det_params = detector_params(**{**det_defaults, **detector_kwargs})
    dets, info = simulate(dataset, int(seed), det_params)

    paths: dict[str, Path] = {"root": out}
    if render:
        paths["images"] = out / "images"
        for i, img_id in enumerate(dataset.images.id):
            data = _png_bytes(render_scene(dataset, i, seed))
            write_bytes(out / "images" / f"{int(img_id):06d}.png", data)
            if kitti_images:
                write_bytes(out / "kitti" / "image_2" / f"{int(img_id):06d}.png", data)
        if kitti_images:
            paths["kitti_images"] = out / "kitti" / "image_2"
    paths["coco_instances"] = out / "annotations" / "instances.json"
    write_coco_instances(paths["coco_instances"], dataset)
    paths["coco_results"] = out / "results" / "detections.json"
    write_coco_results(paths["coco_results"], dets)
    paths["kitti_labels"] = out / "kitti" / "label_2"
    write_kitti_labels(paths["kitti_labels"], dataset)
    paths["kitti_results"] = out / "kitti" / "results"
    write_kitti_results(paths["kitti_results"], dets, categories=KITTI_CATEGORIES, dataset=dataset)
    paths["kitti_sizes"] = out / "kitti" / "sizes.txt"
    lines = [
        f"{int(i):06d} {int(w)} {int(h)}"
        for i, w, h in zip(dataset.images.id, dataset.images.width, dataset.images.height)
    ]
    write_text(paths["kitti_sizes"], "\n".join(lines) + ("\n" if lines else ""))

    scene_params = {
        k: v.default
        for k, v in scene_sig.items()
        if v.default is not inspect.Parameter.empty and k not in ("seed", "render")
    }
    scene_params.update(scene_kwargs)
    scene_params.update(n_images=int(n_images), image_size=[int(v) for v in image_size], render=bool(render))
    paths["meta"] = out / "meta.json"
    write_json(paths["meta"], _meta(dataset, info, int(seed), scene_params, det_params, paths, out))
    return paths
