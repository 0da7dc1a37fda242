"""The run record of a plain command line, made while Hydra runs it (read by :mod:`detcal.apps._replay`).

:func:`prepare` is called inside Hydra's job, with the task's config, Hydra's config and the typed spec, after
Hydra wrote ``.hydra/*.yaml`` and set up logging; it returns the function that stores the record once the task
has completed. A record is made only when a replay can do exactly what Hydra did:

- nothing in the config calls a resolver (``${oc.env:...}``, ``${now:...}``, ...) but the run directory, whose
  ``${now:<pattern>}`` and ``${detcal_run_id:}`` are made afresh by each replay (its other interpolations are
  references to other keys and ``${detcal_name:${key}}``, fixed by the record's key);
- Hydra changes no working directory, copies or sets no environment variable, has no callbacks, is not verbose;
  the config sources are directories (``file://``, ``pkg://``) or schemas;
- the texts of ``.hydra/*.yaml`` and the logging configuration, with this run's directories put back into their
  stand-ins, equal what Hydra wrote and used in this run; the spec and the resolved config pickle without any
  Hydra or OmegaConf object;
- the run directory's YAML text is the path itself (:func:`detcal.apps.safe_path`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import os
import pickle
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from detcal.apps._replay import (
    OUT_SENTINEL,
    RECORD_PREFIX,
    RUN_SENTINEL,
    RecordUnpickler,
    enabled,
    evict,
    identity,
    keyed_overrides,
    plain_words,
    put_in,
    record_file,
    safe_path,
    stamps,
)
from detcal.utils.cache_dir import store

__all__ = ["prepare", "plain_logging", "run_dir_pieces", "MAX_RECORDS"]

MAX_RECORDS = 64
"""Run records kept; writing one more removes the least recently written."""

_NODE_REF = re.compile(r"\$\{[A-Za-z0-9_.\[\]-]*\}")
_NAME_REF = re.compile(r"\$\{detcal_name:\$\{[A-Za-z0-9_.]+\}\}")
_PER_RUN = re.compile(r"\$\{now:([%A-Za-z0-9_./-]*)\}|\$\{detcal_run_id:\}")
_UNUSED_IN_A_RUN = ("sweep", "help", "hydra_help", "run")  # run.dir: see run_dir_pieces


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def _static(text: str) -> bool:
    """No resolver in ``text``: only references to other keys."""
    return "${" not in _NODE_REF.sub("", text)


def run_dir_pieces(raw: str, resolve: Callable[[str], str]) -> list[tuple[str, str]] | None:
    """The run directory ``raw`` (as written in the config) as pieces for :func:`detcal.apps._replay`: text,
    ``("now", pattern)``, ``("id", "")``; ``None`` when it holds anything else that a run resolves afresh.
    ``resolve`` resolves a string in the config's context (the text between the per-run pieces)."""
    marks: list[tuple[str, str]] = []

    def mark(m: re.Match[str]) -> str:
        marks.append(("now", m.group(1)) if m.group(0).startswith("${now") else ("id", ""))
        return f"\ue000{len(marks) - 1}\ue001"

    marked = _PER_RUN.sub(mark, raw)
    if "${" in _NODE_REF.sub("", _NAME_REF.sub("", marked)):
        return None
    text = resolve(marked) if "${" in marked else marked
    pieces: list[tuple[str, str]] = []
    for i, part in enumerate(re.split("\ue000(\\d+)\ue001", text)):
        if i % 2:
            pieces.append(marks[int(part)])
        elif part:
            pieces.append(("text", part))
    return pieces


def _source_dirs(sources: list[Any]) -> list[str] | None:
    dirs = []
    for s in sources:
        scheme, path = s.get("schema"), str(s.get("path"))
        if scheme == "file":
            dirs.append(os.path.abspath(path))
        elif scheme == "pkg":
            found = importlib.util.find_spec(path)
            where = list(found.submodule_search_locations or ()) if found is not None else []
            if len(where) != 1:
                return None
            dirs.append(where[0])
        elif scheme != "structured":
            return None
    return dirs


def _made_from() -> list[str]:
    """The files whose change voids a record: every loaded detcal module, Hydra's and OmegaConf's own."""
    out = []
    for name, mod in list(sys.modules.items()):
        path = getattr(mod, "__file__", None)
        if path and (
            name == "detcal" or name.startswith("detcal.") or name in ("hydra", "omegaconf", "omegaconf.version")
        ):
            out.append(path)
    return sorted(set(out))


def _plain_hydra(hc: DictConfig) -> bool:
    return (
        not hc.job.chdir
        and not hc.verbose
        and len(hc.job.env_set) == 0
        and len(hc.job.env_copy) == 0
        and len(hc.get("callbacks") or {}) == 0
        and str(hc.mode) in ("RunMode.RUN", "None")
    )


def _no_resolvers(task_cfg: DictConfig, hydra_raw: dict[Any, Any]) -> bool:
    raw = OmegaConf.to_container(task_cfg, resolve=False)
    if not all(_static(v) for _, v in _strings(raw)):
        return False
    return all(_static(v) for k, v in _strings(hydra_raw) if k.split(".")[0] not in _UNUSED_IN_A_RUN)


def _set(node: Any, key: str | int, value: str) -> None:
    with read_write(node), open_dict(node):
        node[key] = value


def _with_stand_ins(
    root: DictConfig, slot_line: str | None, raw_run_dir: str, yaml: bool
) -> tuple[Any, Any, str | None]:
    """Hydra's two logging configurations, resolved, and the text of ``hydra.yaml`` (when ``yaml``), from one
    copy of Hydra's config (``{hydra: ...}``) with stand-ins for the run's directories: the output directory;
    ``hydra.run.dir`` for the logging, and for ``hydra.yaml`` when the command line names it (with its line in
    ``hydra.overrides.hydra``); else ``hydra.yaml`` shows it as written (``raw_run_dir``)."""
    copied = copy.deepcopy(root)
    OmegaConf.clear_cache(copied)
    _set(copied.hydra.runtime, "output_dir", OUT_SENTINEL)
    _set(copied.hydra.run, "dir", RUN_SENTINEL)
    logs = (_logging(copied.hydra.hydra_logging), _logging(copied.hydra.job_logging))
    if not yaml:
        return (*logs, None)
    if slot_line is None:
        _set(copied.hydra.run, "dir", raw_run_dir)
    else:
        listed = copied.hydra.overrides.hydra
        at = [i for i, v in enumerate(listed) if v == slot_line]
        if len(at) != 1:
            raise ValueError("the run directory's override is not listed once")
        _set(listed, at[0], "hydra.run.dir=" + RUN_SENTINEL)
    return (*logs, OmegaConf.to_yaml(copied))


_LOGGING_KEYS = {"version", "formatters", "handlers", "loggers", "root", "disable_existing_loggers"}
_FORMATTER_KEYS = {"format", "datefmt", "style"}
_HANDLER_KEYS = {"class", "formatter", "level", "stream", "filename", "mode", "encoding", "delay"}
_HANDLER_CLASSES = {"logging.StreamHandler", "logging.FileHandler"}
_STREAMS = {"ext://sys.stdout", "ext://sys.stderr"}
_LOGGER_KEYS = {"level", "handlers", "propagate"}


def plain_logging(conf: Any) -> bool:
    """A logging configuration of formatters, stream and file handlers and logger levels only: the replay
    (:func:`detcal.apps._replay.configure_logging`) builds from it what Hydra's authorised configurator built."""
    if conf is None:
        return True
    if not isinstance(conf, dict) or not set(conf) <= _LOGGING_KEYS:
        return False
    handlers = (conf.get("handlers") or {}).values()
    loggers = [*(conf.get("loggers") or {}).values(), *([conf["root"]] if conf.get("root") is not None else [])]
    return (
        all(isinstance(f, dict) and set(f) <= _FORMATTER_KEYS for f in (conf.get("formatters") or {}).values())
        and all(
            isinstance(h, dict)
            and set(h) <= _HANDLER_KEYS
            and h.get("class") in _HANDLER_CLASSES
            and h.get("stream", "ext://sys.stderr") in _STREAMS
            for h in handlers
        )
        and all(isinstance(lg, dict) and set(lg) <= _LOGGER_KEYS for lg in loggers)
    )


def _logging(node: Any) -> Any:
    return None if node is None else OmegaConf.to_container(node, resolve=True)


def prepare(
    prog: str,
    config_name: str,
    argv: list[str],
    task_cfg: DictConfig,
    hydra_root: Any,
    spec: Any,
) -> Callable[[], None] | None:
    """The function that stores this run's record (call it when the task has completed), or ``None`` when
    this run cannot be replayed (see the module docstring). Never raises."""
    try:
        return _prepare(prog, config_name, argv, task_cfg, hydra_root, spec)
    except Exception:  # noqa: BLE001 - a record is an optimisation: anything unusual means none
        return None


def _prepare(
    prog: str, config_name: str, argv: list[str], task_cfg: DictConfig, hydra_root: DictConfig, spec: Any
) -> Callable[[], None] | None:
    if not enabled() or os.environ.get("LOCAL_RANK") is not None or not plain_words(argv):
        return None
    keyed, slot = keyed_overrides(argv)
    hc = hydra_root.hydra
    run, out = str(hc.run.dir), str(hc.runtime.output_dir)
    if not _plain_hydra(hc) or not safe_path(out) or (slot is not None and not safe_path(run)):
        return None
    hydra_raw = OmegaConf.to_container(hc, resolve=False)
    assert isinstance(hydra_raw, dict)
    dirs = _source_dirs(list(hc.runtime.config_sources))
    if dirs is None or not _no_resolvers(task_cfg, hydra_raw):
        return None
    pieces = None
    if slot is None:

        def resolve(text: str) -> str:
            probe = copy.deepcopy(task_cfg)
            with open_dict(probe):
                probe["_detcal_run_dir_probe"] = text
            return str(probe["_detcal_run_dir_probe"])

        pieces = run_dir_pieces(str(hydra_raw["run"]["dir"]), resolve)
        if pieces is None:
            return None
    subdir = None if hc.output_subdir is None else str(hc.output_subdir)
    hydra_logging, job_logging, hydra_yaml = _with_stand_ins(
        hydra_root, None if slot is None else argv[slot], str(hydra_raw["run"]["dir"]), subdir is not None
    )
    texts = []
    if subdir is not None:  # the task's config and overrides as Hydra wrote them (no per-run value)
        where = Path(out) / subdir
        texts = [
            ("config.yaml", (where / "config.yaml").read_text(encoding="utf-8")),
            ("hydra.yaml", hydra_yaml),
            ("overrides.yaml", (where / "overrides.yaml").read_text(encoding="utf-8")),
        ]
    record = {
        "run_dir": pieces,
        "dirs": dirs,
        "files": _made_from(),
        "spec": spec,
        "overrides": list(OmegaConf.to_container(hc.overrides.task) or []),
        "choices": OmegaConf.to_container(hc.runtime.choices),
        "config": OmegaConf.to_container(task_cfg, resolve=True),
        "hydra_logging": hydra_logging,
        "job_logging": job_logging,
        "output_subdir": subdir,
        "texts": texts,
    }
    if not (plain_logging(record["hydra_logging"]) and plain_logging(record["job_logging"])):
        return None
    if not _same_as_this_run(record, hydra_root, run, out):
        return None
    key = identity(prog, config_name, keyed)
    data = pickle.dumps((key, stamps(dirs, record["files"]), record), protocol=pickle.HIGHEST_PROTOCOL)
    RecordUnpickler(io.BytesIO(data)).load()  # holds no Hydra or OmegaConf object (else raises: no record)
    return lambda: _write(record_file(key), data)


def _same_as_this_run(record: dict[str, Any], hydra_root: DictConfig, run: str, out: str) -> bool:
    """The record's texts and logging, with this run's directories put in, are what Hydra wrote and used."""
    hc = hydra_root.hydra
    if put_in(record["job_logging"], run, out) != _logging(hc.job_logging):
        return False
    if put_in(record["hydra_logging"], run, out) != _logging(hc.hydra_logging):
        return False
    if record["output_subdir"] is None:
        return True
    where = Path(out) / record["output_subdir"]
    return all(put_in(text, run, out) == (where / name).read_text(encoding="utf-8") for name, text in record["texts"])


def _write(target: Path, data: bytes) -> None:
    """Store ``data`` atomically; silently nothing when the directory cannot be written."""
    if store(target, data):
        with contextlib.suppress(OSError):  # an unreadable cache folder is never fatal
            evict(target.parent, RECORD_PREFIX, MAX_RECORDS)
