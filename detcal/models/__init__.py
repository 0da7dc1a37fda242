"""Detectors that produce delta records with uncertainty (torch; never imported by the numpy core)."""

from detcal.models.backbones import BACKBONES, ResNetBackbone, TinyBackbone, build_backbone
from detcal.models.rfcn import (
    RFCN,
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

__all__ = [
    "BACKBONES",
    "HeadOutput",
    "RFCN",
    "RFCNHead",
    "ResNetBackbone",
    "SeededSampler",
    "TinyBackbone",
    "build_backbone",
    "build_rfcn",
    "postprocess_detections",
    "rfcn_from_config",
    "rfcn_losses",
    "uncertainty_nll",
    "unweight_deltas",
]
