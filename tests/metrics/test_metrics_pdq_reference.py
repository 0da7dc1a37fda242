"""PDQ, the ``pdq_evaluation`` variant: equal to the reference library's figures, and its pieces checked one by one.

The figures in tests/data/pdq_reference/reference.json were printed by pdq_evaluation
(david2611/pdq_evaluation, commit 08688a76) on a set built from the bundled 79-image data
(that folder's README says how). The map checks below rebuild the reference's drawing rules
pixel by pixel with scipy's bivariate normal CDF and a brute-force region of interest, an
independent transcription of the rules, and compare them with the compressed grids.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.data.coco_masks import load_class_scores, load_segmentations, segmentation_mask
from detcal.metrics import pdq_maps
from detcal.metrics.pdq import pdq

HERE = Path(__file__).parents[1] / "data" / "pdq_reference"
REF = json.loads((HERE / "reference.json").read_text())["results"]


def _unpacked(tmp: Path, name: str) -> Path:
    out = tmp / name
    out.write_bytes(gzip.decompress((HERE / f"{name}.gz").read_bytes()))
    return out


@pytest.fixture(scope="module")
def mini79(tmp_path_factory):
    gt = bundled.path("coco_mini79")
    ds = load_coco_instances(gt)
    return ds, load_segmentations(gt, ds), tmp_path_factory.mktemp("pdqref")


def _check(r, ref) -> None:
    assert (r.extra["TP"], r.extra["FP"], r.extra["FN"]) == (ref["TP"], ref["FP"], ref["FN"])
    assert r.value == pytest.approx(ref["PDQ"], abs=1e-4)
    for k in ("avg_pPDQ", "avg_spatial", "avg_label", "avg_fg", "avg_bg"):
        assert r.extra[k] == pytest.approx(ref[k], abs=1e-4), k


@pytest.mark.parametrize(
    "dets,gt_mask",
    [
        pytest.param("bbox", "box", id="uniform-boxes/box-gt"),
        pytest.param("bbox", "segmentation", id="uniform-boxes/mask-gt"),
        pytest.param("pbox", "box", id="gaussian-corners/box-gt", marks=pytest.mark.slow),
        pytest.param("pbox", "segmentation", id="gaussian-corners/mask-gt", marks=pytest.mark.slow),
    ],
)
def test_equal_to_pdq_evaluation(mini79, dets, gt_mask):
    ds, segs, tmp = mini79
    f = _unpacked(tmp, f"dt_{dets}_coco.json")
    d = load_coco_results(f, ds)
    assert (d.corner_cov is not None) == (dets == "pbox")
    r = pdq(ds, d, gt_mask=gt_mask, segmentations=segs, class_scores=load_class_scores(f, len(d)))
    assert r.variant == "pdq_evaluation" and r.params["gt_mask"] == gt_mask
    _check(r, REF[f"{dets}_dets__gt_{'segmasks' if gt_mask == 'segmentation' else 'boxes'}"])


def test_masks_equal_pycocotools(mini79):
    from pycocotools.coco import COCO

    coco = COCO(str(bundled.path("coco_mini79")))
    anns = coco.dataset["annotations"]
    for a in [a for i, a in enumerate(anns) if i % 5 == 0 or a["iscrowd"]]:  # polygons and every crowd RLE
        img = coco.imgs[a["image_id"]]
        mine = segmentation_mask(a["segmentation"], img["height"], img["width"])
        assert np.array_equal(mine, coco.annToMask(a).astype(bool)), a["id"]


def test_compressed_rle_string():
    from pycocotools import mask as mu

    rng = np.random.default_rng(3)
    m = np.asfortranarray(rng.random((23, 17)) < 0.3)
    rle = mu.encode(m.astype(np.uint8))
    assert np.array_equal(segmentation_mask({"counts": rle["counts"].decode(), "size": [23, 17]}, 23, 17), m)


# ---------------------------------------------------------------- the maps, pixel by pixel
def _dense_corner(my, mx, cov_yx, H, W):
    """The reference's corner map, written out over the whole image with scipy (independent transcription)."""
    cov_yx = np.asarray(cov_yx, float)
    g = multivariate_normal(mean=[my, mx], cov=cov_yx, allow_singular=True)
    sy, sx = np.sqrt(cov_yx[0, 0]), np.sqrt(cov_yx[1, 1])
    minx, miny = int(max(mx - 5 * sx, 0)), int(max(my - 5 * sy, 0))
    maxx, maxy = int(min(mx + 5 * sx, W - 1)), int(min(my + 5 * sy, H - 1))
    yy, xx = np.mgrid[miny : maxy + 1, minx : maxx + 1]
    d = np.stack([yy - my, xx - mx], -1)
    md = np.sqrt(np.einsum("...i,ij,...j->...", d, np.linalg.inv(cov_yx), d))
    dy, dx = max(min(int(my - miny), H - 1), 0), max(min(int(mx - minx), W - 1), 0)
    if 0 < dy < H - 1:
        md[:dy] = md[1 : dy + 1].copy()
    if 0 < dx < W - 1:
        md[:, :dx] = md[:, 1 : dx + 1].copy()
    keep = md <= 3.439
    keep[dy, dx] = True
    rows, cols = np.flatnonzero(keep.any(1)), np.flatnonzero(keep.any(0))
    y0, y1, x0, x1 = miny + rows[0], miny + rows[-1], minx + cols[0], minx + cols[-1]
    cdf = lambda y, x: g.cdf(np.stack(np.broadcast_arrays(y, x), -1) - 1e-14)
    hm = np.zeros((H, W), np.float32)
    pr = np.atleast_2d(cdf(np.arange(y0, y1 + 1)[:, None] + 1.0, np.arange(x0, x1 + 1)[None, :] + 1.0))
    hm[y0 : y1 + 1, x0 : x1 + 1] = pr
    hm[y1:, x0 : x1 + 1] = hm[y1, x0 : x1 + 1]
    hm[y0 : y1 + 1, x1:] = hm[y0 : y1 + 1, x1][:, None]
    hm[y1 + 1 :, x1 + 1 :] = 1.0
    if x0 == 0:
        ox = np.zeros((H, 1), np.float32)
        ox[y0 : y1 + 1, 0] = cdf(np.arange(y0, y1 + 1) + 1.0, 0.0)
        ox[y1 + 1 :, 0] = ox[y1, 0]
        hm -= ox
    if y0 == 0:
        oy = np.zeros((1, W), np.float32)
        oy[0, x0 : x1 + 1] = cdf(0.0, np.arange(x0, x1 + 1) + 1.0)
        oy[0, x1 + 1 :] = oy[0, x1]
        hm -= oy
    if x0 == 0 and y0 == 0:
        hm += cdf(0.0, 0.0)
    hm[hm < 0.0027] = 0
    return hm


def _dense_box(box, cov, H, W):
    if cov is None:
        w = lambda lo, hi, n: pdq_maps._uniform_axis(np.array([lo]), np.array([hi]), np.arange(n)[None, :])[0]
        return w(box[1], box[3], H)[:, None] * w(box[0], box[2], W)[None, :]
    flip = lambda c: np.array([[c[1, 1], c[0, 1]], [c[0, 1], c[0, 0]]])
    tl = _dense_corner(box[1], box[0], flip(cov[0]), H, W)
    br = _dense_corner(H - (box[3] + 1), W - (box[2] + 1), flip(cov[1]), H, W)[::-1, ::-1]
    hm = tl * br
    hm[hm > 1] = 1
    hm[hm < 0.0027] = 0
    return hm


CASES = [
    ([6.3, 4.2, 25.7, 19.9], [[[4.0, 1.1], [1.1, 2.5]], [[3.0, -0.8], [-0.8, 6.0]]]),  # inside, correlated
    ([0.4, 0.7, 12.2, 9.1], [[[6.0, 0.0], [0.0, 5.0]], [[2.0, 0.5], [0.5, 2.0]]]),  # touching the top-left edges
    ([20.0, 15.0, 39.5, 29.6], [[[1.0, 0.2], [0.2, 1.5]], [[9.0, 2.0], [2.0, 7.0]]]),  # touching the far edges
    ([10.0, 8.0, 13.0, 11.0], [[[12.0, 0.0], [0.0, 12.0]], [[12.0, 0.0], [0.0, 12.0]]]),  # small box, wide corners
    ([3.5, 2.25, 17.75, 11.0], None),  # uniform box, fractional borders
    ([0.0, 0.0, 40.0, 30.0], None),  # uniform box over the whole image
]


@pytest.mark.parametrize("box,cov", CASES)
def test_maps_equal_the_reference_rules(box, cov):
    H, W = 30, 40
    c = None if cov is None else np.array([cov], float)
    g = pdq_maps.build_grids(np.array([box], float), c, H, W)
    want = _dense_box(box, None if cov is None else np.array(cov, float), H, W)
    got = pdq_maps.dense(g)[0]
    assert np.allclose(got, want, atol=2e-6, rtol=0)
    # sums over rectangles read from the compressed grid equal the dense sums
    rng = np.random.default_rng(1)
    r0, c0 = rng.integers(0, H, 20), rng.integers(0, W, 20)
    r1, c1 = r0 + rng.integers(0, H - r0 + 1), c0 + rng.integers(0, W - c0 + 1)
    fg, bg = pdq_maps.rect_sums(g, r0, r1, c0, c1)
    lfg = np.log(want.astype(np.float64) + 1e-14)
    lbg = np.where(want > 0, np.log(1.0 - want.astype(np.float64) + 1e-14), 0.0)
    for k in range(20):
        sl = np.s_[r0[k] : r1[k], c0[k] : c1[k]]
        assert fg[k, 0] == pytest.approx(lfg[sl].sum(), abs=1e-4)
        assert bg[k, 0] == pytest.approx(lbg[sl].sum(), abs=1e-4)


# ---------------------------------------------------------------- hand-worked figures
def _one_image(gt_boxes, gt_cats, crowd=None, W=40, H=30, cats=(1, 2)):
    n = len(gt_boxes)
    return Dataset(
        images=Images(id=[1], width=[W], height=[H]),
        gt=GroundTruth(image_id=[1] * n, box=np.array(gt_boxes, float).reshape(-1, 4), category=gt_cats, iscrowd=crowd),
        categories={c: str(c) for c in cats},
    )


def test_hand_worked_uniform_boxes():
    ds = _one_image([[4, 5, 12, 13]], [1])  # box GT: columns 4..12, rows 5..13 -> 81 pixels
    exact = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[0.81], category=[1])
    r = pdq(ds, exact, gt_mask="box")
    # the uniform box covers the same 81 pixels with p = 1 (its border pixels 3 and 13 weigh 0): spatial 1
    assert r.extra["avg_spatial"] == 1.0 and r.value == pytest.approx(0.9, abs=1e-7)
    # half a pixel right: column 4 (9 GT pixels) and column 13 (9 background pixels) at p = 0.5
    half = Detections(image_id=[1], box=[[4.5, 5, 12.5, 13]], score=[1.0], category=[1])
    assert pdq(ds, half, gt_mask="box").extra["avg_spatial"] == pytest.approx(0.5 ** (18 / 81), rel=1e-6)


def test_class_distribution_crowd_and_counts():
    ds = _one_image([[4, 5, 12, 13], [20, 5, 30, 15]], [1, 2], crowd=[False, True])
    d = Detections(image_id=[1, 1], box=[[4, 5, 12, 13], [0, 20, 3, 25]], score=[0.7, 0.9], category=[1, 1])
    r = pdq(ds, d, gt_mask="box")
    # own-class score only: the crowd object (class 2) is kept and unmatched -> FN; the far box is FP
    assert (r.extra["TP"], r.extra["FP"], r.extra["FN"]) == (1, 1, 1)
    assert r.value == pytest.approx(np.sqrt(0.7) / 3, abs=1e-7)
    # with a class distribution the label quality is the probability of the object's class
    probs = np.array([[0.6, 0.4], [0.9, 0.1]])
    r2 = pdq(ds, d, gt_mask="box", class_scores=probs)
    assert r2.extra["avg_label"] == pytest.approx(0.6, abs=1e-7)
    assert r2.params["label_quality"].startswith("class distribution")


def test_variants_and_bad_input():
    ds = _one_image([[4, 5, 12, 13]], [1])
    d = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[0.81], category=[1])
    from detcal.core.errors import DetcalInputError

    with pytest.raises(DetcalInputError, match="variant"):
        pdq(ds, d, variant="nope")
    with pytest.raises(DetcalInputError, match="class_scores"):
        pdq(ds, d, class_scores=np.ones((1, 5)))
    with pytest.raises(DetcalInputError, match="segmentation"):
        pdq(ds, d, gt_mask="segmentation")
    assert pdq(ds, d, variant="detcal_continuous").variant == "detcal_continuous"


def test_workers_split_images_with_equal_results():
    ds, d = bundled.load("coco_mini79", "ssd-inception-v2")
    one = pdq(ds, d, fixed_cov=16.0)
    two = pdq(ds, d, fixed_cov=16.0, workers=2)
    assert one.value == two.value and one.extra == two.extra
    assert np.array_equal(one.table["det_ppdq"], two.table["det_ppdq"])


def test_cropped_masks_equal_full_masks(mini79):
    from detcal.data.coco_masks import segmentation_crop

    ds, segs, _ = mini79
    rows = ds.gt_image_rows()
    for g in range(0, len(segs), 7):
        h, w = int(ds.images.height[rows[g]]), int(ds.images.width[rows[g]])
        full = segmentation_mask(segs[g], h, w)
        crop, x0 = segmentation_crop(segs[g], h, w)
        rebuilt = np.zeros_like(full)
        rebuilt[:, x0 : x0 + crop.shape[1]] = crop
        assert np.array_equal(rebuilt, full), g
