"""Replay a plain command line from its run record: the same run, without importing Hydra or OmegaConf.

The first run of a plain command line (``key=value`` words only) goes through Hydra, which composes the
configuration, writes ``.hydra/*.yaml``, sets up logging and calls the task. That run then stores a *run
record* (:mod:`detcal.apps._replay_record`) beside the compose cache: the typed spec, the task overrides and
group choices, the resolved config of the provenance header, the resolved logging configurations, the texts of
``.hydra/config.yaml``, ``overrides.yaml`` and ``hydra.yaml`` with stand-ins where this run's directory goes,
and how the run directory is made (``${now:...}`` and ``${detcal_run_id:}`` pieces). A later run of the same
command line reads the record and does what Hydra's single run does, in the same order: logging as
``hydra.hydra_logging`` says, the run directory claimed (:func:`detcal.apps._run_dir.claim`), logging as
``hydra.job_logging`` says (the log file), the three ``.hydra`` files, the task; a failure is logged, reported
in one line with exit status 2 (or its traceback), and the earlier run of an ``overwrite=true`` directory put
back, exactly as through Hydra. That saves Hydra's and OmegaConf's imports and Hydra's job machinery (about
0.1 s of CPU per run).

The record is used only when everything it was made from is unchanged: its name and first field hold the
command, the config name, the overrides (a plain ``hydra.run.dir=<path>`` without its path), the working
directory, the detcal package's directory and version and the interpreter; it lists every file of every config
source, of the ``hydra_plugins`` folders on ``sys.path`` and every detcal module loaded when it was made, and the
Hydra and OmegaConf installations, each with size, modification and change times and inode, all compared before
it is used. Per-run values are made afresh: the date and time and the process's run id of the default run
directory, or the directory a ``hydra.run.dir=<path>`` names (a path of letters, digits, ``_ . / -`` with a
``/``: then its YAML text is known). Anything else (flags such as ``-m``, ``--cfg``, ``--help``; overrides of
Hydra's mode, sweeper, launcher or search path; a torchrun rank; ``DETCAL_COMPOSE_CACHE=0``; a run directory
that YAML would quote) goes through Hydra, as does every error of composition (a record is stored only after a
run that composed and completed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import pickle
import re
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detcal._version import __version__ as detcal_version
from detcal.apps._context import (
    RUN_ID,
    AppContext,
    debug_requested,
    fail,
    full_errors,
    log_failure,
    reported_errors,
    reuse_freed_memory,
)
from detcal.apps._run_dir import OVERWRITE_ARG, claim, finish, pop_overwrite
from detcal.core.errors import detcal_error_message
from detcal.utils.cache_dir import cache_dir
from detcal.utils.warn import capture

__all__ = [
    "FORMAT",
    "HYDRA_KEYS",
    "OUT_SENTINEL",
    "RUN_SENTINEL",
    "cache_dir",
    "configure_logging",
    "enabled",
    "evict",
    "identity",
    "keyed_overrides",
    "plain_words",
    "put_in",
    "RECORD_PREFIX",
    "record_file",
    "replay",
    "safe_path",
    "stamps",
    "tree",
    "RecordUnpickler",
]

FORMAT = 1
"""Version of the run record's layout; part of its identity."""

RECORD_PREFIX = "replay-"
OUT_SENTINEL = "DETCALRUNOUTPUTDIRSTANDIN"
"""Stands for the run's absolute output directory in a record's texts and logging configuration."""
RUN_SENTINEL = "DETCALRUNDIRSTANDIN"
"""Stands for the ``hydra.run.dir`` a command line names."""

_RUN_DIR = "hydra.run.dir="
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+=:@%~-]+")
_SAFE_PATH = re.compile(r"(?!-|\.\.\.)[A-Za-z0-9_./-]*/[A-Za-z0-9_./-]*")
HYDRA_KEYS = (
    "hydra.mode",
    "hydra.sweeper",
    "hydra/sweeper",
    "hydra.searchpath",
    "hydra/launcher",
    "hydra.launcher",
    "+hydra",
    "++hydra",
    "~hydra",
)


def enabled() -> bool:
    """False when ``DETCAL_COMPOSE_CACHE`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get("DETCAL_COMPOSE_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def keyed_overrides(overrides: list[str]) -> tuple[list[str | None], int | None]:
    """The overrides as keyed, and the position of the one ``hydra.run.dir=<path>`` override keyed without its
    path (``None``: none, several, or a path with quotes, spaces, interpolations, brackets, commas..., or
    another override that sets ``hydra``, ``hydra.run`` or a key under it, which Hydra applies in order).

    A run directory only sets ``hydra.run.dir`` and its line in ``hydra.overrides.hydra``; a command line
    that names a fresh directory each time (benchmarks, scripts) reads what was stored for another directory
    and puts its own in. The keyed slot holds ``None``, which no override on a command line can spell."""
    found = [i for i, o in enumerate(overrides) if o.startswith(_RUN_DIR)]
    keyed: list[str | None] = list(overrides)
    if len(found) != 1 or not _PLAIN_PATH.fullmatch(overrides[found[0]][len(_RUN_DIR) :]):
        return keyed, None
    if any(_sets_run_node(o) for i, o in enumerate(overrides) if i != found[0]):
        return keyed, None
    keyed[found[0]] = None
    return keyed, found[0]


def _sets_run_node(override: str) -> bool:
    """Whether ``override`` sets (adds, deletes) ``hydra``, ``hydra.run`` or a key under ``hydra.run``."""
    key = override.lstrip("~+").split("=", 1)[0]
    return key in ("hydra", "hydra.run") or key.startswith("hydra.run.")


def plain_words(argv: list[str]) -> bool:
    """No flag (``-m``, ``--cfg``, ``--help``, ...) and no override of Hydra's mode, sweeper, launcher or
    search path: a single run that composes once."""
    return not any(a.startswith("-") or a.startswith(HYDRA_KEYS) for a in argv)


def safe_path(path: str) -> bool:
    """A path whose YAML text is the path itself (letters, digits, ``_ . / -``, with a ``/``; no leading
    ``-`` or ``...``) and which Hydra's override parser reads as that string."""
    return _SAFE_PATH.fullmatch(path) is not None


def tree(root: str) -> list[tuple[str, int, int, int, int]] | None:
    """Every file under ``root`` (relative path, size, mtime and ctime in ns, inode), sorted; ``None`` when
    it cannot be read."""
    out: list[tuple[str, int, int, int, int]] = []
    stack = [root]
    try:
        while stack:
            top = stack.pop()
            with os.scandir(top) as entries:
                for e in entries:
                    if e.is_dir():
                        if e.name != "__pycache__":
                            stack.append(e.path)
                    else:
                        st = e.stat()
                        out.append(
                            (os.path.relpath(e.path, root), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                        )
    except OSError:
        return None
    out.sort()
    return out


def _file_stamp(path: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def stamps(dirs: list[str], files: list[str]) -> tuple[Any, ...]:
    """What a record was made from, as it is now: the trees of the config sources ``dirs`` and of the
    ``hydra_plugins`` folders on ``sys.path``, and the stamps of ``files`` (modules, installations)."""
    plugins = []
    for entry in sys.path:
        where = os.path.join(entry or ".", "hydra_plugins")
        if os.path.isdir(where):
            plugins.append((os.path.abspath(where), tree(where)))
    return (
        tuple((d, tuple(tree(d) or ())) for d in dirs),
        tuple(plugins),
        tuple(_file_stamp(f) for f in files),
    )


def identity(prog: str, config_name: str, keyed: list[str | None]) -> str:
    """The record's identity: command, config, keyed overrides, working directory, detcal's package directory
    and version, the interpreter, and ``DETCAL_CONFIG_DIR`` (which picks the configs folder: with the working
    directory and the package directory it decides which folder a run composes from)."""
    from detcal.pipeline.registry import CONFIG_ENV  # lazy: importing it with this module is too early for gc

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    configs = os.environ.get(CONFIG_ENV)
    key = (FORMAT, prog, config_name, tuple(keyed), os.getcwd(), package, detcal_version, sys.version, sys.prefix)
    return repr((*key, configs))


def record_file(key: str) -> Path:
    """The record file of ``key`` (two 32-bit checksums; the reader compares the whole key)."""
    data = key.encode()
    return cache_dir() / f"{RECORD_PREFIX}{zlib.crc32(data):08x}{zlib.adler32(data):08x}.pkl"


def evict(where: Path, prefix: str, keep: int) -> None:
    """Keep the ``keep`` most recently written ``<prefix>*.pkl`` files of ``where``."""
    files = []
    for e in os.scandir(where):
        if e.name.startswith(prefix) and e.name.endswith(".pkl"):
            with contextlib.suppress(OSError):
                files.append((e.stat().st_mtime_ns, e.path))
    files.sort()
    for _, path in files[: max(0, len(files) - keep)]:
        with contextlib.suppress(OSError):
            os.unlink(path)


_REFUSED = ("omegaconf", "hydra", "antlr4", "yaml")


class RecordUnpickler(pickle.Unpickler):
    """Reads a run record; refuses Hydra's, OmegaConf's and their parsers' classes (a record holding one is not
    a record: replaying it would import them)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] in _REFUSED:
            raise pickle.UnpicklingError(f"a run record holds no {module}.{name}")
        return super().find_class(module, name)


def _read(key: str) -> dict[str, Any] | None:
    try:
        with open(record_file(key), "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            stored_key, made_from, record = RecordUnpickler(f).load()
    except Exception:  # noqa: BLE001 - a missing or damaged record: Hydra runs
        return None
    if stored_key != key or not isinstance(record, dict):
        return None
    if stamps(record["dirs"], record["files"]) != made_from:
        return None
    return record


def _render(pieces: list[tuple[str, str]]) -> str:
    """The run directory from its pieces: text, ``now`` (a ``strftime`` pattern, one clock reading per
    pattern, as OmegaConf caches ``${now:...}``), ``id`` (this process's run id)."""
    times: dict[str, str] = {}
    out = []
    for kind, text in pieces:
        if kind == "now":
            if text not in times:
                times[text] = dt.datetime.now().strftime(text)
            out.append(times[text])
        else:
            out.append(RUN_ID if kind == "id" else text)
    return "".join(out)


def put_in(value: Any, run: str, out: str) -> Any:
    """``value`` (texts, dicts, lists) with the stand-ins replaced by this run's directories."""
    if isinstance(value, str):
        return value.replace(OUT_SENTINEL, out).replace(RUN_SENTINEL, run)
    if isinstance(value, dict):
        return {k: put_in(v, run, out) for k, v in value.items()}
    if isinstance(value, list):
        return [put_in(v, run, out) for v in value]
    return value


def configure_logging(conf: dict[str, Any] | None) -> None:
    """What Hydra's ``configure_log`` does with a resolved logging configuration of the shape a record allows
    (formatters, stream and file handlers, logger levels: :func:`detcal.apps._replay_record.plain_logging`),
    step for step as :func:`logging.config.dictConfig` does it, without importing ``logging.config`` (with
    ``logging.handlers``, ``socketserver`` and ``socket``: about 3 ms of CPU)."""
    if conf is None or conf.get("root") is None:
        return
    formatters = {
        name: logging.Formatter(f.get("format"), f.get("datefmt"), f.get("style", "%"))
        for name, f in (conf.get("formatters") or {}).items()
    }
    handlers_of = getattr(logging, "_handlers", {})  # dictConfig clears and shuts down every handler first
    handler_list = getattr(logging, "_handlerList", [])
    handlers_of.clear()
    logging.shutdown(handler_list[:])
    del handler_list[:]
    handlers = {name: _handler(name, conf["handlers"][name], formatters) for name in sorted(conf.get("handlers") or {})}
    existing = sorted(logging.root.manager.loggerDict)
    children: list[str] = []
    for name, spec in (conf.get("loggers") or {}).items():
        if name in existing:
            children += [e for e in existing[existing.index(name) + 1 :] if e.startswith(name + ".")]
            existing.remove(name)
        logger = logging.getLogger(name)
        _logger_config(logger, spec, handlers)
        logger.disabled = False
        if spec.get("propagate") is not None:
            logger.propagate = spec["propagate"]
    disable = conf.get("disable_existing_loggers", True)
    for name in existing:
        known = logging.root.manager.loggerDict[name]
        if name not in children:
            known.disabled = disable  # type: ignore[union-attr]  # as dictConfig: placeholders too
        elif isinstance(known, logging.Logger):
            known.setLevel(logging.NOTSET)
            known.handlers = []
            known.propagate = True
    _logger_config(logging.root, conf["root"], handlers)


def _handler(name: str, spec: dict[str, Any], formatters: dict[str, logging.Formatter]) -> logging.Handler:
    kwargs = {k: v for k, v in spec.items() if k not in ("class", "formatter", "level")}
    if "stream" in kwargs:
        kwargs["stream"] = sys.stdout if kwargs["stream"] == "ext://sys.stdout" else sys.stderr
    handler = (logging.FileHandler if spec["class"] == "logging.FileHandler" else logging.StreamHandler)(**kwargs)
    handler.name = name
    if spec.get("formatter"):
        handler.setFormatter(formatters[spec["formatter"]])
    if spec.get("level") is not None:
        handler.setLevel(spec["level"])
    return handler


def _logger_config(logger: logging.Logger, spec: dict[str, Any], handlers: dict[str, logging.Handler]) -> None:
    if spec.get("level") is not None:
        logger.setLevel(spec["level"])
    for h in logger.handlers[:]:
        logger.removeHandler(h)
    for name in spec.get("handlers") or ():
        logger.addHandler(handlers[name])


def replay(config_name: str, task: Callable[[Any, AppContext], Any], prog: str) -> bool:
    """Run ``task`` from the run record of this command line, as Hydra would; False (nothing done, nothing
    imported beyond this module) when there is no usable record: then the caller runs it through Hydra."""
    words = [a for a in sys.argv[1:] if a.lower() not in (OVERWRITE_ARG, "overwrite=false")]
    if not enabled() or os.environ.get("LOCAL_RANK") is not None or not plain_words(words):
        return False
    found = _recorded(config_name, prog, words)
    if found is None:
        return False
    record, run, out = found
    overwrite = pop_overwrite(sys.argv)
    _run(record, task, prog, Path(out), run, overwrite)
    return True


def _recorded(config_name: str, prog: str, words: list[str]) -> tuple[dict[str, Any], str, str] | None:
    """The record of ``words``, the run directory as named and as an absolute path; ``None``: no record, or
    anything unusual (a working directory gone, a path YAML would quote)."""
    keyed, slot = keyed_overrides(words)
    if slot is not None and not safe_path(words[slot][len(_RUN_DIR) :]):
        return None
    try:
        record = _read(identity(prog, config_name, keyed))
        if record is None or (slot is None) != (record["run_dir"] is not None):
            return None
        run = words[slot][len(_RUN_DIR) :] if slot is not None else _render(record["run_dir"])
        out = os.path.abspath(run)
    except Exception:  # noqa: BLE001 - anything unusual: Hydra runs (and reports any error itself)
        return None
    return (record, run, out) if safe_path(out) else None


def _user_error_message(exc: BaseException) -> str | None:
    """:func:`detcal.apps._errors.user_error_message`; a detcal error (the usual one) without importing Hydra."""
    detcal = detcal_error_message(exc)
    if detcal is not None:
        return detcal
    from detcal.apps._errors import user_error_message  # lazy: Hydra's error classes, only for another error

    return user_error_message(exc)


def _run(
    record: dict[str, Any], task: Callable[[Any, AppContext], Any], prog: str, out: Path, run: str, overwrite: bool
) -> None:
    """Hydra's single run (``run_app``, ``Hydra.run``, ``run_job``) with the record's values."""
    debug = debug_requested()
    reuse_freed_memory()
    with reported_errors(prog, debug, _user_error_message), full_errors(), capture():
        configure_logging(put_in(record["hydra_logging"], run, str(out)))
        aside = claim(out, overwrite=overwrite, resumable=False)
        ok = False
        try:
            ok = _job(record, task, prog, out, run, debug)
        finally:
            finish(out, aside, ok)


def _job(
    record: dict[str, Any], task: Callable[[Any, AppContext], Any], prog: str, out: Path, run: str, debug: bool
) -> bool:
    """Hydra's ``run_job``: the directory, the job's logging, the ``.hydra`` files, the task. True when the
    task completed; a task's exception is raised after Hydra's line naming the overrides."""
    out.mkdir(parents=True, exist_ok=True)
    configure_logging(put_in(record["job_logging"], run, str(out)))
    if record["output_subdir"] is not None:
        where = out / record["output_subdir"]
        where.mkdir(parents=True, exist_ok=True)
        for name, text in record["texts"]:
            with open(where / name, "w", encoding="utf-8") as f:
                f.write(put_in(text, run, str(out)))
    try:
        ctx = AppContext(prog, out, list(record["overrides"]), dict(record["choices"]), None, config=record["config"])
        task(record["spec"], ctx)
    except Exception as exc:
        msg = _user_error_message(exc)
        log_failure(msg or f"{type(exc).__name__}: {exc}")
        if msg is None or debug:
            sys.stderr.write(f"Error executing job with overrides: {list(record['overrides'])}" + os.linesep)
            raise
        fail(prog, msg)
    for ref in list(getattr(logging, "_handlerList", [])):  # as Hydra's run_job, after the task
        with contextlib.suppress(Exception):
            ref().flush()
    return True
