"""Synthetic scenes and a simulated detector with a KNOWN, planted miscalibration.

numpy and PIL only (never torch, never Hydra). Everything is seeded with
``np.random.default_rng`` and fully determined by the seed; the three random
streams are independent (``SeedSequence`` entropy ``[seed, stream, ...]``):
stream 0 draws the scene records, stream 1 the simulated detector, stream 2
(with the image id) the pixels of one image, so that any single image can be
rendered on its own (:func:`render_scene`) with the same pixels as
``generate_scenes(..., render=True)``.

Scenes (:func:`generate_scenes`)
    Images ``W x H`` (default 160 x 120) with a textured, noisy background and
    1..6 objects of the KITTI classes Car (id 1, a wide red body with a cabin,
    windows and two wheels), Pedestrian (id 4, a tall figure: head, blue torso,
    legs) and Cyclist (id 6, two green wheels with a yellow rider). Category
    ids and names are the fixed KITTI ones (``detcal.core.types.KITTI_CATEGORIES``)
    so the same records write to COCO and KITTI without any remapping.
    Geometric size ``s = sqrt(w h)`` is log-uniform in ``[min_size,
    max_size]``, the aspect ``w/h`` uniform per class (Car 1.6-2.4,
    Pedestrian 0.35-0.5, Cyclist 0.7-1.0). Overlap is limited: for any two
    boxes of an image ``inter / min(area_i, area_j) <= max_overlap``
    (rejection sampling, vectorised over all images; objects still in conflict
    after ``_PLACEMENT_ROUNDS`` rounds are dropped).

    KITTI fields, consistent with the pixels:

    * truncation: a fraction ``truncated_fraction`` of the objects straddles
      one image edge; truncation ``t`` (2 decimals, U[0.05, 0.5]) is the share
      of the object's extent along that axis (= of its area) outside the image,
      the box is the visible (clipped) part. Others lie >= 1 px inside: t = 0.
    * occlusion: objects are drawn far to near (KITTI depth ``z``, ties by row);
      occluded share ``o_j = min(1, sum_{i drawn after j} |b_i ^ b_j| / |b_j|)``;
      level 0 if o < 0.1, 1 if o < 0.5, else 2 (3 "unknown" is never used).
    * difficulty: :func:`detcal.data.kitti.kitti_difficulty` (devkit rules:
      0 easy if height > 40 px, occlusion <= 0, truncation <= 0.15; 1 moderate
      if height > 25, occ <= 1, trunc <= 0.30; 2 hard if height > 25, occ <= 2,
      trunc <= 0.50; else -1); -1 for DontCare and crowd boxes. ``ignore`` is
      False on every regular box: the KITTI reader sets it per evaluated level.
    * 3-D dummies: dimensions (h, w, l) = class mean * exp(N(0, 0.05^2)) m;
      pinhole camera with KITTI's focal 721.54 px scaled by H/375:
      ``z = f h_3d / h_px`` (full, unclipped pixel height),
      ``x = (cx - W/2) z / f``, ``y = (y2 - H/2) z / f``; rotation_y ~
      U(-pi, pi); ``alpha = wrap(rotation_y - atan2(x, z))``. All 2 decimals.
    * optional (off by default): ``dontcare_per_image`` DontCare regions
      (category 9, ignore=True, truncation NaN and the KITTI sentinels occ -1,
      alpha -10, dims -1, location -1000, rotation -10, as the KITTI reader
      gives them back; rendered as a noise patch) and
      ``crowd_per_image`` COCO crowd boxes (Pedestrian, iscrowd = ignore =
      True; rendered as a row of small figures; a COCO concept: the KITTI
      writer sees an ordinary Pedestrian row).

    GT boxes are rounded to 2 decimals (the KITTI label precision), so the
    records survive a KITTI round trip unchanged. Image ids are 1..N and file
    names ``<id:06d>.png``.

Simulated detector (:func:`simulate_detector`): see its docstring for the
planted miscalibration and its exact formulas."""

from __future__ import annotations

from detcal.data.synthetic._common import COCO_SCALE_CATEGORIES, DONTCARE_CATEGORY, SYNTHETIC_CATEGORIES
from detcal.data.synthetic.coco_scale import generate_coco_scale
from detcal.data.synthetic.detector import detector_defaults, simulate_detector
from detcal.data.synthetic.render import render_image, render_scene
from detcal.data.synthetic.scenes import generate_scenes
from detcal.data.synthetic.writer import write_synthetic

__all__ = [
    'SYNTHETIC_CATEGORIES',
    'DONTCARE_CATEGORY',
    'COCO_SCALE_CATEGORIES',
    'generate_scenes',
    'render_scene',
    'render_image',
    'simulate_detector',
    'detector_defaults',
    'generate_coco_scale',
    'write_synthetic',
]
