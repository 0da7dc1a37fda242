"""experiment=levi2019_kitti: composes with the paper's settings, and runs to completion on a
miniature KITTI-format dataset (COCO-format training set + KITTI label_2 / image_2 PNGs
written here from detcal.data.synthetic) with overrides that change only paths, sizes,
iteration counts, model=rfcn_tiny and trainer=cpu."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from PIL import Image

from detcal.apps._hydra import register_schema
from detcal.core.types import Dataset, GroundTruth
from detcal.data import synthetic
from detcal.data.coco import load_coco_instances, load_coco_results, write_coco_instances
from detcal.pipeline.registry import config_dir, make_calibrator
from detcal.training.spec import MainApp

CONFIG_DIR = config_dir()
CLASS_MAP = CONFIG_DIR / "classmap" / "coco_kitti_v1.yaml"

# synthetic KITTI ids -> standard COCO ids/names (car 3, person 1, bicycle 2); "bus" (6) is
# unmapped in coco_kitti_v1 and must be dropped from training.
COCO_OF_KITTI = {1: 3, 4: 1, 6: 2}
COCO_CATEGORIES = {1: "person", 2: "bicycle", 3: "car", 6: "bus"}
SCENES = {"min_size": 28, "max_size": 70, "objects_per_image": (1, 4)}


def compose_main(overrides: list[str]) -> Any:
    register_schema("main", MainApp)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="main", overrides=overrides)


def write_miniature(root: Path) -> dict[str, Path]:
    """data/coco (instances_train2017.json + train2017/*.png) and data/kitti/training (label_2, image_2)."""
    paths = synthetic.write_synthetic(
        root / "kitti_src", n_images=24, seed=5, render=True, kitti_images=True, scene_kwargs=SCENES
    )
    ds, images = synthetic.generate_scenes(24, 7, render=True, **SCENES)
    cat = np.array([COCO_OF_KITTI[int(c)] for c in ds.gt.category])
    cat[::7] = 6  # a few "bus" boxes: unmapped, dropped by the class map
    gt = GroundTruth(image_id=ds.gt.image_id, box=ds.gt.box, category=cat)
    coco = Dataset(images=ds.images, gt=gt, categories=dict(COCO_CATEGORIES), source="miniature coco")
    img_dir = root / "coco" / "train2017"
    img_dir.mkdir(parents=True)
    for name, arr in zip(ds.images.file_name, images):
        Image.fromarray(arr).save(img_dir / name)
    write_coco_instances(root / "coco" / "annotations" / "instances_train2017.json", coco)
    return {
        "label_dir": paths["kitti_labels"],
        "image_dir": paths["kitti_images"],
        "instances": root / "coco" / "annotations" / "instances_train2017.json",
        "train_images": img_dir,
    }


def test_experiment_composes_with_the_paper_settings() -> None:
    app = OmegaConf.to_object(compose_main(["experiment=levi2019_kitti"]))
    assert app.name == "levi2019_kitti"
    assert app.model.backbone == "resnet101" and app.model.backbone_weights is None
    assert app.trainer.device == "cuda" and app.trainer.kind == "single"
    assert app.data.source == "kitti" and app.data.label_dir == "data/kitti/training/label_2"
    assert app.data.image_dir == "data/kitti/training/image_2"
    t = app.train_data
    assert t.source == "coco" and t.instances == "data/coco/annotations/instances_train2017.json"
    assert t.image_dir == "data/coco/train2017" and t.class_map.endswith("coco_kitti_v1.yaml")
    # Levi et al. App. A.2: stage 2 = 1K iterations, 6 images/iteration, SGD lr 0.001, momentum 0.9
    s2 = app.stage2
    assert (s2.iterations, s2.batch_size, s2.lr, s2.momentum) == (1000, 6, 0.001, 0.9)
    # KITTI ~6K recal / ~1.5K val of the 7,481 labelled frames; devkit matching; regression TPs at IoU 0.5
    assert app.splits.val_size == 1500 and app.evaluation.matching.iou_thresholds == "kitti"
    assert app.evaluation.matching.mode == "kitti"
    assert app.calibration.iou_threshold == 0.5 == app.evaluation.regression.sample_iou
    assert app.evaluation.sigma_binning.scheme == "equal_count" and app.evaluation.sigma_binning.bins == 10


@pytest.fixture(scope="module")
def miniature_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("mini_kitti")
    p = write_miniature(root / "data")
    overrides = [
        "experiment=levi2019_kitti",
        "model=rfcn_tiny",
        "trainer=cpu",
        # paths
        f"data.label_dir={p['label_dir']}",
        f"data.image_dir={p['image_dir']}",
        f"train_data.instances={p['instances']}",
        f"train_data.image_dir={p['train_images']}",
        f"train_data.class_map={CLASS_MAP}",
        # sizes
        "splits.val_size=8",
        "stage1.batch_size=2",
        "stage2.batch_size=2",
        "evaluation.bootstrap.n=20",
        # iteration counts
        "stage1.iterations=40",
        "stage1.warmup_iters=5",
        "stage1.checkpoint_every=20",
        "stage2.iterations=6",
        "stage2.checkpoint_every=3",
    ]
    from detcal.training.job import run_main_job

    spec = OmegaConf.to_object(compose_main(overrides)).job()
    run_dir = root / "run"
    table = run_main_job(spec, run_dir, calibrators={m: make_calibrator(m) for m in spec.calibration.methods})
    return {"dir": run_dir, "table": table, "spec": spec}


@pytest.mark.slow
def test_runs_to_completion_on_miniature_kitti(miniature_run: dict[str, Any]) -> None:
    d: Path = miniature_run["dir"]
    t = json.loads((d / "table1.json").read_text())
    assert list(t["rows"]) == [
        "ENCE before calibration",
        "ENCE after std scaling",
        "ENCE after isotonic (Kuleshov)",
        "C_v",
    ]
    assert t["columns"] == ["tx", "ty", "tw", "th"] and t["n_tp_val"] >= 1
    assert all(np.isfinite(v) for row in t["rows"].values() for v in row.values() if t["n_tp_val"] >= 2)
    assert (d / "table1.md").read_text().count("| ENCE") >= 3
    for v in ("before", "std_scaling", "kuleshov_isotonic"):
        assert (d / f"reliability_{v}.png").is_file()
        m = json.loads((d / "eval" / f"val_{v}" / "metrics.json").read_text())
        assert m["data"]["format"] == "kitti" and m["matching"]["iou_thresholds"] != [0.5]  # devkit per-class row
    # recal / val: 16 / 8 of the 24 frames, disjoint (split_frames), GT written as KITTI label_2
    recal = {p.stem for p in (d / "splits" / "recal" / "label_2").glob("*.txt")}
    val = {p.stem for p in (d / "splits" / "val" / "label_2").glob("*.txt")}
    assert (len(recal), len(val)) == (16, 8) and not recal & val
    assert {p.stem for p in (d / "predictions" / "val" / "kitti").glob("*.txt")} == val
    assert t["stages"]["stage2"]["status"] == "trained"


@pytest.mark.slow
def test_training_set_is_coco_restricted_to_kitti_classes(miniature_run: dict[str, Any]) -> None:
    d: Path = miniature_run["dir"]
    train = load_coco_instances(d / "data" / "train_instances.json")
    # coco_kitti_v1: person -> Pedestrian (4), bicycle -> Cyclist (6), car -> Car (1); bus unmapped
    assert set(np.unique(train.gt.category).tolist()) <= {1, 4, 6}
    assert train.categories[1] == "Car" and train.categories[4] == "Pedestrian"
    src = load_coco_instances(Path(miniature_run["spec"].train_data.instances))
    assert len(train.gt) == int((src.gt.category != 6).sum())
    val = load_kitti_val(d)
    dets = load_coco_results(d / "predictions" / "val" / "detections.json", dataset=val)
    assert set(np.unique(dets.category).tolist()) <= {1, 4, 6} and dets.uncertainty_kind == "delta"


def load_kitti_val(d: Path) -> Dataset:
    from detcal.data.kitti import load_kitti_labels

    return load_kitti_labels(d / "splits" / "val" / "label_2", sizes=d / "splits" / "val" / "sizes.txt")
