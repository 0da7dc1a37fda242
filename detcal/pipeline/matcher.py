"""The matching stage of a pipeline: a :class:`~detcal.pipeline.spec.MatchingSpec` applied to loaded data.

Below :mod:`detcal.pipeline.parallel` (which runs it over image shards) and
:mod:`detcal.pipeline.evaluation` (which chooses how to run it).
"""

from __future__ import annotations

from collections.abc import Sequence

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, MatchResult
from detcal.matching.engine import match
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import MatchingSpec

__all__ = ["run_match"]


def run_match(
    m: MatchingSpec, dets: Detections, data: LoadedData, thresholds: Sequence[float] | None = None
) -> MatchResult:
    """:func:`detcal.matching.match` of ``dets`` against ``data``'s ground truth as ``m`` says
    (``thresholds``: instead of ``m``'s, e.g. with the regression sample's IoU added)."""
    if m.mode == "kitti" and data.kitti is None:
        raise DetcalInputError(
            "matching.mode=kitti needs KITTI data (data=kitti or data.format=kitti)", field="matching.mode"
        )
    ds = data.dataset
    th = m.thresholds() if thresholds is None else thresholds
    if m.mode == "netcal_example":
        from detcal.matching.netcal_example import match_netcal_example  # lazy: that format only

        if isinstance(th, str):
            raise DetcalInputError(
                "matching.mode=netcal_example needs IoU values, not 'kitti'", field="matching.iou_thresholds"
            )
        return match_netcal_example(dets, ds.gt, th, score_threshold=m.score_threshold)
    if m.mode == "lvis":
        from detcal.data.lvis import LvisRules  # lazy: that format only
        from detcal.matching.lvis import match_lvis  # lazy: as above

        if not isinstance(data.protocol, LvisRules) or isinstance(th, str):
            raise DetcalInputError(
                "matching.mode=lvis needs LVIS data (data=lvis) and IoU values", field="matching.mode"
            )
        return match_lvis(
            dets, ds.gt, th, data.protocol, max_dets=m.max_dets, score_threshold=m.score_threshold, images=ds.images
        )
    if m.mode == "openimages":
        from detcal.data.openimages import OpenImagesRules  # lazy: that format only
        from detcal.matching.openimages import match_openimages  # lazy: as above

        if not isinstance(data.protocol, OpenImagesRules) or isinstance(th, str):
            raise DetcalInputError(
                "matching.mode=openimages needs Open Images data (data=openimages) and IoU values",
                field="matching.mode",
            )
        return match_openimages(dets, ds.gt, th, data.protocol, score_threshold=m.score_threshold, max_dets=m.max_dets)
    if m.mode == "voc":
        from detcal.matching.voc import match_voc  # lazy: that format only

        if isinstance(th, str):
            raise DetcalInputError("matching.mode=voc needs IoU values, not 'kitti'", field="matching.iou_thresholds")
        return match_voc(
            dets,
            ds.gt,
            th,
            class_agnostic=m.class_agnostic,
            score_threshold=m.score_threshold,
            max_dets=m.max_dets,
            images=ds.images,
        )
    return match(
        dets,
        ds.gt,
        th,
        mode=m.mode,
        class_agnostic=m.class_agnostic,
        score_threshold=m.score_threshold,
        max_dets=m.max_dets,
        kitti=data.kitti,
        images=ds.images,
        gt_ignore=m.gt_ignore,
    )
