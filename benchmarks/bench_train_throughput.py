"""Training throughput of detcal's R-FCN (images per second), next to torchvision's Faster R-CNN.

One SGD step = forward with losses, backward, optimizer step, on a batch of
random KITTI-sized images (default 375 x 1242) with a few random boxes each.
``--amp`` wraps the forward in ``torch.autocast`` (float16) with a gradient
scaler, on CUDA only: torchvision's position-sensitive RoI align has no
bfloat16 CPU kernel and no CPU autocast rule, so the R-FCN cannot run under CPU autocast. The reference is torchvision's
``fasterrcnn_resnet50_fpn`` (random weights) trained the same way, i.e. the
training step of torchvision's detection reference scripts, measured in the
same process on the same device. Prints one JSON line per model.

    python benchmarks/bench_train_throughput.py --device cuda --models tiny resnet50 torchvision_frcnn_r50
    python benchmarks/bench_train_throughput.py --device cuda --amp --models tiny resnet50 torchvision_frcnn_r50
    python benchmarks/bench_train_throughput.py --device cpu --models tiny --steps 3 --warmup 1   # CPU sanity

No weights are downloaded (random initialisation; throughput does not depend on the weights).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detcal.training.determinism import configure_torch, platform_facts  # noqa: E402


def batch(n: int, h: int, w: int, classes: int, device: torch.device, seed: int) -> tuple[list, list]:
    g = torch.Generator().manual_seed(seed)
    imgs, targets = [], []
    for _ in range(n):
        imgs.append(torch.rand(3, h, w, generator=g).to(device))
        k = 4
        xy = torch.rand(k, 2, generator=g) * torch.tensor([w * 0.7, h * 0.7])
        wh = 20 + torch.rand(k, 2, generator=g) * torch.tensor([w * 0.25, h * 0.25])
        boxes = torch.cat([xy, xy + wh], 1)
        labels = torch.randint(1, classes + 1, (k,), generator=g)
        targets.append(
            {"boxes": boxes.to(device), "labels": labels.to(device), "seed": torch.tensor(seed, dtype=torch.int64)}
        )
    return imgs, targets


def build(name: str, classes: int, device: torch.device) -> tuple[torch.nn.Module, Any]:
    if name == "torchvision_frcnn_r50":
        from torchvision.models.detection import fasterrcnn_resnet50_fpn

        m = (
            fasterrcnn_resnet50_fpn(
                weights=None, weights_backbone=None, num_classes=classes + 1, min_size=375, max_size=1242
            )
            .to(device)
            .train()
        )
        return m, lambda imgs, tg: m(imgs, [{k: v for k, v in t.items() if k != "seed"} for t in tg])
    from detcal.models.rfcn import build_rfcn

    kw: dict[str, Any] = {"min_size": 375, "max_size": 1242} if name != "tiny" else {}
    m = build_rfcn(num_classes=classes, backbone=name, k=3 if name == "tiny" else 7, **kw).to(device)
    m.set_stage(1)
    m.train_mode_for_stage(1)
    return m, lambda imgs, tg: m(imgs, tg, 1)


def measure(name: str, a: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    torch.manual_seed(0)
    model, step = build(name, a.classes, device)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3, momentum=0.9)
    cuda = device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if a.amp and cuda else None
    amp_dtype = torch.float16
    h, w = a.size
    imgs, tg = batch(a.batch, h, w, a.classes, device, 0)

    def one() -> float:
        ctx = torch.autocast(device.type, dtype=amp_dtype) if a.amp else contextlib.nullcontext()
        with ctx:
            losses = step(imgs, tg)
            loss = sum(losses.values())
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return float(loss.detach())

    for _ in range(a.warmup):
        one()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        last = one()
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {
        "model": name,
        "device": str(device),
        "amp": bool(a.amp),
        "amp_dtype": str(amp_dtype) if a.amp else None,
        "image_hw": [h, w],
        "batch": a.batch,
        "steps": a.steps,
        "seconds": round(dt, 3),
        "images_per_s": round(a.batch * a.steps / dt, 3),
        "last_loss": last,
    }
    if cuda:
        out["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--models",
        nargs="+",
        default=["tiny", "resnet50", "torchvision_frcnn_r50"],
        choices=["tiny", "resnet50", "resnet101", "torchvision_frcnn_r50"],
    )
    p.add_argument("--size", type=int, nargs=2, default=[375, 1242], metavar=("H", "W"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--amp", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    a = p.parse_args(argv)
    device = torch.device(a.device)
    if a.amp and device.type != "cuda":
        p.error("--amp needs --device cuda (ps_roi_align has no bfloat16 CPU kernel)")
    configure_torch(a.threads, False, a.device)
    facts = platform_facts(a.device)
    for name in a.models:
        print(
            json.dumps(
                {**measure(name, a, device), "torch": facts["torch"], "cpu": facts["cpu"], "cuda": facts.get("cuda")}
            ),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
