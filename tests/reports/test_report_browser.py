"""report.html in a real browser: headless Chromium (the distribution's package, driven by Playwright)
loads the page of the bundled R-FCN run without console errors, every figure has a non-zero size, a
table sorts when its header is clicked, and no two text boxes of a drawing overlap (on that page and on a
main-job page). Skips, saying why, where Chromium or Playwright is missing."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = next(
    (
        p
        for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "", shutil.which("chromium-browser") or "")
        if p and Path(p).is_file()
    ),
    None,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium installed (apt-get install chromium); the browser test needs /usr/lib/chromium/chromium",
    ),
]


OVERLAP_JS = """
() => {
  const out = [];
  document.querySelectorAll('svg').forEach((svg, i) => {
    const boxes = Array.from(svg.querySelectorAll('text')).filter(t => t.textContent.trim()).map(t => {
      const r = t.getBoundingClientRect();
      return [t.textContent.trim(), r.left, r.top, r.right, r.bottom];
    });
    for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
      const p = boxes[a], q = boxes[b];
      const w = Math.min(p[3], q[3]) - Math.max(p[1], q[1]), h = Math.min(p[4], q[4]) - Math.max(p[2], q[2]);
      if (w > 1 && h > 1) out.push([i, p[0], q[0], Math.round(w), Math.round(h)]);
    }
  });
  return out;
}
"""
"""Pairs of text boxes of one SVG that intersect by more than 1 px each way: [svg index, text, text, w, h]."""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

    out = tmp_path_factory.mktemp("browser")
    res = detcal.evaluate(
        DataSpec(source="bundled", bundle="coco_tfzoo", detector="rfcn-resnet-101"),
        spec=EvaluationSpec(bootstrap=BootstrapSpec(n=50)),
    )
    res.write(out, plots=True, csv=False, report=True)
    return out / "report.html"


def test_report_renders_in_chromium(report: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extra)")
    errors: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(report.as_uri(), wait_until="load")
            assert not errors, errors
            assert all(u.startswith(("file:", "data:")) for u in requests), requests  # nothing from the network
            sizes = page.eval_on_selector_all(
                "svg.fig, figure img",
                "els => els.map(e => [e.getBoundingClientRect().width, "
                "e.getBoundingClientRect().height, e.tagName === 'IMG' ? e.naturalWidth : 1])",
            )
            assert len(sizes) >= 6, sizes  # reliability x2, D-ECE maps x4, the run's PNGs
            assert all(w > 50 and h > 50 and nat > 0 for w, h, nat in sizes), sizes
            top = page.eval_on_selector("section.top svg.fig", "e => e.getBoundingClientRect().bottom")
            assert top < 900 * 1.2  # the reliability diagram is on the first screen
            # sorting: the per-class table by its 'n' column, descending then ascending
            table = page.locator("#per-class ~ table.sortable").first
            header = table.locator("th", has_text=re.compile(r"^n$")).first
            col = header.evaluate("h => Array.from(h.parentNode.children).indexOf(h)")
            assert col == 2  # category, name, n, ...
            header.click()
            first = table.locator("tbody tr").evaluate_all(
                f"rows => rows.map(r => parseFloat(r.cells[{col}].dataset.sort))"
            )
            assert len(first) > 5 and first == sorted(first)
            header.click()
            second = table.locator("tbody tr").evaluate_all(
                f"rows => rows.map(r => parseFloat(r.cells[{col}].dataset.sort))"
            )
            assert second == sorted(first, reverse=True)
            assert page.evaluate(OVERLAP_JS) == []  # no text of a drawing over another (labels, ticks, legends)
            assert not errors, errors
        finally:
            browser.close()


def test_diagnosis_section_renders_in_chromium(report: Path) -> None:
    """The diagnosis section of the bundled R-FCN run: its figures (TIDE bars, calibration by error type,
    confusion heat map, threshold curves) have a size in the browser and show the numbers of metrics.json."""
    import json

    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extra)")
    diag = json.loads((report.parent / "metrics.json").read_text())["diagnostics"]
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri(), wait_until="load")
            page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
            figs = page.eval_on_selector_all(
                "#diagnosis ~ div.figs svg.fig, #diagnosis ~ details.diag-more div.figs svg.fig",
                "els => els.map(e => [e.getBoundingClientRect().width, e.getBoundingClientRect().height, "
                "e.querySelector('title').textContent])",
            )
            titles = [t for _, _, t in figs]
            for want in ("TIDE main errors", "TIDE special errors", "by error type", "confusion matrix",
                         "precision, recall, F1"):  # fmt: skip
                assert any(want in t for t in titles), (want, titles)
            assert all(w > 100 and h > 50 for w, h, _ in figs), figs
            bars = page.eval_on_selector_all(
                "svg.fig:has(> title:text-matches('^TIDE main errors')) rect[data-v]",
                "els => els.map(e => [parseFloat(e.dataset.v), e.getBoundingClientRect().width])",
            )
            assert [v for v, _ in bars] == [
                diag["tide"]["dap"][k] for k in ("cls", "loc", "both", "dupe", "bkg", "miss")
            ]
            big = max(bars)[0]
            assert max(bars, key=lambda b: b[1])[0] == big  # the longest bar is the largest dAP
            cells = page.eval_on_selector_all("svg.fig rect.cellr[data-v]", "els => els.length")
            assert cells >= sum(1 for row in diag["confusion"]["matrix"] for v in row if v)
            assert not errors, errors
        finally:
            browser.close()


def test_main_job_page_has_no_overlapping_text(tmp_path: Path) -> None:
    """A main-job page (Table 1 beside the paper's, reliability per coordinate with a legend of swatches)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (test extra)")
    from detcal.reports.html import write_report

    rng = [0.01 * k for k in range(1, 11)]
    content = {
        "command": "detcal-main",
        "table": "Levi et al. 2019 Table 1 analogue",
        "split": "val",
        "n_tp_val": 1637,
        "columns": ["tx", "ty"],
        "rows": {
            "ENCE before calibration": {"tx": 0.44, "ty": 0.75},
            "ENCE after std scaling": {"tx": 0.11, "ty": 0.8},
        },
        "paper": {
            "ENCE before calibration": {"tx": 0.165, "ty": 0.254},
            "ENCE after std scaling": {"tx": 0.083, "ty": 0.047},
        },
        "reliability": {
            v: {c: {"rmv": rng, "rmse": [x * f for x in rng]} for c in ("tx", "ty")}
            for v, f in (("before", 1.9), ("std_scaling", 1.05), ("kuleshov_isotonic", 0.97))
        },
        "bins": 10,
        "binning": "equal_count",
    }
    page_path = write_report(tmp_path, content)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(page_path.as_uri(), wait_until="load")
            assert page.locator("svg.fig").count() == 2
            assert page.evaluate(OVERLAP_JS) == []
            assert page.locator("span.worse").count() == 1  # ty after std scaling: higher than before
        finally:
            browser.close()
