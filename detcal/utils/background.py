"""One piece of work in a forked child process while the caller goes on (writers off the critical path).

:func:`start` forks a child that runs ``fn()`` (its inputs reach it through
fork, nothing is pickled on the way in) and returns a :class:`Job`;
:meth:`Job.join` waits for it and re-raises, in the caller, the exception the
child ended with (pickled back through a pipe; an exception that cannot be
pickled comes back as a ``RuntimeError`` with its type and message). Where
forking is not available or not safe (not Linux, or ``DETCAL_INLINE_WRITERS=1``
in the environment), ``fn`` runs at once in the caller and ``join`` re-raises
its exception there, so the result is the same files and the same errors.

Used for the figures of a run: matplotlib's drawing is the longest writer,
and in a child it overlaps the CSV, metrics.json, summary.md and the printed
summary on a second core. The child leaves with ``os._exit`` (no atexit
handlers, no flushing of the parent's buffers a second time).
"""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["Job", "forking", "start"]


def forking() -> bool:
    """Whether :func:`start` runs its work in a forked child (Linux, not turned off by the environment)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and os.environ.get("DETCAL_INLINE_WRITERS") != "1"


class Job:
    """A started piece of work; :meth:`join` waits for it and re-raises its exception."""

    def __init__(self, pid: int | None, fd: int | None, error: BaseException | None = None) -> None:
        self._pid, self._fd, self._error = pid, fd, error

    def join(self) -> None:
        """Wait for the work to end; raise the exception it ended with, if any."""
        if self._pid is not None:
            assert self._fd is not None
            chunks = []
            while chunk := os.read(self._fd, 1 << 16):
                chunks.append(chunk)
            os.close(self._fd)
            _, status = os.waitpid(self._pid, 0)
            self._pid = None
            payload = b"".join(chunks)
            if payload:
                self._error = pickle.loads(payload)
            elif os.waitstatus_to_exitcode(status) != 0:
                self._error = RuntimeError(f"the writer process ended with status {os.waitstatus_to_exitcode(status)}")
        if self._error is not None:
            err, self._error = self._error, None
            raise err


def _child(fn: Callable[[], Any], fd: int) -> None:  # pragma: no cover - runs in the forked child
    code = 0
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent
        code = 1
        try:
            data = pickle.dumps(e)
            pickle.loads(data)
        except Exception:  # noqa: BLE001
            data = pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os._exit(code)


def start(fn: Callable[[], Any]) -> Job:
    """Run ``fn()`` in a forked child (or inline where :func:`forking` is false); :meth:`Job.join` waits."""
    if forking():
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
        else:
            if pid == 0:  # pragma: no cover - the child
                os.close(r)
                _child(fn, w)
            os.close(w)
            return Job(pid, r)
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - raised at join, as from a child
        return Job(None, None, e)
    return Job(None, None)
