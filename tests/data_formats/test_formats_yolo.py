"""YOLO text folders: read and written back, checked against globox 2.9's reader, bad files named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.yolo import load_yolo, write_yolo

REPO = Path(__file__).resolve().parents[2]
YOLO = REPO / "examples" / "mini79_yolo"
VOC = REPO / "examples" / "mini79_voc"


def _random_set(seed: int) -> tuple[Dataset, Detections]:
    rng = np.random.default_rng(seed)
    n = 9
    images = Images(id=np.arange(1, n + 1) * 7, width=rng.integers(100, 900, n), height=rng.integers(100, 900, n))
    g, d = 30, 60

    def boxes(k: int, img: np.ndarray) -> np.ndarray:
        row = images.index_of(img)
        w, h = images.width[row], images.height[row]
        x0, y0 = rng.random(k) * w * 0.8, rng.random(k) * h * 0.8
        return np.stack([x0, y0, x0 + rng.random(k) * w * 0.2, y0 + rng.random(k) * h * 0.2], axis=1)

    gi = rng.choice(images.id[:-1], g)  # the last image has no labels
    gt = GroundTruth(image_id=gi, box=boxes(g, gi), category=rng.integers(0, 3, g))
    di = rng.choice(images.id, d)
    dets = Detections(image_id=di, box=boxes(d, di), score=rng.random(d), category=rng.integers(0, 3, d))
    return Dataset(images, gt, {0: "cat", 1: "dog", 2: "traffic light"}), dets


def test_write_then_read_gives_the_same_records(tmp_path: Path) -> None:
    ds, dets = _random_set(0)
    p = write_yolo(tmp_path, dets, ds, True)
    assert not (tmp_path / "labels" / "000000000063.txt").read_text()  # an image without objects: empty file
    back = load_yolo(p["gt"], p["results"], p["names"], sizes=p["sizes"])
    b = back.dataset
    assert b.categories == ds.categories
    np.testing.assert_array_equal(b.images.id, ds.images.id)  # numeric stems -> the same ids
    og, ob = np.lexsort((ds.gt.box[:, 0], ds.gt.image_id)), np.lexsort((b.gt.box[:, 0], b.gt.image_id))
    np.testing.assert_allclose(b.gt.box[ob], ds.gt.box[og], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(b.gt.category[ob], ds.gt.category[og])
    od, oe = np.lexsort((dets.score, dets.image_id)), np.lexsort((back.detections.score, back.detections.image_id))
    np.testing.assert_array_equal(back.detections.score[oe], dets.score[od])  # repr: exact
    np.testing.assert_allclose(back.detections.box[oe], dets.box[od], rtol=0, atol=1e-9)


def test_reader_agrees_with_globox(tmp_path: Path) -> None:
    """globox 2.9 (a maintained multi-format annotation library) reads the bundled example's YOLO labels
    and detections and its VOC annotations to the same boxes, classes and scores as detcal."""
    globox = pytest.importorskip("globox")
    from PIL import Image

    images = tmp_path / "images"  # globox takes the sizes from image files: blank ones of the right size
    images.mkdir()
    for line in (YOLO / "sizes.txt").read_text().splitlines():
        stem, w, h = line.split()
        Image.new("L", (int(w), int(h))).save(images / f"{stem}.png")
    ours = load_yolo(YOLO / "labels", YOLO / "detections", YOLO / "data.yaml", image_dir=images)
    by_stem = {Path(n).stem: i for i, n in zip(ours.dataset.images.id.tolist(), ours.dataset.images.file_name)}

    def flat(aset: object, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rows = [
            (by_stem[Path(a.image_id).stem], *b.ltrb, float(getattr(b, key) if key == "confidence" else 0), b.label)
            for a in aset
            for b in a.boxes
        ]
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        arr = np.array([r[:6] for r in rows], dtype=np.float64).reshape(-1, 6)
        return arr[:, 0].astype(np.int64), arr[:, 1:5], arr[:, 5], np.array([r[6] for r in rows])

    def ours_flat(img: np.ndarray, box: np.ndarray, score: np.ndarray, cat: np.ndarray) -> tuple:
        o = np.lexsort((box[:, 1], box[:, 0], img))
        return img[o], box[o], score[o], cat[o]

    gt_g = flat(globox.AnnotationSet.from_yolo_v5(YOLO / "labels", image_folder=images, image_extension=".png"), "")
    g = ours.dataset.gt
    gt_o = ours_flat(g.image_id, g.box, np.zeros(len(g)), g.category)
    np.testing.assert_array_equal(gt_g[0], gt_o[0])
    np.testing.assert_allclose(gt_g[1], gt_o[1], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(gt_g[3].astype(np.int64), gt_o[3])
    dt = globox.AnnotationSet.from_yolo_v5(YOLO / "detections", image_folder=images, image_extension=".png")
    dt_g = flat(dt, "confidence")
    d = ours.detections
    dt_o = ours_flat(d.image_id, d.box, d.score, d.category)
    np.testing.assert_allclose(dt_g[1], dt_o[1], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(dt_g[2], dt_o[2])
    # VOC: globox keeps the devkit's one-based corners; detcal's continuous box is [xmin - 1, ymin - 1, xmax, ymax]
    from detcal.data.voc import load_voc

    voc = load_voc(VOC / "Annotations", VOC / "results", VOC / "names.txt").dataset
    names = np.array([voc.categories[int(c)] for c in voc.gt.category])
    v_g = flat(globox.AnnotationSet.from_pascal_voc(VOC / "Annotations"), "")
    v_o = ours_flat(voc.gt.image_id, voc.gt.box + [1.0, 1.0, 0.0, 0.0], np.zeros(len(names)), names)
    np.testing.assert_array_equal(v_g[0], v_o[0])
    np.testing.assert_allclose(v_g[1], v_o[1], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(v_g[3], v_o[3])


def _folders(tmp_path: Path, label: str, det: str = "", names: str = "names: [cat, dog]\n") -> dict[str, Path]:
    (tmp_path / "labels").mkdir()
    (tmp_path / "dets").mkdir()
    (tmp_path / "labels" / "a.txt").write_text(label)
    (tmp_path / "dets" / "a.txt").write_text(det)
    (tmp_path / "data.yaml").write_text(names)
    (tmp_path / "sizes.txt").write_text("a 100 50\nb 20 20\n")
    return {"label_dir": tmp_path / "labels", "results_dir": tmp_path / "dets", "names": tmp_path / "data.yaml"}


@pytest.mark.parametrize(
    ("label", "det", "names", "message"),
    [
        ("0 0.5 0.5 0.2\n", "", "names: [cat, dog]", r"labels/a.txt, record line 1: expected 'class cx cy w h' \(5"),
        ("0 0.5 0.5 0.2 0.2\n1 0.5 x 0.2 0.2\n", "", "names: [cat, dog]", "labels/a.txt, record line 2: not a number"),
        ("2 0.5 0.5 0.2 0.2\n", "", "names: [cat, dog]", "labels/a.txt, record line 1, field 'class'"),
        ("0 0.5 0.5 -0.2 0.2\n", "", "names: [cat, dog]", "negative box width"),
        (
            "0 0.5 0.5 0.2 0.2\n",
            "0 0.5 0.5 0.2 0.2\n",
            "names: [cat, dog]",
            r"dets/a.txt, record line 1: expected .*score",
        ),
        ("0 0.5 0.5 0.2 0.2\n", "", "nom: [cat]", "data.yaml, field 'names'"),
        ("0 0.5 0.5 0.2 0.2\n", "", "names: [cat\n", "data.yaml: not valid YAML"),
    ],
)
def test_bad_files_are_named_in_one_line(tmp_path: Path, label: str, det: str, names: str, message: str) -> None:
    f = _folders(tmp_path, label, det, names)
    with pytest.raises(DetcalInputError, match=message) as e:
        load_yolo(f["label_dir"], f["results_dir"], f["names"], sizes=tmp_path / "sizes.txt")
    assert "\n" not in str(e.value)


def test_images_come_from_sizes_or_an_images_folder(tmp_path: Path) -> None:
    f = _folders(tmp_path, "1 0.5 0.5 0.2 0.2\n", "1 0.5 0.5 0.2 0.2 0.9\n", "names: {0: cat, 1: dog}\n")
    data = load_yolo(f["label_dir"], f["results_dir"], f["names"], sizes=tmp_path / "sizes.txt")
    assert data.dataset.images.id.tolist() == [1, 2]  # stems a, b: 1, 2 in sorted order; b has no label file
    np.testing.assert_allclose(data.dataset.gt.box, [[40.0, 20.0, 60.0, 30.0]])
    assert data.dataset.categories == {0: "cat", 1: "dog"} and data.detections.score.tolist() == [0.9]
    with pytest.raises(DetcalInputError, match="no images/ folder beside"):
        load_yolo(f["label_dir"], f["results_dir"], f["names"])
    (tmp_path / "labels" / "c.txt").write_text("")
    with pytest.raises(DetcalInputError, match="c.txt: has no image"):
        load_yolo(f["label_dir"], f["results_dir"], f["names"], sizes=tmp_path / "sizes.txt")
