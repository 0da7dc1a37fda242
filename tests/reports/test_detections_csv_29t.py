"""detections.csv's lines built per block of rows from three row-major streams (floats, integers,
flags) joined by one gather of runs (issue 29, tenth pass): the same bytes as one ``repr``/``str`` per
cell whatever the column order, with block edges inside the data, no rows, one row, non-finite and
extreme values, and without orjson."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detcal.reports.detections_csv as mod

ODD = np.array([1e-5, -2.5e-7, 1e16, -1e22, np.nan, np.inf, -np.inf, 5e-324, -5e-324, 1.7976931348623157e308, -0.0])


def _by_cell(cols: dict[str, np.ndarray]) -> bytes:
    """The CSV made one cell at a time: ``repr`` of floats, ``str`` of integers, 0/1 for flags."""

    def cell(v: object) -> str:
        if isinstance(v, bool):
            return "1" if v else "0"
        return repr(v) if isinstance(v, float) else str(v)

    lines = [",".join(cols)] + [",".join(map(cell, row)) for row in zip(*(v.tolist() for v in cols.values()))]
    return ("\n".join(lines) + "\n").encode("ascii")


def _column(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "f":
        v = rng.uniform(-1e4, 1e4, n) / rng.choice([1, 3, 7, 1e6], n)
        return np.where(rng.random(n) < 0.15, rng.choice(ODD, n), v)
    if kind == "i":
        return rng.choice([-(2**63), 2**63 - 1, -1, 0, 7, 10**15, 123456789], n)
    if kind == "s":  # narrow types, widened as the writer does
        return rng.integers(-128, 127, n).astype(np.int8)
    if kind == "h":
        return (rng.random(n) * 100).astype(np.float32)
    return rng.random(n) < 0.5


def _cols(order: str, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"{k}{j}": _column(k, n, rng) for j, k in enumerate(order)}


ORDERS = ["fibf", "ifbfib", "f", "i", "b", "bb", "ff", "fbbbfffiib", "hsfb"]


@pytest.fixture(params=["orjson", "repr"])
def formatter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "repr":
        monkeypatch.setattr(mod, "_orjson", None)
    return request.param


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n, block", [(0, 4), (1, 4), (4, 4), (5, 4), (9, 4), (300, 64), (300, 2048)])
def test_lines_equal_one_cell_at_a_time(formatter: str, order: str, n: int, block: int) -> None:
    cols = _cols(order, n, seed=n + block)
    want = _by_cell(cols)
    assert b"".join(mod.iter_csv_bytes(cols, block=block)) == want
    pieces = [p if isinstance(p, bytes) else p.tobytes() for p in mod._iter_csv_arrays(cols, block=block)]
    assert b"".join(pieces) == want  # each block taken before the next overwrites the reused buffers


def test_odd_cells_at_the_block_edges(formatter: str, tmp_path: Path) -> None:
    """Cells spliced in from ``repr`` (scientific notation, non-finite) as the first and last cells of a
    block and of the whole table, in the first and the last float column."""
    n, block = 12, 4
    cols = _cols("fibf", n, seed=3)
    for name in ("f0", "f3"):
        cols[name][[0, 3, 4, 7, 8, 11]] = [1e-7, np.nan, -np.inf, 1e300, 5e-324, -1e-5]
    want = _by_cell(cols)
    assert b"".join(mod.iter_csv_bytes(cols, block=block)) == want
    mod.write_columns_csv(tmp_path / "d.csv", cols)
    assert (tmp_path / "d.csv").read_bytes() == want


def test_one_block_array_alone() -> None:
    cols = {"a": np.array([3, -1]), "x": np.array([0.5, 1e-5]), "f": np.array([True, False])}
    assert mod._block_array(list(cols.values())).tobytes() == b"3,0.5,1\n-1,1e-05,0\n"


def test_the_streams_and_runs_of_a_line() -> None:
    dtypes = [np.dtype(t) for t in ("int64", "int64", "float64", "bool", "float64", "float32", "int8")]
    members, runs = mod._streams(dtypes)
    # since the eleventh pass the flags are cells of the integer stream (0/1 by orjson): two streams, and
    # a flag between integer columns joins their run
    assert members == [[2, 4, 5], [0, 1, 3, 6]]
    assert runs == [(1, 0, 1), (0, 0, 0), (1, 2, 2), (0, 1, 2), (1, 3, 3)]


def test_the_written_file_and_no_rows(tmp_path: Path) -> None:
    cols = _cols("fib", 0, seed=0)
    mod.write_columns_csv(tmp_path / "d.csv", cols)
    assert (tmp_path / "d.csv").read_bytes() == b"f0,i1,b2\n"
    cols = _cols("fib", 5000, seed=1)
    mod.write_columns_csv(tmp_path / "d.csv", cols)
    assert (tmp_path / "d.csv").read_bytes() == _by_cell(cols)
