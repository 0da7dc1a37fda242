"""The image sets of the main job: ``train`` (stages 1-2), ``recal`` (stage 3 fit) and ``val`` (evaluation).

``data.source=synthetic``: three sets of generated scenes with disjoint seeds
(:func:`detcal.data.synthetic.generate_scenes`); ``kitti`` / ``coco``: the
data's labelled images split into recal / val by
:func:`detcal.data.kitti.split_frames`. The training set is synthetic or a
COCO instances file (optionally remapped to KITTI classes by a class map).
Each split carries an ``identity`` fingerprint of its content (image ids and
sizes, boxes, categories, flags) and its image source, which keys the reuse of
the stages computed from it. Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_DIFFICULTY, Dataset
from detcal.data import synthetic
from detcal.data.classmap import load_class_map
from detcal.data.coco import load_coco_instances, write_coco_instances
from detcal.data.kitti import kitti_difficulty, load_kitti_labels, split_frames, write_kitti_labels
from detcal.pipeline.spec import CocoDataSpec, ConfigError, DataSpec, KittiDataSpec, SyntheticDataSpec
from detcal.training.fingerprint import array_digest, file_identity, fingerprint
from detcal.training.spec import SplitsSpec, TrainDataSpec
from detcal.utils.io import write_text

__all__ = ["Split", "prepare_splits", "dataset_digest", "gt_paths"]

SYNTHETIC_IMAGE_SIZE = [160, 120]


@dataclass
class Split:
    """One image set of the pipeline.

    ``dataset`` (images, GT, categories); ``images`` the image source of
    :mod:`detcal.training.data` (a directory, or ``render(row) -> [H,W,3]``);
    ``gt_format`` ``coco`` or ``kitti`` (how its GT is written for the
    evaluation); ``difficulty`` (KITTI); ``ddp_data`` / ``ddp_seed`` /
    ``ddp_image_dir`` rebuild it in ``detcal.training.distributed``;
    ``identity`` the fingerprint of its content and images; ``provenance`` for the result files.
    """

    name: str
    dataset: Dataset
    images: Any
    gt_format: str = "coco"
    difficulty: str = "moderate"
    ddp_data: str = ""
    ddp_seed: int = 0
    ddp_image_dir: str | None = None
    identity: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)


def dataset_digest(ds: Dataset) -> str:
    """sha256 of what a split's numbers depend on: image ids, sizes and names; GT boxes, categories and flags."""
    im, gt = ds.images, ds.gt
    flags = [
        getattr(gt, f)
        for f in ("iscrowd", "ignore", "difficulty", "truncation", "occlusion")
        if getattr(gt, f, None) is not None
    ]
    return array_digest(
        im.id,
        im.width,
        im.height,
        np.asarray(im.file_name, dtype=object),
        gt.image_id,
        gt.box,
        gt.category,
        *flags,
        np.asarray(sorted(ds.categories.items()), dtype=object),
    )


def _subset(ds: Dataset, image_ids: np.ndarray) -> Dataset:
    keep_img = np.isin(ds.images.id, image_ids)
    keep_gt = np.isin(ds.gt.image_id, image_ids)
    return Dataset(ds.images.select(keep_img), ds.gt.select(keep_gt), dict(ds.categories), ds.source)


def _need_path(value: Any, name: str, what: str = "path") -> Path:
    if value in (None, "", "???"):
        raise DetcalInputError(f"{name} is required (give {name}=<{what}>)", file="configs/main.yaml", field=name)
    p = Path(str(value)).expanduser()
    if not p.exists():
        raise DetcalInputError("does not exist", file=p, field=name)
    return p


def _image_identity(image_dir: Path, ds: Dataset) -> str:
    """Sizes and modification times of the split's image files (a missing file counts as missing)."""
    rows = []
    for name in ds.images.file_name:  # one stat per image file
        p = image_dir / str(name)
        try:
            st = p.stat()
            rows.append((str(name), st.st_size, st.st_mtime_ns))
        except OSError:
            rows.append((str(name), -1, -1))
    return fingerprint({"dir": str(image_dir.resolve()), "files": rows})


def _finish(split: Split, inputs: dict[str, Any]) -> Split:
    split.identity = fingerprint(
        {
            "name": split.name,
            "content": dataset_digest(split.dataset),
            "format": split.gt_format,
            "difficulty": split.difficulty,
            "inputs": inputs,
        }
    )
    split.provenance["identity"] = split.identity
    return split


def _synthetic_split(name: str, n_images: int, seed: int, gt_format: str, difficulty: str) -> Split:
    ds, _ = synthetic.generate_scenes(int(n_images), int(seed), render=False)
    if gt_format == "kitti":
        level = int(KITTI_DIFFICULTY[difficulty]["level"])
        diff = kitti_difficulty(ds.gt.box, ds.gt.truncation, ds.gt.occlusion)
        ds = dataclasses.replace(
            ds, gt=dataclasses.replace(ds.gt, difficulty=diff, ignore=ds.gt.ignore | (diff < 0) | (diff > level))
        )

    def render(row: int, _ds: Dataset = ds, _seed: int = int(seed)) -> np.ndarray:
        return synthetic.render_scene(_ds, row, _seed)

    sp = Split(
        name,
        ds,
        render,
        gt_format,
        difficulty,
        f"synthetic:{int(n_images)}",
        int(seed),
        None,
        provenance={
            "source": "synthetic",
            "n_images": int(n_images),
            "seed": int(seed),
            "image_size": SYNTHETIC_IMAGE_SIZE,
        },
    )
    # rendering is a function of (scene, seed): the seed and the generator's content digest identify the images
    return _finish(sp, {"source": "synthetic", "n_images": int(n_images), "seed": int(seed)})


def _coco_train_split(t: TrainDataSpec, run_dir: Path) -> Split:
    inst = _need_path(t.instances, "train_data.instances", "COCO instances JSON")
    image_dir = _need_path(t.image_dir, "train_data.image_dir", "image directory")
    ds = load_coco_instances(inst)
    prov: dict[str, Any] = {"source": "coco", "instances": str(inst.resolve()), "image_dir": str(image_dir.resolve())}
    inputs: dict[str, Any] = {"instances": file_identity(inst)}
    if t.max_images is not None:
        ds = _subset(ds, np.sort(ds.images.id)[: int(t.max_images)])
        prov["max_images"] = int(t.max_images)
    if t.class_map is not None:
        cm_path = _need_path(t.class_map, "train_data.class_map", "class-map YAML")
        cm = load_class_map(cm_path)
        ds = cm.remap_dataset(ds, "coco_to_kitti")
        prov["class_map"] = {
            "file": str(t.class_map),
            "name": cm.name,
            "version": cm.version,
            "direction": "coco_to_kitti",
        }
        inputs["class_map"] = file_identity(cm_path)
    out = run_dir / "data" / "train_instances.json"
    write_coco_instances(out, ds)  # what the model was trained on; also the DDP data file
    prov["written"] = str(out)
    inputs["images"] = _image_identity(image_dir, ds)
    sp = Split("train", ds, str(image_dir), "coco", "moderate", f"coco:{out}", 0, str(image_dir), provenance=prov)
    return _finish(sp, inputs)


def _kitti_eval_splits(d: KittiDataSpec, s: SplitsSpec) -> tuple[Split, Split]:
    label_dir = _need_path(d.label_dir, "data.label_dir", "label_2 directory")
    image_dir = _need_path(d.image_dir, "data.image_dir", "image_2 directory")
    frames = sorted(p.stem for p in label_dir.glob("*.txt"))
    if not frames:
        raise DetcalInputError("no label files (*.txt)", file=label_dir, field="data.label_dir")
    if s.max_images is not None:
        frames = frames[: int(s.max_images)]
    recal, val = split_frames(frames, s.val_size, int(s.split_seed))
    out = []
    for name, fr in (("recal", recal), ("val", val)):
        if not fr:
            raise DetcalInputError(
                f"the {name} split is empty ({len(frames)} frames, val_size={s.val_size})",
                file="configs/main.yaml",
                field="splits.val_size",
            )
        ds = load_kitti_labels(label_dir, image_dir=image_dir, sizes=d.sizes, difficulty=d.difficulty, image_ids=fr)
        sp = Split(
            name,
            ds,
            str(image_dir),
            "kitti",
            d.difficulty,
            provenance={
                "source": "kitti",
                "label_dir": str(label_dir.resolve()),
                "image_dir": str(image_dir.resolve()),
                "frames": len(fr),
                "val_size": s.val_size,
                "split_seed": int(s.split_seed),
                "max_images": s.max_images,
                "difficulty": d.difficulty,
            },
        )
        out.append(_finish(sp, {"images": _image_identity(image_dir, ds)}))
    return out[0], out[1]


def _coco_eval_splits(d: CocoDataSpec, s: SplitsSpec) -> tuple[Split, Split]:
    gt = _need_path(d.gt, "data.gt", "COCO instances JSON")
    image_dir = _need_path(s.image_dir, "splits.image_dir", "image directory of data.gt")
    ds = load_coco_instances(gt)
    ids = np.sort(ds.images.id)
    if s.max_images is not None:
        ids = ids[: int(s.max_images)]
    recal, val = split_frames([int(i) for i in ids], s.val_size, int(s.split_seed))
    out = []
    for name, fr in (("recal", recal), ("val", val)):
        sub = _subset(ds, np.array([int(f) for f in fr], dtype=np.int64))
        sp = Split(
            name,
            sub,
            str(image_dir),
            "coco",
            "moderate",
            provenance={
                "source": "coco",
                "gt": str(gt.resolve()),
                "image_dir": str(image_dir.resolve()),
                "images": len(fr),
            },
        )
        out.append(_finish(sp, {"images": _image_identity(image_dir, sub)}))
    return out[0], out[1]


def prepare_splits(
    data: DataSpec, splits: SplitsSpec, train_data: TrainDataSpec, run_dir: str | Path
) -> dict[str, Split]:
    """The ``train``, ``recal`` and ``val`` splits (module docstring).

    The recal and val splits are disjoint (synthetic: different seeds; real
    data: :func:`detcal.data.kitti.split_frames`). Their ground truth is
    written to ``<run_dir>/splits/<name>/`` in their format (COCO instances,
    or KITTI label_2 + sizes.txt) for the evaluation.
    """
    run_dir = Path(run_dir)
    s = splits
    if isinstance(data, SyntheticDataSpec):
        if train_data.source == "synthetic" and len({s.train_seed, s.recal_seed, s.val_seed}) != 3:
            raise DetcalInputError(
                f"train/recal/val seeds must differ (disjoint scenes), got {[s.train_seed, s.recal_seed, s.val_seed]}",
                file="configs/main.yaml",
                field="splits.*_seed",
            )
        if s.recal_seed == s.val_seed:
            raise DetcalInputError(
                f"recal/val seeds must differ (disjoint scenes), got {s.recal_seed}",
                file="configs/main.yaml",
                field="splits.*_seed",
            )
        recal = _synthetic_split("recal", s.recal_images, s.recal_seed, data.format, data.difficulty)
        val = _synthetic_split("val", s.val_images, s.val_seed, data.format, data.difficulty)
    elif isinstance(data, KittiDataSpec):
        recal, val = _kitti_eval_splits(data, s)
    elif isinstance(data, CocoDataSpec) and data.source == "coco":
        recal, val = _coco_eval_splits(data, s)
    else:
        raise ConfigError("data", f"detcal-main splits synthetic, kitti or coco data, got data={data.source}")
    if train_data.source == "synthetic":
        train = _synthetic_split("train", s.train_images, s.train_seed, "coco", "moderate")
    else:
        train = _coco_train_split(train_data, run_dir)
    for sp in (recal, val):
        _write_split_gt(sp, run_dir / "splits" / sp.name)
    return {"train": train, "recal": recal, "val": val}


def gt_paths(split: Split, run_dir: Path) -> dict[str, str | None]:
    """The written ground truth of ``split``: ``gt`` (instances.json or label_2/) and ``sizes`` (KITTI)."""
    base = Path(run_dir) / "splits" / split.name
    if split.gt_format == "coco":
        return {"gt": str(base / "instances.json"), "sizes": None}
    return {"gt": str(base / "label_2"), "sizes": str(base / "sizes.txt")}


def _write_split_gt(split: Split, out: Path) -> None:
    """Write the split's GT for the evaluation: ``instances.json`` (COCO) or ``label_2/`` + ``sizes.txt`` (KITTI)."""
    if split.gt_format == "coco":
        write_coco_instances(out / "instances.json", split.dataset)
        split.provenance["gt"] = str(out / "instances.json")
        return
    im = split.dataset.images
    write_kitti_labels(out / "label_2", split.dataset)
    lines = [
        f"{Path(n).stem or f'{int(i):06d}'} {w:g} {h:g}"
        for i, n, w, h in zip(im.id.tolist(), im.file_name, im.width.tolist(), im.height.tolist())
    ]
    write_text(out / "sizes.txt", "".join(line + "\n" for line in lines))
    split.provenance["gt"] = str(out / "label_2")
