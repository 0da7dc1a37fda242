"""``detcal-main dry_run.enabled=true``: a full run's set-up checked in a minute, before hours of training.

What a real-data run (``experiment=levi2019_kitti`` with ``model.backbone_weights=...``)
can get wrong is found here without training: the data paths and formats
(the splits are prepared exactly as in the full run), the class map (which
training classes the model predicts, and which of them the evaluation data
has), the image files and sizes (the first images of every split are decoded
and compared with the sizes the labels were read with), the backbone weights
(the model is built), the device, one SGD step of each training stage on the
first training batch (finite losses, trainable parameters), one prediction on
``dry_run.images`` recal and val images, written as COCO (delta records) and
KITTI results and read back, and that every output directory of the full run
can be written. The findings go to ``<run dir>/dry_run/dry_run.json`` and a
short report on stdout; a failed check raises a
:class:`~detcal.errors.DetcalInputError` naming the file or config key.

The dry run writes only under ``<run dir>/dry_run/`` (plus the ``splits/`` the
full run would write as well), so a later full run into the same directory
starts clean. torch is imported inside the functions only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_TYPES, Dataset
from detcal.data.coco import load_coco_results, write_coco_results
from detcal.data.kitti import write_kitti_results
from detcal.training import stages as st
from detcal.training.spec import MainJobSpec
from detcal.training.splits import Split, prepare_splits
from detcal.training.stages import train_kwargs
from detcal.utils.io import to_jsonable, write_json

__all__ = ["run_dry_run", "first_images"]

log = logging.getLogger("detcal.main")

OUTPUT_DIRS = ("train/stage1", "train/stage2", "predictions/recal", "predictions/val", "calibration", "eval")
"""Directories of the full run (relative to the run directory) the dry run checks it can write."""


def first_images(ds: Dataset, n: int) -> Dataset:
    """The first ``n`` images of ``ds`` (in its row order) with their ground truth. Row ``i`` of the result
    is row ``i`` of ``ds``, so an image source indexed by row (a renderer) still fits."""
    keep = np.zeros(len(ds.images), dtype=bool)
    keep[: int(n)] = True
    ids = ds.images.id[keep]
    return Dataset(ds.images.select(keep), ds.gt.select(np.isin(ds.gt.image_id, ids)), dict(ds.categories), ds.source)


def _check_sizes(split: Split, n: int) -> dict[str, Any]:
    """Decode the first ``n`` images of ``split``; :meth:`DetectionDataset.load_image` raises, naming the file,
    when an image's size differs from the one its labels were read with."""
    from detcal.training.data import DetectionDataset, LabelMap  # lazy: needs torch (the [train] extra)

    ds = split.dataset
    cats = tuple(sorted(int(c) for c in ds.categories)) or (1,)
    loader = DetectionDataset(ds, split.images, LabelMap(cats))
    sizes = []
    for row in range(min(int(n), len(ds.images))):
        img = loader.load_image(row)
        sizes.append((int(img.shape[1]), int(img.shape[0])))
    return {"checked": len(sizes), "sizes_wh": sorted(set(sizes)), **_boxes_inside(split)}


def _boxes_inside(split: Split, slack: float = 2.0) -> dict[str, Any]:
    """Ground-truth boxes must lie inside their images (``slack`` pixels allowed): boxes beyond the image
    edge mean labels paired with the wrong (e.g. resized) images. An error names the first such image."""
    ds = split.dataset
    if not len(ds.gt):
        return {"boxes_outside_image": 0}
    rows = ds.images.index_of(ds.gt.image_id)
    w, h = ds.images.width[rows], ds.images.height[rows]
    b = ds.gt.box  # xyxy pixels
    out = (b[:, 0] < -slack) | (b[:, 1] < -slack) | (b[:, 2] > w + slack) | (b[:, 3] > h + slack)
    n_out = int(out.sum())
    if n_out > 0.01 * len(b):
        i = int(np.flatnonzero(out)[0])
        r = int(rows[i])
        raise DetcalInputError(
            f"{n_out} of {len(b)} ground-truth boxes of the {split.name} split lie outside their images (e.g. box "
            f"{np.round(b[i], 1).tolist()} in a {w[i]:g} x {h[i]:g} image): the images do not belong to these labels, or were "
            "resized",
            file=str(ds.images.file_name[r]),
            record=int(ds.images.id[r]),
            field=f"{split.name} images",
        )
    return {"boxes_outside_image": n_out}


def _class_report(splits: Mapping[str, Split], model_categories: list[int]) -> dict[str, Any]:
    """Which trained categories the evaluation splits contain, by id and name; an error when none."""
    train_names = {int(c): splits["train"].dataset.categories.get(int(c), "?") for c in model_categories}
    out: dict[str, Any] = {"model": {str(k): v for k, v in train_names.items()}}
    for name in ("recal", "val"):
        ds = splits[name].dataset
        present = set(np.unique(ds.gt.category).tolist())
        shared = [c for c in model_categories if c in present]
        mismatched = {
            str(c): [train_names[c], ds.categories.get(c)]
            for c in shared
            if ds.categories.get(c) not in (None, train_names[c])
        }
        if not shared:
            raise DetcalInputError(
                f"none of the trained categories {train_names} occurs in the {name} split (its categories: "
                f"{dict(sorted(ds.categories.items()))}); check train_data.class_map",
                field="train_data.class_map",
            )
        if mismatched:
            raise DetcalInputError(
                f"category ids mean different classes in training and {name}: {mismatched} "
                "(id: [training name, evaluation name]); check train_data.class_map",
                field="train_data.class_map",
            )
        out[name] = {
            "categories": {str(k): v for k, v in sorted(ds.categories.items())},
            "boxes_of_trained_categories": int(np.isin(ds.gt.category, shared).sum()),
            "boxes_not_predicted": int((~np.isin(ds.gt.category, model_categories)).sum()),
            "trained_but_absent": [train_names[c] for c in model_categories if c not in present],
        }
    return out


def _check_writable(run_dir: Path) -> list[str]:
    done = []
    for rel in OUTPUT_DIRS:
        d = run_dir / rel
        try:
            d.mkdir(parents=True, exist_ok=True)
            probe = d / ".detcal_dry_run_probe"
            probe.write_text("ok", encoding="utf-8")
            probe.unlink()
        except OSError as exc:
            raise DetcalInputError(
                f"cannot write the run's output directory: {exc}", file=d, field="hydra.run.dir"
            ) from None
        done.append(rel)
    return done


def _one_step(spec: MainJobSpec, model: Any, train: Split, out: Path) -> dict[str, Any]:
    """One SGD step of stage 1, then of stage 2, on the first training batch; the logged losses."""
    from detcal.training.trainer import train_stage  # lazy: needs torch (the [train] extra)

    res: dict[str, Any] = {}
    for stage_spec in (spec.stage1, spec.stage2):
        one = dataclasses.replace(stage_spec, iterations=1, checkpoint_every=1, log_every=1)
        d = out / f"stage{stage_spec.stage}"
        t0 = time.perf_counter()
        train_stage(
            model,
            train.dataset,
            train.images,
            stage_spec.stage,
            d,
            resume=False,
            device=spec.trainer.device,
            **train_kwargs(one, dataclasses.replace(spec.trainer, num_workers=0), False),
        )
        rec = json.loads((d / f"stage{stage_spec.stage}_log.jsonl").read_text(encoding="utf-8").splitlines()[-1])
        res[f"stage{stage_spec.stage}"] = {
            "loss": rec["loss"],
            "losses": rec["losses"],
            "lr": rec["lr"],
            "batch_size": stage_spec.batch_size,
            "seconds": round(time.perf_counter() - t0, 3),
        }
    return res


def _predict(spec: MainJobSpec, model: Any, split: Split, out: Path) -> dict[str, Any]:
    """Predict on the first images of ``split``, write COCO + KITTI results and read the COCO file back."""
    from detcal.training.predict import predict  # lazy: needs torch (the [train] extra)

    sub = first_images(split.dataset, spec.dry_run.images)
    t0 = time.perf_counter()
    res = predict(
        model,
        sub,
        split.images,
        batch_size=spec.predict.batch_size,
        score_threshold=float(spec.predict.score_threshold),
        device=spec.trainer.device,
        progress=False,
    )
    path = out / split.name / "detections.json"
    write_coco_results(path, res.detections)
    back = load_coco_results(path, dataset=sub)
    files = {"coco_results": str(path)}
    if set(sub.categories.values()) <= set(KITTI_TYPES):
        kdir = out / split.name / "kitti"
        write_kitti_results(kdir, res.detections, categories=sub.categories, dataset=sub)
        files["kitti_results"] = str(kdir)
    if len(back) != len(res.detections) or back.delta_std is None and len(back):
        raise DetcalInputError("the written results do not read back as delta records", file=path)
    return {
        "images": len(sub.images),
        "detections": len(back),
        "seconds": round(time.perf_counter() - t0, 3),
        "files": files,
    }


def run_dry_run(spec: MainJobSpec, run_dir: str | Path) -> dict[str, Any]:
    """The dry run of ``spec`` in ``run_dir`` (module docstring); return (and write) its report."""
    t_start = time.perf_counter()
    run_dir = Path(run_dir)
    out = run_dir / "dry_run"
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"dry_run": True, "checks": {}}
    checks = report["checks"]
    facts = st.torch_setup(spec.trainer)
    report["platform"] = facts
    splits = prepare_splits(spec.data, spec.splits, spec.train_data, run_dir)
    checks["splits"] = {
        k: {
            "images": len(v.dataset.images),
            "boxes": len(v.dataset.gt),
            "format": v.gt_format,
            "provenance": v.provenance,
        }
        for k, v in splits.items()
    }
    checks["image_sizes"] = {k: _check_sizes(v, spec.dry_run.images) for k, v in splits.items()}
    t0 = time.perf_counter()
    model = st.build_model(spec.model, splits["train"], spec.train_data.categories, spec.stage1.seed)
    checks["model"] = {
        "backbone": spec.model.backbone,
        "backbone_weights": spec.model.backbone_weights,
        "num_classes": int(model.num_classes),
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "min_size": model.config.get("min_size"),
        "max_size": model.config.get("max_size"),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    checks["classes"] = _class_report(splits, [int(c) for c in model.category_ids.tolist()])
    checks["training_step"] = _one_step(spec, model, splits["train"], out / "train")
    checks["prediction"] = {k: _predict(spec, model, splits[k], out / "predictions") for k in ("recal", "val")}
    checks["output_dirs_writable"] = _check_writable(run_dir)
    report["trainer"] = {
        "kind": spec.trainer.kind,
        "device": spec.trainer.device,
        "note": "the dry run trains in this process; trainer=ddp runs its stages under torchrun",
    }
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    write_json(out / "dry_run.json", to_jsonable(report))
    print(_summary(report, out / "dry_run.json"), flush=True)
    return report


def _summary(r: Mapping[str, Any], path: Path) -> str:
    c = r["checks"]
    lines = [f"detcal-main dry run: every check passed in {r['seconds']:.1f} s ({path})"]
    for k, v in c["splits"].items():
        lines.append(
            f"  {k}: {v['images']} images, {v['boxes']} boxes ({v['format']}); image sizes "
            f"{c['image_sizes'][k]['sizes_wh']} (w x h) of the first {c['image_sizes'][k]['checked']}"
        )
    m = c["model"]
    lines.append(
        f"  model: {m['backbone']} ({m['parameters']:,} parameters, {m['num_classes']} classes "
        f"{list(c['classes']['model'].values())}), weights {m['backbone_weights']}"
    )
    for s, v in c["training_step"].items():
        lines.append(f"  {s}: one step on {v['batch_size']} images, loss {v['loss']:.4f} ({v['seconds']:.1f} s)")
    for s, v in c["prediction"].items():
        lines.append(
            f"  predict {s}: {v['detections']} detections on {v['images']} images -> {v['files']['coco_results']}"
        )
    for s in ("recal", "val"):
        cl = c["classes"][s]
        lines.append(
            f"  classes {s}: {cl['boxes_of_trained_categories']} boxes of trained classes, "
            f"{cl['boxes_not_predicted']} of others; trained but absent: {cl['trained_but_absent'] or 'none'}"
        )
    return "\n".join(lines)
