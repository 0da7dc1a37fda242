"""Typed results: the blocks of a run and the document metrics.json serialises.

A run's results are a :class:`Results`: the provenance header, then one entry
per section of metrics.json. The sections that hold metrics are typed blocks
(:class:`ConfidenceBlock` per IoU threshold, :class:`RegressionBlock`,
:class:`AccuracyBlock`, :class:`LocalisationBlock`, :class:`OCEBlock`,
:class:`UQDetrBlock`, :class:`DiagnosticsBlock`, calibrate's
:class:`CalibratorsBlock` and :class:`CalibrationEvaluationBlock`) whose leaves
are :class:`~detcal.core.types.MetricResult`; a section that was not computed is
a :class:`~detcal.core.types.Skipped` in place of its block. The other sections
(headline, per-class rows, worst detections, a study's table, ...) stay plain
JSON values.

``Results.from_json(content)`` reads the content of a metrics.json (schema
``detcal.metrics/3``, or ``/2`` through :func:`upgrade_v2`) and
``Results.to_json()`` gives it back, key for key: metrics.json is the
serialisation of these blocks (``detcal.reports.results_json`` writes it as
strict JSON). This module is plain Python and numpy, below every layer that
computes or renders results, so the pipeline and the reports share it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

from detcal.core.types import MetricResult, Skipped

__all__ = [
    "SCHEMA_V2",
    "SCHEMA_V3",
    "SKIP",
    "Block",
    "ConfidenceBlock",
    "RegressionBlock",
    "AccuracyBlock",
    "LocalisationBlock",
    "OCEBlock",
    "UQDetrBlock",
    "DiagnosticsBlock",
    "CalibratorsBlock",
    "CalibrationEvaluationBlock",
    "Results",
    "as_results",
    "metric_from_json",
    "metric_to_json",
    "shown",
    "skipped_of",
    "is_description",
    "upgrade_v2",
]

SCHEMA_V2 = "detcal.metrics/2"
SCHEMA_V3 = "detcal.metrics/3"
SKIP = "skipped"
"""The key of "not computed" in metrics.json: a reason (a skipped block) or a map key -> reason."""

_LEAF_KEYS = frozenset(("name", "value", "variant", "params", "table", "extra", "ci", "ci_level"))


def is_description(key: object) -> bool:
    """True for the keys of metrics.json that describe rather than hold results: ``_sample``,
    ``_areas``, ... and the ``skipped`` reasons (tables and generic listings leave them out)."""
    return str(key).startswith("_") or key == SKIP


def skipped_of(node: Any) -> Skipped | None:
    """The :class:`Skipped` a JSON node stands for (``{"skipped": "<reason>"}``), or None."""
    if isinstance(node, Skipped):
        return node
    if isinstance(node, Mapping) and len(node) == 1 and isinstance(node.get(SKIP), str):
        return Skipped(node[SKIP])
    return None


def _floats(v: Any) -> Any:
    """A JSON list with nulls as a float array (NaN where null); any other value as it is."""
    if isinstance(v, list) and any(x is None for x in v) and all(x is None or isinstance(x, (int, float)) for x in v):
        return np.array([np.nan if x is None else x for x in v], dtype=float)
    return v


def _is_leaf(node: Any) -> bool:
    return isinstance(node, Mapping) and _LEAF_KEYS <= set(node) and set(node) <= _LEAF_KEYS | {SKIP}


def metric_from_json(d: Mapping[str, Any]) -> MetricResult:
    """A :class:`MetricResult` from its metrics.json form (null as NaN, the value's reason as ``skipped``)."""
    reasons = d.get(SKIP) if isinstance(d.get(SKIP), Mapping) else {}
    why = (reasons or {}).get("value")
    value = d["value"]
    ci = d.get("ci")
    return MetricResult(
        name=str(d["name"]),
        value=float("nan") if value is None else float(value),
        variant=str(d.get("variant") or ""),
        params=dict(d.get("params") or {}),
        table={str(k): _floats(v) for k, v in (d.get("table") or {}).items()},
        extra=dict(d.get("extra") or {}),
        ci=None if ci is None else (_nan(ci[0]), _nan(ci[1])),
        ci_level=d.get("ci_level"),
        skipped=Skipped(str(why)) if why is not None else None,
    )


def _nan(x: Any) -> float:
    return float("nan") if x is None else float(x)


def shown(node: Any) -> Any:
    """What a page shows for ``node``: a leaf's value as metrics.json writes it (None where undefined),
    a column of a leaf's table as a list (None where undefined); anything else as it is."""
    if isinstance(node, MetricResult):
        node = node.value
    if isinstance(node, np.ndarray):
        return [shown(float(x)) if node.dtype.kind == "f" else x for x in node.tolist()]
    if isinstance(node, float) and not math.isfinite(node):
        return None
    return node


def metric_to_json(m: MetricResult) -> dict[str, Any]:
    """The metrics.json form of a leaf (plain Python; NaN stays NaN for the strict writer)."""
    out = m.to_dict()
    if isinstance(m.value, float) and math.isinf(m.value):
        out.pop(SKIP, None)  # the writer names an infinite value itself
    return out


def _read(node: Any) -> Any:
    """Leaves (dicts with a MetricResult's keys) as MetricResult, everywhere under ``node``."""
    if _is_leaf(node):
        try:
            return metric_from_json(node)
        except (TypeError, ValueError, IndexError, KeyError):  # an edited leaf: kept as it is
            return dict(node)
    if isinstance(node, Mapping):
        return {k: _read(v) for k, v in node.items()}
    return node


def _write(node: Any) -> Any:
    if isinstance(node, MetricResult):
        return metric_to_json(node)
    if isinstance(node, Block):
        return node.to_json()
    if isinstance(node, Skipped):
        return node.to_dict()
    if isinstance(node, Mapping):
        return {k: _write(v) for k, v in node.items()}
    if dataclasses.is_dataclass(node) and not isinstance(node, type) and hasattr(node, "to_dict"):
        return node.to_dict()  # another record of the metrics (a paired difference, ...)
    return node


B = TypeVar("B", bound="Block")


@dataclass
class Block:
    """A section of results: its entries in metrics.json's order, leaves as :class:`MetricResult`."""

    entries: dict[str, Any] = field(default_factory=dict)
    SECTION: ClassVar[str] = ""

    @classmethod
    def from_json(cls: type[B], node: Any) -> B | Skipped:
        """The block of a metrics.json node, or the :class:`Skipped` written in its place."""
        sk = skipped_of(node)
        if sk is not None:
            return sk
        if not isinstance(node, Mapping):
            raise ValueError(f"metrics.json: {cls.SECTION or cls.__name__} is not an object")
        return cls(_read(node))

    def to_json(self) -> dict[str, Any]:
        return _write(self.entries)

    def to_dict(self) -> dict[str, Any]:
        """The same as :meth:`to_json` (what the strict writer calls)."""
        return self.to_json()

    def get(self, key: str, default: Any = None) -> Any:
        return self.entries.get(key, default)

    def __getitem__(self, key: str) -> Any:
        return self.entries[key]

    def __contains__(self, key: object) -> bool:
        return key in self.entries

    def metric(self, key: str) -> MetricResult | None:
        """The entry ``key`` when it is one metric, else None."""
        v = self.entries.get(key)
        return v if isinstance(v, MetricResult) else None

    def metrics(self) -> dict[str, MetricResult]:
        """The entries that are one metric each, by name."""
        return {k: v for k, v in self.entries.items() if isinstance(v, MetricResult)}

    def public(self) -> dict[str, Any]:
        """The entries without the ``_``-prefixed descriptions (``_sample``, ``_areas``)."""
        return {k: v for k, v in self.entries.items() if not is_description(k)}


@dataclass
class ConfidenceBlock(Block):
    """Confidence calibration at one IoU threshold: ``_sample`` (n, n_matched, ...) and one metric per name."""

    SECTION: ClassVar[str] = "confidence"

    @property
    def sample(self) -> dict[str, Any]:
        return dict(self.entries.get("_sample") or {})


@dataclass
class RegressionBlock(Block):
    """Box-uncertainty calibration: ``_sample`` (space, n, IoU) and per metric one result per coordinate."""

    SECTION: ClassVar[str] = "regression"

    @property
    def sample(self) -> dict[str, Any]:
        return dict(self.entries.get("_sample") or {})

    def per_coordinate(self) -> dict[str, dict[str, Any]]:
        """``{metric: {coordinate: MetricResult}}`` (the other entries left out)."""
        return {k: v for k, v in self.public().items() if isinstance(v, dict)}


@dataclass
class AccuracyBlock(Block):
    """Accuracy beside calibration: COCO AP/AR (leaves), or the protocol's (KITTI, VOC, LVIS, Open Images) tables."""

    SECTION: ClassVar[str] = "accuracy"
    PROTOCOL_KEYS: ClassVar[tuple[str, ...]] = (
        "kitti_ap",
        "voc_ap",
        "lvis_ap",
        "openimages_ap",
        "calibration_by_frequency",
    )

    def protocol(self) -> dict[str, Any]:
        """The protocol-specific entries present (``kitti_ap``, ``voc_ap``, ``lvis_ap``, ...)."""
        return {k: self.entries[k] for k in self.PROTOCOL_KEYS if self.entries.get(k)}


@dataclass
class LocalisationBlock(Block):
    """LRP, oLRP, LaECE, LaACE (leaves), their thresholds and choices; ``pdq`` may be a :class:`Skipped`."""

    SECTION: ClassVar[str] = "localisation"

    @classmethod
    def from_json(cls, node: Any) -> LocalisationBlock | Skipped:
        blk = super().from_json(node)
        if isinstance(blk, LocalisationBlock) and skipped_of(blk.entries.get("pdq")) is not None:
            blk.entries["pdq"] = skipped_of(blk.entries["pdq"])
        return blk


@dataclass
class OCEBlock(Block):
    """Object-level calibration: ``oce`` (leaf), ``by_aggregation``, ``not_seen``, ``image_reliability``."""

    SECTION: ClassVar[str] = "oce"


@dataclass
class UQDetrBlock(Block):
    """D-ECE, LaECE and LRP with uq-detr's conventions (leaves)."""

    SECTION: ClassVar[str] = "uq_detr"


@dataclass
class DiagnosticsBlock(Block):
    """Why it is miscalibrated: TIDE, calibration by error type, operating points, confusion, findings."""

    SECTION: ClassVar[str] = "diagnostics"


@dataclass
class CalibratorsBlock(Block):
    """detcal-calibrate's fitted calibrators per role; a role not configured is a :class:`Skipped`."""

    SECTION: ClassVar[str] = "calibrators"

    @classmethod
    def from_json(cls, node: Any) -> CalibratorsBlock | Skipped:
        blk = super().from_json(node)
        if isinstance(blk, CalibratorsBlock):
            for role, v in blk.entries.items():
                if skipped_of(v) is not None:
                    blk.entries[role] = skipped_of(v)
        return blk

    def role(self, name: str) -> Any:
        """The fitted calibrator of ``name`` (``confidence``, ``regression``), its :class:`Skipped`, or None."""
        return self.entries.get(name)

    def fitted(self) -> dict[str, str]:
        """``{role: calibrator name}`` of the roles that were fitted, in the run's order."""
        return {
            str(k): v["name"]
            for k, v in self.entries.items()
            if isinstance(v, Mapping) and isinstance(v.get("name"), str)
        }


@dataclass
class CalibrationEvaluationBlock(Block):
    """detcal-calibrate's evaluation: per part (``confidence``, ``regression``) each metric ``before`` and
    ``after`` (leaves; the box part also per coordinate and as coordinate means under ``_mean``) and the
    paired ``change`` (after minus before with its interval, as metrics.json writes it)."""

    SECTION: ClassVar[str] = "evaluation"
    PARTS: ClassVar[tuple[str, ...]] = ("confidence", "regression")

    @property
    def sample(self) -> dict[str, Any]:
        """The evaluation sample: ``n_confidence``, ``n_matched``, ``iou_threshold``."""
        return dict(self.entries.get("_sample") or {})

    def stage(self, part: str, stage: str) -> dict[str, Any]:
        """``part``'s entries at ``stage`` (``before``, ``after``, ``change``); ``{}`` when absent or skipped."""
        node = self.entries.get(part)
        v = node.get(stage) if isinstance(node, Mapping) else None
        return v if isinstance(v, dict) and skipped_of(v) is None else {}

    def before(self, part: str) -> dict[str, Any]:
        """``part``'s metrics before calibration (``{}`` when the part was not evaluated)."""
        return self.stage(part, "before")

    def after(self, part: str) -> dict[str, Any]:
        """``part``'s metrics after calibration (``{}`` when the part was not evaluated)."""
        return self.stage(part, "after")

    def change(self, part: str) -> dict[str, Any]:
        """``part``'s paired changes by metric (``{}`` when none, e.g. ``bootstrap.n=0``)."""
        return self.stage(part, "change")

    def means(self, part: str, stage: str) -> dict[str, Any]:
        """The box part's coordinate means (``_mean``) at ``stage`` (``before`` / ``after``)."""
        v = self.stage(part, stage).get("_mean")
        return v if isinstance(v, dict) else {}


SECTIONS: dict[str, type[Block]] = {
    b.SECTION: b
    for b in (
        RegressionBlock,
        AccuracyBlock,
        LocalisationBlock,
        OCEBlock,
        UQDetrBlock,
        DiagnosticsBlock,
        CalibratorsBlock,
        CalibrationEvaluationBlock,
    )
}
"""The typed sections of metrics.json (``confidence`` is one :class:`ConfidenceBlock` per IoU label)."""


def _section(key: str, node: Any) -> Any:
    sk = skipped_of(node)
    if sk is not None or not isinstance(node, Mapping):
        return sk or node  # an edited or partial metrics.json: kept as it is
    if key == "confidence":
        return {lbl: ConfidenceBlock.from_json(blk) if isinstance(blk, Mapping) else blk for lbl, blk in node.items()}
    if key in SECTIONS:
        return SECTIONS[key].from_json(node)
    return node


@dataclass
class Results:
    """The results of one run: ``sections`` in metrics.json's order (typed blocks where typed, else plain JSON)."""

    sections: dict[str, Any]
    content: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The metrics.json content (/3) the blocks were read from: what the renderers print numbers from."""

    @classmethod
    def from_json(cls, content: Mapping[str, Any], *, lenient: bool = False) -> Results:
        """The results of a metrics.json content of schema ``detcal.metrics/3`` or ``/2``.

        ``lenient``: a content of another or no schema is read as /3 (the report of an edited or
        partial metrics.json draws what it can) instead of refused."""
        version = content.get("schema_version")
        if version == SCHEMA_V2:
            content = upgrade_v2(content)
        elif version != SCHEMA_V3 and not lenient:
            raise ValueError(f"metrics.json: schema_version {version!r} is not {SCHEMA_V3} or {SCHEMA_V2}")
        return cls({str(k): _section(str(k), v) for k, v in content.items()}, dict(content))

    def to_json(self) -> dict[str, Any]:
        """The metrics.json content (plain Python; NaN for the strict writer to write as null with its reason)."""
        return {k: _write(v) for k, v in self.sections.items()}

    def __getitem__(self, key: str) -> Any:
        return self.sections[key]

    def __contains__(self, key: object) -> bool:
        return key in self.sections

    def __iter__(self) -> Iterator[str]:
        return iter(self.sections)

    def get(self, key: str, default: Any = None) -> Any:
        return self.sections.get(key, default)

    @property
    def command(self) -> str:
        return str(self.sections.get("command") or "detcal")

    @property
    def confidence(self) -> dict[str, ConfidenceBlock | Skipped]:
        c = self.sections.get("confidence")
        return c if isinstance(c, dict) else {}

    def block(self, key: str, kind: type[B]) -> B | Skipped | None:
        """The section ``key`` when it is a ``kind`` or a :class:`Skipped`; None when absent or of another kind."""
        v = self.sections.get(key)
        return v if isinstance(v, (kind, Skipped)) else None

    @property
    def regression(self) -> RegressionBlock | Skipped | None:
        return self.block("regression", RegressionBlock)

    @property
    def accuracy(self) -> AccuracyBlock | Skipped | None:
        return self.block("accuracy", AccuracyBlock)

    @property
    def localisation(self) -> LocalisationBlock | Skipped | None:
        return self.block("localisation", LocalisationBlock)

    @property
    def oce(self) -> OCEBlock | Skipped | None:
        return self.block("oce", OCEBlock)

    @property
    def uq_detr(self) -> UQDetrBlock | Skipped | None:
        return self.block("uq_detr", UQDetrBlock)

    @property
    def diagnostics(self) -> DiagnosticsBlock | Skipped | None:
        return self.block("diagnostics", DiagnosticsBlock)

    @property
    def calibrators(self) -> CalibratorsBlock | Skipped | None:
        return self.block("calibrators", CalibratorsBlock)

    @property
    def evaluation(self) -> CalibrationEvaluationBlock | Skipped | None:
        return self.block("evaluation", CalibrationEvaluationBlock)

    def skipped(self) -> dict[str, Skipped]:
        """Every section (and confidence threshold) not computed, with its reason."""
        out = {k: v for k, v in self.sections.items() if isinstance(v, Skipped)}
        out.update({f"confidence/{k}": v for k, v in self.confidence.items() if isinstance(v, Skipped)})
        return out


def as_results(obj: Results | Mapping[str, Any]) -> Results:
    """``obj`` when it is :class:`Results`, else a metrics.json content read leniently (/3, /2, or an
    edited or partial content drawn as far as it goes)."""
    return obj if isinstance(obj, Results) else Results.from_json(obj, lenient=True)


def _upgrade_node(node: Any) -> Any:
    """One /2 node in the /3 spelling of "not computed" (see :func:`upgrade_v2`)."""
    if isinstance(node, list):
        return [_upgrade_node(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    if set(node) == {"_skipped"}:
        return {SKIP: node["_skipped"]}
    sample = node.get("_sample")
    if isinstance(sample, Mapping) and "skipped" in sample:
        return {SKIP: sample["skipped"]}
    out: dict[str, Any] = {}
    reasons: dict[str, Any] = dict(node["_null"]) if isinstance(node.get("_null"), Mapping) else {}
    for k, v in node.items():
        if k == "_null":
            continue
        if k.endswith("_skipped") and k != "_skipped" and isinstance(v, str) and k[: -len("_skipped")] not in node:
            out[k[: -len("_skipped")]] = {SKIP: v}  # calibrate's confidence_skipped / regression_skipped
            continue
        out[k] = _upgrade_node(v)
    if _LEAF_KEYS <= set(out) and out.get("value") is None and isinstance(out.get("extra"), Mapping):
        note = out["extra"].get("note")
        if note:  # the metric's own reason replaces the generic one, as /3 writes it
            out["extra"] = {k: v for k, v in out["extra"].items() if k != "note"}
            reasons["value"] = str(note)
    if reasons:
        out[SKIP] = reasons
    return out


def upgrade_v2(content: Mapping[str, Any]) -> dict[str, Any]:
    """A ``detcal.metrics/2`` content in the ``/3`` layout; every number stays where it was.

    /2 wrote "not computed" four ways; /3 writes :class:`Skipped` one way:

    * ``{"_skipped": reason}`` (a section) -> ``{"skipped": reason}``;
    * ``{"_sample": {"n": 0, "skipped": reason}}`` (a confidence threshold, the box-uncertainty block)
      -> ``{"skipped": reason}``;
    * ``"_null": {key: reason}`` beside a null -> ``"skipped": {key: reason}``;
    * ``extra["note"]`` of a metric whose value is null -> ``"skipped": {"value": note}``;
    * calibrate's ``calibrators.<role>_skipped: reason`` -> ``calibrators.<role>: {"skipped": reason}``.
    """
    out = {k: _upgrade_node(v) for k, v in content.items()}
    out["schema_version"] = SCHEMA_V3
    return out
