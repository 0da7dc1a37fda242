"""Data-parallel training (torchrun, gloo, CPU) against a single process (detcal.training.distributed).

Tolerance. With GroupNorm (batch independent) and per-image seeded anchor/RoI
sampling, a 2-rank shard computes the same per-image terms as one process and
every stage-1 loss is a mean over equally many sampled anchors/RoIs per image,
so the rank-averaged losses and DDP-averaged gradients equal the single-process
ones up to float32 summation order: we require a relative difference < 1e-5 on
every logged loss and < 1e-5 absolute on the final weights (observed ~6e-8 and
~2e-8). Stage 2 averages the NLL over each rank's positive RoIs (unequal counts),
so only a loose 25 % agreement is asked there, plus the frozen parts staying
bitwise unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from detcal.core.types import Detections, Images
from detcal.training.distributed import all_reduce_sums, gather_detections, get_rank_world, main
from detcal.training.predict import concat_detections, empty_detections

REPO = Path(__file__).resolve().parents[2]
COMMON = [
    "--data",
    "toy:8",
    "--batch-size",
    "4",
    "--norm",
    "gn",
    "--log-every",
    "1",
    "--no-progress",
    "--num-threads",
    "1",
    "--seed",
    "3",
]


def _torchrun(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "detcal.training.distributed",
        *args,
    ]
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _log(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_single_process_helpers_are_identities() -> None:
    assert get_rank_world() == (0, 1)
    d = Detections(
        image_id=[2, 1],
        box=[[0, 0, 1, 1], [0, 0, 2, 2]],
        score=[0.5, 0.6],
        category=[1, 1],
        proposal=[[0, 0, 1, 1], [0, 0, 2, 2]],
        delta_mean=np.zeros((2, 4)),
        delta_std=np.ones((2, 4)),
    )
    assert gather_detections(d, Images(id=[1, 2], width=[5, 5], height=[5, 5])) is d
    out = all_reduce_sums({"count": np.array([1, 2]), "sum": np.array([0.5])})
    assert out["count"].tolist() == [1.0, 2.0] and out["sum"].tolist() == [0.5]
    both = concat_detections([d, empty_detections(), d])
    assert len(both) == 4 and both.delta_std.shape == (4, 4)


@pytest.mark.slow
def test_torchrun_two_ranks_match_single_process(tmp_path: Path) -> None:
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    _torchrun([*COMMON, "--out-dir", str(ddp), "--iterations", "3", "--predict-out", str(ddp / "pred.json")], tmp_path)
    torch.set_num_threads(1)
    main([*COMMON, "--out-dir", str(single), "--iterations", "3", "--predict-out", str(single / "pred.json")])
    la, lb = _log(ddp / "stage1_log.jsonl"), _log(single / "stage1_log.jsonl")
    assert [r["iteration"] for r in la] == [1, 2, 3] and all(r["world_size"] == 2 for r in la)
    for ra, rb in zip(la, lb):
        for k, v in rb["losses"].items():
            assert ra["losses"][k] == pytest.approx(v, rel=1e-5, abs=1e-7), (ra["iteration"], k)
    wa = torch.load(ddp / "stage1_final.pt", weights_only=True)["model"]
    wb = torch.load(single / "stage1_final.pt", weights_only=True)["model"]
    assert max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa) < 1e-5
    pa, pb = json.loads((ddp / "pred.json").read_text()), json.loads((single / "pred.json").read_text())
    assert pa["world_size"] == 2 and pa["n_detections"] == pb["n_detections"]  # gathered over ranks
    assert pa["score_sum"] == pytest.approx(pb["score_sum"], rel=1e-4)

    # stage 2 under DDP (model in eval mode, only the uncertainty branch trained)
    init = str(ddp / "stage1_final.pt")
    args2 = [*COMMON, "--stage", "2", "--init", init, "--iterations", "2", "--lr", "0.001"]
    _torchrun([*args2, "--out-dir", str(ddp)], tmp_path)
    main([*args2, "--out-dir", str(single)])
    s2a, s2b = _log(ddp / "stage2_log.jsonl"), _log(single / "stage2_log.jsonl")
    assert s2a[0]["loss"] == pytest.approx(s2b[0]["loss"], rel=0.25)
    w2 = torch.load(ddp / "stage2_final.pt", weights_only=True)["model"]
    changed = [k for k in wa if not torch.equal(wa[k], w2[k])]
    assert changed and all(k.startswith("head.unc_conv.") for k in changed)


def test_job_file_carries_every_field_of_the_stage_and_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``trainer=ddp``: the full StageSpec/TrainerSpec reach train_stage in the torchrun process."""
    import dataclasses

    from detcal.training import distributed, trainer
    from detcal.training.ddp import DdpJob, ddp_command, read_job, write_job
    from detcal.training.spec import StageSpec, TrainerSpec
    from detcal.training.stages import train_kwargs

    # every field away from its default, so a dropped one cannot pass by accident
    stage = StageSpec(
        stage=2,
        iterations=7,
        batch_size=6,
        lr=0.0123,
        momentum=0.8,
        weight_decay=0.002,
        warmup_iters=3,
        lr_steps=[4, 6],
        lr_gamma=0.5,
        max_grad_norm=2.5,
        hflip=True,
        seed=9,
        checkpoint_every=2,
        log_every=3,
    )
    tr = TrainerSpec(
        kind="ddp",
        device="cpu",
        threads=1,
        nproc=2,
        backend="gloo",
        num_workers=0,
        cache_images=False,
        deterministic=True,
    )
    defaults = (StageSpec(stage=2), TrainerSpec())
    for spec, default in zip((stage, tr), defaults):
        same = [f.name for f in dataclasses.fields(spec) if getattr(spec, f.name) == getattr(default, f.name)]
        assert set(same) <= {"stage", "num_workers", "device"}, same
    job = DdpJob(
        stage=stage,
        trainer=tr,
        data="toy:6",
        data_seed=5,
        image_dir=None,
        init=str(tmp_path / "init.pt"),
        out_dir=str(tmp_path / "out"),
        progress=False,
    )
    path = write_job(tmp_path / "job.json", job)
    back = read_job(path)
    assert back == job
    cmd = ddp_command(path, tr.nproc)
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    assert cmd[-4:] == ["-m", "detcal.training.distributed", "--job", str(path)]

    seen: dict = {}
    monkeypatch.setattr(
        distributed,
        "init_distributed",
        lambda backend=None, device=None: (
            seen.update(backend=backend, device=device) or distributed.DistInfo(0, 1, 0, torch.device("cpu"))
        ),
    )
    monkeypatch.setattr(trainer, "load_checkpoint", lambda p, model=None: seen.update(init=p) or "MODEL")

    def fake_train_stage(model, dataset, images, st, out_dir, **kw):
        seen.update(model=model, n_images=len(dataset.images), stage=st, out_dir=out_dir, kw=kw)
        return Path(out_dir) / f"stage{st}_final.pt"

    monkeypatch.setattr(trainer, "train_stage", fake_train_stage)
    assert main(["--job", str(path)]) == 0
    assert seen["backend"] == "gloo" and seen["device"] == "cpu" and seen["init"] == str(tmp_path / "init.pt")
    assert seen["model"] == "MODEL" and seen["n_images"] == 6 and seen["stage"] == 2
    assert seen["out_dir"] == str(tmp_path / "out")
    kw = seen["kw"]
    assert kw.pop("resume") is True and str(kw.pop("device")) == "cpu"
    assert kw == train_kwargs(stage, tr, False)
    assert (kw["lr_steps"], kw["hflip"], kw["lr_gamma"], kw["max_grad_norm"], kw["warmup_iters"]) == (
        [4, 6],
        True,
        0.5,
        2.5,
        3,
    )
    assert (kw["iterations"], kw["batch_size"], kw["lr"], kw["momentum"], kw["weight_decay"], kw["seed"]) == (
        7,
        6,
        0.0123,
        0.8,
        0.002,
        9,
    )
    assert (kw["checkpoint_every"], kw["log_every"], kw["num_threads"], kw["deterministic"], kw["cache_images"]) == (
        2,
        3,
        1,
        True,
        False,
    )


def test_bad_job_file_names_the_file(tmp_path: Path) -> None:
    from detcal.core.errors import DetcalInputError
    from detcal.training.ddp import read_job

    p = tmp_path / "job.json"
    p.write_text(json.dumps({"format": "detcal-ddp-job/1", "stage": {"stage": 1, "lr": -1}}))
    with pytest.raises(Exception, match="stage1.lr"):
        read_job(p)
    p.write_text("{}")
    with pytest.raises(DetcalInputError, match="job.json"):
        read_job(p)


def test_no_import_cycle_between_predict_and_distributed() -> None:
    import ast

    def imports(mod: str) -> set[str]:
        tree = ast.parse((REPO / "detcal" / "training" / f"{mod}.py").read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("detcal.training."):
                out.add(node.module.rsplit(".", 1)[1])
        return out

    assert "distributed" not in imports("predict")
    assert "predict" not in imports("comm") and "distributed" not in imports("comm")


@pytest.mark.slow
def test_main_job_under_torchrun_gets_every_stage_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """detcal-main with trainer=ddp (2 CPU ranks, gloo): lr_steps and hflip reach the ranks (~1 min)."""
    import dataclasses

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from detcal.apps._hydra import register_schema
    from detcal.pipeline.registry import config_dir
    from detcal.training.ddp import read_job
    from detcal.training.job import make_calibrators, run_main_job
    from detcal.training.spec import MainApp

    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    register_schema("main", MainApp)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="main",
            overrides=[
                "trainer=ddp",
                "trainer.device=cpu",
                "trainer.nproc=2",
                "trainer.threads=1",
                "trainer.backend=gloo",
                "splits.train_images=16",
                "splits.recal_images=12",
                "splits.val_images=12",
                "stage1.iterations=6",
                "stage1.batch_size=2",
                "stage1.warmup_iters=2",
                "stage1.checkpoint_every=3",
                "stage1.lr_steps=[4]",
                "stage1.lr_gamma=0.5",
                "stage1.hflip=true",
                "stage2.iterations=4",
                "stage2.batch_size=2",
                "stage2.checkpoint_every=2",
                "predict.score_threshold=0.0",
                "evaluation.matching.class_agnostic=true",
                "evaluation.bootstrap.n=0",
                "output.plots=false",
                "progress=false",
            ],
        )
    spec = OmegaConf.to_object(cfg).job()
    d = tmp_path / "run"
    table = run_main_job(spec, d, calibrators=make_calibrators(spec.calibration.methods))
    assert table["stages"]["stage1"]["status"] == "trained" and table["stages"]["stage2"]["status"] == "trained"
    for s, st in ((1, spec.stage1), (2, spec.stage2)):
        job = read_job(d / "train" / f"stage{s}" / f"ddp_stage{s}.json")
        assert dataclasses.asdict(job.stage) == dataclasses.asdict(st)
        assert dataclasses.asdict(job.trainer) == dataclasses.asdict(spec.trainer)
    log = _log(d / "train" / "stage1" / "stage1_log.jsonl")
    assert all(r["world_size"] == 2 for r in log)
    last = log[-1]
    assert last["iteration"] == 6 and last["lr"] == pytest.approx(0.02 * 0.5)  # iteration 5 is past lr_steps [4]
