"""Python's cyclic garbage collector around the imports of a command's start-up.

A command imports some 60,000 objects that live as long as the process (the modules' functions, classes
and constants of Hydra, OmegaConf, numpy and detcal). The collector runs every 700 new container objects
and each collection walks every object of its generation: the imports of ``detcal-evaluate`` triggered
about 100 collections that freed about 1,100 objects, the full collection during Hydra's composition
walked every imported object again, and so did the last collection at the interpreter's exit.
:func:`collector_paused` with ``freeze=True`` pauses the collector during the imports and then moves every
object alive to the permanent generation (``gc.freeze``), where no collection walks it (the 5k lean
run: about 0.03 s less CPU to the command's first line, 0.04 s less at exit). What that costs:
reference cycles among the frozen objects are no longer collected (the imports' own garbage, and any
cycle of them dropped later); objects without cycles are freed as before, when their last reference goes.

The figure writer draws inside :func:`collector_paused` too (without ``freeze``): a figure allocates many
small objects with few cycles, and each collection they set off would walk the run's live objects (about
10% of the figures' CPU at 5k); the cycles wait for the first collection after the block.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused", "pause", "resume"]


def pause() -> bool:
    """Pause automatic collection; True when the collector was running (give it to :func:`resume`)."""
    running = gc.isenabled()
    gc.disable()
    return running


def resume(running: bool, *, freeze: bool = False) -> None:
    """Undo :func:`pause`. ``freeze``: first move every object alive to the permanent generation (for
    imports, whose objects live as long as the process); only when the collector was running, so that a
    caller who had disabled it finds it as it left it."""
    if not running:
        return
    if freeze:
        gc.freeze()
    gc.enable()


@contextlib.contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """:func:`pause` within the block, :func:`resume` at its end (a no-op when the collector is disabled)."""
    running = pause()
    try:
        yield
    finally:
        resume(running, freeze=freeze)
