"""Inline SVG diagrams drawn from metrics.json numbers (no matplotlib, no files, no network).

Each shape that stands for a number carries it in ``data-v`` and a ``<title>``
tooltip, so the page shows exactly the numbers of metrics.json.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from detcal.reports.gap_colours import DARK_TEXT_ABOVE, EMPTY_LABEL, diverging_rgb, y_down
from detcal.reports.html.fmt import esc, fmt, is_number, num_attr, text

__all__ = ["reliability_svg", "heatmap_svg", "curve_svg"]

_W, _H, _PAD = 320, 300, 40


def _axes(
    w: int,
    h: int,
    xlabel: str,
    ylabel: str,
    ticks: Sequence[float] = (0, 0.25, 0.5, 0.75, 1),
    pad: int = _PAD,
    down: bool = False,
) -> str:
    """The frame, ticks and labels; ``down``: the vertical axis reads downwards (0 at the top)."""
    parts = [f'<rect x="{pad}" y="10" width="{w}" height="{h}" class="frame"/>']
    for t in ticks:
        x, y = pad + t * w, 10 + h - t * h
        parts.append(f'<text x="{x:.1f}" y="{h + 24}" class="tick" text-anchor="middle">{t:g}</text>')
        parts.append(
            f'<text x="{pad - 4}" y="{y + 4:.1f}" class="tick" text-anchor="end">{1 - t if down else t:g}</text>'
        )
    parts.append(f'<text x="{pad + w / 2}" y="{h + 38}" class="lab" text-anchor="middle">{esc(xlabel)}</text>')
    parts.append(
        f'<text x="12" y="{10 + h / 2}" class="lab" text-anchor="middle" '
        f'transform="rotate(-90 12 {10 + h / 2})">{esc(ylabel)}</text>'
    )
    return "".join(parts)


def reliability_svg(table: dict[str, Any], title: str) -> str:
    """Reliability diagram of an ECE table: precision per confidence bin (bars), the gap to the diagonal
    (red), and the share of samples per bin (grey strip below)."""
    count = table.get("count") or []
    prec, conf = table.get("precision") or [], table.get("confidence") or []
    n_bins = len(count)
    if not n_bins:
        return ""
    w, h, strip = 260, 220, 40
    bw = w / n_bins
    total = sum(c for c in count if is_number(c)) or 1
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {_PAD + w + 10} {h + strip + 50}" '
        f'width="{_PAD + w + 10}" height="{h + strip + 50}"><title>{esc(title)}</title>',
        _axes(w, h, "confidence", "precision"),
        f'<line x1="{_PAD}" y1="{10 + h}" x2="{_PAD + w}" y2="10" class="diag"/>',
    ]
    cmax = max([c for c in count if is_number(c)] or [1])
    for b in range(n_bins):
        x = _PAD + b * bw
        pr: Any = prec[b] if b < len(prec) else None
        cf: Any = conf[b] if b < len(conf) else None
        if is_number(pr):
            out.append(
                f'<rect x="{x + 1:.1f}" y="{10 + h - pr * h:.1f}" width="{bw - 2:.1f}" height="{pr * h:.1f}" '
                f'class="bar"{num_attr(pr)}><title>bin {b}: precision {text(pr)}, confidence {text(cf)}, '
                f'N {text(count[b])}</title></rect>'
            )
        if is_number(pr) and is_number(cf):
            lo, hi = sorted((pr, cf))
            out.append(
                f'<rect x="{x + bw * 0.3:.1f}" y="{10 + h - hi * h:.1f}" width="{bw * 0.4:.1f}" '
                f'height="{max((hi - lo) * h, 0.5):.1f}" class="gap"{num_attr(cf)}>'
                f'<title>gap {text(cf - pr)} (confidence − precision)</title></rect>'
            )
        c = count[b] if is_number(count[b]) else 0
        sh = strip * c / cmax
        out.append(
            f'<rect x="{x + 1:.1f}" y="{h + 50 + strip - sh - 8:.1f}" width="{bw - 2:.1f}" height="{sh:.1f}" '
            f'class="hist"{num_attr(c)}><title>N = {text(c)} ({100 * c / total:.1f}%)</title></rect>'
        )
    out.append("</svg>")
    return "".join(out)


def _colour(v: float, vmax: float) -> str:
    """The diverging colour of a signed gap (detcal.reports.gap_colours: the PNG maps use the same)."""
    r, g, b = diverging_rgb(v, vmax)
    return f"rgb({r},{g},{b})"


def _colour_bar(x: float, y: float, h: float, vmax: float) -> str:
    """A vertical colour bar from -vmax (bottom) to +vmax (top) with its three ticks."""
    steps, out = 20, []
    for k in range(steps):
        v = vmax * (1 - 2 * (k + 0.5) / steps)
        out.append(
            f'<rect x="{x:.1f}" y="{y + k * h / steps:.1f}" width="10" height="{h / steps + 0.5:.1f}" '
            f'fill="{_colour(v, vmax)}"/>'
        )
    for v, yy in ((vmax, y), (0.0, y + h / 2), (-vmax, y + h)):
        out.append(f'<text x="{x + 13:.1f}" y="{yy + 3:.1f}" class="tick">{v:+.2f}</text>'.replace("+0.00", "0"))
    return "".join(out)


def heatmap_svg(
    grid: Sequence[Sequence[Any]],
    counts: Sequence[Sequence[Any]] | None,
    axes: Sequence[str],
    title: str,
    vmax: float | None = None,
) -> str:
    """A D-ECE map in the convention of :mod:`detcal.reports.gap_colours`: one square per (axes[0] bin i,
    axes[1] bin j) coloured by the signed gap ``grid`` on a symmetric diverging scale with its colour bar,
    the value in each cell, empty cells grey with "–" and a legend saying why."""
    rows = [list(r) for r in grid]
    if not rows:
        return ""
    ni, nj = len(rows), len(rows[0])
    vals = [abs(v) for r in rows for v in r if is_number(v)]
    vmax = vmax or (max(vals) if vals else 1.0) or 1.0
    w = h = 200
    cw, ch = w / ni, h / nj
    down = y_down(axes)
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {_PAD + w + 60} {h + 76}" width="{_PAD + w + 60}" '
        f'height="{h + 76}"><title>{esc(title)}</title>'
    ]
    for i in range(ni):
        for j in range(nj):
            v = rows[i][j]
            x, y = _PAD + i * cw, (10 + j * ch) if down else (10 + h - (j + 1) * ch)
            n = counts[i][j] if counts is not None else None
            if is_number(v):
                out.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{cw:.1f}" height="{ch:.1f}" '
                    f'fill="{_colour(v, vmax)}" class="cellr"{num_attr(v)}><title>{esc(axes[0])} bin {i}, '
                    f'{esc(axes[1])} bin {j}: conf − prec {text(v)}, N {text(n)}</title></rect>'
                )
                label = f"{v:+.2f}".replace("-", "−")
                dark = abs(v) > DARK_TEXT_ABOVE * vmax
            else:
                out.append(
                    f'<rect x="{x:.1f}" y="{y:.1f}" width="{cw:.1f}" height="{ch:.1f}" class="empty">'
                    f"<title>{esc(axes[0])} bin {i}, {esc(axes[1])} bin {j}: no kept cell, N {fmt(n)}</title></rect>"
                )
                label, dark = "–", False
            fill = ' fill="#fff"' if dark else ""
            out.append(
                f'<text x="{x + cw / 2:.1f}" y="{y + ch / 2 + 4:.1f}" class="cellt"{fill} text-anchor="middle">'
                f"{label}</text>"
            )
    ax = _axes(w, h, axes[0], axes[1] + (" (0 = top)" if down else ""), down=down)
    out.append(ax.replace('class="frame"', 'class="frame nofill"'))
    out.append(_colour_bar(_PAD + w + 8, 10, h, vmax))
    out.append(
        f'<rect x="{_PAD}" y="{h + 48}" width="10" height="10" class="empty"/>'
        f'<text x="{_PAD + 14}" y="{h + 57}" class="tick">– {esc(EMPTY_LABEL)}</text>'
    )
    out.append("</svg>")
    return "".join(out)


def curve_svg(
    series: dict[str, tuple[Sequence[Any], Sequence[Any]]], title: str, xlabel: str, ylabel: str, diagonal: bool = True
) -> str:
    """Lines of (x, y) points per series; with ``diagonal`` both axes share one scale and the identity line
    is drawn (RMSE against RMV, coverage against nominal), else each axis spans its own data (retention)."""
    pts = [(x, y) for xs, ys in series.values() for x, y in zip(xs, ys) if _finite(x) and _finite(y)]
    if not pts:
        return ""
    xs_all, ys_all = [x for x, _ in pts], [y for _, y in pts]
    if diagonal:
        lo = min(min(xs_all), min(ys_all), 0.0)
        hi = max(max(xs_all), max(ys_all), 1e-12)
        xr = yr = (lo, hi)
    else:
        xr, yr = (min(xs_all), max(xs_all)), (min(min(ys_all), 0.0), max(ys_all))
    xs_span, ys_span = (xr[1] - xr[0]) or 1.0, (yr[1] - yr[0]) or 1.0
    w, h, pad = 260, 220, _PAD + 16  # room for four-digit ticks beside the rotated y label
    names = list(series)
    legend_w = 24 + 6 * max((len(n) for n in names), default=0)
    out = [
        f'<svg class="fig" role="img" viewBox="0 0 {pad + w + legend_w} {h + 50}" width="{pad + w + legend_w}" '
        f'height="{h + 50}"><title>{esc(title)}</title>',
        _axes(w, h, xlabel, ylabel, ticks=(), pad=pad),
    ]
    for t in (0, 0.5, 1):
        out.append(
            f'<text x="{pad + t * w:.1f}" y="{h + 24}" class="tick" text-anchor="middle">'
            f"{xr[0] + t * xs_span:.3g}</text>"
        )
        out.append(
            f'<text x="{pad - 4}" y="{10 + h - t * h + 4:.1f}" class="tick" text-anchor="end">'
            f"{yr[0] + t * ys_span:.3g}</text>"
        )
    if diagonal:
        out.append(f'<line x1="{pad}" y1="{10 + h}" x2="{pad + w}" y2="10" class="diag"/>')
    for k, (name, (xs, ys)) in enumerate(series.items()):
        p = [
            (pad + (x - xr[0]) / xs_span * w, 10 + h - (y - yr[0]) / ys_span * h, y)
            for x, y in zip(xs, ys)
            if _finite(x) and _finite(y)
        ]
        if not p:
            continue
        d = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in p)
        out.append(f'<polyline points="{d}" class="line s{k % 6}"/>')
        if len(p) <= 40:
            out += [
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2.5" class="dot s{k % 6}"{num_attr(v)}>'
                f"<title>{esc(name)}: {text(v)}</title></circle>"
                for px, py, v in p
            ]
        y0 = 20 + 14 * k  # legend: a swatch of the line and the series' name
        out.append(f'<line x1="{pad + w + 6}" y1="{y0 - 3}" x2="{pad + w + 18}" y2="{y0 - 3}" class="line s{k % 6}"/>')
        out.append(f'<text x="{pad + w + 21}" y="{y0}" class="lab s{k % 6}t">{esc(name)}</text>')
    out.append("</svg>")
    return "".join(out)


def _finite(v: Any) -> bool:
    return is_number(v) and math.isfinite(v)
