"""Feature extractors for the R-FCN: ResNet-50/101 (torchvision) and a tiny CNN.

Every backbone maps images ``[B, 3, H, W]`` to one feature map
``[B, out_channels, ceil(H / stride), ceil(W / stride)]`` and exposes
``out_channels`` and ``stride``.

* ``resnet50`` / ``resnet101``: torchvision ResNet conv1..conv5 with conv5
  dilated (stride 16 instead of 32) and a new 1x1 conv to 1024 channels + ReLU,
  as in R-FCN (Dai et al. 2016, section 3 "Backbone architecture"). Weights
  are never downloaded: ``weights`` is ``None`` (random initialisation) or the
  path of a local torchvision ResNet state-dict file. With local weights the
  batch norms are frozen (``FrozenBatchNorm2d``) and conv1 + layer1 are not
  trained, torchvision's detection default (``trainable_layers=3``).
  ``frozen_bn`` chooses this layout without loading (used when a checkpoint
  rebuilds the model).
* ``tiny``: five 3x3 convs (32-64-64-128-128 channels, stride 8, ~0.28 M
  parameters) with BatchNorm (``norm="bn"``), GroupNorm (``"gn"``, batch
  independent, so a DDP shard computes exactly what a single process does) or
  no normalisation, for CPU runs on small synthetic images.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torchvision.models import resnet50, resnet101
from torchvision.ops.misc import FrozenBatchNorm2d

from detcal.core.errors import DetcalInputError

BACKBONES: tuple[str, ...] = ("tiny", "resnet50", "resnet101")


def _norm(kind: str, channels: int) -> nn.Module:
    if kind == "bn":
        return nn.BatchNorm2d(channels)
    if kind == "gn":
        return nn.GroupNorm(min(8, channels), channels)
    if kind == "none":
        return nn.Identity()
    raise DetcalInputError(f"unknown norm {kind!r}; expected 'bn', 'gn' or 'none'", field="norm")


class TinyBackbone(nn.Module):
    """Five 3x3 conv + norm + ReLU layers, stride 8: ``[B,3,H,W] -> [B,128,H/8,W/8]``."""

    def __init__(self, norm: str = "bn", width: int = 32) -> None:
        super().__init__()
        w = int(width)
        spec = [(3, w, 2), (w, 2 * w, 2), (2 * w, 2 * w, 1), (2 * w, 4 * w, 2), (4 * w, 4 * w, 1)]
        layers: list[nn.Module] = []
        for cin, cout, stride in spec:
            layers += [
                nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=norm == "none"),
                _norm(norm, cout),
                nn.ReLU(inplace=True),
            ]
        self.body = nn.Sequential(*layers)
        self.out_channels = 4 * w
        self.stride = 8
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class ResNetBackbone(nn.Module):
    """ResNet conv1..conv5 (conv5 dilated, stride 16) + 1x1 conv to ``out_channels`` + ReLU."""

    def __init__(
        self,
        depth: int = 101,
        weights: str | Path | None = None,
        out_channels: int = 1024,
        trainable_layers: int | None = None,
        frozen_bn: bool | None = None,
    ) -> None:
        super().__init__()
        if depth not in (50, 101):
            raise DetcalInputError(f"ResNet depth must be 50 or 101, got {depth}", field="backbone")
        pretrained = weights is not None if frozen_bn is None else bool(frozen_bn)
        norm_layer = FrozenBatchNorm2d if pretrained else nn.BatchNorm2d
        ctor = resnet50 if depth == 50 else resnet101
        net = ctor(weights=None, replace_stride_with_dilation=[False, False, True], norm_layer=norm_layer)
        if weights is not None:
            load_resnet_weights(net, weights)
        self.body = nn.Sequential(
            net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3, net.layer4
        )
        if trainable_layers is None:
            trainable_layers = 3 if pretrained else 5
        if not 0 <= trainable_layers <= 5:
            raise DetcalInputError(
                f"trainable_layers must be in 0..5, got {trainable_layers}", field="trainable_layers"
            )
        frozen = ["layer4", "layer3", "layer2", "layer1", "conv1"][trainable_layers:]
        names = {"conv1": [0, 1], "layer1": [4], "layer2": [5], "layer3": [6], "layer4": [7]}
        for name in frozen:
            for i in names[name]:
                for p in self.body[i].parameters():
                    p.requires_grad_(False)
        self.reduce = nn.Sequential(nn.Conv2d(2048, out_channels, 1), nn.ReLU(inplace=True))
        nn.init.normal_(self.reduce[0].weight, std=0.01)  # type: ignore[arg-type]
        nn.init.zeros_(self.reduce[0].bias)  # type: ignore[arg-type]
        self.out_channels = int(out_channels)
        self.stride = 16

    def forward(self, x: Tensor) -> Tensor:
        return self.reduce(self.body(x))


def load_resnet_weights(net: nn.Module, path: str | Path) -> None:
    """Load a local torchvision ResNet state dict into ``net`` (the ``fc.*`` keys are skipped).

    Raises :class:`DetcalInputError` naming the file when it is missing or when a
    backbone key is missing or has the wrong shape. Never downloads.
    """
    path = Path(path)
    if not path.is_file():
        raise DetcalInputError(
            "backbone weights file not found (detcal never downloads weights)", file=path, field="backbone_weights"
        )
    state = load_weights_file(path)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise DetcalInputError("expected a state dict (mapping of tensor names to tensors)", file=path)
    state = {k.removeprefix("module."): v for k, v in state.items() if not k.removeprefix("module.").startswith("fc.")}
    own = net.state_dict()
    for key, value in own.items():
        if key.startswith("fc."):
            continue
        if key not in state:
            if key.endswith("num_batches_tracked"):
                continue
            raise DetcalInputError("backbone weight missing", file=path, record=key, field="state_dict")
        if tuple(state[key].shape) != tuple(value.shape):
            raise DetcalInputError(
                f"shape {tuple(state[key].shape)} != expected {tuple(value.shape)}",
                file=path,
                record=key,
                field="state_dict",
            )
    net.load_state_dict(state, strict=False)


def load_weights_file(path: Path) -> Any:
    """``torch.load(path, weights_only=True)``; a file that is no weights-only checkpoint (another pickle,
    not a torch file at all, truncated) is refused with one sentence naming it, nothing in it run."""
    if not Path(path).is_file():
        raise DetcalInputError("weights file not found (detcal never downloads weights)", file=path)
    try:
        with warnings.catch_warnings():  # torch warns about the pickle protocol of a file it then refuses
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError, ValueError, EOFError, KeyError) as exc:
        raise DetcalInputError(
            f"refused: not a weights-only torch checkpoint ({type(exc).__name__}; a pickle of other objects, "
            "or not a torch file): nothing in it was run",
            file=path,
        ) from None


def build_backbone(
    name: str,
    weights: str | Path | None = None,
    norm: str = "bn",
    trainable_layers: int | None = None,
    frozen_bn: bool | None = None,
) -> nn.Module:
    """Backbone by name (``tiny``, ``resnet50``, ``resnet101``); see the module docstring.

    ``frozen_bn`` (ResNet only): frozen batch norms and ``trainable_layers=3`` by
    default; ``None`` means "when ``weights`` is given".
    """
    if name == "tiny":
        if weights is not None:
            bb = TinyBackbone(norm=norm)
            state = load_weights_file(Path(weights))
            try:
                bb.load_state_dict(state)
            except (RuntimeError, TypeError, AttributeError) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise DetcalInputError(f"not weights of the tiny backbone: {first}", file=weights) from None
            return bb
        return TinyBackbone(norm=norm)
    if name in ("resnet50", "resnet101"):
        return ResNetBackbone(
            depth=int(name[6:]), weights=weights, trainable_layers=trainable_layers, frozen_bn=frozen_bn
        )
    raise DetcalInputError(f"unknown backbone {name!r}; expected one of {BACKBONES}", field="backbone")
