"""R-FCN head, losses, inference alignment and model building (detcal.models)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torchvision.models.detection import _utils as det_utils

from detcal.core.boxes import decode_deltas
from detcal.core.errors import DetcalInputError
from detcal.models import (
    HeadOutput,
    RFCNHead,
    SeededSampler,
    build_rfcn,
    postprocess_detections,
    rfcn_from_config,
    rfcn_losses,
    uncertainty_nll,
    unweight_deltas,
)
from detcal.models.backbones import TinyBackbone, build_backbone
from detcal.models.rfcn import count_parameters

torch.set_num_threads(2)
CODER = det_utils.BoxCoder((10.0, 10.0, 5.0, 5.0))


def test_head_shapes_and_empty() -> None:
    head = RFCNHead(8, num_classes=2, k=3, spatial_scale=1.0)
    feats = torch.randn(2, 8, 12, 12)
    props = [torch.tensor([[0.0, 0, 5, 5], [1, 1, 8, 9], [2, 3, 11, 11]]), torch.tensor([[0.0, 0, 4, 6], [3, 3, 9, 9]])]
    out = head(feats, props)
    assert out.class_logits.shape == (5, 3) and out.box_regression.shape == (5, 4) and out.logvar.shape == (5, 4)
    empty = head(feats, [torch.zeros((0, 4)), torch.zeros((0, 4))])
    assert empty.class_logits.shape == (0, 3) and empty.box_regression.shape == (0, 4) and empty.logvar.shape == (0, 4)


def test_position_sensitive_voting_golden() -> None:
    # Constant features and zero conv weights: channel j of the score maps is its bias b_j.
    # PSRoIAlign bin (i, j) of output channel c reads input channel c*k*k + i*k + j (torchvision layout).
    # With b_{c*9 + m} = c + m (m = 0..8) the vote (mean over the 9 bins) is c + (0+...+8)/9 = c + 4.
    head = RFCNHead(1, num_classes=2, k=3, spatial_scale=1.0)
    with torch.no_grad():
        for conv in (head.cls_conv, head.reg_conv, head.unc_conv):
            conv.weight.zero_()
        head.cls_conv.bias.copy_(torch.tensor([c + m for c in range(3) for m in range(9)], dtype=torch.float32))
        head.reg_conv.bias.copy_(torch.tensor([10 * c + m for c in range(4) for m in range(9)], dtype=torch.float32))
        head.unc_conv.bias.fill_(-0.5)
    out = head(torch.ones(1, 1, 16, 16), [torch.tensor([[2.0, 2.0, 11.0, 14.0]])])
    torch.testing.assert_close(out.class_logits, torch.tensor([[4.0, 5.0, 6.0]]))
    torch.testing.assert_close(out.box_regression, torch.tensor([[4.0, 14.0, 24.0, 34.0]]))
    torch.testing.assert_close(out.logvar, torch.full((1, 4), -0.5))


@pytest.mark.parametrize("bias,expected", [(20.0, 7.0), (-20.0, -7.0), (3.0, 3.0)])
def test_logvar_clamped(bias: float, expected: float) -> None:
    head = RFCNHead(4, num_classes=1, k=2, spatial_scale=1.0)
    with torch.no_grad():
        head.unc_conv.weight.zero_()
        head.unc_conv.bias.fill_(bias)
    out = head(torch.randn(1, 4, 8, 8), [torch.tensor([[0.0, 0, 6, 6]])])
    assert torch.all(out.logvar == expected)


def _handmade() -> tuple[HeadOutput, list[torch.Tensor]]:
    # RoIs: P0, P1 (IoU(P0, P1) = 90/110 = 0.818), P2 far away, P3 = P0.
    props = torch.tensor([[0.0, 0, 10, 10], [1, 0, 11, 10], [50, 50, 60, 60], [0, 0, 10, 10]])
    probs = torch.tensor([[0.1, 0.8, 0.1], [0.3, 0.6, 0.1], [0.2, 0.1, 0.7], [0.4, 0.1, 0.5]])
    reg = torch.tensor([[0.0, 0, 0, 0], [0.5, 0, 0, 0], [1.0, 2.0, 0, 0], [0, 0, 0, 0]])  # coded (10,10,5,5)
    logvar = torch.tensor([[0.0, 0.1, 0.2, 0.3], [1.0, 1.1, 1.2, 1.3], [2.0, 2.1, 2.2, 2.3], [3.0, 3.1, 3.2, 3.3]])
    return HeadOutput(torch.log(probs), reg, logvar), [props]


def test_postprocess_alignment_through_nms() -> None:
    out, props = _handmade()
    # score threshold 0.2 leaves (P0,c1,.8) (P1,c1,.6) (P2,c2,.7) (P3,c2,.5) (P3,c0 is background).
    # Class-wise NMS at 0.3: P1 is suppressed by P0 in class 1 (IoU 0.818); P3 survives (class 2).
    det = postprocess_detections(
        out, props, [(100, 100)], CODER, score_thresh=0.2, nms_thresh=0.3, detections_per_img=10
    )[0]
    assert det["roi_index"].tolist() == [0, 2, 3]
    torch.testing.assert_close(det["scores"], torch.tensor([0.8, 0.7, 0.5]))
    assert det["labels"].tolist() == [1, 2, 2]
    torch.testing.assert_close(det["proposals"], props[0][[0, 2, 3]])
    torch.testing.assert_close(det["box_regression"], out.box_regression[[0, 2, 3]])
    torch.testing.assert_close(det["logvar"], out.logvar[[0, 2, 3]])
    # P2 = centre (55, 55), size 10; coded (1, 2) -> tx = 0.1, ty = 0.2 -> centre (56, 57) -> [51, 52, 61, 62]
    torch.testing.assert_close(det["boxes"], torch.tensor([[0.0, 0, 10, 10], [51, 52, 61, 62], [0, 0, 10, 10]]))
    top2 = postprocess_detections(
        out, props, [(100, 100)], CODER, score_thresh=0.2, nms_thresh=0.3, detections_per_img=2
    )[0]
    assert top2["roi_index"].tolist() == [0, 2]
    # Clipping to a 55x58 image changes the box but not the carried proposal / deltas.
    clipped = postprocess_detections(out, props, [(58, 55)], CODER, score_thresh=0.2, nms_thresh=0.3)[0]
    torch.testing.assert_close(clipped["boxes"][1], torch.tensor([51.0, 52, 55, 58]))
    torch.testing.assert_close(clipped["proposals"][1], torch.tensor([50.0, 50, 60, 60]))


def test_postprocess_empty() -> None:
    out = HeadOutput(torch.zeros((0, 3)), torch.zeros((0, 4)), torch.zeros((0, 4)))
    dets = postprocess_detections(out, [torch.zeros((0, 4)), torch.zeros((0, 4))], [(50, 50), (60, 60)], CODER)
    assert len(dets) == 2
    for d in dets:
        assert d["boxes"].shape == (0, 4) and d["proposals"].shape == (0, 4) and d["logvar"].shape == (0, 4)
        assert d["scores"].shape == (0,) and d["labels"].shape == (0,)


def test_unweight_deltas() -> None:
    mean, std = unweight_deltas(
        torch.tensor([[10.0, 10.0, 5.0, 5.0]]), torch.full((1, 4), math.log(4.0)), (10.0, 10.0, 5.0, 5.0)
    )
    torch.testing.assert_close(mean, torch.ones(1, 4))
    torch.testing.assert_close(std, torch.tensor([[0.2, 0.2, 0.4, 0.4]]))  # sqrt(4) / w


def test_rfcn_losses_golden() -> None:
    out = HeadOutput(torch.zeros(2, 3), torch.tensor([[5.0, 5, 5, 5], [0.5, 0, 0, 0]]), torch.zeros(2, 4))
    losses = rfcn_losses(out, torch.tensor([0, 1]), torch.zeros(2, 4))
    # CE of uniform logits over 3 classes = log 3. Smooth-L1 (beta 1/9) of 0.5: 0.5 - beta/2 = 0.5 - 1/18;
    # only the positive row counts, divided by R = 2; the background row's 5s are ignored.
    assert losses["loss_classifier"].item() == pytest.approx(math.log(3.0), rel=1e-6)
    assert losses["loss_box_reg"].item() == pytest.approx((0.5 - 1 / 18) / 2, rel=1e-6)
    empty = rfcn_losses(
        HeadOutput(torch.zeros(0, 3, requires_grad=True), torch.zeros(0, 4), torch.zeros(0, 4)),
        torch.zeros(0, dtype=torch.int64),
        torch.zeros(0, 4),
    )
    assert empty["loss_classifier"].item() == 0.0 and empty["loss_box_reg"].item() == 0.0


def test_uncertainty_nll_golden_and_detached_mean() -> None:
    reg = torch.zeros(2, 4, requires_grad=True)
    logvar = torch.tensor([[0.0] * 4, [math.log(4.0)] * 4], requires_grad=True)
    target = torch.tensor([[1.0] * 4, [2.0] * 4])
    nll = uncertainty_nll(HeadOutput(torch.zeros(2, 2), reg, logvar), target)
    # row 0: 0.5*0 + 0.5*1*1 = 0.5; row 1: 0.5*log 4 + 0.5*4/4 = 0.6931 + 0.5
    assert nll.item() == pytest.approx((0.5 + 0.5 * math.log(4.0) + 0.5) / 2, rel=1e-6)
    nll.backward()
    assert reg.grad is None and logvar.grad is not None
    empty = uncertainty_nll(
        HeadOutput(torch.zeros(0, 2), torch.zeros(0, 4), torch.zeros(0, 4, requires_grad=True)), torch.zeros(0, 4)
    )
    assert empty.item() == 0.0 and empty.requires_grad


def test_seeded_sampler_is_a_function_of_the_seed() -> None:
    s = SeededSampler(8, 0.25)
    m = [torch.tensor([1] * 10 + [0] * 30 + [-1] * 5)]
    s.seeds = [123]
    p1, n1 = s(m)
    p2, n2 = s([m[0].clone()])
    s.seeds = [124]
    p3, n3 = s(m)
    assert torch.equal(p1[0], p2[0]) and torch.equal(n1[0], n2[0])
    assert int(p1[0].sum()) == 2 and int(n1[0].sum()) == 6  # 8 * 0.25 positives, rest negatives
    assert not torch.any(p1[0][40:]) and not torch.any(n1[0][40:])  # -1 never sampled
    assert not (torch.equal(p1[0], p3[0]) and torch.equal(n1[0], n3[0]))  # another seed, another draw


def test_tiny_backbone_size_and_stride() -> None:
    bb = TinyBackbone()
    assert 100_000 <= count_parameters(bb) <= 500_000
    assert bb(torch.zeros(1, 3, 128, 160)).shape == (1, 128, 16, 20)


def _images(n: int = 2, h: int = 96, w: int = 128) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.rand(3, h, w, generator=g) for _ in range(n)]


def test_model_losses_detect_and_empty_targets() -> None:
    torch.manual_seed(0)
    model = build_rfcn(2, category_ids=[4, 1], min_size=96, max_size=128)
    imgs = _images()
    targets = [
        {"boxes": torch.tensor([[10.0, 10, 50, 60]]), "labels": torch.tensor([1]), "seed": torch.tensor(5)},
        {"boxes": torch.zeros((0, 4)), "labels": torch.zeros(0, dtype=torch.int64), "seed": torch.tensor(6)},
    ]
    model.set_stage(1)
    model.train()
    losses = model(imgs, targets, 1)
    assert set(losses) == {"loss_objectness", "loss_rpn_box_reg", "loss_classifier", "loss_box_reg"}
    assert all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    assert model.head.unc_conv.weight.grad is None and model.head.cls_conv.weight.grad is not None
    model.set_stage(2)
    model.eval()
    nll = model([imgs[1]], [targets[1]], 2)["loss_nll"]  # no GT: no positive RoI, zero loss, graph kept
    assert nll.item() == 0.0
    nll.backward()
    assert model.head.unc_conv.weight.grad is not None
    with pytest.raises(RuntimeError):
        model.train()
        model.detect(imgs)


def test_detect_outputs_aligned_in_input_coordinates() -> None:
    torch.manual_seed(1)
    # input 48x64 with min_size 96: the transform doubles the image; outputs must come back in input pixels
    model = build_rfcn(3, min_size=96, max_size=128, box_score_thresh=0.0).eval()
    with torch.no_grad():
        model.head.reg_conv.bias.copy_(torch.randn(model.head.reg_conv.bias.shape) * 2.0)
        model.head.unc_conv.weight.zero_()
        model.head.unc_conv.bias.fill_(math.log(0.25))
    dets = model.detect(_images(2, 48, 64), score_thresh=0.0)
    for d in dets:
        n = len(d["scores"])
        assert n > 0
        for key, shape in (
            ("boxes", (n, 4)),
            ("proposals", (n, 4)),
            ("delta_mean", (n, 4)),
            ("delta_std", (n, 4)),
            ("labels", (n,)),
        ):
            assert d[key].shape == shape
        assert torch.all(d["boxes"][:, [0, 2]] <= 64.0 + 1e-4) and torch.all(d["boxes"][:, [1, 3]] <= 48.0 + 1e-4)
        assert torch.all(d["proposals"][:, [0, 2]] <= 64.0 + 1e-4)
        # independent numpy decode of the exported unweighted deltas reproduces the (unclipped) boxes
        dec = decode_deltas(d["proposals"].double().numpy(), d["delta_mean"].double().numpy())
        inside = (dec[:, 0] >= 0) & (dec[:, 1] >= 0) & (dec[:, 2] <= 64) & (dec[:, 3] <= 48)
        assert inside.sum() > 0
        np.testing.assert_allclose(dec[inside], d["boxes"].double().numpy()[inside], atol=2e-3)
        # std = exp(0.5 * log 0.25) / w = 0.5 / (10, 10, 5, 5)
        np.testing.assert_allclose(d["delta_std"].numpy(), np.tile([0.05, 0.05, 0.1, 0.1], (n, 1)), rtol=1e-5)
        assert set(d["category"].tolist()) <= {1, 2, 3}


def test_build_validation_and_config_round_trip(tmp_path) -> None:
    with pytest.raises(DetcalInputError):
        build_rfcn(0)
    with pytest.raises(DetcalInputError):
        build_rfcn(2, backbone="vgg")
    with pytest.raises(DetcalInputError):
        build_rfcn(2, category_ids=[1])
    with pytest.raises(DetcalInputError, match="not found"):
        build_rfcn(2, backbone="resnet50", backbone_weights=str(tmp_path / "missing.pth"))
    m = build_rfcn(2, category_ids=[6, 1], k=2)
    m2 = rfcn_from_config(m.config)
    assert m2.head.k == 2 and m2.category_ids.tolist() == [6, 1]
    assert set(m.state_dict()) == set(m2.state_dict())


def test_resnet50_backbone_local_weights(tmp_path) -> None:
    import torchvision

    ref = torchvision.models.resnet50(weights=None)
    path = tmp_path / "r50.pth"
    torch.save(ref.state_dict(), path)
    bb = build_backbone("resnet50", path)
    assert bb.stride == 16 and bb.out_channels == 1024
    torch.testing.assert_close(bb.body[0].weight, ref.conv1.weight)  # loaded, not random
    assert (
        not bb.body[0].weight.requires_grad and bb.body[6][0].conv1.weight.requires_grad
    )  # conv1 frozen, layer3 trained
    with torch.no_grad():
        assert bb(torch.zeros(1, 3, 64, 96)).shape == (1, 1024, 4, 6)
    bad = {k: v for k, v in ref.state_dict().items() if k != "layer2.0.conv1.weight"}
    torch.save(bad, tmp_path / "bad.pth")
    with pytest.raises(DetcalInputError, match="layer2.0.conv1.weight"):
        build_backbone("resnet50", tmp_path / "bad.pth")
