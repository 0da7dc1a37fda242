"""What every detcal command shares with its task, without Hydra or OmegaConf.

:class:`AppContext` (what a task gets besides its spec), the process's run id, and the pieces of a command's
run that both ways of running it use: through Hydra (:func:`detcal.apps._hydra.run_app`) and replayed from
a stored run record (:mod:`detcal.apps._replay`), which imports neither Hydra nor OmegaConf.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NoReturn

from detcal.apps._run_dir import run_files

__all__ = [
    "AppContext",
    "RUN_ID",
    "debug_requested",
    "fail",
    "full_errors",
    "reported_errors",
    "is_secondary_rank",
    "log_failure",
    "reuse_freed_memory",
]

RUN_ID = os.urandom(3).hex()  # as secrets.token_hex(3), without importing hmac and OpenSSL's hashlib
"""Random id of this process, the suffix of its run directory (``${detcal_run_id:}``)."""


def is_secondary_rank() -> bool:
    """True in a torchrun rank other than 0 (it computes its share; rank 0 writes the report)."""
    return os.environ.get("LOCAL_RANK") is not None and os.environ.get("RANK", "0") != "0"


def debug_requested() -> bool:
    """``HYDRA_FULL_ERROR=1`` or ``DETCAL_DEBUG`` set: errors show their traceback."""
    return os.environ.get("HYDRA_FULL_ERROR", "") == "1" or os.environ.get("DETCAL_DEBUG", "") not in ("", "0")


def fail(prog: str, message: str) -> NoReturn:
    """One line on stderr, exit status 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


@contextlib.contextmanager
def full_errors() -> Iterator[None]:
    """``HYDRA_FULL_ERROR=1`` inside (errors reach detcal, which decides what the user sees), restored after."""
    saved = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved


@contextlib.contextmanager
def reported_errors(prog: str, debug: bool, message: Callable[[BaseException], str | None]) -> Iterator[None]:
    """A command's outermost handler: an error the user can fix (``message`` gives its line) ends in that line
    and exit status 2, an interrupt in exit status 130; a bug, or any error under ``debug``, keeps its
    traceback."""
    try:
        yield
    except SystemExit:
        raise
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:
        msg = message(exc)
        if debug or msg is None:
            raise
        fail(prog, msg)


def log_failure(message: str) -> None:
    """Write the failure to the run's log file only (the console already shows it)."""
    root = logging.getLogger()
    rec = logging.LogRecord("detcal", logging.ERROR, __file__, 0, "run failed: %s", (message,), None)
    for h in root.handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(rec)


_MMAP_THRESHOLD = 1 << 30
_TRIM_THRESHOLD = 1 << 31


def reuse_freed_memory() -> None:
    """glibc: serve the large arrays of a run from memory the process has freed, not from fresh pages.

    By default glibc maps every array of more than a few MiB afresh and unmaps it when freed, so
    each of the many full-size temporaries of a run pays the page faults of its memory again (a
    tenth of the lean run's CPU at 5,000 images, more at 20,000). With these thresholds freed
    memory stays in the process for the next array; the peak resident memory is unchanged (it is
    the most held at once). No-op off glibc, or with ``DETCAL_MALLOC_DEFAULTS=1``.
    """
    if not sys.platform.startswith("linux") or os.environ.get("DETCAL_MALLOC_DEFAULTS") == "1":
        return

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt thresholds)
        return
    mallopt(-1, _TRIM_THRESHOLD)  # M_TRIM_THRESHOLD
    mallopt(-3, _MMAP_THRESHOLD)  # M_MMAP_THRESHOLD


class AppContext:
    """What a task gets besides its spec: ``prog``, ``run_dir``, ``overrides``,
    ``choices`` (config group -> option) and ``cfg`` (for the provenance header).

    ``config``: the resolved config itself (plain dicts and lists), when the run was replayed from a stored
    run record and has no ``cfg``."""

    def __init__(
        self,
        prog: str,
        run_dir: Path,
        overrides: list[str],
        choices: Mapping[str, Any],
        cfg: Any,
        *,
        config: dict[str, Any] | None = None,
    ):
        self.prog, self.run_dir, self.overrides, self.choices, self.cfg = prog, run_dir, overrides, choices, cfg
        self._config = config

    def resolved_config(self) -> Any:
        """The run's whole config, resolved, as plain containers (metrics.json ``config``)."""
        if self._config is not None:
            return self._config
        from omegaconf import OmegaConf  # lazy: only a run composed by Hydra has a cfg; a replayed run has none

        return OmegaConf.to_container(self.cfg, resolve=True)

    def header(self) -> dict[str, Any]:
        """metrics.json provenance of this run, with ``run_files``: what the run directory holds besides the
        outputs the command is about to write (listed under ``files``): the log, ``.hydra/`` files, data
        the run generated (folders as ``name/``)."""

        return {
            "run_dir": str(Path(self.run_dir).resolve()),
            "overrides": list(self.overrides),
            "config": self.resolved_config(),
            "run_files": run_files(self.run_dir),
        }

    def instantiate(self, node: Any, key: str) -> Any:
        """Build a ``_target_`` node (a calibrator) with a clear error naming ``key``; the target must be a
        subclass of :class:`detcal.calibration.base.Calibrator`, checked before it is called."""
        from detcal.apps._instantiate import (
            instantiate_checked,  # lazy: Hydra's instantiate, only for commands that build calibrators
        )

        return instantiate_checked(node, key)
