"""The R-FCN head and its losses and inference (torch): position-sensitive score maps for the class
logits, the box deltas and their log-variances; seeded RoI sampling; the detection losses, the
Gaussian NLL of the uncertainty branch and the post-processing into per-image detections.
Assembled into the detector by :mod:`detcal.models.rfcn`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models.detection import _utils as det_utils
from torchvision.ops import batched_nms, clip_boxes_to_image, ps_roi_align, remove_small_boxes

from detcal.core.errors import DetcalInputError

__all__ = [
    "HeadOutput",
    "SeededSampler",
    "RFCNHead",
    "rfcn_losses",
    "uncertainty_nll",
    "postprocess_detections",
    "unweight_deltas",
]


@dataclass
class HeadOutput:
    """Raw head outputs: ``class_logits [R, C+1]``, ``box_regression [R, 4]`` (coded), ``logvar [R, 4]`` (clamped)."""

    class_logits: Tensor
    box_regression: Tensor
    logvar: Tensor


class SeededSampler(det_utils.BalancedPositiveNegativeSampler):
    """torchvision's balanced sampler whose per-image draws come from a seed.

    When ``seeds`` (one int per image) is set, image ``i`` draws its positives
    and negatives with a ``torch.Generator`` seeded by ``seeds[i]``, so that
    the sample is a function of (seed, image) alone: a data-parallel shard
    samples exactly what a single process samples for the same image, and a
    resumed run repeats it. With ``seeds = None`` it is torchvision's sampler.
    """

    def __init__(self, batch_size_per_image: int, positive_fraction: float) -> None:
        super().__init__(batch_size_per_image, positive_fraction)
        self.seeds: list[int] | None = None

    def __call__(self, matched_idxs: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
        if self.seeds is None:
            return super().__call__(matched_idxs)
        if len(self.seeds) != len(matched_idxs):
            raise ValueError(f"SeededSampler: {len(self.seeds)} seeds for {len(matched_idxs)} images")
        pos_idx, neg_idx = [], []
        for m, seed in zip(matched_idxs, self.seeds):
            g = torch.Generator().manual_seed(int(seed))
            positive = torch.where(m >= 1)[0]
            negative = torch.where(m == 0)[0]
            num_pos = min(positive.numel(), int(self.batch_size_per_image * self.positive_fraction))
            num_neg = min(negative.numel(), self.batch_size_per_image - num_pos)
            perm1 = torch.randperm(positive.numel(), generator=g)[:num_pos].to(m.device)
            perm2 = torch.randperm(negative.numel(), generator=g)[:num_neg].to(m.device)
            pm = torch.zeros_like(m, dtype=torch.uint8)
            nm = torch.zeros_like(m, dtype=torch.uint8)
            pm[positive[perm1]] = 1
            nm[negative[perm2]] = 1
            pos_idx.append(pm)
            neg_idx.append(nm)
        return pos_idx, neg_idx


class RFCNHead(nn.Module):
    """Position-sensitive score maps + PSRoIAlign voting for class, box and log-variance.

    ``forward(features [B,F,h,w], proposals list of [R_i,4]) -> HeadOutput`` with
    R = sum R_i rows in proposal order. Voting averages the k x k bins
    (Dai et al. 2016, Eq. 2). ``logvar`` is clamped to ``logvar_clamp``.
    """

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        k: int = 3,
        spatial_scale: float = 1.0 / 16,
        sampling_ratio: int = 2,
        logvar_clamp: tuple[float, float] = (-7.0, 7.0),
    ) -> None:
        super().__init__()
        if num_classes < 1:
            raise DetcalInputError(f"num_classes must be >= 1, got {num_classes}", field="num_classes")
        if k < 1:
            raise DetcalInputError(f"k must be >= 1, got {k}", field="k")
        self.num_classes = int(num_classes)
        self.k = int(k)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.logvar_clamp = (float(logvar_clamp[0]), float(logvar_clamp[1]))
        kk = self.k * self.k
        self.cls_conv = nn.Conv2d(in_channels, kk * (num_classes + 1), 1)
        self.reg_conv = nn.Conv2d(in_channels, kk * 4, 1)
        self.unc_conv = nn.Conv2d(in_channels, kk * 4, 1)
        for conv, std in ((self.cls_conv, 0.01), (self.reg_conv, 0.001), (self.unc_conv, 0.001)):
            nn.init.normal_(conv.weight, std=std)
            nn.init.zeros_(conv.bias)  # type: ignore[arg-type]

    def _vote(self, maps: Tensor, proposals: list[Tensor]) -> Tensor:
        pooled = ps_roi_align(maps, proposals, self.k, self.spatial_scale, self.sampling_ratio)
        return pooled.mean(dim=(2, 3))

    def forward(self, features: Tensor, proposals: list[Tensor]) -> HeadOutput:
        proposals = [p.to(features.dtype) for p in proposals]
        class_logits = self._vote(self.cls_conv(features), proposals)
        box_regression = self._vote(self.reg_conv(features), proposals)
        logvar = self._vote(self.unc_conv(features), proposals).clamp(*self.logvar_clamp)
        return HeadOutput(class_logits, box_regression, logvar)


def rfcn_losses(out: HeadOutput, labels: Tensor, regression_targets: Tensor) -> dict[str, Tensor]:
    """Stage-1 R-FCN losses over the sampled RoIs (Fast R-CNN, Girshick 2015).

    ``loss_classifier = mean_r CE(class_logits[r], labels[r])`` over all R sampled RoIs;
    ``loss_box_reg = sum_{r: labels[r] > 0} smoothL1_beta(box_regression[r] - regression_targets[r]) / R``
    with beta = 1/9 (torchvision ``fastrcnn_loss``). ``labels [R]`` int64 (0 background),
    ``regression_targets [R, 4]`` coded deltas. With R = 0 both are 0 (and keep the graph).
    """
    if labels.numel() == 0:
        zero = out.class_logits.sum() * 0.0 + out.box_regression.sum() * 0.0
        return {"loss_classifier": zero, "loss_box_reg": zero.clone()}
    loss_cls = F.cross_entropy(out.class_logits, labels)
    pos = labels > 0
    loss_box = (
        F.smooth_l1_loss(out.box_regression[pos], regression_targets[pos], beta=1.0 / 9, reduction="sum")
        / labels.numel()
    )
    return {"loss_classifier": loss_cls, "loss_box_reg": loss_box}


def uncertainty_nll(out: HeadOutput, regression_targets: Tensor) -> Tensor:
    """Stage-2 Gaussian NLL of the coded deltas of the positive RoIs (Levi et al. 2019, Eq. 9, App. A.2).

    ``L = mean_{r,k} [0.5 * logvar[r,k] + 0.5 * e[r,k]^2 * exp(-logvar[r,k])]``,
    ``e = regression_targets - box_regression.detach()`` (the mean is not
    trained here; the constant 0.5 log 2 pi is dropped). Empty -> 0 (graph kept).
    """
    if regression_targets.numel() == 0:
        return out.logvar.sum() * 0.0
    e = regression_targets - out.box_regression.detach()
    return (0.5 * out.logvar + 0.5 * e.pow(2) * torch.exp(-out.logvar)).mean()


def postprocess_detections(
    out: HeadOutput,
    proposals: list[Tensor],
    image_shapes: list[tuple[int, int]],
    box_coder: det_utils.BoxCoder,
    score_thresh: float = 0.05,
    nms_thresh: float = 0.3,
    detections_per_img: int = 100,
    min_box_size: float = 1e-2,
) -> list[dict[str, Tensor]]:
    """Per-image detections with every output aligned through NMS.

    For image i with RoIs P [R_i,4]: ``scores = softmax(class_logits)[:, 1:]``
    [R_i, C]; every (RoI r, class c) with ``scores[r, c] > score_thresh``
    becomes a candidate with box ``clip(decode(P_r, box_regression_r))``;
    candidates smaller than ``min_box_size`` go; class-wise NMS
    (``batched_nms``, IoU > ``nms_thresh`` suppressed) keeps at most
    ``detections_per_img`` by descending score. The RoI row ``roi_index`` of each
    kept candidate carries its proposal, deltas and log-variance along.

    Returns per image: ``boxes [D,4]``, ``scores [D]``, ``labels [D]`` (1..C),
    ``proposals [D,4]``, ``box_regression [D,4]`` (coded), ``logvar [D,4]``,
    ``roi_index [D]`` (row within the image's proposals).
    """
    counts = [len(p) for p in proposals]
    all_props = torch.cat(proposals) if proposals else out.box_regression.new_zeros((0, 4))
    if len(all_props):
        pred_boxes = box_coder.decode_single(out.box_regression, all_props)
    else:
        pred_boxes = out.box_regression.new_zeros((0, 4))
    scores = F.softmax(out.class_logits, dim=-1)
    results = []
    for props, boxes, sc, reg, lv, shape in zip(
        proposals,
        pred_boxes.split(counts),
        scores.split(counts),
        out.box_regression.split(counts),
        out.logvar.split(counts),
        image_shapes,
    ):
        boxes = clip_boxes_to_image(boxes, shape)
        r, c = torch.nonzero(sc[:, 1:] > score_thresh, as_tuple=True)
        b, s, lab = boxes[r], sc[r, c + 1], c + 1
        keep = remove_small_boxes(b, min_box_size)
        r, b, s, lab = r[keep], b[keep], s[keep], lab[keep]
        keep = batched_nms(b, s, lab, nms_thresh)[:detections_per_img]
        r = r[keep]
        results.append(
            {
                "boxes": b[keep],
                "scores": s[keep],
                "labels": lab[keep],
                "proposals": props[r],
                "box_regression": reg[r],
                "logvar": lv[r],
                "roi_index": r,
            }
        )
    return results


def unweight_deltas(box_regression: Tensor, logvar: Tensor, weights: Sequence[float]) -> tuple[Tensor, Tensor]:
    """Unweighted delta means and stds: ``(box_regression / w, exp(0.5 * logvar) / w)`` (docs/metrics.md, boxes and deltas)."""
    w = torch.as_tensor(weights, dtype=box_regression.dtype, device=box_regression.device)
    return box_regression / w, torch.exp(0.5 * logvar) / w
