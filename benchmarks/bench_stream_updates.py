"""Update cost of the streaming evaluator as its state grows: 80,000 one-image updates (5 detections
and 3 ground-truth boxes each), timed in five blocks of 16,000; the last block should take about as long
as the first (amortised appends). Prints seconds per block and the last/first ratio."""

from __future__ import annotations

import time

import numpy as np

from detcal.integrations.evaluator import DetectionCalibration


def main(n_updates: int = 80_000, blocks: int = 5) -> list[float]:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, (5, 2))
    pred = {"boxes": np.hstack([xy, xy + 20]), "scores": rng.uniform(size=5), "labels": np.ones(5, np.int64)}
    gt_box = np.hstack([xy[:3], xy[:3] + 18])
    ev = DetectionCalibration(categories={1: "a"})
    per = n_updates // blocks
    times = []
    for b in range(blocks):
        t0 = time.perf_counter()
        for i in range(b * per, (b + 1) * per):
            ev.update([pred], [{"boxes": gt_box, "labels": np.ones(3, np.int64), "image_id": i}])
        times.append(time.perf_counter() - t0)
    print("seconds per block of", per, "updates:", " ".join(f"{t:.2f}" for t in times))
    print(f"last/first: {times[-1] / times[0]:.2f}; images kept: {len(ev)}")
    return times


if __name__ == "__main__":
    main()
