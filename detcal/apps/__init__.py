"""detcal's command-line apps: thin Hydra wrappers around the Python API
(:mod:`detcal.pipeline`). Each app composes its config, converts it once into
a typed spec (:mod:`detcal.apps.schema`) and calls the API.

A command started fresh runs numpy's OpenBLAS on one thread (``OPENBLAS_NUM_THREADS=1``)
unless the environment already names a BLAS thread count. detcal's matrix products are
small or thin, and OpenBLAS's worker threads spin while they wait: with its default pool
a lean run at 5,000 images burns about 0.1 s more CPU and finishes no sooner. The setting
is made only before numpy is first imported, so importing this package into a process
that already uses numpy (a notebook, a test) changes nothing.
"""

import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
"""The variables OpenBLAS reads for its thread count; a user's setting of any of them is kept."""

if "numpy" not in sys.modules and not any(os.environ.get(v) for v in BLAS_THREAD_VARIABLES):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
