"""R-FCN (Dai et al. 2016) with a log-variance uncertainty branch (Levi et al. 2019, App. A.2).

Built from torchvision parts: ``GeneralizedRCNNTransform`` (normalise, resize,
pad), a backbone (:mod:`detcal.models.backbones`), ``RegionProposalNetwork``
with ``AnchorGenerator`` + ``RPNHead`` on the backbone's single feature map,
and the position-sensitive head below (``torchvision.ops.ps_roi_align``).

Shapes (B images, R RoIs over the batch, C foreground classes, k the
position-sensitive grid, F feature channels, s the backbone stride)::

    features         [B, F, H/s, W/s]
    cls score maps   [B, k*k*(C+1), H/s, W/s] --PSRoIAlign--> [R, C+1, k, k] --mean k x k--> class_logits [R, C+1]
    box maps         [B, k*k*4, H/s, W/s]     --PSRoIAlign--> [R, 4, k, k]   --mean-->        box_regression [R, 4]
    uncertainty maps [B, k*k*4, H/s, W/s]     --PSRoIAlign--> [R, 4, k, k]   --mean-->        logvar [R, 4]

Label 0 is background; labels 1..C are the contiguous training labels whose
dataset category ids are ``RFCN.category_ids[label - 1]``. Box regression is
class-agnostic (one box per RoI), as in R-FCN. The uncertainty branch is
identical in structure to the box branch; its output is clamped to [-7, 7]
(probdet).

Delta convention. ``box_regression`` are *coded* R-CNN deltas of the GT
w.r.t. the RoI P, multiplied by the box-coder weights ``w = (wx, wy, ww, wh)``
(default (10, 10, 5, 5), torchvision/detectron)::

    box_regression = (wx * tx, wy * ty, ww * tw, wh * th),
    tx = (Gx - Px) / Pw, ty = (Gy - Py) / Ph, tw = log(Gw / Pw), th = log(Gh / Ph)

and ``logvar`` is the log-variance of these coded deltas. Exported records
(:meth:`RFCN.detect`, :func:`detcal.training.predict.predict`) carry
*unweighted* deltas (docs/metrics.md, boxes and deltas)::

    delta_mean = box_regression / w,   delta_std = exp(0.5 * logvar) / w.

The final ``box`` is ``decode(proposal, delta_mean)`` clipped to the image;
``proposal`` is the RoI P the deltas refer to. Everything is returned in the
coordinates of the input image (deltas are invariant to the resize).

Keep ``forward`` (raw tensors), ``losses`` and ``inference`` apart
(detectron2 ``fast_rcnn.py``): :class:`RFCNHead` has ``forward`` -> raw
:class:`HeadOutput`; :func:`rfcn_losses` and :func:`uncertainty_nll` are the
losses; :func:`postprocess_detections` is the inference. :class:`RFCN`'s
``forward(images, targets, stage)`` always returns the loss dict (so that
``DistributedDataParallel`` can wrap it) and :meth:`RFCN.detect` always returns
per-image detection dicts.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torchvision.models.detection import _utils as det_utils
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.rpn import RegionProposalNetwork, RPNHead
from torchvision.models.detection.transform import GeneralizedRCNNTransform, resize_boxes
from torchvision.ops import box_iou

from detcal.core.errors import DetcalInputError
from detcal.models.backbones import build_backbone

UNCERTAINTY_PREFIX = "head.unc_conv."
"""Parameter-name prefix of the uncertainty branch (trained alone in stage 2)."""


from detcal.models.head import (  # noqa: E402,F401 - the head's names stay importable from here
    HeadOutput,
    RFCNHead,
    SeededSampler,
    postprocess_detections,
    rfcn_losses,
    uncertainty_nll,
    unweight_deltas,
)


def _tiny_defaults() -> dict[str, Any]:
    return dict(
        min_size=120,
        max_size=400,
        anchor_sizes=(16, 32, 64, 128),
        rpn_pre_nms_top_n_train=1000,
        rpn_post_nms_top_n_train=300,
        rpn_pre_nms_top_n_test=600,
        rpn_post_nms_top_n_test=150,
    )


def _resnet_defaults() -> dict[str, Any]:
    return dict(
        min_size=600,
        max_size=1000,
        anchor_sizes=(32, 64, 128, 256, 512),
        rpn_pre_nms_top_n_train=6000,
        rpn_post_nms_top_n_train=300,
        rpn_pre_nms_top_n_test=6000,
        rpn_post_nms_top_n_test=300,
    )


class RFCN(nn.Module):
    """R-FCN detector with an uncertainty branch. Build it with :func:`build_rfcn`.

    ``forward(images, targets, stage)`` -> loss dict (stage 1: ``loss_objectness``,
    ``loss_rpn_box_reg``, ``loss_classifier``, ``loss_box_reg``; stage 2:
    ``loss_nll``). ``images``: list of float ``[3, H, W]`` in [0, 1];
    ``targets``: list of dicts with ``boxes [G,4]`` xyxy float, ``labels [G]``
    int64 in 1..C and optionally ``seed`` (int64 scalar: seeds this image's
    RoI/anchor sampling, see :class:`SeededSampler`).
    ``detect(images)`` -> per-image dicts (see :meth:`detect`).
    """

    category_ids: torch.Tensor  # buffer [C] int64: dataset category id of label 1..C

    def __init__(
        self,
        transform: GeneralizedRCNNTransform,
        backbone: nn.Module,
        rpn: RegionProposalNetwork,
        head: RFCNHead,
        category_ids: Sequence[int],
        config: dict[str, Any],
        box_coder_weights: Sequence[float] = (10.0, 10.0, 5.0, 5.0),
        roi_batch_size_per_image: int = 128,
        roi_positive_fraction: float = 0.25,
        roi_fg_iou_thresh: float = 0.5,
        roi_bg_iou_thresh: float = 0.5,
        add_gt_as_proposals: bool = True,
        stage2_positives_per_image: int | None = None,
        box_score_thresh: float = 0.05,
        box_nms_thresh: float = 0.3,
        box_detections_per_img: int = 100,
    ) -> None:
        super().__init__()
        self.transform = transform
        self.backbone = backbone
        self.rpn = rpn
        self.head = head
        self.config = dict(config)
        self.register_buffer("category_ids", torch.as_tensor(list(category_ids), dtype=torch.int64))
        self.box_coder_weights = tuple(float(w) for w in box_coder_weights)
        self.box_coder = det_utils.BoxCoder(self.box_coder_weights)
        self.roi_matcher = det_utils.Matcher(roi_fg_iou_thresh, roi_bg_iou_thresh, allow_low_quality_matches=False)
        self.roi_sampler = SeededSampler(roi_batch_size_per_image, roi_positive_fraction)
        self.roi_fg_iou_thresh = float(roi_fg_iou_thresh)
        self.add_gt_as_proposals = bool(add_gt_as_proposals)
        self.stage2_positives_per_image = stage2_positives_per_image
        self.box_score_thresh = float(box_score_thresh)
        self.box_nms_thresh = float(box_nms_thresh)
        self.box_detections_per_img = int(box_detections_per_img)
        self.frozen_by_design = {n for n, p in self.named_parameters() if not p.requires_grad}

    @property
    def num_classes(self) -> int:
        return self.head.num_classes

    # ------------------------------------------------------------------ stages
    def set_stage(self, stage: int) -> list[nn.Parameter]:
        """Set ``requires_grad`` for a training stage and return the trainable parameters.

        Stage 1: everything but the uncertainty branch (and the layers frozen by
        design, e.g. conv1/layer1 of a pretrained ResNet). Stage 2: only the
        uncertainty branch (``head.unc_conv``).
        """
        if stage not in (1, 2):
            raise DetcalInputError(f"stage must be 1 or 2, got {stage}", field="stage")
        trainable = []
        for name, p in self.named_parameters():
            is_unc = name.startswith(UNCERTAINTY_PREFIX)
            flag = is_unc if stage == 2 else (not is_unc and name not in self.frozen_by_design)
            p.requires_grad_(flag)
            if flag:
                trainable.append(p)
        return trainable

    def train_mode_for_stage(self, stage: int) -> None:
        """Stage 1: ``train()``; stage 2: ``eval()`` so BN statistics and the frozen parts stay unchanged."""
        self.train(stage == 1)

    # ----------------------------------------------------------------- training
    def _set_seeds(self, targets: list[dict[str, Tensor]] | None, offset: int) -> list[int] | None:
        if targets is None or not targets or any("seed" not in t for t in targets):
            return None
        return [(int(t["seed"]) * 2 + offset) % (2**63 - 1) for t in targets]

    def forward(self, images: list[Tensor], targets: list[dict[str, Tensor]], stage: int = 1) -> dict[str, Tensor]:
        """Loss dict for ``stage`` (1: RPN + R-FCN, 2: uncertainty NLL); see the class docstring."""
        if targets is None or len(targets) != len(images):
            raise DetcalInputError(
                "forward needs one target dict per image (use detect() for inference)", field="targets"
            )
        if stage not in (1, 2):
            raise DetcalInputError(f"stage must be 1 or 2, got {stage}", field="stage")
        image_list, targets_t = self.transform(images, targets)
        assert targets_t is not None
        features = self.backbone(image_list.tensors)
        self.rpn.fg_bg_sampler.seeds = self._set_seeds(targets_t, 0)
        try:
            proposals, rpn_losses = self.rpn(image_list, OrderedDict([("0", features)]), targets_t)
        finally:
            self.rpn.fg_bg_sampler.seeds = None
        seeds = self._set_seeds(targets_t, 1)
        if stage == 1:
            rois, labels, reg_targets = self.select_training_samples(proposals, targets_t, seeds)
            out = self.head(features, rois)
            return {**rpn_losses, **rfcn_losses(out, labels, reg_targets)}
        rois, reg_targets = self.select_positive_samples(proposals, targets_t, seeds)
        out = self.head(features, rois)
        return {"loss_nll": uncertainty_nll(out, reg_targets)}

    def _match(self, props: Tensor, gt_boxes: Tensor) -> Tensor:
        if gt_boxes.numel() == 0:
            return torch.full(
                (len(props),), self.roi_matcher.BELOW_LOW_THRESHOLD, dtype=torch.int64, device=props.device
            )
        if len(props) == 0:
            return torch.zeros((0,), dtype=torch.int64, device=props.device)
        return self.roi_matcher(box_iou(gt_boxes, props))

    def select_training_samples(
        self, proposals: list[Tensor], targets: list[dict[str, Tensor]], seeds: list[int] | None
    ) -> tuple[list[Tensor], Tensor, Tensor]:
        """Stage-1 RoIs: proposals (+ GT boxes), matched at IoU >= fg (labels) / < bg (background), then
        ``roi_batch_size_per_image`` sampled with ``roi_positive_fraction`` positives.
        Returns RoIs per image, ``labels [R]`` and coded ``regression_targets [R,4]``."""
        rois, labels, matched_gt = [], [], []
        for props, t in zip(proposals, targets):
            gt_boxes, gt_labels = t["boxes"].to(props.dtype), t["labels"]
            if self.add_gt_as_proposals and len(gt_boxes):
                props = torch.cat([props, gt_boxes])
            idx = self._match(props, gt_boxes)
            lab = gt_labels[idx.clamp(min=0)] if len(gt_boxes) else torch.zeros_like(idx)
            lab = torch.where(idx == self.roi_matcher.BELOW_LOW_THRESHOLD, torch.zeros_like(lab), lab)
            lab = torch.where(idx == self.roi_matcher.BETWEEN_THRESHOLDS, torch.full_like(lab, -1), lab)
            rois.append(props)
            labels.append(lab)
            matched_gt.append(gt_boxes[idx.clamp(min=0)] if len(gt_boxes) else torch.zeros_like(props))
        self.roi_sampler.seeds = seeds
        try:
            pos, neg = self.roi_sampler(labels)
        finally:
            self.roi_sampler.seeds = None
        out_rois, out_labels, out_targets = [], [], []
        for props, lab, mg, p, n in zip(rois, labels, matched_gt, pos, neg):
            keep = torch.where((p | n).bool())[0]
            out_rois.append(props[keep])
            out_labels.append(lab[keep])
            out_targets.append(
                self.box_coder.encode_single(mg[keep], props[keep]) if len(keep) else props.new_zeros((0, 4))
            )
        return out_rois, torch.cat(out_labels), torch.cat(out_targets)

    def select_positive_samples(
        self, proposals: list[Tensor], targets: list[dict[str, Tensor]], seeds: list[int] | None
    ) -> tuple[list[Tensor], Tensor]:
        """Stage-2 RoIs: the proposals (no GT boxes added) whose best IoU with a GT is >= ``roi_fg_iou_thresh``,
        at most ``stage2_positives_per_image`` (seeded draw). Returns RoIs per image and coded targets [R,4]."""
        rois, reg_targets = [], []
        for i, (props, t) in enumerate(zip(proposals, targets)):
            gt_boxes = t["boxes"].to(props.dtype)
            if len(gt_boxes) == 0 or len(props) == 0:
                rois.append(props[:0])
                reg_targets.append(props.new_zeros((0, 4)))
                continue
            iou = box_iou(gt_boxes, props)
            best, arg = iou.max(dim=0)
            keep = torch.where(best >= self.roi_fg_iou_thresh)[0]
            cap = self.stage2_positives_per_image
            if cap is not None and len(keep) > cap:
                g = torch.Generator().manual_seed(seeds[i]) if seeds is not None else None
                keep = keep[torch.randperm(len(keep), generator=g)[:cap].to(keep.device)]
            rois.append(props[keep])
            reg_targets.append(self.box_coder.encode_single(gt_boxes[arg[keep]], props[keep]))
        return rois, torch.cat(reg_targets)

    # ---------------------------------------------------------------- inference
    @torch.no_grad()
    def detect(self, images: list[Tensor], score_thresh: float | None = None) -> list[dict[str, Tensor]]:
        """Detections per image, in input-image coordinates (model must be in eval mode).

        Keys: ``boxes [D,4]`` xyxy, ``scores [D]``, ``labels [D]`` (1..C),
        ``category [D]`` (dataset ids), ``proposals [D,4]``, ``delta_mean [D,4]``
        and ``delta_std [D,4]`` (unweighted deltas w.r.t. ``proposals``),
        ``logvar [D,4]`` (coded), ``roi_index [D]``. See :func:`postprocess_detections`.
        """
        if self.training:
            raise RuntimeError("RFCN.detect needs model.eval() (the RPN proposes with its test settings)")
        original_sizes = [tuple(int(s) for s in img.shape[-2:]) for img in images]
        image_list, _ = self.transform(images)
        features = self.backbone(image_list.tensors)
        proposals, _ = self.rpn(image_list, OrderedDict([("0", features)]))
        out = self.head(features, proposals)
        dets = postprocess_detections(
            out,
            proposals,
            image_list.image_sizes,
            self.box_coder,
            self.box_score_thresh if score_thresh is None else float(score_thresh),
            self.box_nms_thresh,
            self.box_detections_per_img,
        )
        for d, size, orig in zip(dets, image_list.image_sizes, original_sizes):
            d["boxes"] = resize_boxes(d["boxes"], list(size), list(orig))
            d["proposals"] = resize_boxes(d["proposals"], list(size), list(orig))
            d["delta_mean"], d["delta_std"] = unweight_deltas(d["box_regression"], d["logvar"], self.box_coder_weights)
            d["category"] = self.category_ids[d["labels"] - 1]
            del d["box_regression"]
        return dets


# long function: one keyword argument per model setting (all stored in model.config); the body is about 35 lines
def build_rfcn(
    num_classes: int,
    backbone: str = "tiny",
    k: int = 3,
    backbone_weights: str | None = None,
    min_size: int | None = None,
    max_size: int | None = None,
    *,
    category_ids: Sequence[int] | None = None,
    norm: str = "bn",
    trainable_layers: int | None = None,
    frozen_bn: bool | None = None,
    anchor_sizes: Sequence[int] | None = None,
    aspect_ratios: Sequence[float] = (0.5, 1.0, 2.0),
    rpn_pre_nms_top_n_train: int | None = None,
    rpn_post_nms_top_n_train: int | None = None,
    rpn_pre_nms_top_n_test: int | None = None,
    rpn_post_nms_top_n_test: int | None = None,
    rpn_nms_thresh: float = 0.7,
    rpn_fg_iou_thresh: float = 0.7,
    rpn_bg_iou_thresh: float = 0.3,
    rpn_batch_size_per_image: int = 256,
    rpn_positive_fraction: float = 0.5,
    roi_batch_size_per_image: int = 128,
    roi_positive_fraction: float = 0.25,
    roi_fg_iou_thresh: float = 0.5,
    roi_bg_iou_thresh: float = 0.5,
    add_gt_as_proposals: bool = True,
    stage2_positives_per_image: int | None = None,
    box_coder_weights: Sequence[float] = (10.0, 10.0, 5.0, 5.0),
    box_score_thresh: float = 0.05,
    box_nms_thresh: float = 0.3,
    box_detections_per_img: int = 100,
    sampling_ratio: int = 2,
    logvar_clamp: tuple[float, float] = (-7.0, 7.0),
    image_mean: Sequence[float] = (0.485, 0.456, 0.406),
    image_std: Sequence[float] = (0.229, 0.224, 0.225),
) -> RFCN:
    """Build an :class:`RFCN` (Dai et al. 2016) with the uncertainty branch of Levi et al. 2019.

    ``num_classes`` C foreground classes (labels 1..C, background 0);
    ``category_ids`` the dataset category id of each label (default 1..C).
    ``backbone``: ``tiny`` (defaults: min/max size 120/400, anchors 16..128,
    RPN 1000/300 proposals train, 600/150 test) or ``resnet50``/``resnet101``
    (600/1000, anchors 32..512, RPN 6000/300 as R-FCN). ``None`` arguments take
    these backbone defaults. ``backbone_weights``: a local state-dict path
    (never downloaded). All arguments are stored in ``model.config`` so that a
    checkpoint rebuilds the same model (:func:`rfcn_from_config`).
    """
    config: dict[str, Any] = dict(locals())
    config["category_ids"] = None if category_ids is None else [int(c) for c in category_ids]
    config = {k_: (list(v) if isinstance(v, tuple) else v) for k_, v in config.items()}
    if num_classes < 1:
        raise DetcalInputError(f"num_classes must be >= 1, got {num_classes}", field="num_classes")
    if category_ids is None:
        category_ids = list(range(1, num_classes + 1))
    if len(category_ids) != num_classes:
        raise DetcalInputError(f"{len(category_ids)} category ids for {num_classes} classes", field="category_ids")
    defaults = _tiny_defaults() if backbone == "tiny" else _resnet_defaults()
    given = dict(
        min_size=min_size,
        max_size=max_size,
        anchor_sizes=anchor_sizes,
        rpn_pre_nms_top_n_train=rpn_pre_nms_top_n_train,
        rpn_post_nms_top_n_train=rpn_post_nms_top_n_train,
        rpn_pre_nms_top_n_test=rpn_pre_nms_top_n_test,
        rpn_post_nms_top_n_test=rpn_post_nms_top_n_test,
    )
    p: dict[str, Any] = {name: (defaults[name] if v is None else v) for name, v in given.items()}
    config["frozen_bn"] = backbone_weights is not None if frozen_bn is None else bool(frozen_bn)
    bb = build_backbone(
        backbone, backbone_weights, norm=norm, trainable_layers=trainable_layers, frozen_bn=config["frozen_bn"]
    )
    transform = GeneralizedRCNNTransform(int(p["min_size"]), int(p["max_size"]), list(image_mean), list(image_std))
    anchor_gen = AnchorGenerator(
        sizes=(tuple(int(s) for s in p["anchor_sizes"]),), aspect_ratios=(tuple(float(a) for a in aspect_ratios),)
    )
    rpn_head = RPNHead(bb.out_channels, anchor_gen.num_anchors_per_location()[0])
    rpn = RegionProposalNetwork(
        anchor_gen,
        rpn_head,
        rpn_fg_iou_thresh,
        rpn_bg_iou_thresh,
        rpn_batch_size_per_image,
        rpn_positive_fraction,
        dict(training=int(p["rpn_pre_nms_top_n_train"]), testing=int(p["rpn_pre_nms_top_n_test"])),
        dict(training=int(p["rpn_post_nms_top_n_train"]), testing=int(p["rpn_post_nms_top_n_test"])),
        rpn_nms_thresh,
    )
    rpn.fg_bg_sampler = SeededSampler(rpn_batch_size_per_image, rpn_positive_fraction)
    head = RFCNHead(bb.out_channels, num_classes, k, 1.0 / bb.stride, sampling_ratio, logvar_clamp)  # type: ignore[arg-type,operator]
    return RFCN(
        transform,
        bb,
        rpn,
        head,
        category_ids,
        config,
        box_coder_weights,
        roi_batch_size_per_image,
        roi_positive_fraction,
        roi_fg_iou_thresh,
        roi_bg_iou_thresh,
        add_gt_as_proposals,
        stage2_positives_per_image,
        box_score_thresh,
        box_nms_thresh,
        box_detections_per_img,
    )


def rfcn_from_config(config: dict[str, Any]) -> RFCN:
    """Rebuild an :class:`RFCN` from ``model.config`` (as stored in checkpoints).

    The backbone weights file is not read again (``backbone_weights=None``; the
    layout it implied is kept through ``frozen_bn``): load the checkpoint's
    state dict afterwards.
    """
    cfg = dict(config)
    cfg["backbone_weights"] = None
    if "logvar_clamp" in cfg and cfg["logvar_clamp"] is not None:
        cfg["logvar_clamp"] = tuple(cfg["logvar_clamp"])
    return build_rfcn(**cfg)


def count_parameters(module: nn.Module) -> int:
    """Number of scalar parameters of ``module``."""
    return int(sum(math.prod(p.shape) for p in module.parameters()))
