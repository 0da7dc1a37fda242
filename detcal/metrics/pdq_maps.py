"""Spatial probability maps of PDQ as pdq_evaluation draws them, on compressed grids.

The reference implementation of PDQ (Hall et al., WACV 2020; public
repository david2611/pdq_evaluation) draws every detection as an ``H x W``
float32 heatmap. This module computes the same maps without ever expanding
them to the image: each map is constant on the cells of a small grid whose
row and column boundaries are known in advance, so it is stored as its cell
values plus the cell boundaries, and every sum over a rectangle of pixels is
read from prefix sums over that grid.

Conventions (those of the reference, in our words)
--------------------------------------------------
A probabilistic box has Gaussian corners; the map is the product of two
corner maps ``tl(r, c) * br(r, c)``, clipped to 1 and with values below
``threshold`` (0.0027) set to 0.

Corner map in its own frame (mean ``(my, mx)``, covariance in ``(y, x)``
order). Its region of interest (ROI) is found first: the window of 5
standard deviations around the mean (truncated to integers and clipped to the
image), the Mahalanobis distance of each integer pixel position to the mean,
with the rows above and the columns left of the mean's pixel reading the
distance of their neighbour one closer to the mean, kept where it is at most
3.439, plus the mean's own pixel; the ROI is the bounding box of those
pixels (the whole window when the covariance is singular). Inside the ROI
pixel ``(r, c)`` gets the bivariate normal CDF at ``(r + 1, c + 1)`` (less
1e-14). Outside it the map is extended: rows below the ROI repeat its last
row, columns right of it repeat its last column, pixels below and right of
it are 1, pixels above or left of it 0. When the ROI touches the image's
first column the probability that the corner lies left of the image (CDF at
``x = 0`` for the row) is subtracted, likewise for the first row, and the
doubly subtracted corner probability is added back. Values below the
threshold become 0. Arithmetic follows the reference's float32 maps.

The top-left corner is drawn in the image frame with mean ``(y1, x1)``; the
bottom-right corner in the image flipped about both far edges, with mean
``(H - (y2 + 1), W - (x2 + 1))``, and flipped back.

A box without covariance is a uniform box (the reference's ``BBoxDetInst``):
along each axis the pixels ``ceil(x1) - 1`` to ``floor(x2) + 1`` (clipped to
the image), the first weighted ``ceil(x1) - x1``, the last ``x2 - floor(x2)``,
the others 1; the map is the product of the two axes' weights (no threshold).

Why the grids are small: a corner map takes one value per (row type, column
type), the row types being "above the ROI", each ROI row, and "below the
ROI". The product of two corner maps therefore changes only at the ROI rows
of either corner, so a map has at most ``nR_tl + nR_br + 4`` distinct row
runs and as many column runs, whatever the box's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from detcal.metrics._special import ndtr

HEATMAP_THRESHOLD: float = 0.0027
SMALL: float = 1e-14
MAHALANOBIS_THRESHOLD: float = 3.439
"""The reference's ``_2D_MAH_DIST_THRESH``: ROI pixels are those within this Mahalanobis distance."""
ROI_SIGMAS: float = 5.0
SINGULAR_DET: float = 1e-8

_GL_X, _GL_W = np.polynomial.legendre.leggauss(24)
_GL_X = 0.5 * (_GL_X + 1.0)
_GL_W = 0.5 * _GL_W
_GL_ASIN = {
    n: tuple(0.5 * v + (0.5 if i == 0 else 0.0) for i, v in enumerate(np.polynomial.legendre.leggauss(n)))
    for n in (6, 12)
}


def _bvn_asin(h: np.ndarray, k: np.ndarray, rho: np.ndarray, nodes: int) -> np.ndarray:
    """``Phi2 - Phi(h) Phi(k)`` by ``(1 / 2 pi) int_0^{asin rho} exp(-(h^2 - 2 h k sin t + k^2) / (2 cos^2 t)) dt``
    (Genz's form; ``nodes``-point Gauss-Legendre: 6 for ``|rho| < 0.3``, 12 below 0.75)."""
    x, w = _GL_ASIN[nodes]
    a = np.arcsin(rho)
    t = a[..., None] * x
    sn, cs2 = np.sin(t), np.cos(t) ** 2
    hh, kk = h[..., None], k[..., None]
    f = np.exp(-(hh * hh - 2.0 * hh * kk * sn + kk * kk) / (2.0 * cs2))
    return a * (f @ w) / (2.0 * np.pi)


def bvn_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """``P(Z1 <= h, Z2 <= k)`` for standard normals of correlation ``rho`` (broadcast arrays).

    ``Phi(h) Phi(k)`` plus the correlation term: for ``|rho| < 0.75`` Genz's arcsine form with 6 or 12
    Gauss-Legendre nodes (double precision); above, Plackett's identity ``d Phi2 / d rho = phi2(h, k, rho)``
    integrated from 0 to ``rho`` with 24 nodes (~1e-9 for ``|rho| <= 0.95``).
    """
    h, k, rho = np.broadcast_arrays(np.asarray(h, float), np.asarray(k, float), np.asarray(rho, float))
    out = ndtr(h) * ndtr(k)
    nz = (rho != 0) & np.isfinite(h) & np.isfinite(k)
    if not nz.any():
        return out
    hh, kk, rr = np.clip(h[nz], -40, 40), np.clip(k[nz], -40, 40), rho[nz]
    ar = np.abs(rr)
    add = np.empty(len(rr))
    for lo, hi, n in ((0.0, 0.3, 6), (0.3, 0.75, 12)):  # three accuracy bands
        m = (ar >= lo) & (ar < hi)
        if m.any():
            add[m] = _bvn_asin(hh[m], kk[m], rr[m], n)
    m = ar >= 0.75
    if m.any():
        r = rr[m][..., None] * _GL_X
        one = 1.0 - r * r
        h1, k1 = hh[m][..., None], kk[m][..., None]
        q = (h1**2 - 2.0 * r * h1 * k1 + k1**2) / (2.0 * one)
        add[m] = rr[m] * ((np.exp(-q) / (2.0 * np.pi * np.sqrt(one))) @ _GL_W)
    out[nz] += add
    return np.clip(out, 0.0, 1.0)


@dataclass
class Corners:
    """Gaussian corners in their own frames: means, (y, x) covariance terms, image size, ROI."""

    my: np.ndarray
    mx: np.ndarray
    vy: np.ndarray
    vx: np.ndarray
    cxy: np.ndarray
    H: int
    W: int
    ry0: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    ry1: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rx0: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rx1: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _axis_extent(
    m_a: np.ndarray,
    m_b: np.ndarray,
    v_a: np.ndarray,
    v_b: np.ndarray,
    c: np.ndarray,
    det: np.ndarray,
    lo_a: np.ndarray,
    n_a: np.ndarray,
    lo_b: np.ndarray,
    hi_b: np.ndarray,
    first_a: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """First and last window index along axis ``a`` (``first_a`` = first source index kept) whose
    line holds an integer position along ``b`` in ``[lo_b, hi_b]`` within the Mahalanobis threshold; -1 if none."""
    n = int(n_a.max(initial=0))
    i = np.arange(n)[None, :]
    d_a = (lo_a[:, None] + i) - m_a[:, None]
    t = MAHALANOBIS_THRESHOLD
    disc = det[:, None] * (t * t * v_a[:, None] - d_a * d_a)
    ok = (disc >= 0) & (i < n_a[:, None]) & (i >= first_a[:, None])
    root = np.sqrt(np.maximum(disc, 0.0)) / v_a[:, None]
    centre = c[:, None] * d_a / v_a[:, None] + m_b[:, None]
    bmin = np.maximum(np.ceil(centre - root), lo_b[:, None])
    bmax = np.minimum(np.floor(centre + root), hi_b[:, None])
    ok &= bmin <= bmax
    any_ok = ok.any(axis=1)
    first = np.where(any_ok, np.argmax(ok, axis=1), -1)
    last = np.where(any_ok, n - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
    return first, last


def find_rois(k: Corners) -> Corners:
    """The reference's ROI of every corner (module docstring), as inclusive pixel bounds in the corner's frame."""
    H, W = k.H, k.W
    sy, sx = np.sqrt(k.vy), np.sqrt(k.vx)
    minx = np.trunc(np.maximum(k.mx - ROI_SIGMAS * sx, 0)).astype(np.int64)
    miny = np.trunc(np.maximum(k.my - ROI_SIGMAS * sy, 0)).astype(np.int64)
    maxx = np.trunc(np.minimum(k.mx + ROI_SIGMAS * sx, W - 1)).astype(np.int64)
    maxy = np.trunc(np.minimum(k.my + ROI_SIGMAS * sy, H - 1)).astype(np.int64)
    det = k.vy * k.vx - k.cxy * k.cxy
    singular = np.abs(det) < SINGULAR_DET
    ny, nx = maxy + 1 - miny, maxx + 1 - minx
    dmy = np.clip(np.trunc(k.my - miny).astype(np.int64), 0, H - 1)
    dmx = np.clip(np.trunc(k.mx - minx).astype(np.int64), 0, W - 1)
    shift_y = (dmy > 0) & (dmy < H - 1)
    shift_x = (dmx > 0) & (dmx < W - 1)
    first_y, first_x = shift_y.astype(np.int64), shift_x.astype(np.int64)
    ry0, ry1, rx0, rx1 = miny.copy(), maxy.copy(), minx.copy(), maxx.copy()
    ns = ~singular
    if ns.any():
        s = np.flatnonzero(ns)
        detn = det[s]
        # rows: source rows i' >= first_y whose line meets a kept source column in [minx + first_x, maxx]
        fr, lr = _axis_extent(
            k.my[s],
            k.mx[s],
            k.vy[s],
            k.vx[s],
            k.cxy[s],
            detn,
            miny[s],
            ny[s],
            minx[s] + first_x[s],
            maxx[s],
            first_y[s],
        )
        fc, lc = _axis_extent(
            k.mx[s],
            k.my[s],
            k.vx[s],
            k.vy[s],
            k.cxy[s],
            detn,
            minx[s],
            nx[s],
            miny[s] + first_y[s],
            maxy[s],
            first_x[s],
        )

        def back(
            first: np.ndarray, last: np.ndarray, shift: np.ndarray, dm: np.ndarray
        ) -> tuple[np.ndarray, np.ndarray]:
            # a window index i reads source i + 1 when shifted and i < dm: map the sources back
            lo = np.where(shift & (first >= 1) & (first <= dm), first - 1, first)
            hi = np.where(shift & (last < dm), last - 1, last)
            none = first < 0
            lo = np.where(none, dm, np.minimum(lo, dm))
            hi = np.where(none, dm, np.maximum(hi, dm))
            return lo, hi

        ylo, yhi = back(fr, lr, shift_y[s], dmy[s])
        xlo, xhi = back(fc, lc, shift_x[s], dmx[s])
        ry0[s], ry1[s] = miny[s] + ylo, miny[s] + yhi
        rx0[s], rx1[s] = minx[s] + xlo, minx[s] + xhi
    k.ry0, k.ry1, k.rx0, k.rx1 = ry0, ry1, rx0, rx1
    return k


def _phi2(k: Corners, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Bivariate normal CDF of each corner [n] at positions y [n, a, 1], x [n, 1, b] (or broadcastable)."""
    sy = np.sqrt(k.vy)[:, None, None]
    sx = np.sqrt(k.vx)[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        zy = np.where(sy > 0, (y - k.my[:, None, None]) / sy, np.where(y >= k.my[:, None, None], np.inf, -np.inf))
        zx = np.where(sx > 0, (x - k.mx[:, None, None]) / sx, np.where(x >= k.mx[:, None, None], np.inf, -np.inf))
        rho = np.where((sy[:, 0, 0] > 0) & (sx[:, 0, 0] > 0), k.cxy / (sy[:, 0, 0] * sx[:, 0, 0]), 0.0)
    rho = np.clip(rho, -0.999, 0.999)
    if not rho.any():
        return ndtr(zy) * ndtr(zx)
    return bvn_cdf(zy, zx, rho[:, None, None])


@dataclass
class CornerMaps:
    """Per corner: ROI CDF grid ``P [n, R, C]`` (float32), outside-image terms ``ox [n, R]``, ``oy [n, C]``, ``corner [n]``."""

    k: Corners
    P: np.ndarray
    ox: np.ndarray
    oy: np.ndarray
    corner: np.ndarray


def corner_maps(k: Corners) -> CornerMaps:
    """CDF values on every corner's ROI (one evaluation per ROI pixel, batched over the corners)."""
    nR = k.ry1 - k.ry0 + 1
    nC = k.rx1 - k.rx0 + 1
    R, C = int(nR.max(initial=1)), int(nC.max(initial=1))
    yy = (k.ry0[:, None] + np.arange(R)[None, :] + 1.0 - SMALL)[:, :, None]
    xx = (k.rx0[:, None] + np.arange(C)[None, :] + 1.0 - SMALL)[:, None, :]
    P = _phi2(k, yy, xx).astype(np.float32)
    left, top = np.equal(k.rx0, 0), np.equal(k.ry0, 0)
    ox = np.zeros((len(nR), R), np.float32)
    oy = np.zeros((len(nR), C), np.float32)
    corner = np.zeros(len(nR))
    edge = np.full((len(nR), 1, 1), -SMALL)
    if left.any():
        ox[left] = _phi2(_sub(k, left), yy[left], edge[left])[:, :, 0].astype(np.float32)
    if top.any():
        oy[top] = _phi2(_sub(k, top), edge[top], xx[top])[:, 0, :].astype(np.float32)
    both = left & top
    if both.any():
        corner[both] = _phi2(_sub(k, both), edge[both], edge[both])[:, 0, 0]
    return CornerMaps(k, P, ox, oy, corner)


def _sub(k: Corners, m: np.ndarray) -> Corners:
    return Corners(k.my[m], k.mx[m], k.vy[m], k.vx[m], k.cxy[m], k.H, k.W)


def corner_values(cm: CornerMaps, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The corner maps (float32) at pixel rows [n, a] x columns [n, b] of their own frames -> [n, a, b]."""
    k = cm.k
    zr = rows < k.ry0[:, None]
    zc = cols < k.rx0[:, None]
    br = rows > k.ry1[:, None]
    bc = cols > k.rx1[:, None]
    kr = np.clip(rows - k.ry0[:, None], 0, (k.ry1 - k.ry0)[:, None])
    kc = np.clip(cols - k.rx0[:, None], 0, (k.rx1 - k.rx0)[:, None])
    n = np.arange(len(k.ry0))[:, None, None]
    base = cm.P[n, kr[:, :, None], kc[:, None, :]]
    base = np.where(br[:, :, None] & bc[:, None, :], np.float32(1.0), base)
    base = np.where(zr[:, :, None] | zc[:, None, :], np.float32(0.0), base)
    left = np.equal(k.rx0, 0)[:, None]
    top = np.equal(k.ry0, 0)[:, None]
    ox = np.where(left & ~zr, np.take_along_axis(cm.ox, kr, axis=1), np.float32(0.0))
    oy = np.where(top & ~zc, np.take_along_axis(cm.oy, kc, axis=1), np.float32(0.0))
    v = base - ox[:, :, None]
    v = v - oy[:, None, :]
    v = (v.astype(np.float64) + cm.corner[:, None, None]).astype(np.float32)
    v[v < HEATMAP_THRESHOLD] = 0.0
    return v


def _uniform_axis(lo: np.ndarray, hi: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Weights along one axis of a box without covariance: pixels ``ceil(lo) - 1`` ... ``floor(hi) + 1``,
    the first weighted ``ceil(lo) - lo``, the last ``hi - floor(hi)``, the others 1 (the reference's uniform box)."""
    lc = np.ceil(lo)[:, None]
    hf = np.floor(hi)[:, None]
    w = ((idx >= lc - 1) & (idx <= hf + 1)).astype(np.float32)
    w = np.where(idx == lc - 1, (w * (lc - lo[:, None])).astype(np.float32), w)
    w = np.where(idx == hf + 1, (w * (hi[:, None] - hf)).astype(np.float32), w)
    return w


@dataclass
class Grids:
    """Compressed maps of a batch of detections: run starts ``rs [n, K]`` / ``cs [n, L]`` (first 0, last H / W) and
    run lengths ``lr`` / ``lc`` (the last 0); per cell the map ``heat`` and the foreground / background log terms
    ``vfg`` / ``vbg`` ``[n, K, L]``; ``pfg`` / ``pbg``: their sums over the pixels above and left of each cell's corner."""

    rs: np.ndarray
    cs: np.ndarray
    lr: np.ndarray
    lc: np.ndarray
    heat: np.ndarray
    vfg: np.ndarray
    vbg: np.ndarray
    pfg: np.ndarray
    pbg: np.ndarray
    H: int
    W: int


def _breaks(parts: list[np.ndarray], limit: int) -> np.ndarray:
    b = np.concatenate(parts, axis=1)
    return np.sort(np.clip(b, 0, limit), axis=1)


def _prefix(V: np.ndarray, lr: np.ndarray, lc: np.ndarray) -> np.ndarray:
    """``P[i, j]``: sum of ``V`` over the pixels above row ``rs_i`` and left of column ``cs_j``."""
    M = V * lr[:, :, None] * lc[:, None, :]
    P = np.zeros_like(M)
    np.cumsum(M[:, :-1, :-1], axis=1, out=P[:, 1:, 1:])
    np.cumsum(P[:, 1:, 1:], axis=2, out=P[:, 1:, 1:])
    return P


def build_grids(box: np.ndarray, cov: np.ndarray | None, H: int, W: int) -> Grids:
    """Compressed maps of detections ``box [n, 4]`` (xyxy) with corner covariances ``cov [n, 2, 2, 2]`` (x, y) or None."""
    n = len(box)
    x1, y1, x2, y2 = box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    edges_r = [np.zeros((n, 1), np.int64), np.full((n, 1), H, np.int64)]
    edges_c = [np.zeros((n, 1), np.int64), np.full((n, 1), W, np.int64)]
    if cov is None:
        for lo, hi, parts in ((y1, y2, edges_r), (x1, x2, edges_c)):
            a = np.ceil(lo).astype(np.int64)[:, None] - 1
            b = np.floor(hi).astype(np.int64)[:, None] + 1
            parts += [a, a + 1, b, b + 1]
        rs, cs = _breaks(edges_r, H), _breaks(edges_c, W)
        rr, cc = np.minimum(rs, H - 1), np.minimum(cs, W - 1)
        heat = _uniform_axis(y1, y2, rr)[:, :, None] * _uniform_axis(x1, x2, cc)[:, None, :]
    else:
        tl = find_rois(Corners(y1.copy(), x1.copy(), cov[:, 0, 1, 1], cov[:, 0, 0, 0], cov[:, 0, 0, 1], H, W))
        br = find_rois(Corners(H - (y2 + 1.0), W - (x2 + 1.0), cov[:, 1, 1, 1], cov[:, 1, 0, 0], cov[:, 1, 0, 1], H, W))
        for k, flip in ((tl, False), (br, True)):
            for a0, a1, lim, parts in ((k.ry0, k.ry1, H, edges_r), (k.rx0, k.rx1, W, edges_c)):
                steps = np.arange(int((a1 - a0).max(initial=0)) + 2)[None, :]
                run = np.minimum(a0[:, None] + steps, (a1 + 1)[:, None])  # ROI lines and the first line past it
                # a run [f_a, f_b) of the flipped frame is [lim - f_b, lim - f_a) of the image
                parts.append(lim - run if flip else run)
        rs, cs = _breaks(edges_r, H), _breaks(edges_c, W)
        rr, cc = np.minimum(rs, H - 1), np.minimum(cs, W - 1)
        v_tl = corner_values(corner_maps(tl), rr, cc)
        v_br = corner_values(corner_maps(br), H - 1 - rr, W - 1 - cc)
        heat = v_tl * v_br
        heat[heat > 1] = 1.0
        heat[heat < HEATMAP_THRESHOLD] = 0.0
    lr = np.diff(rs, axis=1, append=rs[:, -1:]).astype(np.float64)
    lc = np.diff(cs, axis=1, append=cs[:, -1:]).astype(np.float64)
    lfg = np.log((heat + np.float32(SMALL)).astype(np.float64))
    lbg = np.where(heat > 0, np.log((np.float32(1.0) - heat + np.float32(SMALL)).astype(np.float64)), 0.0)
    return Grids(rs, cs, lr, lc, heat, lfg, lbg, _prefix(lfg, lr, lc), _prefix(lbg, lr, lc), H, W)


def _locate(starts: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run index (the last start <= pos) and offset into it, for positions pos [m, n] against starts [n, K]."""
    n, K = starts.shape
    span = int(starts.max(initial=0)) + 2
    flat = (starts + np.arange(n)[:, None] * span).ravel()
    q = pos + np.arange(n)[None, :] * span
    i = np.searchsorted(flat, q, side="right") - 1 - np.arange(n)[None, :] * K
    return i, pos - np.take_along_axis(starts, i.T, axis=1).T


def _at(g: Grids, P: np.ndarray, loc_r: tuple, loc_c: tuple) -> np.ndarray:
    """Sum over the pixels above and left of (R, C): the prefix, bilinear inside a cell (the map is constant there)."""
    (i, dr), (j, dc) = loc_r, loc_c
    n, K, L = P.shape
    d = np.arange(n)[None, :]
    i1, j1 = np.minimum(i + 1, K - 1), np.minimum(j + 1, L - 1)
    fr = dr / np.maximum(g.lr[d, i], 1.0)
    fc = dc / np.maximum(g.lc[d, j], 1.0)
    p00, p10, p01, p11 = P[d, i, j], P[d, i1, j], P[d, i, j1], P[d, i1, j1]
    return p00 + fr * (p10 - p00) + fc * (p01 - p00) + fr * fc * (p11 - p10 - p01 + p00)


def rect_sums(
    g: Grids, r0: np.ndarray, r1: np.ndarray, c0: np.ndarray, c1: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sums of the foreground and background log terms of every map [n] over rectangles ``[r0, r1) x [c0, c1)`` [m] -> [m, n]."""
    n = g.rs.shape[0]
    lr0, lr1 = (_locate(g.rs, np.broadcast_to(v[:, None], (len(v), n))) for v in (r0, r1))
    lc0, lc1 = (_locate(g.cs, np.broadcast_to(v[:, None], (len(v), n))) for v in (c0, c1))
    return tuple(
        _at(g, P, lr1, lc1) - _at(g, P, lr0, lc1) - _at(g, P, lr1, lc0) + _at(g, P, lr0, lc0) for P in (g.pfg, g.pbg)
    )


def totals(g: Grids) -> tuple[np.ndarray, np.ndarray]:
    """Whole-image sums of the foreground and background log terms [n]."""
    H = np.array([g.H])
    W = np.array([g.W])
    z = np.array([0])
    fg, bg = rect_sums(g, z, H, z, W)
    return fg[0], bg[0]


def dense(g: Grids, which: str = "heat") -> np.ndarray:
    """The maps expanded to ``[n, H, W]`` (for tests and pictures): ``which`` 'heat', or 'fg' / 'bg' for the log terms."""
    V = {"heat": g.heat, "fg": g.vfg, "bg": g.vbg}[which]
    n = g.rs.shape[0]
    i, _ = _locate(g.rs, np.broadcast_to(np.arange(g.H)[:, None], (g.H, n)))
    j, _ = _locate(g.cs, np.broadcast_to(np.arange(g.W)[:, None], (g.W, n)))
    return V[np.arange(n)[:, None, None], i.T[:, :, None], j.T[:, None, :]]
