"""Training data for the R-FCN: a torch Dataset over a :class:`detcal.core.types.Dataset`.

Images come from an *image source*: a directory holding the files named by
``Images.file_name`` (PNG/JPEG read with PIL, converted to RGB), or a
renderer ``render(image_index) -> np.ndarray [H, W, 3] uint8`` (e.g.
``lambda i: detcal.data.synthetic.render_scene(dataset, i, seed)``), where
``image_index`` is the row in ``Dataset.images``.

Labels. Dataset category ids are mapped to contiguous training labels 1..C by
a :class:`LabelMap` (``label = 1 + position of the id in category_ids``;
background 0). The map is stored in the model (``RFCN.category_ids``) and in
every checkpoint, so predictions come back as dataset ids.

Ground truth used as training targets. A GT box is *excluded* from the
targets (the detector never sees it, neither as positive nor as anything
else) when it is ``ignore`` or ``iscrowd``, when its category is not in the
label map (e.g. KITTI ``DontCare``, ``Misc``, or any class not trained), or
when it is degenerate (width or height <= 0). Note that the regions of
excluded boxes can then be sampled as background, as in torchvision's
detection references (which have no ignore regions).

Data order. Iteration ``i`` of a run with seed ``s`` and batch size ``b``
takes the global sample positions ``i*b .. i*b+b-1`` of an endless sequence of
epochs, epoch ``e`` being ``numpy.random.default_rng([s, e]).permutation(N)``
(:func:`iteration_batch`). It is a pure function of (seed, iteration): a
resumed run reads exactly the images an uninterrupted one does, and under
data parallelism each of R ranks takes the ``r``-th of R contiguous shards of
the same global batch (:class:`IterationBatchSampler`). Each item also
carries a seed (from (s, i, position)) that drives its flip and its RoI/anchor
sampling in the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset as TorchDataset, Sampler

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, GroundTruth, Images

ImageSource = str | os.PathLike | Callable[[int], np.ndarray]
"""A directory of image files, or ``render(image_index) -> [H, W, 3] uint8``."""

EXCLUDED_NAMES: tuple[str, ...] = ("DontCare",)
"""Category names never trained by default."""


@dataclass(frozen=True)
class LabelMap:
    """Dataset category ids <-> contiguous training labels 1..C (0 = background).

    ``label(c) = 1 + category_ids.index(c)``; ``category(l) = category_ids[l - 1]``.
    """

    category_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        ids = tuple(int(c) for c in self.category_ids)
        if not ids:
            raise DetcalInputError("label map needs at least one category", field="category_ids")
        if len(set(ids)) != len(ids):
            raise DetcalInputError(f"duplicate category ids in label map: {ids}", field="category_ids")
        object.__setattr__(self, "category_ids", ids)

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    @classmethod
    def from_dataset(
        cls, dataset: Dataset, categories: Sequence[int] | None = None, exclude_names: Sequence[str] = EXCLUDED_NAMES
    ) -> LabelMap:
        """The given ``categories``, or by default the sorted ids of the categories that
        have at least one trainable box (not ignore/crowd) and whose name is not in
        ``exclude_names``."""
        if categories is not None:
            unknown = [c for c in categories if int(c) not in dataset.categories]
            if unknown:
                raise DetcalInputError(
                    f"categories {unknown} not in the dataset's categories {sorted(dataset.categories)}",
                    file=dataset.source or None,
                    field="categories",
                )
            return cls(tuple(int(c) for c in categories))
        gt = dataset.gt
        usable = ~(gt.ignore | gt.iscrowd)
        excluded = {k for k, v in dataset.categories.items() if v in set(exclude_names)}
        ids = [int(c) for c in np.unique(gt.category[usable]) if int(c) not in excluded]
        if not ids:
            raise DetcalInputError(
                "no trainable ground-truth box (all ignored, crowd or excluded)",
                file=dataset.source or None,
                field="category",
            )
        return cls(tuple(ids))

    def to_labels(self, category: np.ndarray) -> np.ndarray:
        """Labels [G] for dataset category ids [G]; -1 for ids not in the map (vectorised)."""
        category = np.asarray(category, dtype=np.int64)
        ids = np.asarray(self.category_ids, dtype=np.int64)
        order = np.argsort(ids)
        pos = np.clip(np.searchsorted(ids[order], category), 0, len(ids) - 1)
        found = ids[order][pos] == category
        return np.where(found, order[pos] + 1, -1).astype(np.int64)

    def to_categories(self, labels: np.ndarray) -> np.ndarray:
        """Dataset category ids for labels 1..C."""
        labels = np.asarray(labels, dtype=np.int64)
        if labels.size and (labels.min() < 1 or labels.max() > self.num_classes):
            raise DetcalInputError(f"labels must be in 1..{self.num_classes}", field="labels")
        return np.asarray(self.category_ids, dtype=np.int64)[labels - 1]


def training_gt_mask(gt: GroundTruth, label_map: LabelMap) -> np.ndarray:
    """``[G]`` bool: the GT rows used as training targets (see the module docstring)."""
    wh = gt.box[:, 2:4] - gt.box[:, 0:2]
    return ~gt.ignore & ~gt.iscrowd & (label_map.to_labels(gt.category) > 0) & np.all(wh > 0, axis=1)


def _image_rows_of_gt(dataset: Dataset) -> np.ndarray:
    return dataset.gt_image_rows()


def iteration_batch(n_images: int, batch_size: int, seed: int, iteration: int) -> tuple[np.ndarray, np.ndarray]:
    """Image rows ``[b]`` and item seeds ``[b]`` of ``iteration`` (see the module docstring).

    ``rows[j] = perm_e[(i*b + j) mod N]`` with ``e = (i*b + j) // N`` and
    ``perm_e = default_rng([seed, e]).permutation(N)``; item seeds are
    ``default_rng([seed, i, 7]).integers(0, 2**62, b)``.
    """
    if n_images < 1:
        raise DetcalInputError("the training set has no images", field="images")
    if batch_size < 1:
        raise DetcalInputError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
    pos = iteration * batch_size + np.arange(batch_size, dtype=np.int64)
    epoch, offset = np.divmod(pos, n_images)
    rows = np.empty(batch_size, dtype=np.int64)
    for e in np.unique(epoch):
        sel = epoch == e
        rows[sel] = np.random.default_rng([int(seed), int(e)]).permutation(n_images)[offset[sel]]
    seeds = np.random.default_rng([int(seed), int(iteration), 7]).integers(0, 2**62, size=batch_size, dtype=np.int64)
    return rows, seeds


def shard(n: int, rank: int, world_size: int) -> slice:
    """Contiguous shard ``rank`` of ``world_size`` over ``n`` positions (``np.array_split`` sizes)."""
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


class IterationBatchSampler(Sampler[list[tuple[int, int]]]):
    """Yields, for iterations ``start .. iterations-1``, this rank's shard of
    :func:`iteration_batch` as a list of ``(image_row, item_seed)`` keys."""

    def __init__(
        self,
        n_images: int,
        batch_size: int,
        seed: int,
        start_iteration: int,
        iterations: int,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.n_images, self.batch_size, self.seed = int(n_images), int(batch_size), int(seed)
        self.start, self.iterations = int(start_iteration), int(iterations)
        self.rank, self.world_size = int(rank), int(world_size)

    def __len__(self) -> int:
        return max(0, self.iterations - self.start)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        sl = shard(self.batch_size, self.rank, self.world_size)
        for it in range(self.start, self.iterations):
            rows, seeds = iteration_batch(self.n_images, self.batch_size, self.seed, it)
            yield [(int(r), int(s)) for r, s in zip(rows[sl], seeds[sl])]


class DetectionDataset(TorchDataset):
    """``dataset[key] -> (image [3,H,W] float32 in [0,1], target)`` for the R-FCN.

    ``key`` is an image row, or ``(image_row, item_seed)`` during training (the
    seed drives the horizontal flip when ``hflip`` and is passed to the model as
    ``target["seed"]``). ``target``: ``boxes [G_i,4]`` float32 xyxy pixels,
    ``labels [G_i]`` int64 in 1..C (training GT only, see the module docstring),
    ``image_index`` int64 scalar, and ``seed`` when given. ``cache`` keeps the
    decoded uint8 images in memory.
    """

    def __init__(
        self, dataset: Dataset, images: ImageSource, label_map: LabelMap, hflip: bool = False, cache: bool = False
    ) -> None:
        self.dataset = dataset
        self.source = images
        self.label_map = label_map
        self.hflip = bool(hflip)
        self.cache: dict[int, np.ndarray] | None = {} if cache else None
        if not callable(images):
            root = Path(images)
            if not root.is_dir():
                raise DetcalInputError("image directory not found", file=root, field="images")
        rows = _image_rows_of_gt(dataset)
        keep = np.flatnonzero(training_gt_mask(dataset.gt, label_map))
        order = keep[np.argsort(rows[keep], kind="stable")]
        self._gt_order = order
        self._gt_start = np.searchsorted(rows[order], np.arange(len(dataset.images) + 1))
        self.n_excluded = int(len(dataset.gt) - len(keep))

    def __len__(self) -> int:
        return len(self.dataset.images)

    def load_image(self, row: int) -> np.ndarray:
        """The ``[H, W, 3]`` uint8 image of row ``row``, checked against ``Images.width/height``."""
        if self.cache is not None and row in self.cache:
            return self.cache[row]
        imgs: Images = self.dataset.images
        file: Any = None
        if callable(self.source):
            arr = np.asarray(self.source(row))
        else:
            from PIL import Image  # lazy: Pillow only when images are drawn or read

            file = Path(self.source) / imgs.file_name[row]
            if not imgs.file_name[row] or not file.is_file():
                raise DetcalInputError("image file not found", file=file, record=int(imgs.id[row]), field="file_name")
            with Image.open(file) as im:
                arr = np.asarray(im.convert("RGB"))
        if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
            raise DetcalInputError(
                f"image must be [H, W, 3] uint8, got {arr.shape} {arr.dtype}",
                file=file,
                record=int(imgs.id[row]),
                field="image",
            )
        if arr.shape[0] != int(round(imgs.height[row])) or arr.shape[1] != int(round(imgs.width[row])):
            raise DetcalInputError(
                f"image is {arr.shape[1]}x{arr.shape[0]} but the record says {imgs.width[row]:g}x{imgs.height[row]:g}",
                file=file or self.dataset.source or None,
                record=int(imgs.id[row]),
                field="width/height",
            )
        if self.cache is not None:
            self.cache[row] = arr
        return arr

    def gt_rows(self, row: int) -> np.ndarray:
        """Rows into ``dataset.gt`` of the training targets of image ``row``."""
        return self._gt_order[self._gt_start[row] : self._gt_start[row + 1]]

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        row, seed = (int(key[0]), int(key[1])) if isinstance(key, tuple) else (int(key), None)
        arr = self.load_image(row)
        g = self.gt_rows(row)
        boxes = self.dataset.gt.box[g].astype(np.float32)
        labels = self.label_map.to_labels(self.dataset.gt.category[g])
        if self.hflip and seed is not None and np.random.default_rng([seed, 1]).random() < 0.5:
            arr = arr[:, ::-1]
            w = np.float32(arr.shape[1])
            boxes = np.stack([w - boxes[:, 2], boxes[:, 1], w - boxes[:, 0], boxes[:, 3]], axis=1).reshape(-1, 4)
        image = torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1))).float().div_(255.0)
        target = {
            "boxes": torch.from_numpy(np.ascontiguousarray(boxes)).reshape(-1, 4),
            "labels": torch.from_numpy(labels),
            "image_index": torch.tensor(row, dtype=torch.int64),
        }
        if seed is not None:
            target["seed"] = torch.tensor(seed, dtype=torch.int64)
        return image, target


def collate(
    batch: list[tuple[torch.Tensor, dict[str, torch.Tensor]]],
) -> tuple[list[torch.Tensor], list[dict[str, torch.Tensor]]]:
    """List of items -> (list of images, list of targets) (variable-size images)."""
    return [b[0] for b in batch], [b[1] for b in batch]


TOY_CATEGORIES: dict[int, str] = {1: "Car", 4: "Pedestrian", 6: "Cyclist"}


def toy_scenes(
    n_images: int, seed: int, image_size: tuple[int, int] = (160, 120), max_objects: int = 4
) -> tuple[Dataset, Callable[[int], np.ndarray]]:
    """A small toy detection set for tests and smoke runs (the benchmark's synthetic
    scenes live in :mod:`detcal.data.synthetic`).

    ``image_size = (W, H)``. Each image holds 1..``max_objects`` filled
    rectangles on a noisy grey background: KITTI ids Car = 1 (wide, red),
    Pedestrian = 4 (tall, green), Cyclist = 6 (square-ish, blue). Returns the
    dataset and ``render(image_index) -> [H, W, 3] uint8`` (deterministic in
    ``(seed, image_index)``; later boxes are drawn over earlier ones).
    """
    W, H = int(image_size[0]), int(image_size[1])
    rng = np.random.default_rng([int(seed), 11])
    counts = rng.integers(1, max_objects + 1, size=n_images)
    g = int(counts.sum())
    image_id = np.repeat(np.arange(1, n_images + 1), counts)
    cats = np.array(sorted(TOY_CATEGORIES))[rng.integers(0, 3, size=g)]
    scale = rng.uniform(0.12, 0.4, size=g) * H
    aspect = np.select(
        [cats == 1, cats == 4], [rng.uniform(1.5, 2.2, g), rng.uniform(0.35, 0.5, g)], rng.uniform(0.8, 1.2, g)
    )
    w = np.clip(scale * np.sqrt(aspect), 4, W - 2)
    h = np.clip(scale / np.sqrt(aspect), 4, H - 2)
    x1 = rng.uniform(0, 1, g) * (W - w)
    y1 = rng.uniform(0, 1, g) * (H - h)
    box = np.round(np.stack([x1, y1, x1 + w, y1 + h], axis=1))
    images = Images(
        id=np.arange(1, n_images + 1),
        width=np.full(n_images, W),
        height=np.full(n_images, H),
        file_name=[f"toy_{i:06d}.png" for i in range(1, n_images + 1)],
    )
    gt = GroundTruth(image_id=image_id, box=box, category=cats)
    dataset = Dataset(
        images=images, gt=gt, categories=dict(TOY_CATEGORIES), source=f"toy_scenes(n={n_images}, seed={seed})"
    )
    colours = {1: (200, 40, 40), 4: (40, 190, 60), 6: (50, 70, 210)}
    starts = np.concatenate([[0], np.cumsum(counts)])

    def render(index: int) -> np.ndarray:
        r = np.random.default_rng([int(seed), 13, int(index)])
        img = np.clip(r.normal(110, 25, size=(H, W, 3)), 0, 255)
        for j in range(starts[index], starts[index + 1]):
            a, b, c, d = box[j].astype(int)
            img[b:d, a:c] = np.asarray(colours[int(cats[j])]) + r.normal(0, 12, size=(d - b, c - a, 3))
        return np.clip(img, 0, 255).astype(np.uint8)

    return dataset, render
