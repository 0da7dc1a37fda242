"""A run directory holds one run.

Every command's run directory is claimed here, before Hydra writes anything into it (its ``.hydra/``
files, the log), for a single run and for each job of a sweep:

- the lock ``.detcal.lock`` is opened without following a symlink (a planted link is refused, never
  truncated) and held for the life of the process; a directory another live run holds is refused, and
  nothing of that run is touched;
- a directory that already holds files is refused (exit status 2, one sentence) unless the command line
  says ``overwrite=true``; then the earlier run is moved aside to a hidden sibling
  ``.<name>~previous-<id>`` and removed once the new run has completed. A new run that fails or is
  interrupted puts the earlier run back; one that is killed leaves it aside, and the next run into
  the directory puts it back before anything else (the killed run's files are removed). So a refused,
  failed or killed run leaves the previous complete run as it was, ``.hydra/``, log and outputs included;
- ``overwrite=true`` only replaces a detcal run (a directory with ``.hydra/``, ``metrics.json`` or
  ``.detcal.lock``): a folder of other files is refused even then;
- commands that resume in their own directory (``detcal-main``: its finished stages are kept) may rerun
  into it; leftover temporary files of a killed write (``.<file>.<random>.tmp``) are removed first, and
  a symlink where the run writes its log or ``.hydra/`` files is refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from detcal.core.errors import DetcalError

__all__ = ["claim", "OVERWRITE_ARG", "pop_overwrite", "guarded_jobs", "run_files"]

OVERWRITE_ARG = "overwrite=true"
"""The command-line word that lets a run replace the run already in its directory."""

LOCK_NAME = ".detcal.lock"
_MARKERS = (".hydra", "metrics.json", LOCK_NAME)
_held: dict[Path, Any] = {}


def pop_overwrite(argv: list[str]) -> bool:
    """Remove ``overwrite=true`` (or ``overwrite=false``) from ``argv`` (in place); True when it was true."""
    words = [a for a in argv if a.lower() in (OVERWRITE_ARG, "overwrite=false")]
    for a in words:
        argv.remove(a)
    return any(a.lower() == OVERWRITE_ARG for a in words)


def _aside_dirs(run_dir: Path, kind: str = "previous") -> list[Path]:
    pat = f".{run_dir.name}~{kind}-*"
    return sorted(p for p in run_dir.parent.glob(pat) if p.is_dir() and not p.is_symlink())


def lock(run_dir: Path) -> None:
    """Hold ``run_dir/.detcal.lock`` for the life of the process (opened with no-follow: a symlink there is
    refused); a directory another live run holds is refused, nothing written into it."""
    import fcntl  # lazy: POSIX only

    run_dir = Path(run_dir)
    key = run_dir.resolve()
    if key in _held:
        raise DetcalError(
            f"run directory {run_dir} is in use by another detcal run (in this process); "
            "choose another hydra.run.dir or wait for that run to end"
        )
    if run_dir.is_symlink():
        raise DetcalError(f"run directory {run_dir} is a symbolic link; give the directory it points to")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise DetcalError(f"run directory {run_dir} is a file, not a directory; choose another hydra.run.dir") from None
    except OSError as e:
        raise DetcalError(f"cannot create the run directory {run_dir}: {e.strerror}") from None
    path = run_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise DetcalError(f"{path} is a symbolic link; a run never writes through one (remove it)") from None
        raise DetcalError(f"cannot create the run's lock {path}: {e.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DetcalError(
            f"run directory {run_dir} is in use by another detcal run; "
            "choose another hydra.run.dir or wait for that run to end"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held[key] = fd


def _release(run_dir: Path) -> None:
    fd = _held.pop(Path(run_dir).resolve(), None)
    if fd is not None:
        os.close(fd)


def run_files(run_dir: Path) -> list[str]:
    """The entries of a run directory, relative (``.hydra/`` files one by one, other folders as ``name/``;
    the lock and temporary files left out)."""
    rd = Path(run_dir)
    if not rd.is_dir():
        return []
    out = []
    for p in _entries(rd):
        if p.name.endswith(".tmp"):
            continue
        if p.name == ".hydra" and p.is_dir() and not p.is_symlink():
            out += [f".hydra/{q.name}" for q in sorted(p.iterdir())]
        else:
            out.append(p.name + ("/" if p.is_dir() and not p.is_symlink() else ""))
    return out


def _entries(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.iterdir() if p.name != LOCK_NAME)


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)


def _recover(run_dir: Path) -> None:
    """A run killed after ``overwrite=true`` moved the earlier run aside: put that run back when the killed
    one did not complete (no metrics.json), else the aside copy is stale and removed. Copies kept for a
    resumed run are stale once that run is gone."""
    for aside in _aside_dirs(run_dir, "resume"):
        shutil.rmtree(aside, ignore_errors=True)
    for aside in _aside_dirs(run_dir):
        if (run_dir / "metrics.json").is_file():
            shutil.rmtree(aside, ignore_errors=True)
            continue
        _put_back(run_dir, aside)
        print(
            f"detcal: put back the earlier run of {run_dir} (the run that replaced it did not finish)", file=sys.stderr
        )


def _put_back(run_dir: Path, aside: Path) -> None:
    for p in _entries(run_dir):
        _remove(p)
    for p in aside.iterdir():
        os.replace(p, run_dir / p.name)
    aside.rmdir()


def _check_no_links(run_dir: Path) -> None:
    for p in [run_dir / ".hydra", *run_dir.glob(".hydra/*"), *run_dir.glob("*.log")]:
        if p.is_symlink():
            raise DetcalError(f"{p} is a symbolic link; a run never writes through one (remove it)")


def _remove_temporaries(run_dir: Path) -> None:
    """Hidden ``.<name>.<random>.tmp`` files an atomic write left when its process was killed."""
    for p in run_dir.rglob(".*.tmp"):
        if p.is_file() or p.is_symlink():
            p.unlink(missing_ok=True)


def _keep_for_resume(run_dir: Path) -> Path:
    """A resumed run rewrites ``.hydra/`` and appends to the log: keep copies to put back if it fails."""
    _check_no_links(run_dir)
    _remove_temporaries(run_dir)
    aside = run_dir.parent / f".{run_dir.name}~resume-{os.getpid()}"
    aside.mkdir()
    if (run_dir / ".hydra").is_dir():
        shutil.copytree(run_dir / ".hydra", aside / ".hydra")
    for log in run_dir.glob("*.log"):
        shutil.copy2(log, aside / log.name)
    return aside


def claim(run_dir: Path, *, overwrite: bool, resumable: bool) -> Path | None:
    """Make ``run_dir`` this run's own before anything is written into it (see the module docstring).
    Returns the hidden directory that keeps the earlier run (or, resuming, its ``.hydra/`` and log)."""
    run_dir = Path(run_dir)
    is_run = any((run_dir / m).exists() for m in _MARKERS)
    had_dir, had_lock = run_dir.is_dir(), (run_dir / LOCK_NAME).exists() or (run_dir / LOCK_NAME).is_symlink()
    lock(run_dir)
    try:
        _recover(run_dir)
        entries = _entries(run_dir)
        if not entries:
            return None
        if resumable:
            return _keep_for_resume(run_dir)
        names = ", ".join(p.name for p in entries[:5]) + (", ..." if len(entries) > 5 else "")
        if not overwrite:
            raise DetcalError(
                f"run directory {run_dir} already holds files ({names}): a run directory holds one run; "
                f"choose another hydra.run.dir, or add {OVERWRITE_ARG} to replace that run"
            )
        if not is_run:
            raise DetcalError(
                f"run directory {run_dir} holds files that are not a detcal run ({names}); "
                f"{OVERWRITE_ARG} only replaces a detcal run: choose another hydra.run.dir"
            )
        _remove_temporaries(run_dir)
        aside = run_dir.parent / f".{run_dir.name}~previous-{os.getpid()}"
        aside.mkdir()
        for p in _entries(run_dir):
            os.replace(p, aside / p.name)
        return aside
    except BaseException:  # a refused run leaves the directory as it found it
        _release(run_dir)
        if not had_lock:
            (run_dir / LOCK_NAME).unlink(missing_ok=True)
        if not had_dir:
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise


def finish(run_dir: Path, aside: Path | None, ok: bool) -> None:
    """After the run: release the lock; drop what was kept aside (``ok``), or put it back (a failed run)."""
    _release(run_dir)
    if aside is None or not aside.exists():
        return
    if ok:
        shutil.rmtree(aside, ignore_errors=True)
    elif "~resume-" in aside.name:
        for p in aside.iterdir():
            _remove(run_dir / p.name)
            os.replace(p, run_dir / p.name)
        aside.rmdir()
    else:
        _put_back(run_dir, aside)


def _output_dir(config: Any, job_dir_key: str, job_subdir_key: str | None) -> Path:
    """The job's directory, read from the config as Hydra's ``run_job`` reads it."""
    from hydra.core.hydra_config import (
        HydraConfig,  # lazy: Hydra only where a command composes its config, kept out of start-up
    )

    hc = HydraConfig.instance()
    saved = hc.cfg
    if saved is None:  # a single run: no other job's HydraConfig to read by mistake
        try:  # set_config copies the whole hydra node; only a ${hydra:...} interpolation needs it
            return _select_dir(config, job_dir_key, job_subdir_key)
        except Exception:  # noqa: BLE001 - read again below with the HydraConfig set, as Hydra does
            pass
    hc.set_config(config)
    try:
        return _select_dir(config, job_dir_key, job_subdir_key)
    finally:
        hc.cfg = saved


def _select_dir(config: Any, job_dir_key: str, job_subdir_key: str | None) -> Path:
    from omegaconf import OmegaConf  # lazy: Hydra only where a command composes its config, kept out of start-up

    out = str(OmegaConf.select(config, job_dir_key))
    if job_subdir_key is not None:
        out = os.path.join(out, str(OmegaConf.select(config, job_subdir_key)))
    return Path(os.path.abspath(out))


@contextlib.contextmanager
def guarded_jobs(*, overwrite: bool, resumable: bool) -> Iterator[None]:
    """Within the block, every Hydra job (a run, each job of a sweep) claims its directory first."""
    import hydra._internal.core_plugins.basic_launcher as launcher  # lazy: Hydra only where a command composes its config, kept out of start-up
    import hydra._internal.hydra as hydra_main  # lazy: Hydra only where a command composes its config, kept out of start-up
    import hydra.core.utils as core  # lazy: Hydra only where a command composes its config, kept out of start-up

    original: Callable[..., Any] = core.run_job

    def run_job(task_function: Any, config: Any, job_dir_key: str, job_subdir_key: Any, **kw: Any) -> Any:
        run_dir = _output_dir(config, job_dir_key, job_subdir_key)
        aside = claim(run_dir, overwrite=overwrite, resumable=resumable)
        ok = False
        try:
            ret = original(
                task_function=task_function, config=config, job_dir_key=job_dir_key, job_subdir_key=job_subdir_key, **kw
            )
            ok = getattr(ret, "status", None) is not None and ret.status.name == "COMPLETED"
            return ret
        finally:
            finish(run_dir, aside, ok)

    mods = (core, hydra_main, launcher)
    saved = [m.run_job for m in mods]
    for m in mods:
        m.run_job = run_job  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, f in zip(mods, saved):
            m.run_job = f  # type: ignore[attr-defined]
