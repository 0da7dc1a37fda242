"""Split KITTI training frames into a recalibration and a validation set.

Levi et al. (2019) split the 7,481 labelled KITTI training images into about
6K images for recalibration and about 1.5K for validation. This command does
the same split, seeded and reproducible:

    detcal-split-kitti --label-dir data/kitti/training/label_2 \
        --out-dir data/kitti/splits --val-size 1500 --seed 0

(or ``python -m detcal.apps.split_kitti ...``, the same).

It writes ``recal.txt`` and ``val.txt`` (one frame name per line, sorted)
atomically and prints the counts. The split logic is
:func:`detcal.data.kitti.split_frames`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from detcal.core.errors import DetcalInputError
from detcal.data.kitti import split_frames
from detcal.utils.io import write_text


def _val_size(text: str) -> int | float:
    """``1500`` (a count) or ``0.2`` (a fraction of the frames)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or a fraction, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a fraction must be in (0, 1), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``detcal-split-kitti``."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--label-dir", type=Path, required=True, help="KITTI label_2 directory (<frame>.txt files)")
    p.add_argument("--out-dir", type=Path, required=True, help="where recal.txt and val.txt are written")
    p.add_argument(
        "--val-size", type=_val_size, default=1500, help="validation frames: a count (1500) or a fraction (0.2)"
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (numpy default_rng)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``detcal-split-kitti``: write recal.txt and val.txt; 0 on success, 2 with a one-line error."""
    args = build_parser().parse_args(argv)
    if not args.label_dir.is_dir():
        print(f"error: label directory {args.label_dir} does not exist", file=sys.stderr)
        return 2
    frames = sorted(p.stem for p in args.label_dir.glob("*.txt"))
    try:
        recal, val = split_frames(frames, args.val_size, args.seed)
    except DetcalInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_text(args.out_dir / "recal.txt", "".join(f + "\n" for f in recal))
    write_text(args.out_dir / "val.txt", "".join(f + "\n" for f in val))
    print(f"frames: {len(frames)}  recal: {len(recal)}  val: {len(val)}  seed: {args.seed}  -> {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
