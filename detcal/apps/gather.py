"""``detcal-gather``: one comparison table from a sweep directory (see :mod:`detcal.reports.gather`).

detcal-gather multirun/calibrate                      # the most recent sweep below it
detcal-gather multirun/calibrate/<date>/<time>-<id> --metrics 'headline/*'
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from detcal.core.errors import DetcalError
from detcal.reports.gather import gather
from detcal.reports.tables import write_table
from detcal.utils.io import write_text


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``detcal-gather``; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="detcal-gather",
        description="One comparison table (Markdown + CSV) from the runs of a detcal sweep directory.",
    )
    ap.add_argument("multirun_dir", help="a Hydra sweep directory written by detcal-evaluate -m")
    ap.add_argument("--out", default=None, help="Markdown output (default <multirun_dir>/comparison.md)")
    ap.add_argument("--csv", default=None, help="CSV output (default: --out with .csv suffix)")
    ap.add_argument("--metrics", nargs="+", default=None, help="fnmatch patterns over flattened metric keys")
    ap.add_argument("--quiet", action="store_true", help="do not print the table")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="detcal-gather: %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        res = gather(args.multirun_dir, args.metrics)
    except DetcalError as exc:
        print(f"detcal-gather: error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.multirun_dir) / "comparison.md"
    csv_path = Path(args.csv) if args.csv else out.with_suffix(".csv")
    write_table(out, res.markdown, echo=not args.quiet)
    write_text(csv_path, res.csv)
    print(f"wrote {out} and {csv_path} ({len(res.rows)} runs, {len(res.columns)} columns)", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
