"""Intervals from per-image cell statistics (issue 29): replicates and jackknife equal the recomputation.

The fast path (detcal.metrics.image_cells) turns each bootstrap replicate into
a weighted sum of per-image cell sums and each jackknife value into totals
minus one image (corrected over that image's own cells by
detcal.metrics.confidence_loo). The generic path (``fast=False``) cuts the
resampled sample out and calls the metric on it: the definition. They must
agree to 1e-12 on every metric of the default suite, under both sparse-cell
policies, with sparse cells, empty and one-image cells, and for the
delete-a-block jackknife.
"""

from __future__ import annotations

import numpy as np
import pytest

from detcal.metrics import ConfidenceMetric, SuiteBinning, image_cells, suite
from detcal.metrics.bootstrap import bootstrap_many, jackknife_many, suite_intervals
from detcal.metrics.confidence_loo import _first_above
from detcal.metrics.paired import paired_bootstrap_many

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


def _data(seed: int, n_img: int, max_per: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    img = np.repeat(rng.permutation(n_img) * 7 + 3, rng.integers(1, max_per, n_img))
    order = rng.permutation(len(img))  # an image's detections are not contiguous
    img = img[order]
    p = rng.beta(2.0, 2.0, len(img))
    y = rng.random(len(img)) < p**1.3
    f = rng.random((len(img), 4))
    f[: len(img) // 3, 0] = 0.05  # crowd one feature bin so cells differ in size
    return img, p, y, f


SUITES = {
    "default": suite(),
    "netcal_policy": suite(SuiteBinning(policy="netcal", position=3)),
    "variance_q3": suite(
        params={"homogeneity": {"spread": "variance"}, "ece_q": {"q": 3.0}, "mce": {"sample_threshold": 4}}
    ),
    "sparse": {
        "dece": ConfidenceMetric("dece", [6, 3, 3, 2, 2], 3, use_features=True),
        "homogeneity": ConfidenceMetric("homogeneity", [6, 3, 3, 2, 2], 3, use_features=True),
        "outliers": ConfidenceMetric("outliers", [6, 3, 3, 2, 2], 2, use_features=True),
        "mce": ConfidenceMetric("mce", 40, 5),
    },
}


@pytest.mark.parametrize("suite", list(SUITES))
def test_jackknife_from_totals_equals_leaving_each_image_out(suite: str) -> None:
    img, p, y, f = _data(1, 90, 14)
    fns = SUITES[suite]
    n_img = len(np.unique(img))
    fast = jackknife_many(fns, img, p, y, f)
    slow = jackknife_many(fns, img, p, y, f, fast=False, n_blocks=n_img)  # one image per block: the definition
    for name in fns:
        assert len(fast[name]) == n_img
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12, atol=1e-15, err_msg=name)
    # and a value by hand: the first image (smallest id) left out
    keep = img != img.min()
    for name, m in fns.items():
        by_hand = float(m(p[keep], y[keep], f[keep]).value)
        assert fast[name][0] == pytest.approx(by_hand, rel=1e-12, nan_ok=True), name


def test_delete_a_block_jackknife_from_totals() -> None:
    img, p, y, f = _data(2, 120, 10)
    fns = suite()
    fast = jackknife_many(fns, img, p, y, f, n_blocks=17, seed=5)
    slow = jackknife_many(fns, img, p, y, f, fast=False, n_blocks=17, seed=5)
    for name in fns:
        assert len(fast[name]) == 17
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12, atol=1e-15, err_msg=name)


@pytest.mark.parametrize("suite", ["default", "netcal_policy", "sparse"])
def test_replicates_from_counts_equal_recomputed_resamples(suite: str) -> None:
    img, p, y, f = _data(3, 70, 12)
    fns = SUITES[suite]
    fast = bootstrap_many(fns, img, p, y, f, n_boot=40, seed=9)
    slow = bootstrap_many(fns, img, p, y, f, n_boot=40, seed=9, fast=False)
    for name in fns:
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12, atol=1e-15, err_msg=name)


def test_suite_intervals_equal_the_generic_path() -> None:
    # the intervals themselves (BCa: replicates and acceleration) from either path
    img, p, y, f = _data(4, 80, 10)
    fns = suite()
    results = {n: m(p, y, f) for n, m in fns.items()}
    fast = suite_intervals(results, fns, img, p, y, f, n_boot=150, seed=2)

    class Generic:  # the same metric without the fast interface
        def __init__(self, m: ConfidenceMetric) -> None:
            self.m = m

        def __call__(self, *a: np.ndarray) -> float:
            return float(self.m(*a).value)

    slow = suite_intervals(results, {n: Generic(m) for n, m in fns.items()}, img, p, y, f, n_boot=150, seed=2)
    for name in fns:
        assert fast[name].ci == pytest.approx(slow[name].ci, rel=1e-12, nan_ok=True), name


def test_paired_jackknife_with_images_on_one_side_only() -> None:
    # set B lacks some images of A: their per-image sums are empty on that side
    img, p, y, f = _data(5, 60, 9)
    keep = img % 5 != 0
    fns = {"ece": ConfidenceMetric("ece", 10), "mce": ConfidenceMetric("mce", 10, 2), "nll": ConfidenceMetric("nll")}
    kw = {"n_boot": 60, "seed": 1}
    fast = paired_bootstrap_many(fns, img, (p, y), img[keep], (p[keep] ** 1.2, y[keep]), **kw)
    slow = paired_bootstrap_many(fns, img, (p, y), img[keep], (p[keep] ** 1.2, y[keep]), fast=False, **kw)
    for name in fns:  # the generic jackknife has one image per block below 200 images
        assert fast[name].ci == pytest.approx(slow[name].ci, rel=1e-12), name
        assert fast[name].acceleration == pytest.approx(slow[name].acceleration, rel=1e-9, abs=1e-15), name


def test_first_above_is_the_exact_comparison() -> None:
    rng = np.random.default_rng(0)
    gaps = np.sort(rng.random(50))
    gaps[10:14] = gaps[10]  # ties
    mean = rng.random(200)
    limit = rng.random(200) * 0.3
    limit[:5] = gaps[10] - mean[:5]  # a threshold exactly at a gap
    got = _first_above(gaps, mean, limit)
    want = np.array([np.argmax(np.append(gaps - mu > lim, True)) for mu, lim in zip(mean, limit)])
    np.testing.assert_array_equal(got, want)


class _PlainFast:
    """A metric with only the three methods of the fast interface (all cell sums, no leave_one_out)."""

    def __init__(self, m: ConfidenceMetric) -> None:
        self.m = m

    def grid_key(self, *a: np.ndarray) -> object:
        return ("plain", self.m.grid_key(*a))

    def pair_sums(self, group_index: np.ndarray, *a: np.ndarray) -> tuple:
        return self.m.pair_sums(group_index, *a)

    def values(self, sums: object) -> np.ndarray:
        return self.m.values(sums)  # type: ignore[arg-type]

    def __call__(self, *a: np.ndarray) -> float:
        return float(self.m(*a).value)


@pytest.mark.parametrize("block_elems", [1 << 21, 64])
def test_metric_without_leave_one_out_gets_dense_totals_minus_image(block_elems: int, monkeypatch) -> None:
    # the fallback for other fast metrics: values() of totals minus each image's sums, in blocks of images
    # (64 elements: many blocks of images and of replicates)
    monkeypatch.setattr(image_cells, "BLOCK_ELEMS", block_elems)
    img, p, y, f = _data(6, 70, 10)
    fns = {
        "dece": _PlainFast(ConfidenceMetric("dece", [4, 3], 3, use_features=True)),
        "mce": _PlainFast(ConfidenceMetric("mce", 12)),
    }
    fast = jackknife_many(fns, img, p, y, f[:, :1])
    slow = jackknife_many(fns, img, p, y, f[:, :1], fast=False, n_blocks=70)
    for name in fns:
        np.testing.assert_allclose(fast[name], slow[name], rtol=1e-12, atol=1e-15, err_msg=name)
    reps = bootstrap_many(fns, img, p, y, f[:, :1], n_boot=30, seed=4)
    reps_slow = bootstrap_many(fns, img, p, y, f[:, :1], n_boot=30, seed=4, fast=False)
    for name in fns:
        np.testing.assert_allclose(reps[name], reps_slow[name], rtol=1e-12, atol=1e-15, err_msg=name)


def test_binned_metrics_never_take_the_dense_jackknife(monkeypatch) -> None:
    # the linear path: a binned confidence metric corrects its value over each image's pairs and never
    # evaluates images x cells of sums (values() is only for the one-cell metrics here)
    img, p, y, f = _data(7, 50, 8)
    fns = suite()
    seen: list[tuple[str, tuple[int, ...]]] = []
    real = ConfidenceMetric.values

    def spy(self: ConfidenceMetric, sums: object) -> np.ndarray:
        seen.append((self.name, np.shape(sums.count)))  # type: ignore[attr-defined]
        return real(self, sums)  # type: ignore[arg-type]

    monkeypatch.setattr(ConfidenceMetric, "values", spy)
    jackknife_many(fns, img, p, y, f)
    assert seen and all(shape[-1] == 1 for _, shape in seen), seen
    assert {name for name, _ in seen} == {n for n, m in fns.items() if not m.binned}


def test_packed_count_and_matched_give_the_same_replicates_bit_for_bit(monkeypatch) -> None:
    # count and sum_y travel as one matrix column count * s + sum_y (whole numbers, exact in any order):
    # the replicates equal those of the unpacked product exactly, for every metric of the suite
    img, p, y, f = _data(11, 300, 25)
    fns = suite()
    packed = bootstrap_many(fns, img, p, y, f, n_boot=40, seed=2)
    grids = image_cells.image_cells(fns, list(fns), np.unique(img, return_inverse=True)[1], 300, (p, y, f))
    assert all(g.pack > 0 and g.matrix_fields[0] == image_cells.PACKED for g in grids)
    monkeypatch.setattr(image_cells, "pack_scale", lambda *a: 0.0)
    plain = bootstrap_many(fns, img, p, y, f, n_boot=40, seed=2)
    for name in fns:
        np.testing.assert_array_equal(packed[name], plain[name], err_msg=name)


def test_pack_scale_refuses_what_it_cannot_carry_exactly() -> None:
    count, sum_y = np.array([3.0, 5.0, 1.0]), np.array([1.0, 5.0, 0.0])
    s = image_cells.pack_scale(count, sum_y, 10)
    assert s == 64.0  # the power of two above 10 images x 5 matched
    v = (10 * count * s + 10 * sum_y).max()
    assert np.floor(v / s) == 50 and v - np.floor(v / s) * s == 50
    assert image_cells.pack_scale(count, sum_y + 0.5, 10) == 0.0  # not whole numbers
    assert image_cells.pack_scale(count * 2.0**40, sum_y * 2.0**20, 10) == 0.0  # past 2**53
    assert image_cells.pack_scale(np.zeros(0), np.zeros(0), 10) == 0.0


@pytest.mark.parametrize("n_cells", [40, 10**7])
def test_occupied_index_is_the_unique_inverse(n_cells: int) -> None:
    rng = np.random.default_rng(3)
    cells = rng.integers(0, n_cells, 500)
    occ, inv = np.unique(cells, return_inverse=True)
    got, n_occ = image_cells.occupied_index(cells, n_cells)
    np.testing.assert_array_equal(got, inv)
    assert n_occ == len(occ)
    assert image_cells.occupied_index(np.zeros(0, dtype=np.int64), 5)[1] == 0


@pytest.mark.parametrize("kind", ["fractional", "over_n", "zero_one"])
def test_weights_that_are_not_draw_counts_take_the_unpacked_product(kind: str, monkeypatch) -> None:
    # replicate_values is public (detcal-compare and the paired bootstrap pass their own weights): weights that
    # could break the packed column's exactness fall back to one column per field, with the same values
    img, p, y, f = _data(12, 120, 20)
    fns = suite()
    inv = np.unique(img, return_inverse=True)[1]
    rng = np.random.default_rng(1)
    w = {
        "fractional": rng.random((7, 120)) * 2.0,
        "over_n": np.full((7, 120), 2.0),
        "zero_one": (rng.random((7, 120)) < 0.9).astype(np.float64),
    }[kind]
    assert image_cells.counts_fit_packing(w, 120) == (kind == "zero_one")
    got = {n: np.full(7, np.nan) for n in fns}
    image_cells.replicate_values(fns, image_cells.image_cells(fns, list(fns), inv, 120, (p, y, f)), w, got, 0)
    monkeypatch.setattr(image_cells, "pack_scale", lambda *a: 0.0)
    want = {n: np.full(7, np.nan) for n in fns}
    image_cells.replicate_values(fns, image_cells.image_cells(fns, list(fns), inv, 120, (p, y, f)), w, want, 0)
    for name in fns:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
