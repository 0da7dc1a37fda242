"""Full-page screenshots of report.html pages, with their height and any overlapping text boxes.

    python scripts/screenshot_reports.py RUN_DIR[=NAME] ... --out docs/figures

For each run directory, loads its report.html in headless Chromium (playwright, the distribution's
/usr/lib/chromium/chromium) at 1280 px wide and writes ``<out>/report_<NAME>.png`` (a full-page
screenshot), then prints the page height in screen heights of 1080 px and the pairs of text boxes that
overlap (``overlapping_text`` of tests/reports/test_report_browser.py: text elements of one SVG, and the page's
text outside SVGs, whose rectangles intersect by more than 1 px each way).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHROMIUM = "/usr/lib/chromium/chromium"

OVERLAP_JS = """
() => {
  const boxes = [];
  const add = (el, group) => {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && el.textContent.trim())
      boxes.push({g: group, t: el.textContent.trim().slice(0, 40), x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
  };
  document.querySelectorAll('svg').forEach((svg, i) => svg.querySelectorAll('text').forEach(t => add(t, 'svg' + i)));
  const out = [];
  for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
    const p = boxes[a], q = boxes[b];
    if (p.g !== q.g) continue;
    const w = Math.min(p.x1, q.x1) - Math.max(p.x0, q.x0), h = Math.min(p.y1, q.y1) - Math.max(p.y0, q.y0);
    if (w > 1 && h > 1) out.push([p.g, p.t, q.t, Math.round(w), Math.round(h)]);
  }
  return out;
}
"""


def _shrink(png: Path) -> None:
    """Re-save ``png`` with a 256-colour palette (a third of the bytes; the page's flat colours survive)."""
    from PIL import Image

    with Image.open(png) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    small.save(png, optimize=True)


def shoot(page_path: Path, png: Path | None, width: int = 1280) -> tuple[int, list[list[object]]]:
    """(page height in px, overlapping text pairs) of ``page_path``; the screenshot into ``png`` when given."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport={"width": width, "height": 1080})
            tab.goto(page_path.resolve().as_uri(), wait_until="load")
            height = int(tab.evaluate("() => document.documentElement.scrollHeight"))
            overlaps = tab.evaluate(OVERLAP_JS)
            if png is not None:
                png.parent.mkdir(parents=True, exist_ok=True)
                tab.screenshot(path=str(png), full_page=True)
                _shrink(png)
        finally:
            browser.close()
    return height, overlaps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run directories, each optionally =NAME (default: the folder name)")
    ap.add_argument("--out", type=Path, default=None, help="folder for report_<NAME>.png (none: measure only)")
    args = ap.parse_args()
    bad = 0
    for spec in args.runs:
        run, _, name = spec.partition("=")
        page = Path(run) / "report.html"
        png = None if args.out is None else args.out / f"report_{name or Path(run).name}.png"
        height, overlaps = shoot(page, png)
        print(f"{page}: {height} px = {height / 1080:.2f} screens of 1080 px; {len(overlaps)} overlapping text pairs")
        for o in overlaps[:10]:
            print("   ", o)
        bad += bool(overlaps)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
