"""Helpers the tests share (not tests themselves): transcriptions of reference devkits, data builders,
the regression-number reader and the streaming comparisons.

``tests/conftest.py`` puts ``tests/`` on ``sys.path`` (pytest's rootdir-relative conftest import), so
a test anywhere under ``tests/`` imports them as ``from support.kitti_like import make_frames``.
"""
