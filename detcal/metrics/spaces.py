"""Evaluation spaces for box-uncertainty (regression) calibration.

Turns matched detections into a :class:`RegressionSample`: per true positive
a predicted mean ``mu``, a standard deviation ``sigma`` and a target ``y`` for
each of the K = 4 coordinates (docs/formats.md).

Axis letters: S samples (true positives), K coordinates (4).

Spaces
------
``"delta"`` (default)
    Unweighted R-CNN deltas (Girshick 2015) w.r.t. the record's own
    reference box, coordinates ``(tx, ty, tw, th)``::

        tx = (Gx - Px) / Pw,  ty = (Gy - Py) / Ph,  tw = log(Gw / Pw),  th = log(Gh / Ph)

    * delta records (Levi et al. 2019, R-FCN): P = proposal,
      ``y = encode_deltas(P, G)``, ``mu = delta_mean``, ``sigma = delta_std``.
    * box records (third-party detectors): P := B (the final box), ``mu = 0``,
      ``y = encode_deltas(B, G)`` and first-order propagation of the pixel
      uncertainty of ``(cx, cy, w, h)``: with ``D = diag(1/Bw, 1/Bh, 1/Bw, 1/Bh)``
      ``Sigma_t = D Sigma_c D``, i.e. ``sigma_t = (s_cx/Bw, s_cy/Bh, s_w/Bw, s_h/Bh)``
      (``d tw = d log w = dw / Bw`` to first order). ``box_cov`` (x, y, w, h)
      goes to (cx, cy, w, h) by the linear Jacobian ``J_xywh``; ``corner_cov``
      (two independent 2x2 corner covariances) by the Jacobian ``J_corner`` of
      ``(x1, y1, x2, y2) -> (cx, cy, w, h)``.
``"box"``
    Deltas w.r.t. the final box B for every record: ``mu = 0``,
    ``y = encode_deltas(B, G)``. For box records this equals ``"delta"``. For
    delta records the deltas are re-expressed relative to B:
    ``sigma_tx^B = sigma_tx * Pw / Bw``, ``sigma_ty^B = sigma_ty * Ph / Bh``,
    ``sigma_tw^B = sigma_tw``, ``sigma_th^B = sigma_th`` (exact when
    ``B = decode_deltas(P, mu)``, since then ``tx^B = (tx - mu_tx) Pw / Bw`` and
    ``tw^B = tw - mu_tw``).
``"pixel"``
    Residuals in pixels, coordinates ``(cx, cy, w, h)``: ``y`` = GT centre/size,
    ``mu`` = predicted centre/size, ``sigma`` = pixel standard deviations.
    Box records: ``mu`` = final box B, ``Sigma_c`` as above. Delta records:
    ``mu = decode_deltas(P, delta_mean)`` and first-order propagation at the
    predicted box: ``s_cx = sigma_tx * Pw``, ``s_cy = sigma_ty * Ph``,
    ``s_w = sigma_tw * Bw'``, ``s_h = sigma_th * Bh'`` with
    ``Bw' = Pw exp(mu_tw)``, ``Bh' = Ph exp(mu_th)`` (``dw = w dtw``).

Sample: detections matched to a (non-ignored) GT at ``iou_threshold``,
considered and not ignored (true positives).

Numpy only; must not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.core.boxes import decode_deltas, encode_deltas, xyxy_to_cxcywh
from detcal.core.errors import DetcalInputError
from detcal.core.types import COORDS, Detections, GroundTruth, MatchResult

SPACES: tuple[str, ...] = ("delta", "box", "pixel")
"""The evaluation spaces :func:`regression_sample` understands."""

PIXEL_COORDS: tuple[str, ...] = ("cx", "cy", "w", "h")
"""Coordinate names of the ``pixel`` space."""

J_XYWH_TO_CXCYWH: np.ndarray = np.array(
    [[1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
)
"""Jacobian [4,4] of ``(x, y, w, h) -> (cx, cy, w, h)`` (linear: cx = x + w/2)."""

J_CORNERS_TO_CXCYWH: np.ndarray = np.array(
    [[0.5, 0.0, 0.5, 0.0], [0.0, 0.5, 0.0, 0.5], [-1.0, 0.0, 1.0, 0.0], [0.0, -1.0, 0.0, 1.0]]
)
"""Jacobian [4,4] of ``(x1, y1, x2, y2) -> (cx, cy, w, h)`` (cx = (x1+x2)/2, w = x2 - x1)."""


@dataclass
class RegressionSample:
    """Box-regression calibration sample, one row per true positive.

    Fields (S samples, K = 4 coordinates):

    ``mu [S,K]``
        predicted mean (0 for deltas w.r.t. the final box).
    ``sigma [S,K]``
        predicted standard deviation, finite and > 0.
    ``y [S,K]``
        target; the residual is ``e = y - mu`` (:attr:`residual`).
    ``cov [S,K,K] | None``
        full covariance in the same space when the record has one
        (``box_cov``/``corner_cov``), else ``None`` (independent coordinates).
    ``rows [S]``
        row of each sample in the Detections record.
    ``image_id [S]``
        image of each sample (for bootstrap over images).
    ``space``
        ``"delta"``, ``"box"`` or ``"pixel"``; ``coords`` names the K columns.
    ``notes``
        provenance: uncertainty kind, reference box, propagation, IoU threshold.
    """

    mu: np.ndarray
    sigma: np.ndarray
    y: np.ndarray
    rows: np.ndarray
    image_id: np.ndarray
    space: str = "delta"
    cov: np.ndarray | None = None
    coords: tuple[str, ...] = COORDS
    notes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.mu = np.asarray(self.mu, dtype=np.float64).reshape(-1, 4)
        s = len(self.mu)
        self.sigma = np.asarray(self.sigma, dtype=np.float64).reshape(s, 4)
        self.y = np.asarray(self.y, dtype=np.float64).reshape(s, 4)
        self.rows = np.asarray(self.rows, dtype=np.int64).reshape(s)
        self.image_id = np.asarray(self.image_id, dtype=np.int64).reshape(s)
        if self.cov is not None:
            self.cov = np.asarray(self.cov, dtype=np.float64).reshape(s, 4, 4)
        if self.space not in SPACES:
            raise ValueError(f"RegressionSample: unknown space {self.space!r}; expected one of {SPACES}")

    def __len__(self) -> int:
        return len(self.mu)

    @property
    def residual(self) -> np.ndarray:
        """Residual ``e = y - mu`` [S,K]."""
        return self.y - self.mu

    def select(self, index: np.ndarray) -> RegressionSample:
        """Rows ``index`` (bool mask or integer array) of every per-sample field."""
        return RegressionSample(
            mu=self.mu[index],
            sigma=self.sigma[index],
            y=self.y[index],
            rows=self.rows[index],
            image_id=self.image_id[index],
            space=self.space,
            cov=None if self.cov is None else self.cov[index],
            coords=self.coords,
            notes=dict(self.notes),
        )


def _first_bad(mask: np.ndarray) -> int:
    """Index of the first True along axis 0 of a [S,...] mask (caller knows one exists)."""
    flat = mask.reshape(len(mask), -1).any(axis=1)
    return int(np.flatnonzero(flat)[0])


def _check_positive_finite(values: np.ndarray, rows: np.ndarray, name: str, what: str) -> None:
    """Raise :class:`DetcalInputError` naming the detection row if any value is not finite and > 0."""
    bad = ~(np.isfinite(values) & (values > 0))
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(
            f"{what} must be finite and > 0, got {values[i].tolist()} ({int(bad.reshape(len(bad), -1).any(axis=1).sum())} "
            "detection(s) affected)",
            record=f"detection row {int(rows[i])}",
            field=name,
        )


def _check_finite(values: np.ndarray, rows: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(
            f"values must be finite, got {values[i].tolist()}", record=f"detection row {int(rows[i])}", field=name
        )


def _check_covariance(cov: np.ndarray, rows: np.ndarray, name: str) -> None:
    """Covariances [S,n,n] must be finite, symmetric and positive semi-definite with positive variances."""
    _check_finite(cov, rows, name)
    scale = np.maximum(np.abs(cov).max(axis=(-2, -1)), 1e-300)
    asym = np.abs(cov - np.swapaxes(cov, -1, -2)).max(axis=(-2, -1)) > 1e-9 * scale
    if asym.any():
        i = int(np.flatnonzero(asym)[0])
        raise DetcalInputError(
            f"covariance is not symmetric: {cov[i].tolist()}", record=f"detection row {int(rows[i])}", field=name
        )
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    _check_positive_finite(diag, rows, name, "variances (covariance diagonal)")
    if len(cov):
        min_eig = np.linalg.eigvalsh(0.5 * (cov + np.swapaxes(cov, -1, -2)))[..., 0]
        neg = min_eig < -1e-9 * scale
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise DetcalInputError(
                f"covariance is not positive semi-definite (smallest eigenvalue {min_eig[i]:.3g}): {cov[i].tolist()}",
                record=f"detection row {int(rows[i])}",
                field=name,
            )


def _corner_block(corner_cov: np.ndarray) -> np.ndarray:
    """[S,2,2,2] corner covariances -> [S,4,4] block-diagonal covariance of (x1, y1, x2, y2)."""
    out = np.zeros((len(corner_cov), 4, 4))
    out[:, :2, :2] = corner_cov[:, 0]
    out[:, 2:, 2:] = corner_cov[:, 1]
    return out


def _sandwich(jac: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """``J C J^T`` for a fixed [4,4] J and covariances [S,4,4]."""
    return np.einsum("ij,sjk,lk->sil", jac, cov, jac)


def _pixel_covariance(dets: Detections, rows: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray | None]:
    """Pixel uncertainty of (cx, cy, w, h) of box records: (sigma_c [S,4], cov_c [S,4,4] or None)."""
    if kind == "box_std":
        assert dets.box_std is not None
        std = dets.box_std[rows]
        _check_positive_finite(std, rows, "box_std", "pixel standard deviations")
        return std, None
    if kind == "box_cov":
        assert dets.box_cov is not None
        c = dets.box_cov[rows]
        _check_covariance(c, rows, "box_cov")
        cov_c = _sandwich(J_XYWH_TO_CXCYWH, c)
    else:
        assert dets.corner_cov is not None
        c = dets.corner_cov[rows]
        _check_covariance(c.reshape(-1, 2, 2), np.repeat(rows, 2), "corner_cov")
        cov_c = _sandwich(J_CORNERS_TO_CXCYWH, _corner_block(c))
    var = np.diagonal(cov_c, axis1=-2, axis2=-1)
    _check_positive_finite(var, rows, kind, "propagated (cx, cy, w, h) variances")
    return np.sqrt(var), cov_c


def regression_sample(
    dets: Detections,
    gt: GroundTruth,
    match: MatchResult,
    iou_threshold: float = 0.5,
    space: str = "delta",
) -> RegressionSample:
    """Regression calibration sample (true positives at ``iou_threshold``) in ``space``.

    See the module docstring for the three spaces and the first-order
    propagation (docs/formats.md; Girshick 2015 deltas; Levi et al. 2019
    for delta records). Returns a :class:`RegressionSample` whose ``rows``
    index ``dets`` and whose ``notes`` record the propagation used.

    Raises :class:`DetcalInputError` naming the detection row and field when a
    standard deviation/variance is not finite and > 0, a covariance is not
    symmetric PSD, or a reference/GT box has a non-positive width or height.
    """
    if space not in SPACES:
        raise DetcalInputError(f"unknown space {space!r}; expected one of {SPACES}", field="space")
    kind = dets.uncertainty_kind
    if kind is None:
        raise DetcalInputError(
            "detections carry no box uncertainty (need proposal+delta_mean+delta_std, box_std, box_cov or corner_cov)",
            field="delta_std",
        )
    if match.matched.ndim != 2 or match.matched.shape[1] != len(dets) or len(match.considered) != len(dets):
        raise DetcalInputError(
            f"match result has matched of shape {match.matched.shape}, expected [T, {len(dets)}] for these Detections",
            field="matched",
        )
    rows, gbox = _true_positives(gt, match, iou_threshold)
    b = dets.box[rows]
    gc = xyxy_to_cxcywh(gbox)
    _check_finite(gbox, rows, "gt box")
    _check_positive_finite(gc[:, 2:], rows, "gt box", "matched GT width and height")
    _check_finite(b, rows, "box")

    notes: dict[str, Any] = {
        "uncertainty_kind": kind,
        "iou_threshold": float(iou_threshold),
        "n_true_positives": int(len(rows)),
        "matching": match.describe(),
    }
    cov: np.ndarray | None = None
    if kind == "delta":
        mu, sigma, y, coords = _from_delta_records(dets, rows, b, gbox, gc, space, notes)
    else:
        mu, sigma, y, cov, coords = _from_box_records(dets, rows, b, gbox, gc, kind, space, notes)

    _check_positive_finite(sigma, rows, "sigma", f"propagated standard deviations ({space} space)")
    _check_finite(y, rows, "target")
    return RegressionSample(
        mu=mu,
        sigma=sigma,
        y=y,
        rows=rows,
        image_id=dets.image_id[rows],
        space=space,
        cov=cov,
        coords=coords,
        notes=notes,
    )


def _true_positives(gt: GroundTruth, match: MatchResult, iou_threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Rows [S] of the true positives at ``iou_threshold`` and the boxes [S,4] of the GTs they matched."""
    t = match.threshold_index(iou_threshold)
    keep = match.considered & match.matched[t] & ~match.ignored[t]
    rows = np.flatnonzero(keep)
    g = match.gt_index[t, rows]
    if (g < 0).any() or (g >= len(gt)).any():
        i = int(np.flatnonzero((g < 0) | (g >= len(gt)))[0])
        raise DetcalInputError(
            f"matched detection has gt_index {int(g[i])} outside 0..{len(gt) - 1}",
            record=f"detection row {int(rows[i])}",
            field="gt_index",
        )
    return rows, gt.box[g]


def _from_delta_records(
    dets: Detections,
    rows: np.ndarray,
    b: np.ndarray,
    gbox: np.ndarray,
    gc: np.ndarray,
    space: str,
    notes: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """mu, sigma, y [S,4] and the coordinate names of delta records (proposal, delta_mean, delta_std) in ``space``."""
    assert dets.proposal is not None and dets.delta_mean is not None and dets.delta_std is not None
    p = dets.proposal[rows]
    mu_d = dets.delta_mean[rows]
    sig_d = dets.delta_std[rows]
    _check_finite(p, rows, "proposal")
    pc = xyxy_to_cxcywh(p)
    _check_positive_finite(pc[:, 2:], rows, "proposal", "proposal width and height")
    _check_finite(mu_d, rows, "delta_mean")
    _check_positive_finite(sig_d, rows, "delta_std", "delta standard deviations")
    if space == "delta":
        notes.update(reference="proposal", propagation="none (native deltas)")
        return mu_d.copy(), sig_d.copy(), encode_deltas(p, gbox), COORDS
    if space == "box":
        bc = xyxy_to_cxcywh(b)
        _check_positive_finite(bc[:, 2:], rows, "box", "box width and height")
        scale = np.stack([pc[:, 2] / bc[:, 2], pc[:, 3] / bc[:, 3], np.ones(len(rows)), np.ones(len(rows))], axis=1)
        notes.update(reference="box", propagation="sigma_tx*Pw/Bw, sigma_ty*Ph/Bh, sigma_tw, sigma_th")
        return np.zeros_like(mu_d), sig_d * scale, encode_deltas(b, gbox), COORDS
    pred = xyxy_to_cxcywh(decode_deltas(p, mu_d))
    scale = np.stack([pc[:, 2], pc[:, 3], pred[:, 2], pred[:, 3]], axis=1)
    notes.update(
        reference="pixels",
        mean="decode_deltas(proposal, delta_mean)",
        propagation="first order at the predicted box: s_cx=sigma_tx*Pw, s_cy=sigma_ty*Ph, "
        "s_w=sigma_tw*Pw*exp(mu_tw), s_h=sigma_th*Ph*exp(mu_th)",
    )
    return pred, sig_d * scale, gc, PIXEL_COORDS


def _from_box_records(
    dets: Detections,
    rows: np.ndarray,
    b: np.ndarray,
    gbox: np.ndarray,
    gc: np.ndarray,
    kind: str,
    space: str,
    notes: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, tuple[str, ...]]:
    """mu, sigma, y [S,4], covariance [S,4,4] (or None) and coordinate names of box records (box_std, box_cov,
    corner_cov) in ``space`` (pixels, or box deltas for ``delta``/``box``)."""
    bc = xyxy_to_cxcywh(b)
    _check_positive_finite(bc[:, 2:], rows, "box", "box width and height")
    sig_c, cov_c = _pixel_covariance(dets, rows, kind)
    if space == "pixel":
        notes.update(reference="pixels", propagation=_propagation_note(kind, pixel=True))
        return bc, sig_c, gc, cov_c, PIXEL_COORDS
    inv = np.stack([1 / bc[:, 2], 1 / bc[:, 3], 1 / bc[:, 2], 1 / bc[:, 3]], axis=1)
    cov = None if cov_c is None else cov_c * inv[:, :, None] * inv[:, None, :]
    notes.update(reference="box", propagation=_propagation_note(kind, pixel=False))
    return np.zeros((len(rows), 4)), sig_c * inv, encode_deltas(b, gbox), cov, COORDS


def _propagation_note(kind: str, pixel: bool) -> str:
    base = {
        "box_std": "pixel std of (cx, cy, w, h) as given",
        "box_cov": "Sigma_c = J_xywh C J_xywh^T",
        "corner_cov": "Sigma_c = J_corner blockdiag(C_tl, C_br) J_corner^T (independent corners)",
    }[kind]
    return base if pixel else base + "; Sigma_t = D Sigma_c D, D = diag(1/Bw, 1/Bh, 1/Bw, 1/Bh) (first order)"
