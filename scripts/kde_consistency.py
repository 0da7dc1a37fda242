"""Consistency of the KDE calibration error (Popordanoska et al., WACV 2024): the estimate against the true error
as the sample grows, on a synthetic detector with a known calibration map.

The detector: confidences uniform on (0, 1); a detection is a hit with probability ``c(s) = s^2`` (binary
link), so the true L1 calibration error is ``E|s^2 - s| = 1/2 - 1/3 = 1/6``; and a second detector whose
targets are IoU-like values drawn from a Beta distribution of mean ``c(s) = 0.2 + 0.6 s`` (IoU link), true
error ``E|0.2 + 0.6 s - s| = E|0.2 - 0.4 s| = 0.1``. For each N, ``--seeds`` samples; the figure shows the
mean estimate with its 10-90% band and the true value.

    python scripts/kde_consistency.py            # writes docs/figures/kde_consistency.png and prints the table
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from detcal.metrics.kde_ece import kde_ece  # noqa: E402

SIZES = (50, 100, 200, 400, 800, 1600, 3200, 6400)


def binary_detector(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = rng.uniform(0, 1, n)
    return s, (rng.uniform(0, 1, n) < s**2).astype(float)


def iou_detector(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    s = rng.uniform(0, 1, n)
    mean = 0.2 + 0.6 * s
    k = 20.0  # Beta(k m, k (1 - m)) has mean m
    return s, rng.beta(k * mean, k * (1 - mean))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "figures" / "kde_consistency.png")
    )
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from tqdm import tqdm

    cases = {"binary link, c(s) = s^2": (binary_detector, 1 / 6), "IoU link, c(s) = 0.2 + 0.6 s": (iou_detector, 0.1)}
    rows = {}
    for name, (gen, true) in cases.items():
        est = np.array(
            [
                [kde_ece(*gen(n, np.random.default_rng(1000 * i + n))).value for i in range(args.seeds)]
                for n in tqdm(SIZES, desc=name)
            ]
        )
        rows[name] = {
            "true": true,
            "N": list(SIZES),
            "mean": est.mean(1).tolist(),
            "mean_abs_error": np.abs(est - true).mean(1).tolist(),
            "p10": np.percentile(est, 10, axis=1).tolist(),
            "p90": np.percentile(est, 90, axis=1).tolist(),
        }
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, (name, r) in zip(axes, rows.items()):
        ax.fill_between(r["N"], r["p10"], r["p90"], alpha=0.25, label="10-90% of seeds")
        ax.plot(r["N"], r["mean"], "o-", label="mean KDE estimate")
        ax.axhline(r["true"], color="k", ls="--", label=f"true error {r['true']:.4f}")
        ax.set_xscale("log")
        ax.set_xlabel("N detections")
        ax.set_ylabel("L1 calibration error")
        ax.set_title(name)
        ax.legend(fontsize=8)
    fig.suptitle(f"KDE calibration error (Popordanoska et al. 2024): consistency, {args.seeds} seeds per N")
    fig.tight_layout()
    tmp = args.out + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, args.out)
    print(json.dumps(rows, indent=1))
    print("| case | " + " | ".join(f"N={n}" for n in SIZES) + " |")
    for name, r in rows.items():
        print(f"| {name} (true {r['true']:.4f}) mean | " + " | ".join(f"{m:.4f}" for m in r["mean"]) + " |")
        print(f"| {name} mean abs error | " + " | ".join(f"{m:.4f}" for m in r["mean_abs_error"]) + " |")


if __name__ == "__main__":
    main()
