"""Compare the numbers of two sets of metrics.json files, number for number (a refactor's check).

    python scripts/compare_metrics.py BEFORE_DIR AFTER_DIR [--rtol 0]

Each ``NAME.json`` of BEFORE_DIR is compared with AFTER_DIR/NAME.json: every number (NaN and null alike) by
its path, and, as a check that does not depend on the layout, the multiset of finite values. Provenance,
timing and the config dump are left out. The exit status is 1 when a number differs or is lost.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

SKIP = ("timing_s", "created", "run_dir", "config", "paths", "provenance", "writeback", "files", "seconds")


def numbers(node: object, prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """(path, value) of every number under ``node``; NaN and null as None; booleans and strings skipped."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k not in SKIP:
                yield from numbers(v, f"{prefix}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from numbers(v, f"{prefix}[{i}]")
    elif node is None:
        yield prefix, None
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        v = float(node)
        yield prefix, (v if math.isfinite(v) else None)


def compare(a: dict[str, float | None], b: dict[str, float | None], rtol: float) -> dict[str, list[str]]:
    """Paths whose numbers differ, paths only in ``a``, and finite values of ``a`` missing from ``b``."""

    def same(x: float | None, y: float | None) -> bool:
        if x is None or y is None:
            return x is y
        return abs(x - y) <= rtol * max(1.0, abs(x))

    differ = [k for k in a.keys() & b.keys() if not same(a[k], b[k])]
    gone = sorted(a.keys() - b.keys())
    lost = Counter(float(f"{v:.12g}") for v in a.values() if v is not None)
    lost.subtract(float(f"{v:.12g}") for v in b.values() if v is not None)
    return {"differ": sorted(differ), "gone": gone, "lost": [str(v) for v, n in lost.items() if n > 0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default 0: equal)")
    args = p.parse_args(argv)
    ok = True
    for fa in sorted(args.before.glob("*.json")):
        fb = args.after / fa.name
        if not fb.exists():
            print(f"{fa.name}: missing in {args.after}")
            ok = False
            continue
        a = dict(numbers(json.loads(fa.read_text(encoding="utf-8"))))
        b = dict(numbers(json.loads(fb.read_text(encoding="utf-8"))))
        r = compare(a, b, args.rtol)
        print(
            f"{fa.name}: {len(a)} numbers before, {len(b)} after; {len(r['differ'])} differ, "
            f"{len(r['gone'])} paths gone, {len(r['lost'])} values lost"
        )
        for k in r["differ"][:5]:
            print(f"  differs {k}: {a[k]!r} -> {b[k]!r}")
        for k in r["gone"][:5]:
            print(f"  gone {k}: {a[k]!r}")
        ok = ok and not r["differ"] and not r["lost"]
    print("every number equal" if ok else "differences")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
