"""A streaming, mergeable detection-calibration evaluator for training loops.

:class:`DetectionCalibration` takes the torchvision / torchmetrics detection
convention, one dict per image::

    metric = DetectionCalibration(spec=detcal.EvaluationSpec(), box_format="xyxy")
    for images, targets in loader:
        metric.update(model(images), targets)   # preds: boxes [N,4], scores [N], labels [N]
    result = metric.compute()                   # the EvaluationResult of detcal.evaluate
    metric.reset()

``compute()`` builds the records the offline pipeline builds after loading a
COCO results file (:class:`~detcal.types.Dataset`, :class:`~detcal.types.Detections`)
from the kept columns and runs :func:`detcal.evaluate` on them with the same
spec, so every number comes from the same code as ``detcal-evaluate``.

State (bounded, docs/api.md "During training"): per detection only the
compact input columns (box in the input's format and float precision, score,
label, and the box uncertainty when given); per ground-truth box its xyxy box,
label, crowd flag (and area / input width-height when given); per image its
id, size and counts. Nothing else (no per-image dicts, no tensors).
:meth:`DetectionCalibration.state_bytes` reports the bytes kept.

Order: ``compute()`` puts the images in ascending image-id order (stable;
each image's detections keep the order they were given in), so the result
does not depend on the update order, the batch sizes, the merge order or the
number of ranks. The offline evaluation keeps the results file's order; the
two differ only in the order of floating-point sums (last bits; docs/api.md).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from detcal.core.boxes import cxcywh_to_xyxy, xywh_to_xyxy, xyxy_to_cxcywh
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.integrations._contract import (
    check_categories,
    check_field,
    exact_int,
    int_column,
    shape_kind,
    spec_fingerprint,
)
from detcal.pipeline.evaluation import evaluate
from detcal.pipeline.parallel import gather_all
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec

__all__ = ["DetectionCalibration", "BOX_FORMATS", "UNCERTAINTY_KEYS"]

BOX_FORMATS: tuple[str, ...] = ("xyxy", "xywh", "cxcywh")
"""Box formats of ``update`` (torchvision ``box_convert`` names)."""

UNCERTAINTY_KEYS: dict[str, tuple[int, ...]] = {
    "box_std": (4,),  # pixel std of (cx, cy, w, h)
    "box_cov": (4, 4),  # covariance of (x, y, w, h), pixels^2 (probdet's bbox_covar)
    "box_cov_xyxy": (4, 4),  # covariance of the corners (x1, y1, x2, y2); kept as box_cov (x, y, w, h)
    "corner_cov": (2, 2, 2),  # 2x2 covariances of the top-left and bottom-right corners (PDQ)
    "delta_std": (4,),  # with proposal [N,4] (box_format) and delta_mean [N,4]: R-CNN delta records
}
"""Optional box-uncertainty keys of a prediction dict and their per-detection shapes."""

_DET_UNC = ("box_std", "box_cov", "corner_cov", "delta_std", "delta_mean")  # as kept (Detections fields)
_IMG = ("img_id", "img_w", "img_h", "img_ndet", "img_ngt")
_GT_OPT = ("gt_area", "gt_wh", "gt_ignore")
STATE_SCHEMA_VERSION = 1
"""Version of :meth:`DetectionCalibration.state_dict`'s layout (``load_state_dict`` refuses another)."""
_STATE_REQUIRED: tuple[str, ...] = ("img_id", "img_w", "img_h", "img_ndet", "img_ngt", "det_box", "det_score")
_STATE_REQUIRED += ("det_label", "gt_box", "gt_label", "gt_crowd")


# --------------------------------------------------------------------------- array conversion


def _class_columns(preds: list[Mapping[str, Any]], where: Any, ids: np.ndarray) -> int:
    """C when the batch's ``scores`` are class distributions [N, C] (0 for top scores [N]); all or none."""
    shapes = [shape_kind(p["scores"])[0] for p in preds]
    dims = [len(s) for s in shapes]
    if all(d == 1 for d in dims):
        return 0
    widths = {s[1] for s, d in zip(shapes, dims) if d == 2}
    if (
        any(d not in (1, 2) for d in dims)
        or (1 in dims and any(s[0] for s, d in zip(shapes, dims) if d == 1))
        or len(widths) != 1
    ):
        i = next((i for i, d in enumerate(dims) if d != 2), 0)
        raise DetcalInputError(
            "scores are [N] top scores or [N, C] class distributions (one C), the same in every prediction dict",
            record=where(i, ids[i]),
            field="scores",
        )
    return widths.pop()


def _torch() -> Any:
    """torch when it is already imported (a tensor can only exist then), else None: never imports it."""
    return sys.modules.get("torch")


def _is_tensor(x: Any) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def _cat(parts: Sequence[Any], tail: tuple[int, ...], ints: bool) -> np.ndarray:
    """Per-image arrays or tensors, concatenated into one numpy array [sum N, *tail]; tensors are
    concatenated on their device and moved to the CPU once. Floats keep float32 / float64 (float16 and
    bfloat16 become float32: exactly), integers become int64."""
    if any(_is_tensor(p) for p in parts):
        torch = _torch()
        ts = [p if _is_tensor(p) else torch.as_tensor(np.asarray(p)) for p in parts]
        devices = {t.device for t in ts}
        ts = [t.reshape((-1,) + tail) if devices == {ts[0].device} else t.cpu().reshape((-1,) + tail) for t in ts]
        t = torch.cat(ts) if len(ts) != 1 else ts[0]
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        a = t.detach().cpu().numpy()
    else:
        arrs = [np.asarray(p).reshape((-1,) + tail) for p in parts]
        a = np.concatenate(arrs) if len(arrs) != 1 else arrs[0]
    if ints:  # integer columns are checked and converted by the caller (int_column), as given
        return a
    if a.dtype == np.float16:
        return a.astype(np.float32)
    if a.dtype not in (np.float32, np.float64):
        return a.astype(np.float64)
    return a


def _compact_ints(a: np.ndarray) -> np.ndarray:
    """int32 when every value fits (labels: 4 bytes a detection, the same values), else int64."""
    if len(a) and (a.min() < -(2**31) or a.max() >= 2**31):
        return a
    return a.astype(np.int32)


def _scalar(x: Any) -> float:
    if _is_tensor(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x).reshape(-1)
    if a.size != 1:
        raise DetcalInputError(f"expected one number, got {a.size}")
    return a[0].item()


def _hw(t: Mapping[str, Any]) -> tuple[float, float]:
    """(width, height) of an image from its dict: ``width``/``height``, ``orig_size`` or ``image_size``
    (both (h, w), DETR / torchvision); NaN when absent (the position features are then unavailable)."""
    if "width" in t and "height" in t:
        return float(_scalar(t["width"])), float(_scalar(t["height"]))
    for key in ("orig_size", "image_size"):
        if key in t:
            v = t[key].detach().cpu().numpy() if _is_tensor(t[key]) else np.asarray(t[key])
            v = np.asarray(v, np.float64).reshape(-1)
            if v.size != 2:
                raise DetcalInputError(f"must be (height, width), got {v.size} values", field=key)
            return float(v[1]), float(v[0])
    return float("nan"), float("nan")


def _xyxy(box: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray | None]:
    """float64 xyxy boxes and, for xywh input, the input's (w, h) (matching takes COCO areas from them)."""
    b = np.asarray(box, np.float64)
    if fmt == "xyxy":
        return b, None
    if fmt == "xywh":
        return xywh_to_xyxy(b), b[:, 2:4].copy()
    return cxcywh_to_xyxy(b), None


def _corner_to_xywh_cov(c: np.ndarray) -> np.ndarray:
    """Covariance of (x1, y1, x2, y2) [N,4,4] as that of (x, y, w, h) = J c J^T, J: w = x2 - x1, h = y2 - y1."""
    j = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [-1, 0, 1, 0], [0, -1, 0, 1]], np.float64)
    return np.einsum("ij,njk,lk->nil", j, np.asarray(c, np.float64), j)


# --------------------------------------------------------------------------- the evaluator


class DetectionCalibration:
    """Streaming detection-calibration evaluator; ``compute()`` equals :func:`detcal.evaluate`.

    Parameters
    ----------
    spec:
        :class:`~detcal.pipeline.spec.EvaluationSpec` (defaults when None), as for :func:`detcal.evaluate`.
    box_format:
        ``"xyxy"`` (torchvision), ``"xywh"`` (COCO) or ``"cxcywh"`` (DETR), for prediction and target boxes.
    categories:
        ``{id: name}``; predictions with another label are left out and counted, as the COCO loader
        does (``data.unknown_category=drop``); a target with another label is an error. None: the
        labels seen (named by their id). Default: those of ``ground_truth`` when given.
    ground_truth:
        A :class:`~detcal.types.Dataset` (e.g. ``detcal.data.coco.load_coco_instances(path)``): targets
        may then be left out, each prediction dict naming its ``image_id`` (detectron2's evaluation
        inputs carry no annotations).
    sync_on_compute:
        Under an initialised torch.distributed group with several ranks, ``compute()`` gathers every
        rank's state first (every rank gets the same result, equal to one process).
    duplicate_images:
        ``"error"`` (default) or ``"first"``: keep the first copy of an image given twice (e.g. the
        padding of ``DistributedSampler``), in arrival order (ranks in rank order).
    order:
        ``"image_id"`` (default): images in ascending id order at ``compute()``, so the result does not
        depend on update order, batch sizes, merges or ranks. ``"arrival"``: in the order they were given
        (ranks one after the other): fed in a results file's image order, the same arrays as the offline
        evaluation of that file (bitwise-equal numbers).
    """

    def __init__(
        self,
        spec: EvaluationSpec | None = None,
        *,
        box_format: str = "xyxy",
        categories: Mapping[int, str] | None = None,
        ground_truth: Dataset | None = None,
        sync_on_compute: bool = True,
        process_group: Any = None,
        duplicate_images: str = "error",
        order: str = "image_id",
    ) -> None:
        if box_format not in BOX_FORMATS:
            raise DetcalInputError(
                f"unknown box_format {box_format!r}; choose one of {BOX_FORMATS}", field="box_format"
            )
        if order not in ("image_id", "arrival"):
            raise DetcalInputError("order must be 'image_id' or 'arrival'", field="order")
        self.order = order
        if duplicate_images not in ("error", "first"):
            raise DetcalInputError("duplicate_images must be 'error' or 'first'", field="duplicate_images")
        self.spec = spec or EvaluationSpec()
        self.box_format = box_format
        self.ground_truth = ground_truth
        if categories is None and ground_truth is not None:
            categories = ground_truth.categories
        self.categories = None if categories is None else check_categories(categories)
        self._known = None if self.categories is None else np.fromiter(self.categories, np.int64)
        self.sync_on_compute = sync_on_compute
        self.process_group = process_group
        self.duplicate_images = duplicate_images
        self._gt_index: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.reset()

    # ----------------------------------------------------------------- state

    def reset(self) -> None:
        """Forget every update (the spec and options stay)."""
        self._chunks: list[dict[str, Any]] = []
        self._n_updates = 0
        self._auto_ids = 0  # images numbered in arrival order when targets carry no image_id
        self._cached: Any = None

    def __len__(self) -> int:
        """Images seen."""
        return int(sum(len(c["img_id"]) for c in self._chunks))

    @property
    def n_detections(self) -> int:
        return int(sum(len(c["det_score"]) for c in self._chunks))

    def state_bytes(self) -> dict[str, Any]:
        """Bytes of the kept arrays: total, per image / detection / GT column (``per_detection``: the
        detection columns' bytes per detection)."""
        by: dict[str, int] = {}
        for c in self._chunks:
            for k, v in c.items():
                if isinstance(v, np.ndarray):
                    by[k] = by.get(k, 0) + v.nbytes
        n_det = max(self.n_detections, 1)
        det = sum(v for k, v in by.items() if k.startswith("det_"))
        return {
            "total": int(sum(by.values())),
            "per_detection": det / n_det,
            "columns": by,
            "images": len(self),
            "detections": self.n_detections,
        }

    def settings(self) -> dict[str, Any]:
        """What a state depends on: the spec's fingerprint, box format, categories, duplicate and order rules
        (a state or an evaluator with other settings is refused by ``load_state_dict`` and ``merge``)."""
        return {
            "spec_fingerprint": spec_fingerprint(self.spec),
            "box_format": self.box_format,
            "categories": None if self.categories is None else {int(k): v for k, v in sorted(self.categories.items())},
            "duplicate_images": self.duplicate_images,
            "order": self.order,
        }

    def _refuse_other_settings(self, other: Mapping[str, Any], what: str) -> None:
        mine = self.settings()
        diff = [k for k in mine if k not in other or _norm_setting(k, other[k]) != mine[k]]
        if diff:
            k = diff[0]
            theirs = other.get(k, "nothing") if k != "categories" else _describe_categories(other.get(k))
            ours = mine[k] if k != "categories" else _describe_categories(mine[k])
            raise DetcalInputError(
                f"cannot {what}: {k} {theirs!r} there, {ours!r} here"
                + (f" (also different: {', '.join(diff[1:])})" if len(diff) > 1 else ""),
                field=k,
            )

    def merge(self, other: DetectionCalibration) -> DetectionCalibration:
        """Add ``other``'s state to this one (in place; returns self). Exact: the result is that of one
        evaluator that saw both streams (images in image-id order). Evaluators with different settings
        (:meth:`settings`) are refused with a sentence naming the setting."""
        if not isinstance(other, DetectionCalibration):
            raise TypeError(f"cannot merge {type(other).__name__} into DetectionCalibration")
        self._refuse_other_settings(other.settings(), "merge an evaluator")
        if (self._auto_ids and other._chunks) or (other._auto_ids and self._chunks):
            raise DetcalInputError(
                "cannot merge evaluators whose targets carry no image_id (give image_id)", field="image_id"
            )
        self._chunks.extend(other._chunks)
        self._n_updates += other._n_updates
        self._cached = None
        self._consolidate()
        return self

    def __add__(self, other: DetectionCalibration) -> DetectionCalibration:
        out = copy.copy(self)
        out._chunks = list(self._chunks)
        out._cached = None
        return out.merge(other)

    def state_dict(self) -> dict[str, Any]:
        """The state as plain numpy columns (for checkpoints and gathering), with the layout's
        ``schema_version`` and the :meth:`settings` it was made under (spec fingerprint, box format,
        categories, ...), which :meth:`load_state_dict` checks."""
        self._consolidate(force=True)
        c = self._chunks[0] if self._chunks else {}
        return {
            "schema_version": STATE_SCHEMA_VERSION,
            **self.settings(),
            "columns": dict(c),
            "n_updates": self._n_updates,
            "auto_ids": self._auto_ids,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (replaces the current state). A state of another schema version or
        made under other settings (an xywh state into an xyxy evaluator, other categories, another spec),
        or whose columns are missing or inconsistent, is refused with a sentence and nothing changes."""
        if not isinstance(state, Mapping):
            raise DetcalInputError(f"a state is a mapping, got {type(state).__name__}", field="state_dict")
        version = state.get("schema_version")
        if version != STATE_SCHEMA_VERSION:
            raise DetcalInputError(
                f"state schema_version {version!r} is not this evaluator's {STATE_SCHEMA_VERSION} (a state from "
                "another detcal version, or not a DetectionCalibration.state_dict())",
                field="schema_version",
            )
        self._refuse_other_settings(state, "load this state")
        self._load_columns(state.get("columns"), state.get("n_updates", 0), state.get("auto_ids", 0))

    def _load_columns(self, cols: Any, n_updates: Any, auto_ids: Any) -> None:
        """Replace the state by checked columns (``load_state_dict`` and the torchmetrics adapter)."""
        cols = _checked_columns(cols, self._known)
        n_up = exact_int(n_updates, "state", "n_updates", 0)
        auto = exact_int(auto_ids, "state", "auto_ids", 0)
        self.reset()
        if cols:
            self._chunks = [cols]
        self._n_updates, self._auto_ids = n_up, auto

    # ----------------------------------------------------------------- update

    def update(
        self,
        preds: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        targets: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
    ) -> None:
        """Add a batch: ``preds`` one dict per image (``boxes`` [N,4], ``scores`` [N] or class distributions
        [N, C] (columns: the categories in ascending id order; used by OCE's exact Brier score), ``labels`` [N],
        optional box uncertainty, :data:`UNCERTAINTY_KEYS`), ``targets`` one dict per image (``boxes``,
        ``labels``, optional ``iscrowd``, ``area``, ``image_id``, image size as ``width``/``height`` or
        ``orig_size``/``image_size`` (h, w)). numpy arrays or torch tensors on any device."""
        preds = [preds] if isinstance(preds, Mapping) else list(preds)
        if targets is not None:
            targets = [targets] if isinstance(targets, Mapping) else list(targets)
        if not preds:
            if targets:  # the targets' ground truth would silently vanish from recall
                raise DetcalInputError(
                    f"no prediction dicts but {len(targets)} target dicts: give one prediction dict per image "
                    "(with empty boxes, scores and labels for an image without detections)",
                    record=f"update {self._n_updates}",
                    field="preds",
                )
            return
        self._check_dicts(preds, "prediction")
        if targets is None:
            if self.ground_truth is None:
                raise DetcalInputError(
                    "give targets, or build the evaluator with ground_truth=<Dataset>", field="targets"
                )
            chunk = self._chunk_from_dataset(preds)
        else:
            self._check_dicts(targets, "target")
            if len(preds) != len(targets):
                raise DetcalInputError(
                    f"{len(preds)} prediction dicts but {len(targets)} target dicts",
                    record=f"update {self._n_updates}",
                    field="targets",
                )
            chunk = self._chunk_from_targets(targets)
        if not len(chunk["img_id"]):
            return
        n_det = self._check_pred_shapes(preds, chunk["img_id"])
        chunk.update(self._det_columns(preds, chunk["img_id"], n_det))
        chunk["img_ndet"] = n_det
        self._drop_unknown(chunk)
        before = list(self._chunks)
        self._chunks.append(chunk)
        try:  # an update whose optional columns disagree with the state's leaves the state as it was
            self._consolidate()
        except DetcalInputError:
            self._chunks = before
            raise
        self._n_updates += 1
        self._cached = None

    def _where(self, i: int, img: Any) -> str:
        return f"update {self._n_updates}, image {i} (image_id {img})"

    def _check_dicts(self, dicts: list[Any], what: str) -> None:
        for i, d in enumerate(dicts):
            if not isinstance(d, Mapping):
                raise DetcalInputError(
                    f"each {what} is a dict, got {type(d).__name__}", record=f"update {self._n_updates}, image {i}"
                )

    def _check_pred_shapes(self, preds: list[Mapping[str, Any]], ids: np.ndarray) -> np.ndarray:
        """Detections per image, after every prediction field's exact shape and dtype is checked (the
        input contract: nothing is flattened before this)."""
        n = np.zeros(len(preds), np.int64)
        for i, p in enumerate(preds):
            where = self._where(i, ids[i])
            for key in ("boxes", "scores", "labels"):
                if key not in p:
                    raise DetcalInputError(
                        f"missing from the prediction dict (its keys: {sorted(map(str, p))[:8]})",
                        record=where,
                        field=key,
                    )
            shape, _ = shape_kind(p["scores"])
            n[i] = check_field(p, "scores", shape[1:2] if len(shape) == 2 else (), None, where)
            check_field(p, "boxes", (4,), int(n[i]), where)
            check_field(p, "labels", (), int(n[i]), where)
            for key, tail in (*UNCERTAINTY_KEYS.items(), ("proposal", (4,)), ("delta_mean", (4,))):
                if key in p:
                    check_field(p, key, tail, int(n[i]), where)
        return n

    def _det_columns(self, preds: list[Mapping[str, Any]], ids: np.ndarray, n: np.ndarray) -> dict[str, Any]:
        """The detection columns of a batch (shapes already checked), with finite values and box extents."""
        out: dict[str, Any] = {}
        n_cls = _class_columns(preds, self._where, ids)
        try:
            out["det_box"] = _cat([p["boxes"] for p in preds], (4,), ints=False)
            if n_cls:  # class distributions [N, C]: the top score is the detection's score
                probs = _cat([p["scores"] for p in preds], (n_cls,), ints=False)
                out["det_class_probs"] = probs
                out["det_score"] = probs.max(axis=1) if len(probs) else np.zeros(0, probs.dtype)
            else:
                out["det_score"] = _cat([p["scores"] for p in preds], (), ints=False)
            labels = _cat([p["labels"] for p in preds], (), ints=True)
        except (ValueError, RuntimeError) as e:
            raise DetcalInputError(f"prediction arrays: {e}", record=f"update {self._n_updates}") from None
        out["det_label"] = _compact_ints(int_column(labels, n, ids, self._where, "labels"))
        self._check_values(out["det_box"], out["det_score"], n, ids, "predictions")
        kinds = {k for p in preds for k in UNCERTAINTY_KEYS if k in p}
        if len(kinds) > 1:
            raise DetcalInputError(
                f"predictions carry several uncertainty forms {sorted(kinds)}; give one",
                record=f"update {self._n_updates}",
                field=sorted(kinds)[1],
            )
        for key in kinds:
            have = [key in p for p in preds]
            if not all(have) and any(len(p["scores"]) for p, h in zip(preds, have) if not h):
                i = have.index(False)
                raise DetcalInputError(
                    "every prediction dict of a batch must carry it (or none)", record=self._where(i, ids[i]), field=key
                )
            parts = [p[key] for p in preds if key in p]
            a = _cat(parts, UNCERTAINTY_KEYS[key], ints=False)
            if len(a) != int(n.sum()):
                raise DetcalInputError(
                    f"{len(a)} rows but {int(n.sum())} detections", record=f"update {self._n_updates}", field=key
                )
            out["det_" + ("box_cov" if key == "box_cov_xyxy" else key)] = (
                _corner_to_xywh_cov(a) if key == "box_cov_xyxy" else a
            )
        if "delta_std" in kinds:
            for key in ("proposal", "delta_mean"):
                if any(key not in p for p in preds if "delta_std" in p):
                    raise DetcalInputError(
                        "delta records need proposal, delta_mean and delta_std",
                        record=f"update {self._n_updates}",
                        field=key,
                    )
                out["det_" + key] = _cat([p[key] for p in preds if "delta_std" in p], (4,), ints=False)
        return out

    def _check_values(
        self, box: np.ndarray, score: np.ndarray | None, n: np.ndarray, ids: np.ndarray, what: str
    ) -> None:
        """Finite boxes with a non-negative extent (and finite scores), or an error naming the image."""
        ok = np.isfinite(box).all(axis=1)
        if self.box_format == "xyxy":
            ok &= (box[:, 2] >= box[:, 0]) & (box[:, 3] >= box[:, 1])
        else:
            ok &= (box[:, 2] >= 0) & (box[:, 3] >= 0)
        field = "boxes"
        if score is not None and ok.all():
            ok, field = np.isfinite(score), "scores"
        if not ok.all():
            row = int(np.flatnonzero(~ok)[0])
            img = int(np.searchsorted(np.cumsum(n), row, side="right"))
            raise DetcalInputError(
                f"{what}: row {row - int(np.sum(n[:img]))} is not finite or has a negative extent ({self.box_format})",
                record=self._where(img, ids[img]),
                field=field,
            )

    def _image_ids(self, targets: list[Mapping[str, Any]]) -> np.ndarray:
        given = ["image_id" in t for t in targets]
        if (
            any(given) != all(given)
            or (any(given) and self._auto_ids)
            or (not any(given) and self._chunks and not self._auto_ids)
        ):
            raise DetcalInputError(
                "give image_id in every target dict or in none", record=f"update {self._n_updates}", field="image_id"
            )
        if all(given):
            n = self._n_updates
            return np.array(
                [exact_int(t["image_id"], f"update {n}, image {i}", "image_id") for i, t in enumerate(targets)],
                np.int64,
            )
        ids = np.arange(self._auto_ids, self._auto_ids + len(targets), dtype=np.int64)
        self._auto_ids += len(targets)
        return ids

    def _chunk_from_targets(self, targets: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Image and GT columns of a batch of target dicts (GT boxes kept as float64 xyxy)."""
        ids = self._image_ids(targets)
        ngt = np.zeros(len(targets), np.int64)
        for i, t in enumerate(targets):
            where = self._where(i, ids[i])
            for key in ("boxes", "labels"):
                if key not in t:
                    raise DetcalInputError("missing from the target dict", record=where, field=key)
            ngt[i] = check_field(t, "labels", (), None, where)
            check_field(t, "boxes", (4,), int(ngt[i]), where)
            for key in ("iscrowd", "area"):
                if t.get(key) is not None:
                    check_field(t, key, (), int(ngt[i]), where, kinds="fiub" if key == "iscrowd" else "fiu")
        wh = np.array([_hw(t) for t in targets], np.float64).reshape(-1, 2)
        raw = _cat([t["boxes"] for t in targets], (4,), ints=False)
        self._check_values(raw, None, ngt, ids, "targets")
        box, gwh = _xyxy(raw, self.box_format)
        c: dict[str, Any] = {
            "img_id": ids,
            "img_w": wh[:, 0],
            "img_h": wh[:, 1],
            "img_ngt": ngt,
            "gt_box": box,
            "gt_label": int_column(
                _cat([t["labels"] for t in targets], (), ints=True), ngt, ids, self._where, "labels"
            ),
        }
        crowd = [t.get("iscrowd") if t.get("iscrowd") is not None else np.zeros(len(t["labels"])) for t in targets]
        c["gt_crowd"] = _cat(crowd, (), ints=True).astype(bool)
        if gwh is not None:
            c["gt_wh"] = gwh
        has_area = ["area" in t for t in targets]
        if any(has_area):
            if not all(h or n == 0 for h, n in zip(has_area, ngt)):
                i = has_area.index(False)
                raise DetcalInputError(
                    "give area in every target dict or in none", record=self._where(i, ids[i]), field="area"
                )
            c["gt_area"] = _cat([t["area"] for t in targets if "area" in t], (), ints=False).astype(np.float64)
        self._check_gt_labels(c["gt_label"], ngt, ids)
        return c

    def _check_gt_labels(self, label: np.ndarray, ngt: np.ndarray, ids: np.ndarray) -> None:
        if self._known is None or len(label) == 0:
            return
        bad = np.flatnonzero(~np.isin(label, self._known))
        if len(bad):
            img = int(np.searchsorted(np.cumsum(ngt), bad[0], side="right"))
            raise DetcalInputError(
                f"ground-truth label {int(label[bad[0]])} is not among the categories",
                record=self._where(img, ids[img]),
                field="labels",
            )

    def _chunk_from_dataset(self, preds: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Image and GT columns of the images named by ``preds[i]["image_id"]``, from ``ground_truth``."""
        ds = self.ground_truth
        if any("image_id" not in p for p in preds):
            raise DetcalInputError(
                "without targets, every prediction dict names its image_id",
                record=f"update {self._n_updates}",
                field="image_id",
            )
        assert ds is not None  # update() asks for targets otherwise
        n = self._n_updates
        ids = np.array(
            [exact_int(p["image_id"], f"update {n}, image {i}", "image_id") for i, p in enumerate(preds)], np.int64
        )
        row = ds.images.index_of(ids)
        if (row < 0).any():
            i = int(np.flatnonzero(row < 0)[0])
            raise DetcalInputError(
                "image id not in the ground truth",
                file=ds.source or None,
                record=self._where(i, ids[i]),
                field="image_id",
            )
        if self._gt_index is None:
            order = np.argsort(ds.gt.image_id, kind="stable")
            self._gt_index = (order, ds.gt.image_id[order], np.zeros(0))
        order, sorted_img, _ = self._gt_index
        lo, hi = np.searchsorted(sorted_img, ids, "left"), np.searchsorted(sorted_img, ids, "right")
        cnt = hi - lo
        rows = order[np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt - lo, cnt)]
        gt = ds.gt
        c: dict[str, Any] = {
            "img_id": ids,
            "img_w": ds.images.width[row],
            "img_h": ds.images.height[row],
            "img_ngt": cnt.astype(np.int64),
            "gt_box": gt.box[rows],
            "gt_label": gt.category[rows],
            "gt_crowd": gt.iscrowd[rows],
            "gt_ignore": gt.ignore[rows],
        }
        if gt.wh is not None:
            c["gt_wh"] = gt.wh[rows]
        if gt.area is not None:
            c["gt_area"] = gt.area[rows]
        return c

    def _drop_unknown(self, c: dict[str, Any]) -> None:
        """Leave out predictions whose label is not a category (counted, as the COCO loader does)."""
        c["dropped"] = 0
        if self._known is None:
            return
        keep = np.isin(c["det_label"], self._known)
        if keep.all():
            return
        per_img = np.repeat(np.arange(len(c["img_ndet"])), c["img_ndet"])
        c["img_ndet"] = np.bincount(per_img[keep], minlength=len(c["img_ndet"])).astype(np.int64)
        c["dropped"] = int((~keep).sum())
        for k in [k for k in c if k.startswith("det_")]:
            c[k] = c[k][keep]

    def _consolidate(self, force: bool = False) -> None:
        """Amortised appends: the newest chunks are concatenated while the one before is no larger than
        the newest (a binary counter: O(log n) chunks, each row copied O(log n) times, so the cost of an
        update per image stays flat as the state grows); ``force``: into one chunk."""
        ch = self._chunks
        if force:
            if len(ch) > 1:
                self._chunks = [concat_chunks(ch)]
            return
        while len(ch) > 1 and _chunk_rows(ch[-2]) <= _chunk_rows(ch[-1]):
            ch[-2:] = [concat_chunks(ch[-2:])]

    # ----------------------------------------------------------------- compute

    def _gathered(self) -> list[dict[str, Any]]:
        """This rank's chunks, or (``sync_on_compute`` under torch.distributed with several ranks) every
        rank's chunks in rank order (the compact columns, as the distributed evaluation gathers them)."""
        self._consolidate(force=True)
        mine = self._chunks
        dist = sys.modules.get("torch.distributed")
        if not (self.sync_on_compute and dist is not None and dist.is_available() and dist.is_initialized()):
            return mine
        if dist.get_world_size(self.process_group) <= 1:
            return mine
        if self._auto_ids:
            raise DetcalInputError(
                "under torch.distributed the target dicts must carry image_id (images are numbered per rank otherwise)",
                field="image_id",
            )
        if self.process_group is None:
            parts = gather_all(mine)
        else:
            parts = [None] * dist.get_world_size(self.process_group)
            dist.all_gather_object(parts, mine, group=self.process_group)
        return [c for part in parts for c in part]

    def loaded(self) -> Any:
        """The state as the pipeline's :class:`~detcal.pipeline.sources.LoadedData` (image-id order)."""
        chunks = self._gathered()
        if not chunks:
            raise DetcalInputError("nothing to evaluate: update() was never called", field="update")
        return _loaded(
            concat_chunks(chunks),
            self.box_format,
            self.categories,
            self.duplicate_images,
            self.order == "arrival" or bool(self._auto_ids),
            self._n_updates,
        )

    def compute(self) -> Any:
        """The :class:`~detcal.pipeline.result.EvaluationResult` of :func:`detcal.evaluate` on the images
        seen (every rank's, with ``sync_on_compute``), with this evaluator's spec."""
        if self._cached is None:
            self._cached = evaluate(self.loaded(), spec=self.spec)
        return self._cached


# --------------------------------------------------------------------------- checked state


def _norm_setting(key: str, v: Any) -> Any:
    """A setting as :meth:`DetectionCalibration.settings` writes it (category ids as ints: a state that
    went through JSON has string keys)."""
    if key == "categories" and isinstance(v, Mapping):
        try:
            return {int(k): n for k, n in sorted(v.items(), key=lambda kv: int(kv[0]))}
        except (TypeError, ValueError):
            return v
    return v


def _describe_categories(c: Any) -> str:
    if not isinstance(c, Mapping):
        return "the labels seen" if c is None else repr(c)[:60]
    ids = sorted(c, key=str)
    return f"{len(ids)} categories ({', '.join(map(str, ids[:5]))}{', ...' if len(ids) > 5 else ''})"


_TAILS = {"det_box": (4,), "gt_box": (4,), "gt_wh": (2,), "det_box_std": (4,), "det_box_cov": (4, 4)}
_TAILS |= {"det_corner_cov": (2, 2, 2), "det_delta_std": (4,), "det_delta_mean": (4,), "det_proposal": (4,)}


def _checked_columns(cols: Any, known: np.ndarray | None) -> dict[str, Any]:
    """A state's columns, checked: the required ones present, row counts agreeing with the per-image
    counts, per-row shapes, and labels among the evaluator's categories; an error sentence otherwise."""
    if cols is None or (isinstance(cols, Mapping) and not cols):
        return {}
    if not isinstance(cols, Mapping):
        raise DetcalInputError(f"state columns are a mapping, got {type(cols).__name__}", field="columns")
    missing = [k for k in _STATE_REQUIRED if k not in cols]
    if missing:
        raise DetcalInputError(f"the state lacks the columns {missing} (truncated state?)", field=missing[0])
    out: dict[str, Any] = {k: np.asarray(v) for k, v in cols.items() if k != "dropped"}
    out["dropped"] = exact_int(cols.get("dropped", 0), "state", "dropped", 0)
    n_img = len(out["img_id"])
    rows = {"img": n_img, "det": int(out["img_ndet"].sum()), "gt": int(out["img_ngt"].sum())}
    for k, v in out.items():
        if k == "dropped":
            continue
        want = (rows.get(k[: k.index("_")], -1),) + _TAILS.get(k, ())
        if k.startswith("det_class_probs") and v.ndim == 2:
            want = (rows["det"], v.shape[1])
        if v.shape != want:
            raise DetcalInputError(
                f"state column of shape {list(v.shape)}, expected {list(want)} (truncated or mixed state?)", field=k
            )
    if known is not None:
        for k in ("det_label", "gt_label"):
            bad = ~np.isin(out[k], known)
            if bad.any():
                raise DetcalInputError(
                    f"the state holds label {int(out[k][bad][0])}, not among this evaluator's categories", field=k
                )
    return out


# --------------------------------------------------------------------------- state -> records


def _chunk_rows(c: dict[str, Any]) -> int:
    return len(c["img_id"]) + len(c["det_score"]) + len(c["gt_label"])


def concat_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """One chunk from several (optional columns must be present wherever there are rows)."""
    if len(chunks) == 1:
        return chunks[0]
    keys = sorted({k for c in chunks for k in c if isinstance(c[k], np.ndarray)})
    out: dict[str, Any] = {"dropped": int(sum(c.get("dropped", 0) for c in chunks))}
    for k in keys:
        rows = "img_id" if k.startswith("img_") else ("det_score" if k.startswith("det_") else "gt_label")
        missing = [c for c in chunks if k not in c and len(c[rows])]
        if missing:
            what = k[4:]
            raise DetcalInputError(f"some updates give {what} and others do not: give it always or never", field=what)
        out[k] = np.concatenate([c[k] for c in chunks if k in c])
    return out


def _blocks(counts: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """Rows of the per-image blocks (``counts`` rows each, in order) taken in the image order ``perm``."""
    starts = (np.cumsum(counts) - counts)[perm]
    c = counts[perm]
    return np.arange(int(c.sum()), dtype=np.int64) - np.repeat(np.cumsum(c) - c - starts, c)


def _image_order(ids: np.ndarray, duplicates: str, arrival: bool) -> np.ndarray:
    """Images in ascending id order (stable), or in arrival order; a repeated id is an error or its
    first copy is kept."""
    perm = np.argsort(ids, kind="stable")
    s = ids[perm]
    dup = np.concatenate([[False], s[1:] == s[:-1]])
    if dup.any():
        if duplicates == "error":
            raise DetcalInputError(
                f"image {int(s[np.flatnonzero(dup)[0]])} was given twice (set "
                "duplicate_images='first' to keep its first copy, e.g. with DistributedSampler "
                "padding)",
                record=f"image_id {int(s[np.flatnonzero(dup)[0]])}",
                field="image_id",
            )
        perm = perm[~dup]
    return np.sort(perm) if arrival else perm


def _loaded(
    c: dict[str, Any], fmt: str, categories: dict[int, str] | None, duplicates: str, arrival: bool, n_updates: int
) -> Any:
    """:class:`LoadedData` from one chunk: images in id order, detections and GT in per-image blocks."""
    perm = _image_order(c["img_id"], duplicates, arrival)
    ids = c["img_id"][perm]
    drows, grows = _blocks(c["img_ndet"], perm), _blocks(c["img_ngt"], perm)
    images = Images(id=ids, width=c["img_w"][perm], height=c["img_h"][perm])
    g_img = np.repeat(ids, c["img_ngt"][perm])
    gt = GroundTruth(
        image_id=g_img,
        box=c["gt_box"][grows],
        category=c["gt_label"][grows],
        iscrowd=c["gt_crowd"][grows],
        wh=c["gt_wh"][grows] if "gt_wh" in c else None,
        area=c["gt_area"][grows] if "gt_area" in c else None,
        **({"ignore": c["gt_ignore"][grows]} if "gt_ignore" in c else {}),
    )
    box, wh = _xyxy(c["det_box"][drows], fmt)
    unc = {k: np.asarray(c["det_" + k][drows], np.float64) for k in _DET_UNC if "det_" + k in c}
    if "det_proposal" in c:
        unc["proposal"] = _xyxy(c["det_proposal"][drows], fmt)[0]
    probs = np.asarray(c["det_class_probs"][drows], np.float64) if "det_class_probs" in c else None
    dets = Detections(
        image_id=np.repeat(ids, c["img_ndet"][perm]),
        box=box,
        score=np.asarray(c["det_score"][drows], np.float64),
        category=c["det_label"][drows],
        wh=wh,
        class_probs=probs,
        **unc,
    )
    if categories is None:
        seen = np.unique(np.concatenate([gt.category, dets.category]))
        categories = {int(k): str(int(k)) for k in seen}
    if probs is not None and probs.shape[1] != len(categories):
        raise DetcalInputError(
            f"scores have {probs.shape[1]} class columns but there are {len(categories)} categories: the columns "
            "are the categories in ascending id order (give categories= or ground_truth= to name them all)",
            field="scores",
        )
    ds = Dataset(images=images, gt=gt, categories=dict(categories), source="stream")
    dropped = {"unknown_category": int(c.get("dropped", 0))} if c.get("dropped") else {}
    prov = {
        "source": "stream",
        "updates": int(n_updates),
        "order": "arrival" if arrival else "image_id",
        "duplicate_images": duplicates,
        "dropped_duplicates": int(len(c["img_id"]) - len(perm)),
    }
    return LoadedData(ds, dets, None, prov, dropped)


def from_records(
    dataset: Dataset,
    detections: Detections,
    *,
    batch: int = 1,
    image_order: Iterable[int] | None = None,
    box_format: str = "xyxy",
) -> Iterable[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(preds, targets) batches of ``batch`` images from offline records, in ``image_order`` (image rows;
    default the dataset's order): what a data loader and a model would hand to ``update`` (tests,
    benchmarks). ``box_format="xywh"`` gives the records' input (w, h) where they keep it."""
    d_order = np.argsort(detections.image_id, kind="stable")
    d_sorted = detections.image_id[d_order]
    g_order = np.argsort(dataset.gt.image_id, kind="stable")
    g_sorted = dataset.gt.image_id[g_order]
    rows = list(range(len(dataset.images))) if image_order is None else list(image_order)

    def fmt(box: np.ndarray, wh: np.ndarray | None) -> np.ndarray:
        if box_format == "xyxy":
            return box
        if box_format == "xywh":
            return np.concatenate([box[:, :2], wh if wh is not None else box[:, 2:] - box[:, :2]], axis=1)
        return xyxy_to_cxcywh(box)

    for lo in range(0, len(rows), batch):
        preds, targets = [], []
        for r in rows[lo : lo + batch]:
            img = int(dataset.images.id[r])
            d = d_order[np.searchsorted(d_sorted, img, "left") : np.searchsorted(d_sorted, img, "right")]
            g = g_order[np.searchsorted(g_sorted, img, "left") : np.searchsorted(g_sorted, img, "right")]
            p = {
                "boxes": fmt(detections.box[d], None if detections.wh is None else detections.wh[d]),
                "scores": detections.score[d],
                "labels": detections.category[d],
            }
            for k in _DET_UNC:
                if getattr(detections, k) is not None:
                    p[k] = getattr(detections, k)[d]
            if detections.proposal is not None:
                p["proposal"] = fmt(detections.proposal[d], None)
            gt = dataset.gt
            t = {
                "boxes": fmt(gt.box[g], None if gt.wh is None else gt.wh[g]),
                "labels": gt.category[g],
                "iscrowd": gt.iscrowd[g],
                "image_id": img,
                "width": dataset.images.width[r],
                "height": dataset.images.height[r],
            }
            if gt.area is not None:
                t["area"] = gt.area[g]
            preds.append(p)
            targets.append(t)
        yield preds, targets
