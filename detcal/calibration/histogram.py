"""Histogram binning of confidence scores (docs/calibration.md#histogram), numpy only."""

from __future__ import annotations

import warnings

import numpy as np

from detcal.binning.edges import cell_index, feature_bin_index
from detcal.calibration.base import ConfidenceCalibrator
from detcal.calibration.report import CalibrationFitWarning, make_report
from detcal.core.errors import DetcalInputError


class HistogramBinning(ConfidenceCalibrator):
    """Histogram binning (Zadrozny & Elkan 2001), 1-D or over the D-ECE grid.

    * Without features: equal-width bins over p in [0, 1] (``bins``, half-open
      ``[a, b)``, last closed, as :func:`detcal.binning.feature_bin_index`);
      ``p' = mean y`` of the calibration samples in p's bin.
    * With features ``[S,F]``: the D-ECE cells over (p, f_1..f_F)
      (:func:`detcal.binning.cell_index` with ``grid_bins``, default 5 per
      feature, Kueppers et al. 2020); ``p' = mean y`` in the sample's cell.

    Sparse/empty cells fall back, in order: a cell with fewer than the cell
    minimum of calibration samples uses the 1-D confidence bin of the
    sample; a 1-D bin with fewer than the bin minimum uses the global
    frequency ``mean y``. ``min_samples``: an integer sets both minima;
    ``"auto"`` (default) sets the bin minimum to 1 and the cell minimum to
    ``AUTO_MIN_CELL_SAMPLES`` = 30, so a cell's frequency is used only where
    its standard error (at most ``0.5 / sqrt(n)``) is below 0.1. The grid
    thus refines the 1-D map only where the calibration sample is dense
    enough, and the map becomes the 1-D binning as the sample shrinks. (With
    a cell minimum of 1, the 3125 cells of the 5^5 grid hold about 1.6 of
    the ~5000 samples of the default synthetic calibration split each, and
    the held-out ECE doubles instead of falling.)

    ``fit`` warns (:class:`~detcal.calibration.report.CalibrationFitWarning`)
    when the cells it uses hold fewer than 10 calibration samples on average.
    Learned: ``bin_freq_ [B]`` (NaN where sparse), ``cell_freq_ [C]`` (NaN
    where sparse; empty array without features), ``global_freq_``,
    ``bin_count_``, ``cell_count_``, ``min_bin_samples_``,
    ``min_cell_samples_`` and ``fit_report_`` (its notes give the share of
    calibration samples whose cell or bin fell back).
    """

    uses_features = True

    AUTO_MIN_CELL_SAMPLES: int = 30
    SPARSE_MEAN_COUNT: float = 10.0

    def __init__(self, bins: int = 15, grid_bins: int | list[int] = 5, min_samples: int | str = "auto") -> None:
        self.bins = bins
        self.grid_bins = grid_bins
        self.min_samples = min_samples

    def _grid(self, n_features: int) -> int | list[int]:
        gb = self.grid_bins
        return int(gb) if np.ndim(gb) == 0 else [int(b) for b in gb]  # type: ignore[arg-type,union-attr]

    def _minima(self) -> tuple[int, int]:
        ms = self.min_samples
        if isinstance(ms, str):
            if ms != "auto":
                raise DetcalInputError(
                    f"min_samples must be an integer >= 1 or 'auto', got {ms!r}", field="min_samples"
                )
            return 1, self.AUTO_MIN_CELL_SAMPLES
        if isinstance(ms, bool) or int(ms) != ms or int(ms) < 1:
            raise DetcalInputError(f"min_samples must be an integer >= 1 or 'auto', got {ms!r}", field="min_samples")
        return int(ms), int(ms)

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if int(self.bins) < 1:
            raise DetcalInputError(f"bins must be >= 1, got {self.bins}", field="bins")
        min_bin, min_cell = self._minima()
        nb = int(self.bins)
        b = feature_bin_index(p, nb)
        cnt = np.bincount(b, minlength=nb).astype(np.float64)
        pos = np.bincount(b, weights=y, minlength=nb)
        with np.errstate(invalid="ignore", divide="ignore"):
            freq = np.where(cnt >= min_bin, pos / np.maximum(cnt, 1), np.nan)
        self.bin_freq_ = freq
        self.bin_count_ = cnt.astype(np.int64)
        self.global_freq_ = float(np.mean(y))
        self.min_bin_samples_, self.min_cell_samples_ = min_bin, min_cell
        n = float(len(p))
        notes = [
            f"1-D bins: {int((cnt >= min_bin).sum())} of {nb} hold >= {min_bin} samples; "
            f"{cnt[cnt < min_bin].sum() / n:.1%} of the calibration samples fall back to the global frequency"
        ]
        if features is not None:
            try:
                c, n_cells = cell_index(np.column_stack([p, features]), self._grid(features.shape[1] + 1))
            except ValueError as exc:
                raise DetcalInputError(str(exc), field="grid_bins") from exc
            ccnt = np.bincount(c, minlength=n_cells).astype(np.float64)
            cpos = np.bincount(c, weights=y, minlength=n_cells)
            used = ccnt >= min_cell
            self.cell_freq_ = np.where(used, cpos / np.maximum(ccnt, 1), np.nan)
            self.cell_count_ = ccnt.astype(np.int64)
            n_used = int(used.sum())
            mean_used = float(ccnt[used].mean()) if n_used else 0.0
            notes.append(
                f"grid: {n_used} of {n_cells} cells hold >= {min_cell} samples (mean {mean_used:.1f} in "
                f"those); {ccnt[~used].sum() / n:.1%} of the calibration samples fall back to the 1-D bins"
            )
            if n_used and mean_used < self.SPARSE_MEAN_COUNT:
                warnings.warn(
                    f"HistogramBinning: the {n_used} grid cells in use hold {mean_used:.1f} calibration samples on "
                    f"average (< {self.SPARSE_MEAN_COUNT:g}): their frequencies are noise and will worsen held-out "
                    f"calibration; use min_samples='auto' or more, or fewer grid_bins",
                    CalibrationFitWarning,
                    stacklevel=3,
                )
                notes.append(f"sparse: cells in use hold {mean_used:.1f} samples on average")
        else:
            self.cell_freq_ = np.zeros(0)
            self.cell_count_ = np.zeros(0, dtype=np.int64)
        self.fit_report_ = make_report(message="closed form (frequencies per bin/cell)", notes=notes)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        out = self.bin_freq_[feature_bin_index(p, len(self.bin_freq_))]
        out = np.where(np.isnan(out), self.global_freq_, out)
        if features is not None:
            c, _ = cell_index(np.column_stack([p, features]), self._grid(features.shape[1] + 1))
            cell = self.cell_freq_[c]
            out = np.where(np.isnan(cell), out, cell)
        return out


__all__ = ["HistogramBinning"]
