"""The input files' SHA-256 in report.html's provenance, kept from run to run (detcal.reports.html.digests)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from detcal.reports.html import digests
from detcal.reports.html.page import file_digests


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DETCAL_DIGEST_CACHE", raising=False)
    monkeypatch.setattr(digests, "STABLE_NS", 0)  # the files here were just written
    return tmp_path / "cache" / "digests.json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _no_hashing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(path: object) -> str:
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(digests, "sha256_file", fail)


def test_digest_is_read_back_while_the_file_is_unchanged(tmp_path: Path, cache: Path, monkeypatch) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(b"[1, 2, 3]" * 1000)
    b.write_bytes(b"")
    want = [_sha(a.read_bytes()), _sha(b"")]
    assert digests.sha256_digests([a, b]) == want
    assert cache.is_file()
    _no_hashing(monkeypatch)
    assert digests.sha256_digests([a, b]) == want
    assert digests.sha256_digests([str(b)]) == want[1:]


def test_a_changed_file_is_hashed_again(tmp_path: Path, cache: Path) -> None:
    f = tmp_path / "r.json"
    f.write_bytes(b"abcd")
    st = f.stat()
    assert digests.sha256_digests([f]) == [_sha(b"abcd")]
    time.sleep(0.05)  # past the file system's timestamp tick (STABLE_NS guards this in a run; it is 0 here)
    f.write_bytes(b"abce")  # same size, and the modification time set back: the change time still moves
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digests.sha256_digests([f]) == [_sha(b"abce")]
    g = tmp_path / "g.json"  # another file at the same path (a new inode)
    g.write_bytes(b"zzzz")
    os.replace(g, f)
    assert digests.sha256_digests([f]) == [_sha(b"zzzz")]


def test_a_file_changed_just_before_hashing_is_not_stored(tmp_path: Path, cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(digests, "STABLE_NS", 10**12)  # every file here is younger than that
    f = tmp_path / "r.json"
    f.write_bytes(b"x")
    assert digests.sha256_digests([f]) == [_sha(b"x")]
    assert not cache.exists()


def test_a_file_written_while_hashed_is_not_stored(tmp_path: Path, cache: Path, monkeypatch) -> None:
    f = tmp_path / "r.json"
    f.write_bytes(b"first")
    plain = digests.sha256_file

    def hash_then_write(path: object) -> str:
        out = plain(path)
        f.write_bytes(b"second!")
        return out

    monkeypatch.setattr(digests, "sha256_file", hash_then_write)
    assert digests.sha256_digests([f]) == [_sha(b"first")]
    assert not cache.exists()


def test_switched_off_another_users_or_damaged_cache(tmp_path: Path, cache: Path, monkeypatch) -> None:
    f = tmp_path / "r.json"
    f.write_bytes(b"data")
    monkeypatch.setenv("DETCAL_DIGEST_CACHE", "0")
    assert digests.sha256_digests([f]) == [_sha(b"data")]
    assert not cache.exists()
    monkeypatch.delenv("DETCAL_DIGEST_CACHE")
    digests.sha256_digests([f])
    key = next(iter(json.loads(cache.read_text())["entries"]))
    forged = {"format": digests.FORMAT, "entries": {key: "sha256:forged"}}
    cache.write_text(json.dumps(forged))
    monkeypatch.setattr(digests.os, "getuid", lambda: os.getuid() + 1)  # the file is not this user's
    assert digests.sha256_digests([f]) == [_sha(b"data")]
    monkeypatch.undo()
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(cache.parent))
    monkeypatch.setattr(digests, "STABLE_NS", 0)
    for damaged in ("{not json", json.dumps({"format": 999, "entries": {key: "sha256:old"}}), "[]"):
        cache.write_text(damaged)
        assert digests.sha256_digests([f]) == [_sha(b"data")]
    assert json.loads(cache.read_text())["entries"] == {key: _sha(b"data")}


def test_an_unwritable_cache_is_not_fatal(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(blocker / "below"))  # a folder under a file cannot be made
    monkeypatch.setattr(digests, "STABLE_NS", 0)
    f = tmp_path / "r.json"
    f.write_bytes(b"q")
    assert digests.sha256_digests([f]) == [_sha(b"q")]


def test_the_oldest_entries_go(tmp_path: Path, cache: Path, monkeypatch) -> None:
    monkeypatch.setattr(digests, "MAX_ENTRIES", 3)
    files = []
    for k in range(5):
        files.append(tmp_path / f"{k}.json")
        files[-1].write_bytes(bytes([k]))
        digests.sha256_digests([files[-1]])
    entries = json.loads(cache.read_text())["entries"]
    assert len(entries) == 3
    assert sorted(entries.values()) == sorted(_sha(bytes([k])) for k in (2, 3, 4))


def test_provenance_digests_and_files_left_unhashed(tmp_path: Path, cache: Path, monkeypatch) -> None:
    gt, res = tmp_path / "gt.json", tmp_path / "res.json"
    gt.write_bytes(b'{"images": []}')
    res.write_bytes(b"[]")
    m = {
        "config": {"data": {"gt": str(gt), "results": str(res), "image_dir": str(tmp_path)}},
        "data": {"gt": str(gt), "missing": str(tmp_path / "none.json")},
    }
    want = file_digests(m)
    assert ("data.gt", str(gt), _sha(gt.read_bytes())) in want
    assert ("data.results", str(res), _sha(b"[]")) in want
    assert ("data.image_dir", str(tmp_path), "directory") in want
    _no_hashing(monkeypatch)
    assert file_digests(m) == want  # the same rows in the same order, read back
    monkeypatch.setattr("detcal.reports.html.page._HASH_LIMIT", 3)
    assert ("data.gt", str(gt), f"not hashed ({gt.stat().st_size} bytes, over 256 MB)") in file_digests(m)
