"""detcal.utils.scoped.Scoped: items kept while a block is open, shared by nested blocks, dropped when the
outermost block closes (also on an exception); and the two caches built on it clear themselves."""

from __future__ import annotations

import pytest

from detcal.metrics import confidence_compute, confidence_loo
from detcal.utils.scoped import Scoped


def test_items_live_while_the_outermost_block_is_open() -> None:
    s = Scoped()
    assert not s.active
    with s.open():
        assert s.active
        s.items.append("a")
        with s.open():  # nested: the same items
            assert s.items == ["a"]
            s.items.append("b")
        assert s.active and s.items == ["a", "b"]  # the inner block's close keeps them
    assert not s.active and s.items == []


def test_items_are_dropped_when_the_block_raises() -> None:
    s = Scoped()
    with pytest.raises(RuntimeError), s.open():
        s.items.append(1)
        raise RuntimeError("boom")
    assert not s.active and s.items == []
    with s.open():  # usable again
        assert s.items == []


def test_the_measure_caches_are_scoped() -> None:
    for opened, store in (
        (confidence_compute.summaries_shared, confidence_compute._SUMMARIES),
        (confidence_loo.loo_shared, confidence_loo._LOO),
    ):
        assert not store.active
        with opened():
            assert store.active
            store.items.append(object())
        assert not store.active and store.items == []
