"""Assemble report.html: one self-contained page (inline CSS, SVG, PNG/JPEG data; one small inline script
that sorts tables), no network, no external script or font."""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import detcal.reports.html.protocol as proto
import detcal.reports.html.sections as sec
from detcal.core.results import CalibratorsBlock, Results, as_results, is_description
from detcal.reports.html.diagnosis import diagnosis_section
from detcal.reports.html.digests import sha256_digests
from detcal.reports.html.findings import findings
from detcal.reports.html.fmt import cell, esc, is_number, num, pct_cell, table
from detcal.reports.html.main_page import main_body
from detcal.reports.html.measures import confidence_measures
from detcal.reports.html.study_page import study_body
from detcal.reports.html.style import CSS, SCRIPT
from detcal.reports.html.thumbs import find_image, inside, thumbnails

__all__ = ["render_report", "worst_section", "generic_section", "provenance_section", "file_digests"]

_HASH_LIMIT = 256 * 1024 * 1024
log = logging.getLogger("detcal")
_ROW_KEYS = ("image_id", "class", "score", "iou", "matched", "cell", "cell_gap")


def worst_section(m: Mapping[str, Any], image_dir: Path | None) -> str:
    """The detections and cells that contribute most to the D-ECE, with thumbnails when images are given."""
    w = m.get("worst_detections") or {}
    if not w:
        return ""
    out = [
        f"<h2 id=worst>Worst-calibrated detections at {esc(w.get('iou', ''))}</h2>",
        f"<p class=note>{esc(w.get('definition', ''))}. Sum of the contributions: "
        f"{num(w.get('dece_from_contributions'))} (the D-ECE of this grid).</p>",
    ]
    titles = {
        "highest_confidence_false_positives": "Highest-confidence false positives",
        "lowest_confidence_true_positives": "Lowest-confidence true positives",
        "largest_contributions": "Largest contributions to the D-ECE",
    }
    pending: list[tuple[int, list[Any]]] = []  # (slot in out, rows): thumbnails filled in once, below
    shown: set[tuple[Any, Any, Any]] = set()
    for key, title in titles.items():
        rows = w.get(key) or []
        if not rows:
            continue
        ids = {(r.get("image_id"), r.get("score"), r.get("cell")) for r in rows}
        if ids <= shown:
            out.append(f"<h3>{title}</h3><p class=note>The same detections as the table above.</p>")
            continue
        shown |= ids
        body = []
        for r in rows:
            tds = [cell(r.get(k)) if k != "image_id" else f"<td>{esc(r.get(k))}</td>" for k in _ROW_KEYS]  # an id
            tds.insert(6, f"<td>{esc(', '.join(f'{k}:{v}' for k, v in (r.get('cell_bins') or {}).items()))}</td>")
            body.append([*tds, pct_cell(r.get("share"), 2)])
        fold = key != "highest_confidence_false_positives"  # the first table open, the others a click away
        out.append(
            (f"<details class=worst-more><summary>{title}</summary>" if fold else f"<h3>{title}</h3>")
            + table(
                ["image", "class", "score", "IoU", "TP", "cell", "bins", "cell gap", "share of D-ECE"], body, raw=True
            )
        )
        if image_dir is not None:
            pending.append((len(out), rows))
            out.append("")
        if fold:
            out.append("</details>")
    if pending:
        _fill_thumbnails(out, pending, image_dir)
    cells = w.get("largest_gap_cells") or []
    if cells:
        body = [
            [
                f"<td>{esc(c['cell'])}</td>",
                f"<td>{esc(', '.join(f'{k} {lo:.2f}–{hi:.2f}' for k, (lo, hi) in c['ranges'].items()))}</td>",
                *(cell(c[k]) for k in ("count", "confidence", "precision", "gap")),
                pct_cell(c.get("share")),
            ]
            for c in cells
        ]
        out.append(
            "<h3>D-ECE cells with the largest share</h3>"
            + table(["cell", "ranges", "N", "confidence", "precision", "gap", "share of D-ECE"], body, raw=True)
        )
    return "".join(out)


def _fill_thumbnails(out: list[str], pending: list[tuple[int, list[Any]]], image_dir: Path | None) -> None:
    """The thumbnail strips of the worst-detection tables; each image file is decoded once for all of them."""

    assert image_dir is not None
    found: dict[tuple[str, str], Path | None] = {}
    items: list[tuple[Path, Any]] = []
    where: list[int] = []
    for slot, rows in pending:
        for r in rows:
            key = (str(r.get("file_name", "")), str(r.get("image_id")))
            if key not in found:  # a refused file_name is warned about once
                found[key] = find_image(image_dir, key[0], r.get("image_id"))
            path = found[key]
            if path is not None:
                items.append((path, r))
                where.append(slot)
    html = thumbnails(items)
    for slot, _ in pending:
        figs = [
            f"<figure class=th>{t}<figcaption>{esc(r['class'])} {num(r['score'], 2)}</figcaption></figure>"
            for t, s, (_, r) in zip(html, where, items)
            if s == slot and t
        ]
        if figs:
            out[slot] = "<div class=thumbs>" + "".join(figs) + "</div>"


def _leaves(node: Any, path: str, out: list[tuple[str, Any]], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(node, Mapping):
        if "value" in node and (is_number(node["value"]) or node["value"] is None):
            out.append((path, node["value"]))
            if "ci" in node:
                out.append((path + " ci", node["ci"]))
            return
        for k, v in node.items():
            if not is_description(k):
                _leaves(v, f"{path}/{k}" if path else str(k), out, limit)
    elif isinstance(node, list) and node and all(isinstance(x, Mapping) for x in node) and len(node) <= 50:
        for i, x in enumerate(node):
            _leaves(x, f"{path}[{i}]", out, limit)
    elif is_number(node) or isinstance(node, str) or node is None or isinstance(node, bool):
        out.append((path, node))
    elif isinstance(node, list) and len(node) <= 8:
        out.append((path, node))


def generic_section(m: Mapping[str, Any], keys: Iterable[str], title: str = "Other results") -> str:
    """Every number of the keys this page has no dedicated section for (new measures show up here unchanged)."""
    parts = []
    for key in keys:
        rows: list[tuple[str, Any]] = []
        _leaves(m.get(key), "", rows, 2000)
        if rows:
            parts.append(f"<h3>{esc(key)}</h3>" + table(["entry", "value"], [[p or key, v] for p, v in rows]))
    if not parts:
        return ""
    return (
        f"<h2 id=other>{esc(title)}</h2><details><summary>{len(parts)} groups of numbers this page has no section "
        "for (every one is in metrics.json)</summary>" + "".join(parts) + "</details>"
    )


def file_digests(m: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(key, path, sha256 or why not) of every input file named in ``data`` / ``config.data`` (the digests
    kept from run to run while a file is unchanged: :mod:`detcal.reports.html.digests`)."""
    seen: dict[str, tuple[str, str, str]] = {}
    hashed: list[str] = []  # files to hash, in the order of ``seen``
    for root in ((m.get("config") or {}).get("data"), m.get("data")):
        stack = [("data", root)]
        while stack:
            k, v = stack.pop()
            if isinstance(v, Mapping):
                stack += [(f"{k}.{kk}", vv) for kk, vv in v.items()]
            elif isinstance(v, str) and ("/" in v or v.endswith((".json", ".gz", ".npz", ".txt"))) and v not in seen:
                p = Path(v)
                if p.is_file():
                    size = p.stat().st_size
                    if size <= _HASH_LIMIT:
                        hashed.append(v)
                    seen[v] = (k, v, f"not hashed ({size} bytes, over 256 MB)")
                elif p.is_dir():
                    seen[v] = (k, v, "directory")
    for v, h in zip(hashed, sha256_digests(hashed)):
        seen[v] = (seen[v][0], v, h)
    return list(seen.values())


def provenance_section(m: Mapping[str, Any], extra_files: list[tuple[str, str, str]]) -> str:
    """Command line, version, run directory, input files with hashes and the resolved configuration."""
    cmd = " ".join([str(m.get("command", "detcal"))] + [str(o) for o in m.get("overrides") or []])
    rows: list[list[Any]] = [
        ["command line", cmd],
        ["detcal version", m.get("detcal_version")],
        ["created", m.get("created")],
        ["run directory", m.get("run_dir")],
        ["schema", m.get("schema_version")],
    ]
    rows += [[f"variant: {k}", v] for k, v in (m.get("variants") or {}).items()]
    files: list[Any] = [*file_digests(m), *extra_files]
    out = "<h2 id=provenance>Configuration and provenance</h2>" + table(["", ""], rows, sortable=False)
    if files:
        out += "<h3>Input files</h3>" + table(["key", "path", "hash"], files, sortable=False)
    cfg = m.get("config") or m.get("spec")
    if cfg:
        out += (
            f"<details><summary>Resolved configuration</summary><pre>{esc(json.dumps(cfg, indent=1))}</pre></details>"
        )
    return out


def _png_figs(run_dir: Path | None, files: Iterable[str]) -> list[str]:
    """The run's PNG diagrams as inline figures (the same files that lie beside report.html); a name that
    leads out of the run directory (absolute, ``..``, a symlink out) is not read."""

    if run_dir is None:
        return []
    figs = []
    for f in files:
        p = inside(run_dir, f)
        if f.endswith(".png") and p is not None:
            data = base64.b64encode(p.read_bytes()).decode("ascii")
            figs.append(
                f'<figure><img alt="{esc(f)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{esc(f)}</figcaption></figure>"
            )
    return figs


def _png_section(run_dir: Path | None, files: Iterable[str], keep_per_class: bool = True) -> str:
    """Every PNG of the run (but the per-class diagrams when the per-class table shows them)."""
    figs = _png_figs(run_dir, [f for f in files if (keep_per_class or "per_class" not in f) and "overlay" not in f])
    if not figs:
        return ""
    return (
        f"<h2 id=diagrams>Diagrams</h2><details><summary>The run's {len(figs)} PNG files (the drawings above, in "
        "the same convention, for a paper)</summary><div class=figs>" + "".join(figs) + "</div></details>"
    )


def _nav(body: str) -> str:

    ids = re.findall(r"<h2 id=([a-z-]+)>([^<]*)", body)
    return (
        "<nav>" + " · ".join(f'<a href="#{i}">{esc(t.split(" (")[0].split(" at ")[0])}</a>' for i, t in ids) + "</nav>"
    )


def _data_line(d: Any) -> str:
    """``source bundle/detector (N images, G GT, D detections)`` of evaluate's ``data`` block."""
    if not isinstance(d, Mapping):
        return ""
    if "source" not in d and isinstance(d.get("calibration"), Mapping):  # calibrate: the detector it calibrates
        d = d["calibration"]
    parts = {k: v for k, v in d.items() if isinstance(v, Mapping) and is_number(v.get("n_images"))}
    if parts and "source" not in d:  # the main job: its splits
        return ", ".join(f"{esc(k)}: {esc(v.get('source', ''))} {num(v['n_images'])} images" for k, v in parts.items())
    name = " / ".join(str(d[k]) for k in ("source", "bundle", "detector", "gt", "results") if d.get(k))
    c = d.get("counts") or {}
    n = ", ".join(f"{num(c[k])} {k}" for k in ("images", "gt", "detections") if is_number(c.get(k)))
    return esc(name) + (f" ({n})" if n else "")


def _guard(name: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or, when the content does not have the layout the section expects (a metrics.json
    edited or from elsewhere), a note saying so in place of the section: the rest of the page is drawn."""
    try:
        return fn(*args)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
        log.warning(
            "report: the %s section could not be drawn from this metrics.json (%s: %s)", name, type(e).__name__, e
        )
        note = (
            f"<p class=note>The {esc(name)} section could not be drawn from this metrics.json "
            f"({esc(type(e).__name__)}: {esc(str(e)[:200])}).</p>"
        )
        return [note] if name == "findings" else note


def _own_run(m: Mapping[str, Any], run_dir: Path | None) -> bool:
    """True when ``m`` is the metrics.json of ``run_dir`` (its ``run_dir`` names that directory)."""
    try:
        return run_dir is not None and bool(m.get("run_dir")) and Path(str(m["run_dir"])).resolve() == run_dir.resolve()
    except (OSError, ValueError):
        return False


def render_report(
    results: Results | Mapping[str, Any],
    run_dir: str | Path | None = None,
    *,
    image_dir: str | Path | None = None,
    extra_files: list[tuple[str, str, str]] | None = None,
) -> str:
    """report.html of one run from its results (or a metrics.json content of schema /3 or /2, read into
    them); the page shows only numbers of the results, as metrics.json writes them."""
    res = as_results(results)
    m = res.content
    rd = None if run_dir is None else Path(run_dir)
    own = _own_page(m, rd, extra_files or [])
    if own is not None:
        return html_page(res, own)
    if image_dir is None and _own_run(m, rd):  # a metrics.json from elsewhere never picks the image folder
        image_dir = ((m.get("config") or {}).get("data") or {}).get("image_dir")
    img = Path(image_dir) if image_dir else None
    files = [f for f in m.get("files") or [] if isinstance(f, str)]
    pc_list = _png_figs(rd, [f for f in files if "per_class" in f])
    pc_figs = (
        f"<details><summary>Per-class reliability diagrams ({len(pc_list)} PNG)</summary>{''.join(pc_list)}</details>"
        if pc_list
        else ""
    )
    pc_html = _guard("per-class", sec.per_class, m, pc_figs)
    facts = _guard("findings", findings, res) or []
    first = [_guard("headline", sec.headline, m), _guard("reliability", sec.confidence_figures, res, "first")]
    overlay = [f for f in files if "overlay" in f]
    if not first[1] and overlay:  # compare: the overlaid reliability diagrams on the first screen
        first[1] = "<div class=figs>" + "".join(_png_figs(rd, overlay)) + "</div>"
    rest = [
        _guard("confidence measures", confidence_measures, res),
        _guard("confidence", sec.confidence_figures, res, "rest"),
        _guard("worst detections", worst_section, m, img),
        _guard("diagnosis", diagnosis_section, res, img),
        pc_html,
        _guard("protocol accuracy", proto.protocol_accuracy, res),
        _guard("accuracy", sec.accuracy, res),
        _guard("box uncertainty", sec.regression, res),
        _guard("change", sec.change, res),
        _guard("Table 1", sec.table1, m),
        _guard("compare", sec.compare, m),
        _guard("other results", generic_section, m, [k for k in m if k not in sec.KNOWN_KEYS]),
        _png_section(rd, files, keep_per_class=not pc_html),
        _guard("provenance", provenance_section, m, extra_files or []),
    ]
    body = (
        "<section class=top><div class=left><h2 id=findings>Findings</h2><ul class=findings>"
        + "".join(f"<li>{f}</li>" for f in facts)
        + "</ul>"
        + first[0]
        + "</div><div class=right>"
        + first[1]
        + "</div></section>"
        + "".join(rest)
    )
    return html_page(res, body)


def _files_section(m: Mapping[str, Any]) -> str:
    files = [str(f) for f in m.get("files") or []]
    if not files:
        return ""
    return "<h2 id=files>Files of the run</h2><p class=note>" + esc(", ".join(files)) + "</p>"


def _own_page(m: Mapping[str, Any], rd: Path | None, extra_files: list[tuple[str, str, str]]) -> str | None:
    """The body of a command with a page of its own (the main job, the study), or None."""
    if m.get("command") == "detcal-main" and isinstance(m.get("table"), str):
        return main_body(m, _files_section(m), provenance_section(m, extra_files))
    if m.get("command") == "detcal-study" and m.get("study") == "kueppers2020":
        return study_body(m, _png_section(rd, m.get("files") or []), provenance_section(m, extra_files))
    return None


def html_page(results: Results | Mapping[str, Any], body: str) -> str:
    """The document around ``body``: header with the data line and the section links, footer."""
    res = as_results(results)
    m = res.content
    title = f"{m.get('command', 'detcal')} report"
    sub = _data_line(m.get("data"))
    roles = res.calibrators
    names = [f"{k} {n}" for k, n in roles.fitted().items()] if isinstance(roles, CalibratorsBlock) else []
    if names:
        sub += " · calibrators: " + esc(", ".join(names))
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><meta name=viewport "
        f'content="width=device-width,initial-scale=1"><title>{esc(title)}</title><style>{CSS}</style></head>'
        f"<body><header><h1>{esc(title)}</h1><p>{sub} · detcal {esc(m.get('detcal_version', ''))} · "
        f"{esc(m.get('created', ''))} · {esc(m.get('run_dir', ''))}</p>{_nav(body)}</header><main>{body}</main>"
        f"<footer>Definitions: docs/metrics.md of detcal {esc(m.get('detcal_version', ''))}; what this page shows: "
        f"docs/report.md. Every number on it is a number of metrics.json.</footer><script>{SCRIPT}</script></body></html>"
    )
