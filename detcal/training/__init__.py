"""Two-stage R-FCN training, prediction (delta records) and data parallelism (torch)."""
from detcal.training.data import (
    DetectionDataset,
    ImageSource,
    IterationBatchSampler,
    LabelMap,
    collate,
    iteration_batch,
    toy_scenes,
    training_gt_mask,
)
from detcal.training.predict import PredictResult, concat_detections, predict, scale_delta_std
from detcal.training.trainer import TrainingStopped, learning_rate, load_checkpoint, read_checkpoint, train_stage

__all__ = [
    "DetectionDataset", "ImageSource", "IterationBatchSampler", "LabelMap", "PredictResult", "TrainingStopped", "collate",
    "concat_detections", "iteration_batch", "learning_rate", "load_checkpoint", "predict", "read_checkpoint", "scale_delta_std",
    "toy_scenes", "train_stage", "training_gt_mask",
]
