"""Binning: edge rules and bins (:mod:`.edges`), the chunked fixed-point kernels (:mod:`.kernels`), and the
exact per-cell statistics every binned metric reduces to (:mod:`.cells`).

Imports run one way: ``edges`` <- ``kernels`` <- ``cells``.
"""

from detcal.binning.edges import (
    EDGE_RULES,
    BinGrid,
    RankSegments,
    cell_index,
    cell_index_columns,
    equal_count_bins,
    equal_count_cuts,
    equal_count_segments,
    equal_width_bins,
    feature_bin_index,
    normalise_bins,
    rank_segments,
)

__all__ = [
    "EDGE_RULES",
    "BinGrid",
    "RankSegments",
    "cell_index",
    "cell_index_columns",
    "equal_count_bins",
    "equal_count_cuts",
    "equal_count_segments",
    "equal_width_bins",
    "feature_bin_index",
    "normalise_bins",
    "rank_segments",
]
