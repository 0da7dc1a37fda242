"""The replicate product ``A @ X`` of a compressed sparse column matrix, without importing ``scipy.sparse``.

The bootstrap's product (:mod:`detcal.metrics.image_cells`) runs over a CSC
matrix ``[cells x fields, images]`` built from the per-image sums, with scipy's
compiled kernels ``csc_matvecs`` (several weight columns) and ``csc_matvec``
(one). Those kernels live in scipy's extension module
``scipy.sparse._sparsetools``, which needs nothing of ``scipy.sparse`` itself;
importing ``scipy.sparse`` however costs about 0.09 s of CPU and 20 MB of
memory (it brings in scipy's array-API layer, ``numpy.f2py``,
``numpy.testing`` and ``numpy.ma``). So :func:`kernels` loads that one
extension file directly (``importlib``'s extension loader, the file found
next to scipy's package without running ``scipy/__init__.py`` or
``scipy/sparse/__init__.py``) and checks its two functions on a small product
with known result. :func:`csc_product` then gives a :class:`CscProduct` whose
``@`` calls the same kernel ``scipy.sparse.csc_matrix.__matmul__`` calls, on
the same arrays: the same additions in the same order, so the same numbers bit
for bit (tests/metrics/test_intervals_memory_29v.py). When the file cannot be found
or loaded, or its functions do not take the arguments this module passes, the
check fails and :func:`csc_product` returns ``scipy.sparse.csc_matrix`` as
before.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["CscProduct", "csc_product", "kernels", "kernels_work", "load_kernels", "sparsetools_path"]

MODULE = "scipy.sparse._sparsetools"
"""The name scipy gives the extension module (its init function is found by the last part)."""


def sparsetools_path() -> Path | None:
    """The file of scipy's ``_sparsetools`` extension, located without importing scipy; None when absent."""
    try:
        spec = importlib.util.find_spec("scipy")  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = Path(root) / "sparse" / f"_sparsetools{suffix}"
            if path.is_file():
                return path
    return None


def kernels_work(mod: Any) -> bool:
    """Whether ``mod``'s ``csc_matvecs`` and ``csc_matvec`` take this module's arguments and give the known
    product of a small matrix (whole numbers: exact in any order)."""
    indptr = np.array([0, 2, 3, 3], dtype=np.int32)  # columns: {0: 1, 2: 2}, {1: 3}, {} of a 3 x 3 matrix
    indices = np.array([0, 2, 1], dtype=np.int32)
    data = np.array([1.0, 2.0, 3.0])
    x = np.array([[1.0, 10.0], [2.0, 20.0], [5.0, 50.0]])
    want = np.array([[1.0, 10.0], [6.0, 60.0], [2.0, 20.0]])
    try:
        y = np.zeros((3, 2))
        mod.csc_matvecs(3, 3, 2, indptr, indices, data, x.ravel(), y.ravel())
        v = np.zeros(3)
        mod.csc_matvec(3, 3, indptr, indices, data, np.ascontiguousarray(x[:, 0]), v)
    except Exception:  # any failure (a changed signature, a missing function) means: use scipy.sparse
        return False
    return bool(np.array_equal(y, want) and np.array_equal(v, want[:, 0]))


def load_kernels(path: Path | None) -> ModuleType | None:
    """The extension module at ``path`` (scipy's ``_sparsetools``) when it loads and passes the check, else None."""
    if path is None:
        return None
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
        spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
        if spec is None:
            return None
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except Exception:  # not loadable here (another build, a broken file): scipy.sparse is used instead
        return None
    return mod if kernels_work(mod) else None


@functools.cache
def kernels() -> ModuleType | None:
    """scipy's checked ``_sparsetools`` kernels (:func:`load_kernels`), loaded once; None: use scipy.sparse."""
    return load_kernels(sparsetools_path())


@dataclass(frozen=True)
class CscProduct:
    """A CSC matrix ``shape = (M, N)``: column ``j``'s entries ``data[indptr[j]:indptr[j+1]]`` in rows
    ``indices[...]`` (one index type for both arrays). ``self @ x`` (``x [N, b]`` or ``[N]``) is computed
    as ``scipy.sparse.csc_matrix.__matmul__`` computes it: ``csc_matvec`` for one column, ``csc_matvecs``
    for several, into a zeroed float64 result (each output entry adds its terms in column order)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple[int, int]
    module: ModuleType

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return int(self.indptr[-1]) if len(self.indptr) else 0

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        m, n = self.shape
        xa = np.ascontiguousarray(x, dtype=np.float64)
        if xa.shape[0] != n or xa.ndim not in (1, 2):
            raise ValueError(f"dimension mismatch: a ({m}, {n}) matrix times an array of shape {xa.shape}")
        if xa.ndim == 1 or xa.shape[1] == 1:  # one weight column: the vector kernel, as scipy dispatches
            out = np.zeros(m, dtype=np.float64)
            self.module.csc_matvec(m, n, self.indptr, self.indices, self.data, xa.reshape(-1), out)
            return out if xa.ndim == 1 else out.reshape(m, 1)
        out = np.zeros((m, xa.shape[1]), dtype=np.float64)
        self.module.csc_matvecs(m, n, xa.shape[1], self.indptr, self.indices, self.data, xa.ravel(), out.ravel())
        return out

    def toarray(self) -> np.ndarray:
        """The dense ``[M, N]`` matrix (duplicate entries added)."""
        out = np.zeros(self.shape, dtype=np.float64)
        cols = np.repeat(np.arange(self.shape[1]), np.diff(self.indptr))
        np.add.at(out, (self.indices, cols), self.data)
        return out


def csc_product(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> Any:
    """The CSC matrix of these arrays (:class:`CscProduct` on scipy's kernels; ``scipy.sparse.csc_matrix``
    of the same arrays when the kernels are not available): ``@`` gives the same numbers either way."""
    mod = kernels()
    if mod is not None:
        return CscProduct(indptr, indices, np.ascontiguousarray(data, dtype=np.float64), shape, mod)
    import scipy.sparse as sp  # lazy: the fallback only (its import is what this module avoids)

    return sp.csc_matrix((data, indices, indptr), shape=shape, copy=False)
