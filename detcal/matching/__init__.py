"""Box matching: detections -> precision targets (docs/matching.md).

* :mod:`.engine` -- :func:`match`, the exact matcher (pycocotools ``exclusive``, ``max``, KITTI devkit rules);
  its docstring numbers the steps.
* :mod:`.blocks` -- the vectorised building blocks shared by the matchers (groups, pair IoUs, greedy walks).
* :mod:`.kitti_ap` -- the KITTI devkit's assignment and its AP (``kitti_ap``).
* :mod:`.netcal_example` -- netcal's example matching (best overlap, no exclusivity).

A new matching rule goes in its own module here, built from :mod:`.blocks`.
"""

from detcal.matching.engine import match

__all__ = ["match"]
