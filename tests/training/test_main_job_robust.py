"""Issue 22: the main job's Table 1 with intervals and a conclusion, deterministic torch set-up and
platform facts, and the dry run on the miniature KITTI data.

The ENCE changes are checked against an ENCE written out here from its definition (Levi et
al. 2019, Eq. 8: equal-count bins of sigma, (1/B) sum_b |RMV_b - RMSE_b| / RMV_b) and against
a paired resampling of images written out here (same draws as detcal.metrics.bootstrap.draws
is not assumed: only the interval's coverage of the point estimate and its side of 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.scripts import load_script

from detcal.core.types import COORDS
from detcal.metrics.spaces import RegressionSample
from detcal.studies import main_job_seeds

REPO = Path(__file__).resolve().parents[2]


def _ence_by_hand(sigma: np.ndarray, err: np.ndarray, bins: int) -> float:
    order = np.argsort(sigma, kind="stable")
    s, e = sigma[order], err[order]
    vals = []
    for part_s, part_e in zip(np.array_split(s, bins), np.array_split(e, bins)):
        rmv, rmse = np.sqrt(np.mean(part_s**2)), np.sqrt(np.mean(part_e**2))
        vals.append(abs(rmv - rmse) / rmv)
    return float(np.mean(vals))


def _sample(
    n_images: int = 300, per_image: int = 4, factor: np.ndarray | None = None, seed: int = 0
) -> RegressionSample:
    """Gaussian errors whose true std is ``factor * sigma`` per coordinate (over-confident for factor > 1)."""
    rng = np.random.default_rng(seed)
    n = n_images * per_image
    sigma = rng.uniform(0.05, 0.5, size=(n, 4))
    f = np.array([1.5, 1.3, 1.8, 1.2]) if factor is None else factor
    y = rng.normal(0.0, sigma * f)
    return RegressionSample(
        mu=np.zeros((n, 4)), sigma=sigma, y=y, rows=np.arange(n), image_id=np.repeat(np.arange(n_images), per_image)
    )


class _Scale:
    def __init__(self, s: np.ndarray) -> None:
        self.s = np.asarray(s, float)

    def transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mu.copy(), sigma * self.s


def test_ence_changes_are_the_hand_computed_differences_with_paired_intervals() -> None:
    from detcal.training.report import conclusion, ence_changes

    smp = _sample()
    # std scaling fitted on an independent recal sample of the same miscalibration (Levi et al. Eq. 12)
    rec = _sample(seed=1)
    s = np.sqrt(np.mean(((rec.y - rec.mu) / rec.sigma) ** 2, axis=0))
    ch = ence_changes(
        smp, {"std_scaling": _Scale(s)}, bins=10, binning="equal_count", n_boot=300, level=0.95, seed=0, method="bca"
    )
    err = smp.y - smp.mu
    for k, c in enumerate(COORDS):
        e = ch["std_scaling"]["ence"][c]
        before = _ence_by_hand(smp.sigma[:, k], err[:, k], 10)
        after = _ence_by_hand(smp.sigma[:, k] * s[k], err[:, k], 10)
        assert e["a"] == pytest.approx(before, rel=1e-12) and e["b"] == pytest.approx(after, rel=1e-12)
        assert e["difference"] == pytest.approx(after - before, rel=1e-12)
        lo, hi = e["ci"]
        assert lo < e["difference"] < hi < 0 and e["excludes_zero"]  # a 20-80% over-confidence is no noise at N=1200
        assert e["bootstrap"] == {
            "method": "bca",
            "unit": "image",
            "paired": True,
            "n_boot": 300,
            "level": 0.95,
            "seed": 0,
            "n_images": 300,
        }
        assert e["params"] == {"bins": 10, "binning": "equal_count"}
        cv = ch["std_scaling"]["cv"][c]
        assert abs(cv["difference"]) <= 1e-12 * cv["a"]
    con = conclusion(ch)
    assert con["holds"] is True and con["all_intervals_below_zero"] is True


def test_conclusion_fails_when_a_coordinate_gets_worse_or_cv_moves() -> None:
    from detcal.training.report import conclusion, ence_changes

    smp = _sample(factor=np.array([1.5, 1.0, 1.0, 1.0]))
    # a wrong scale on th (too wide by 1.6x) makes that coordinate worse
    ch = ence_changes(
        smp,
        {"std_scaling": _Scale([1.5, 1.0, 1.0, 1.6])},
        bins=10,
        binning="equal_count",
        n_boot=200,
        level=0.95,
        seed=0,
        method="percentile",
    )
    con = conclusion(ch)
    assert con["ence_lowered"]["tx"] is True and con["ence_lowered"]["th"] is False and con["holds"] is False
    assert con["ence_interval_below_zero"]["th"] is False
    # a transform that is not a scale changes C_v: the claim's second half fails
    bent = type("Bent", (), {"transform": lambda self, mu, sg: (mu, sg**1.5)})()
    con2 = conclusion(
        ence_changes(
            smp,
            {"std_scaling": bent},
            bins=10,
            binning="equal_count",
            n_boot=50,
            level=0.95,
            seed=0,
            method="percentile",
        )
    )
    assert con2["holds"] is False and not any(con2["cv_unchanged"].values())
    assert conclusion({}, "std_scaling")["holds"] is None


def test_table1_markdown_reports_the_intervals_and_the_verdict() -> None:
    from detcal.training.report import conclusion, ence_changes, table1_markdown

    smp = _sample()
    ch = ence_changes(
        smp,
        {"std_scaling": _Scale([1.5, 1.3, 1.8, 1.2])},
        bins=10,
        binning="equal_count",
        n_boot=100,
        level=0.9,
        seed=3,
        method="bca",
    )
    rows = {"ENCE before calibration": {c: 0.3 for c in COORDS}, "C_v": {c: 0.4 for c in COORDS}}
    t = {
        "columns": list(COORDS),
        "split": "val",
        "n_tp_val": len(smp),
        "iou_threshold": 0.5,
        "bins": 10,
        "binning": "equal_count",
        "rows": rows,
        "cv": {},
        "rmse_rmv_spearman": {},
        "detection": {},
        "files": [],
        "ence_change": ch,
        "conclusion": conclusion(ch),
    }
    md = table1_markdown(t)
    assert "90% paired bootstrap intervals over the 300 val images (bca, 100 replicates, seed 3)" in md
    line = next(x for x in md.splitlines() if x.startswith("| ENCE std scaling - before |"))
    assert line.count("excludes 0") == 4
    assert "Conclusion: 'std_scaling lowers the val ENCE on every coordinate, C_v unchanged' holds" in md


def test_platform_facts_and_deterministic_setup_in_a_fresh_process() -> None:
    pytest.importorskip("torch")
    code = (
        "import json, torch; from detcal.training.determinism import configure_torch, platform_facts, platform_key; "
        "s = configure_torch(1, True, 'cpu'); f = platform_facts('cpu'); "
        "print(json.dumps({'set': s, 'facts': f, 'key': platform_key(f), "
        "'det': torch.are_deterministic_algorithms_enabled(), 'n': torch.get_num_threads()}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["det"] is True and r["n"] == 1 and r["set"]["threads"] == 1 and r["set"]["deterministic"] is True
    f = r["facts"]
    assert f["cpu_capability"] == "DEFAULT" and f["aten_cpu_capability_env"] == "default"  # the override is recorded
    assert f["threads"] == 1 and f["deterministic_algorithms"] is True and f["torch"].split("+")[0].count(".") == 2
    assert set(r["key"]) == {"torch", "cpu_capability", "machine", "cpu", "threads", "device"}
    if Path("/proc/cpuinfo").exists() and "flags" in Path("/proc/cpuinfo").read_text():
        assert isinstance(f["cpu_flags"], list)


# ----------------------------------------------------------------------------- the dry run (miniature KITTI)


def _mini_overrides(p: dict[str, Path]) -> list[str]:
    from detcal.pipeline.registry import config_dir

    return [
        "experiment=levi2019_kitti",
        "model=rfcn_tiny",
        "trainer=cpu",
        "trainer.threads=2",
        f"data.label_dir={p['label_dir']}",
        f"data.image_dir={p['image_dir']}",
        f"train_data.instances={p['instances']}",
        f"train_data.image_dir={p['train_images']}",
        f"train_data.class_map={config_dir() / 'classmap' / 'coco_kitti_v1.yaml'}",
        "splits.val_size=8",
        "dry_run.enabled=true",
        "progress=false",
    ]


def _main(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DETCAL_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "detcal.apps.main", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("torch")
    sys.path.insert(0, str(Path(__file__).parent))
    from test_levi2019_kitti import write_miniature

    root = tmp_path_factory.mktemp("dry")
    return {"root": root, "paths": write_miniature(root / "data")}


@pytest.mark.slow
def test_dry_run_of_levi2019_kitti_on_miniature_data(mini: dict[str, Any]) -> None:
    run = mini["root"] / "run"
    out = _main([f"hydra.run.dir={run}", *_mini_overrides(mini["paths"])], mini["root"])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "every check passed" in out.stdout
    r = json.loads((run / "dry_run" / "dry_run.json").read_text())
    c = r["checks"]
    assert {k: v["images"] for k, v in c["splits"].items()} == {"train": 24, "recal": 16, "val": 8}
    assert c["splits"]["val"]["format"] == "kitti"
    assert c["image_sizes"]["val"]["checked"] == 4 and len(c["image_sizes"]["val"]["sizes_wh"]) >= 1
    # coco_kitti_v1: person -> Pedestrian, bicycle -> Cyclist, car -> Car (bus dropped)
    assert sorted(c["classes"]["model"].values()) == ["Car", "Cyclist", "Pedestrian"]
    for s in ("stage1", "stage2"):
        assert (
            np.isfinite(c["training_step"][s]["loss"]) and c["training_step"][s]["batch_size"] == 8
            if s == "stage1"
            else c["training_step"][s]["batch_size"] == 6
        )
    for s in ("recal", "val"):
        p = c["prediction"][s]
        assert p["images"] == 4 and Path(p["files"]["coco_results"]).is_file()
        assert len(list(Path(p["files"]["kitti_results"]).glob("*.txt"))) == 4
    assert set(c["output_dirs_writable"]) == {
        "train/stage1",
        "train/stage2",
        "predictions/recal",
        "predictions/val",
        "calibration",
        "eval",
    }
    # nothing of the full run was trained or predicted
    assert not list((run / "train").rglob("*.pt")) and not (run / "predictions" / "val" / "detections.json").exists()
    assert not (run / "table1.json").exists()
    assert r["seconds"] < 120


@pytest.mark.slow
def test_dry_run_names_a_wrong_image_folder(mini: dict[str, Any]) -> None:
    from PIL import Image

    p = dict(mini["paths"])
    wrong = mini["root"] / "image_2_resized"  # the images of another size (e.g. a resized copy of KITTI)
    wrong.mkdir()
    for f in sorted(Path(p["image_dir"]).glob("*.png")):
        with Image.open(f) as im:
            im.resize((im.width // 2, im.height // 2)).save(wrong / f.name)
    p["image_dir"] = wrong
    out = _main([f"hydra.run.dir={mini['root'] / 'bad'}", *_mini_overrides(p)], mini["root"])
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("detcal-main: error:") and ("image" in last) and "Traceback" not in out.stderr


@pytest.mark.slow
def test_dataloader_workers_do_not_change_the_trained_weights(tmp_path: Path) -> None:
    """Items carry their own seeds and workers are seeded: 2 loader processes train the same weights as 0."""
    torch = pytest.importorskip("torch")
    from detcal.models.rfcn import build_rfcn
    from detcal.training.data import LabelMap, toy_scenes
    from detcal.training.trainer import train_stage

    ds, src = toy_scenes(12, 0)
    lm = LabelMap.from_dataset(ds)
    states = []
    for workers in (0, 2):
        torch.manual_seed(0)
        m = build_rfcn(num_classes=lm.num_classes, category_ids=list(lm.category_ids), backbone="tiny", k=3)
        train_stage(
            m,
            ds,
            src,
            1,
            tmp_path / f"w{workers}",
            iterations=3,
            batch_size=2,
            lr=0.01,
            momentum=0.9,
            weight_decay=0.0,
            seed=5,
            checkpoint_every=3,
            progress=False,
            hflip=True,
            num_workers=workers,
            num_threads=1,
        )
        states.append({k: v.clone() for k, v in m.state_dict().items()})
    assert states[0].keys() == states[1].keys()
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k]), k


def _fake_table(ence_before: float, ence_after: float, cv: float, s: float) -> dict[str, Any]:
    rows = {
        "ENCE before calibration": dict.fromkeys(COORDS, ence_before),
        "ENCE after std scaling": dict.fromkeys(COORDS, ence_after),
        "ENCE after isotonic (Kuleshov)": dict.fromkeys(COORDS, ence_after),
        "C_v": dict.fromkeys(COORDS, cv),
    }
    return {"rows": rows, "std_scaling_s": dict.fromkeys(COORDS, s)}


def test_seed_study_spread_and_fixture_tolerance_by_hand() -> None:
    seeds_mod, rec = main_job_seeds, load_script("scripts/record_main_fixture.py")
    runs = {
        "a": {"table": _fake_table(0.30, 0.08, 0.40, 1.2)},
        "b": {"table": _fake_table(0.36, 0.10, 0.43, 1.3)},
        "c": {"table": _fake_table(0.33, 0.05, 0.40, 1.25)},
    }
    sp = seeds_mod.spread(runs)
    assert sp["ENCE before calibration/tx"]["range"] == pytest.approx(0.06)
    assert sp["ENCE after std scaling/th"]["sd"] == pytest.approx(np.std([0.08, 0.10, 0.05], ddof=1))
    assert sp["s/tw"]["min"] == 1.2 and sp["s/tw"]["max"] == 1.3 and sp["C_v/ty"]["range"] == pytest.approx(0.03)
    rows = [
        {
            "run": k,
            "ence_before": r["table"]["rows"]["ENCE before calibration"],
            "ence_std_scaling": r["table"]["rows"]["ENCE after std scaling"],
            "ence_isotonic": r["table"]["rows"]["ENCE after isotonic (Kuleshov)"],
            "cv": r["table"]["rows"]["C_v"],
            "s": r["table"]["std_scaling_s"],
        }
        for k, r in runs.items()
    ]
    tol = rec.tolerance(runs["a"]["table"], {"rows": rows}, factor=2.0)
    # largest |run - recorded| per row with run a recorded (before 0.06, after 0.03, C_v 0.03, s 0.1), times 2
    assert tol["ENCE before calibration"] == pytest.approx(0.12) and tol["ENCE after std scaling"] == pytest.approx(
        0.06
    )
    assert tol["C_v"] == pytest.approx(0.06) and tol["s"] == pytest.approx(0.2)
    assert tol["runs"] == ["a", "b", "c"]
