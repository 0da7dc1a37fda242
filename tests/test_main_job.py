"""detcal-main (detcal.experiments.main): the pipeline end to end on a tiny config,
the Table 1 analogue, the C_v invariance under std scaling, resume, and the configs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf

from detcal.errors import DetcalInputError
from detcal.experiments import main as main_job
from detcal.experiments.common import config_dir
from detcal.types import COORDS

CONFIG_DIR = config_dir()

# Tiny but complete: 16 training scenes, 30 + 10 SGD steps of 2 images, 12 recal / 12 val
# scenes. Every detection is kept (score > 0) and matching is class-agnostic, so that an
# R-FCN trained for seconds still yields true positives for the regression sample.
TINY = [
    "splits.train_images=16", "splits.recal_images=12", "splits.val_images=12",
    "stage1.iterations=30", "stage1.batch_size=2", "stage1.warmup_iters=5", "stage1.checkpoint_every=10",
    "stage2.iterations=10", "stage2.batch_size=2", "stage2.checkpoint_every=5",
    "predict.score_threshold=0.0", "evaluation.matching.class_agnostic=true",
    "evaluation.bootstrap.n=0", "evaluation.plots=false", "progress=false", "trainer.threads=2",
]


def compose_main(overrides: list[str]) -> Any:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="main", overrides=overrides)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    run_dir = tmp_path_factory.mktemp("main_tiny")
    cfg = compose_main(TINY)
    table = main_job.run(cfg, run_dir)
    ckpts = {p.name: p.stat().st_mtime_ns for p in (run_dir / "train").glob("stage*_final.pt")}
    return {"cfg": cfg, "dir": run_dir, "table": table, "ckpts": ckpts}


def test_pipeline_writes_table1_json_markdown_and_pngs(tiny_run: dict[str, Any]) -> None:
    d: Path = tiny_run["dir"]
    for name in ("table1.json", "table1.md", "stages.json", "main_config.yaml", "calibration/calibrators.json",
                 "reliability_before.png", "reliability_std_scaling.png", "reliability_isotonic.png",
                 "train/stage1_final.pt", "train/stage2_final.pt", "predictions/val/detections.json",
                 "predictions/recal/detections.json", "predictions/val/meta.json", "calibration/val_std_scaling.json",
                 "calibration/val_isotonic.json", "eval/val_before/metrics.json", "eval/val_std_scaling/metrics.json",
                 "eval/val_isotonic/metrics.json", "splits/val/instances.json"):
        assert (d / name).is_file(), name
    for png in d.glob("reliability_*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # KITTI export of the delta records' boxes and scores: one file per val image
    assert len(list((d / "predictions" / "val" / "kitti").glob("*.txt"))) == 12
    t = json.loads((d / "table1.json").read_text())
    assert t["columns"] == ["tx", "ty", "tw", "th"]
    assert list(t["rows"]) == ["ENCE before calibration", "ENCE after std scaling", "ENCE after isotonic (Kuleshov)", "C_v"]
    assert t["bins"] == 10 and t["binning"] == "equal_count" and t["iou_threshold"] == 0.5
    assert t["n_tp_val"] >= 2 and t["calibration"]["n_recal_tp"] >= 2
    for row in t["rows"].values():
        assert set(row) == set(COORDS) and all(np.isfinite(v) and v >= 0 for v in row.values())
    md = (d / "table1.md").read_text()
    assert "| ENCE before calibration |" in md and "| C_v |" in md and "| s (std scaling, fitted on recal) |" in md
    assert md.splitlines()[2] == "| | tx | ty | tw | th |"
    val = t["detection"]["val"]
    assert val["true_positives"] + val["false_positives"] + val["ignored"] == val["detections"]
    assert val["precision"] == pytest.approx(val["true_positives"] / (val["true_positives"] + val["false_positives"]))
    assert set(t["stages"]) == {"data", "stage1", "stage2", "predict", "calibrate", "evaluate", "report"}


def test_cv_is_unchanged_by_std_scaling_on_the_real_outputs(tiny_run: dict[str, Any]) -> None:
    d: Path = tiny_run["dir"]
    t = json.loads((d / "table1.json").read_text())
    for c in COORDS:
        before, after = t["cv"]["before"][c], t["cv"]["std_scaling"][c]
        assert abs(before - after) <= 1e-12 * max(abs(before), 1.0), c
        assert t["rows"]["C_v"][c] == before
    # the std-scaled results file: sigma' / sigma is the learned s_k for every detection, mu unchanged
    before = json.loads((d / "predictions" / "val" / "detections.json").read_text())
    after = json.loads((d / "calibration" / "val_std_scaling.json").read_text())
    s = np.array([t["std_scaling_s"][c] for c in COORDS])
    ratio = np.array([a["delta_std"] for a in after]) / np.array([b["delta_std"] for b in before])
    np.testing.assert_allclose(ratio, np.broadcast_to(s, ratio.shape), rtol=1e-13)
    np.testing.assert_array_equal(np.array([a["delta_mean"] for a in after]), np.array([b["delta_mean"] for b in before]))
    # C_v recomputed here from the val TP rows (matched at IoU 0.5, class-agnostic as configured):
    # C_v = std(sigma, ddof=1) / mean(sigma) (Levi et al. Eq. 9), for sigma and for s * sigma
    rows = _tp_rows(d, "val")
    assert len(rows) == t["n_tp_val"]
    sig = np.array([before[i]["delta_std"] for i in rows])
    sig_s = np.array([after[i]["delta_std"] for i in rows])
    cv = sig.std(axis=0, ddof=1) / sig.mean(axis=0)
    cv_s = sig_s.std(axis=0, ddof=1) / sig_s.mean(axis=0)
    np.testing.assert_allclose([t["cv"]["before"][c] for c in COORDS], cv, rtol=1e-12)
    np.testing.assert_allclose([t["cv"]["std_scaling"][c] for c in COORDS], cv_s, rtol=1e-12)


def _tp_rows(d: Path, split: str) -> np.ndarray:
    from detcal.data.coco import load_coco_instances, load_coco_results
    from detcal.matching import match

    ds = load_coco_instances(d / "splits" / split / "instances.json")
    dets = load_coco_results(d / "predictions" / split / "detections.json", dataset=ds)
    mr = match(dets, ds.gt, [0.5], class_agnostic=True, max_dets=100)
    return np.flatnonzero(mr.matched[0] & mr.considered)


def test_std_scaling_factor_matches_closed_form_on_recal(tiny_run: dict[str, Any]) -> None:
    from detcal.data.coco import load_coco_instances, load_coco_results
    from detcal.matching import match
    from detcal.metrics.spaces import regression_sample

    d: Path = tiny_run["dir"]
    ds = load_coco_instances(d / "splits" / "recal" / "instances.json")
    dets = load_coco_results(d / "predictions" / "recal" / "detections.json", dataset=ds)
    mr = match(dets, ds.gt, [0.5], class_agnostic=True, max_dets=100)
    smp = regression_sample(dets, ds.gt, mr, 0.5)
    # Levi et al. Eq. 12 (sign fixed): s_k = sqrt(mean_t ((y_tk - mu_tk) / sigma_tk)^2)
    s = np.sqrt(np.mean(((smp.y - smp.mu) / smp.sigma) ** 2, axis=0))
    t = json.loads((d / "table1.json").read_text())
    np.testing.assert_allclose([t["std_scaling_s"][c] for c in COORDS], s, rtol=1e-12)
    assert t["calibration"]["n_recal_tp"] == len(smp)


def test_rerun_resumes_and_skips_training(tiny_run: dict[str, Any]) -> None:
    d: Path = tiny_run["dir"]
    table2 = main_job.run(tiny_run["cfg"], d)
    st = json.loads((d / "stages.json").read_text())
    assert st["stage1"]["status"].startswith("skipped") and st["stage2"]["status"].startswith("skipped")
    assert st["predict"]["status"].count("reused") == 2
    assert {p.name: p.stat().st_mtime_ns for p in (d / "train").glob("stage*_final.pt")} == tiny_run["ckpts"]
    assert table2["rows"] == tiny_run["table"]["rows"] and table2["std_scaling_s"] == tiny_run["table"]["std_scaling_s"]


def test_splits_are_disjoint_and_seeded(tmp_path: Path) -> None:
    cfg = compose_main(["splits.train_images=5", "splits.recal_images=4", "splits.val_images=3"])
    sp = main_job.prepare_splits(cfg, tmp_path)
    assert [len(sp[k].dataset.images) for k in ("train", "recal", "val")] == [5, 4, 3]
    boxes = {k: {tuple(b) for b in sp[k].dataset.gt.box.round(2).tolist()} for k in sp}
    assert not (boxes["recal"] & boxes["val"]) and not (boxes["train"] & boxes["val"])
    assert (tmp_path / "splits" / "recal" / "instances.json").is_file()
    bad = compose_main(["splits.val_seed=2", "splits.recal_seed=2"])
    with pytest.raises(DetcalInputError, match="seeds must differ"):
        main_job.prepare_splits(bad, tmp_path)


def test_delta_records_source_names_missing_file(tmp_path: Path) -> None:
    src = main_job.DeltaRecordsSource(gt=str(tmp_path / "nope.json"), results=str(tmp_path / "r.json"))
    with pytest.raises(DetcalInputError, match="nope.json"):
        src.load(tmp_path)


def test_ddp_command_is_a_torchrun_of_the_distributed_entry(tmp_path: Path) -> None:
    cfg = compose_main(["trainer=ddp", "trainer.nproc=2", "trainer.device=cpu"])
    sp = main_job.prepare_splits(compose_main(["splits.train_images=3", "splits.recal_images=2", "splits.val_images=2"]), tmp_path)
    cmd = main_job.ddp_command(cfg, 1, sp["train"], tmp_path / "init.pt", tmp_path)
    joined = " ".join(cmd)
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"] and "--nproc_per_node=2" in cmd
    assert "-m detcal.training.distributed --data synthetic:3 --data-seed 1 --stage 1" in joined
    assert f"--iterations {cfg.stage1.iterations}" in joined and "--device cpu" in joined
    with pytest.raises(DetcalInputError, match="divisible"):
        main_job.ddp_command(compose_main(["trainer=ddp", "trainer.nproc=3"]), 1, sp["train"], tmp_path, tmp_path)
    with pytest.raises(DetcalInputError, match="lr_steps"):
        main_job.ddp_command(compose_main(["trainer=ddp", "stage1.lr_steps=[5]"]), 1, sp["train"], tmp_path, tmp_path)


@pytest.mark.parametrize("model", ["rfcn_tiny", "rfcn_r50", "rfcn_r101"])
def test_model_group_builds_the_rfcn(model: str) -> None:
    cfg = compose_main([f"model={model}"])
    builder = instantiate(cfg.model)
    from detcal.models.rfcn import build_rfcn

    assert builder.func is build_rfcn and builder.keywords["backbone_weights"] is None
    if model == "rfcn_tiny":
        net = builder(num_classes=3, category_ids=[1, 4, 6])
        assert net.num_classes == 3 and net.category_ids.tolist() == [1, 4, 6]


@pytest.mark.parametrize("overrides", [[], ["trainer=gpu"], ["trainer=ddp"], ["experiment=levi2019_kitti"],
                                       ["data=kitti"], ["data.format=kitti"]])
def test_main_config_composes(overrides: list[str]) -> None:
    cfg = compose_main(overrides)
    OmegaConf.to_container(cfg, resolve=True)
    assert cfg.evaluation.metrics.regression.iou_threshold == cfg.calibration.iou_threshold
    assert cfg.stage2.iterations >= 1 and cfg.trainer.kind in ("single", "ddp")


def test_smoke_is_the_default_experiment() -> None:
    cfg = compose_main([])
    assert cfg.name == "smoke" and cfg.model.backbone == "tiny" and cfg.trainer.device == "cpu"
    assert cfg.data._target_.endswith("SyntheticSource")
    assert len({cfg.splits.train_seed, cfg.splits.recal_seed, cfg.splits.val_seed}) == 3
