"""detcal's command-line apps: thin Hydra wrappers around the Python API
(:mod:`detcal.pipeline`). Each app composes its config, converts it once into
a typed spec (:mod:`detcal.apps.schema`) and calls the API.

A command started fresh runs numpy's OpenBLAS on one thread (``OPENBLAS_NUM_THREADS=1``)
unless the environment already names a BLAS thread count. detcal's matrix products are
small or thin, and OpenBLAS's worker threads spin while they wait: with its default pool
a lean run at 5,000 images burns about 0.1 s more CPU and finishes no sooner. The setting
is made only before numpy is first imported, so importing this package into a process
that already uses numpy (a notebook, a test) changes nothing.

Likewise such a command asks numpy not to advise transparent huge pages for its large arrays
(``NUMPY_MADVISE_HUGEPAGE=0``) unless the environment sets that variable. Where the kernel grants
huge pages on that advice (``/sys/kernel/mm/transparent_hugepage/enabled`` set to ``madvise``, a
common default), every fresh large array is faulted in 2 MiB pages, each zeroed whole and, under the
default ``defrag`` setting, compacted for first: a lean run at 20,000 images spent 0.8-1.0 s of
system time that way, 0.3-0.4 s without the advice, for the same user time and peak memory.
"""

import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
"""The variables OpenBLAS reads for its thread count; a user's setting of any of them is kept."""

if "numpy" not in sys.modules and not any(os.environ.get(v) for v in BLAS_THREAD_VARIABLES):
    os.environ["OPENBLAS_NUM_THREADS"] = "1"

HUGEPAGE_VARIABLE = "NUMPY_MADVISE_HUGEPAGE"
"""The variable numpy reads at import for whether to advise huge pages; a user's setting is kept."""

if "numpy" not in sys.modules and HUGEPAGE_VARIABLE not in os.environ:
    os.environ[HUGEPAGE_VARIABLE] = "0"
