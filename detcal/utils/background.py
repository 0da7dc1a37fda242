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
handlers, no flushing of the parent's buffers a second time); it runs with
Python's cyclic garbage collector off (its work is one short piece, and a
collection would walk every object it made).

:func:`prestart` forks such a child at the start of a run instead, while the
process is still small: it runs a preparation (importing matplotlib) on the
second core while the caller computes, then waits for one piece of work, a
module-level function and its arguments pickled through a pipe
(:meth:`Worker.submit`, which returns the same :class:`Job`). A child forked
at the end of a run starts as large as the run (its resident size counts the
parent's pages it shares); a pre-started one holds only what the start-up
had, so the run's peak memory is the parent's own. :func:`run` submits to a
worker when there is one and falls back to :func:`start` otherwise.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import struct
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["Job", "Worker", "forking", "prestart", "run", "start"]


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
    # The child does one piece of work and leaves: no cyclic garbage collection in it (a collection walks
    # every object the work made, and the work is short; the figures' ~0.035 s of CPU at their import and end).
    gc.disable()
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


_HEADER = struct.Struct("<Q")
"""The length of the pickled work sent to a :class:`Worker` (0: none, the worker ends)."""


def _read_exactly(fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd`` (fewer only when the writer closed it first)."""
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Worker:
    """A child forked by :func:`prestart`, waiting for one piece of work (:meth:`submit`) or its end
    (:meth:`close`, also on leaving a ``with`` block)."""

    def __init__(self, pid: int, send_fd: int, result_fd: int) -> None:
        self._pid: int | None = pid
        self._send, self._result = send_fd, result_fd

    @property
    def waiting(self) -> bool:
        """Whether the worker still waits for its work (neither submitted nor closed)."""
        return self._pid is not None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        """Run ``fn(*args)`` in the worker (``fn`` a module-level function: it travels by name; ``args`` are
        pickled); :meth:`Job.join` waits for it and re-raises its exception. Raises ``RuntimeError`` when the
        worker is gone or already used (:func:`run` then falls back to :func:`start`)."""
        if self._pid is None:
            raise RuntimeError("the pre-started worker was already used or closed")
        pid, self._pid = self._pid, None
        payload = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            _write_all(self._send, _HEADER.pack(len(payload)) + payload)
        except OSError as e:  # the worker died before its work came (killed): reap it, let the caller fall back
            os.close(self._send)
            os.close(self._result)
            os.waitpid(pid, 0)
            raise RuntimeError(f"the pre-started worker is gone ({e})") from e
        os.close(self._send)
        return Job(pid, self._result)

    def close(self) -> None:
        """End a worker that got no work (nothing when it got some: its :class:`Job` waits for it)."""
        if self._pid is None:
            return
        pid, self._pid = self._pid, None
        with contextlib.suppress(OSError):
            _write_all(self._send, _HEADER.pack(0))
        os.close(self._send)
        os.close(self._result)
        os.waitpid(pid, 0)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve(prepare: Callable[[], Any] | None, job_fd: int, result_fd: int) -> None:  # pragma: no cover - child
    def work() -> None:
        if prepare is not None:
            with contextlib.suppress(Exception):  # a preparation only saves time: the work meets its errors
                prepare()
        head = _read_exactly(job_fd, _HEADER.size)
        n = _HEADER.unpack(head)[0] if len(head) == _HEADER.size else 0
        if n == 0:
            return  # closed without work
        fn, args = pickle.loads(_read_exactly(job_fd, n))
        fn(*args)

    _child(work, result_fd)


def prestart(prepare: Callable[[], Any] | None = None) -> Worker | None:
    """Fork a :class:`Worker` now, which runs ``prepare()`` at once (its errors are ignored: the work meets
    them again) and then waits for its work; ``None`` where :func:`forking` is false or the fork fails (the
    caller's :func:`run` then runs the work as :func:`start` does)."""
    if not forking():
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    job_r, job_w = os.pipe()
    res_r, res_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (job_r, job_w, res_r, res_w):
            os.close(fd)
        return None
    if pid == 0:  # pragma: no cover - the child
        os.close(job_w)
        os.close(res_r)
        _serve(prepare, job_r, res_w)
    os.close(job_r)
    os.close(res_w)
    return Worker(pid, job_w, res_r)


def run(worker: Worker | None, fn: Callable[..., Any], *args: Any) -> Job:
    """``fn(*args)`` in ``worker`` when it still waits, else as :func:`start` does (a child forked now, or
    inline): the same work and the same errors at :meth:`Job.join`."""
    if worker is not None and worker.waiting:
        try:
            return worker.submit(fn, *args)
        except RuntimeError:
            pass
    return start(partial(fn, *args))
