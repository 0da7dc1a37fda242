"""detections.csv's columns read in place from orjson's output and its lines built in reused buffers
(issue 29, writers): the same bytes as one ``repr``/``str`` per cell, at every block size, whichever
column comes last and whether or not a block's last cell is spliced in from ``repr``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import detcal.reports.detections_csv as mod


def _by_cell(cols: dict[str, np.ndarray]) -> bytes:
    """The CSV made one cell at a time: ``repr`` of floats, ``str`` of integers, 0/1 for flags."""

    def cell(v: object) -> str:
        if isinstance(v, bool):
            return "1" if v else "0"
        return repr(v) if isinstance(v, float) else str(v)

    lines = [",".join(cols)]
    rows = zip(*(v.tolist() for v in cols.values()))
    lines += [",".join(cell(v) for v in row) for row in rows]
    return ("\n".join(lines) + "\n").encode("ascii") if len(lines) > 1 else (lines[0] + "\n").encode("ascii")


def _cols(n: int, seed: int, last: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    odd = np.array([1e-5, 1e16, -2.5e-7, np.nan, np.inf, -np.inf, 5e-324, 1.7976931348623157e308])
    f = rng.uniform(-1e3, 1e3, n) / rng.choice([1, 3, 7], n)
    f = np.where(rng.random(n) < 0.1, rng.choice(odd, n), f)
    cols = {
        "i": rng.integers(-(2**62), 2**62, n),
        "f": f,
        "b": rng.random(n) < 0.5,
        "g": rng.random(n),
    }
    tail = {"int": rng.integers(-3, 3, n), "float": np.where(rng.random(n) < 0.3, rng.choice(odd, n), rng.random(n))}
    tail["flag"] = rng.random(n) < 0.5
    cols["z"] = tail[last]
    return cols


@pytest.mark.parametrize("last", ["int", "float", "flag"])
@pytest.mark.parametrize("n, block", [(0, 7), (1, 7), (2, 1), (23, 1), (23, 2), (23, 7), (500, 64), (500, 32768)])
def test_lines_equal_one_cell_at_a_time(tmp_path: Path, last: str, n: int, block: int) -> None:
    for seed in range(3):
        cols = _cols(n, seed, last)
        want = _by_cell(cols)
        assert b"".join(mod.iter_csv_bytes(cols, block=block)) == want
        pieces = [p if isinstance(p, bytes) else p.tobytes() for p in mod._iter_csv_arrays(cols, block=block)]
        assert b"".join(pieces) == want  # each block taken before the next overwrites the reused buffer
        mod.write_columns_csv(tmp_path / "d.csv", cols)
        assert (tmp_path / "d.csv").read_bytes() == want


def test_a_column_as_cells_with_separators() -> None:
    v = np.array([0.5, 1e-5, 3.0])
    cells = mod._column_cells(v).tobytes()
    assert cells[:-1] == b"0.5,1e-05,3.0" and cells[-1:] == b","  # spliced: every separator a comma
    cells = mod._column_cells(np.array([0.5, 2.25])).tobytes()
    assert cells == b"0.5,2.25]"  # orjson's list read in place: the last separator is its "]"
    buf, lens = mod._column_chunks(np.array([10, -7, 123456789]))
    assert buf.tobytes() == b"10,-7,123456789]" and lens.tolist() == [3, 3, 10]
    assert mod._column_cells(np.array([10, -7])).tobytes()[:-1] == b"10,-7"
    assert mod._column_cells(np.zeros(0)).tobytes() == b""
