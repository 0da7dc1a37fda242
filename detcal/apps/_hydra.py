"""The one Hydra boundary of every detcal command.

``run_app`` registers the command's schema dataclass in Hydra's ConfigStore
(so the YAML files hold values only and a misspelt key or a wrong type is a
composition error), composes the config, converts it once into the typed
spec (``OmegaConf.to_object``: every spec validates itself), and hands the
spec to the command's task. Below this module nothing sees Hydra or OmegaConf.
A command line composed before is read back from a cache of Hydra's composed
configurations (:mod:`detcal.apps._compose_cache`; sweeps always compose).

Errors a user can fix (a config mistake, a malformed input file) end with one
line on stderr and exit status 2; the traceback appears only with
``HYDRA_FULL_ERROR=1`` or ``DETCAL_DEBUG=1``. The failure is also written to
the run's log file, so a run directory left by a failed run says why.

Run directories are unique: ``outputs/<name>/<date>/<time>-<id>`` (``<id>``
is random per process), and a directory holds one run: each job claims its
directory before Hydra writes into it (:mod:`detcal.apps._run_dir`: a directory
another live run holds or one that holds another run is refused, unless
``overwrite=true``; a failed or killed run leaves the earlier run as it was).
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import tempfile
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from detcal.utils import collector

_collecting = collector.pause()  # imports of objects that live as long as the process (detcal.utils.collector)
try:
    import hydra
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.hydra import Hydra
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.object_type import ObjectType
    from omegaconf import OmegaConf

    from detcal.apps._compose_cache import cached_composition
    from detcal.apps._context import (
        RUN_ID,
        AppContext,
        debug_requested,
        fail,
        full_errors,
        is_secondary_rank,
        log_failure,
        reported_errors,
        reuse_freed_memory,
    )
    from detcal.apps._errors import first_line, os_error_message, user_error_message
    from detcal.apps._instantiate import instantiate_checked, target_class
    from detcal.apps._replay import HYDRA_KEYS, plain_words
    from detcal.apps._replay_record import prepare as prepare_record
    from detcal.apps._run_dir import guarded_jobs, lock, pop_overwrite
    from detcal.data.specs import DATA_SPECS
    from detcal.utils.warn import capture
finally:
    collector.resume(_collecting, freeze=True)

__all__ = [
    "run_app",
    "run_header",
    "user_error_message",
    "data_schema_name",
    "RUN_ID",
    "AppContext",
    "is_secondary_rank",
    "instantiate_checked",
    "os_error_message",
    "target_class",
]


_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+=,-]*$")
log = logging.getLogger("detcal")


def _safe_name(name: Any) -> str:
    s = str(name)
    if not _NAME_OK.match(s) or ".." in s:
        raise ValueError(
            f"name must be a plain directory name (letters, digits, _ . + = , -; no '/' or '..'), got {s!r}"
        )
    return s


def _register_resolvers() -> None:

    if not OmegaConf.has_resolver("detcal_run_id"):
        OmegaConf.register_new_resolver("detcal_run_id", lambda: RUN_ID, use_cache=True)
    if not OmegaConf.has_resolver("detcal_name"):
        OmegaConf.register_new_resolver("detcal_name", _safe_name)


def data_schema_name(source: str) -> str:
    """The ConfigStore name of the data source ``source``'s spec class (``data_kitti_schema``)."""
    return f"data_{source}_schema"


def schema_entries(config_name: str, schema: type, sources: Collection[str] | None = None) -> dict[str, type]:
    """What :func:`register_schema` stores: ConfigStore name -> schema class."""
    entries = {f"{config_name}_schema": schema}
    for source, spec in DATA_SPECS.items():  # root entries, so --help lists no group of schemas
        if sources is None or source in sources:
            entries[data_schema_name(source)] = spec
    return entries


def register_schema(config_name: str, schema: type, sources: Collection[str] | None = None) -> str:
    """Store ``schema`` in the ConfigStore as ``<config_name>_schema`` (the first default of the primary YAML),
    and each data source's spec class as ``data_<source>_schema`` (the first default of each data group file,
    ``configs/data/<name>.yaml``, so ``data=kitti`` composes a :class:`~detcal.data.specs.KittiDataSpec`).

    ``sources`` limits the data sources stored to those named (``None``: every one); ``run_app`` passes the
    one source a plain command line composes (:func:`plain_data_source`)."""

    store = ConfigStore.instance()
    for name, node in schema_entries(config_name, schema, sources).items():
        store.store(name=name, node=node)
    _register_resolvers()
    return f"{config_name}_schema"


_DATA_GROUP_KEYS = ("experiment", "data@", "hydra.searchpath", "hydra/", "hydra.mode", "hydra.sweeper")


def plain_data_source(argv: Sequence[str], cdir: Path) -> str | None:
    """The one data source a plain command line composes, or ``None`` when it cannot be told from the words.

    Storing a data source's spec class costs about 1 ms of CPU, and Hydra deep-copies everything stored
    each time it composes; a run needs only the spec class its data group file names. A command line
    qualifies when every word is a ``key=value`` override (no flag, no ``+``/``~``, no experiment, no
    ``data@...`` package, nothing that moves Hydra's search path, mode or sweeper), one of them is
    ``data=<source>`` with ``<source>`` a data source of :data:`~detcal.data.specs.DATA_SPECS`, and
    ``configs/data/<source>.yaml`` exists (each such file composes ``data_<source>_schema`` and nothing else
    from the store: a test checks both, and that the composed configs are the same). Anything else stores
    every source, as before."""

    chosen: list[str] = []
    for word in argv:
        key, eq, value = word.partition("=")
        if not eq or word.startswith(("-", "+", "~")) or key.startswith(_DATA_GROUP_KEYS):
            return None
        if key == "data":
            chosen.append(value)
    if len(chosen) != 1 or chosen[0] not in DATA_SPECS or not (cdir / "data" / f"{chosen[0]}.yaml").is_file():
        return None
    return chosen[0]


_first_line = first_line


_log_failure = log_failure

_lock_run_dir = lock  # the advisory lock of a run directory (detcal.apps._run_dir)


def run_header(command: str, cfg: Any, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Provenance fields of metrics.json: command, run directory, overrides and the resolved config."""

    return {
        "command": command,
        "run_dir": str(Path(run_dir).resolve()),
        "overrides": list(overrides),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def _quiet_other_ranks() -> None:
    """Under torchrun, ranks other than 0 run in a scratch directory and write no run directory of their own."""
    if not is_secondary_rank():
        return

    keep = [
        a for a in sys.argv[1:] if not a.startswith(("hydra.run.dir=", "hydra.output_subdir=", "hydra/job_logging="))
    ]
    sys.argv[1:] = keep + [
        f"hydra.run.dir={tempfile.mkdtemp(prefix='detcal-rank')}",
        "hydra.output_subdir=null",
        "hydra/job_logging=disabled",
    ]


_debug = debug_requested
_fail = fail


_SWEEP_KEYS = HYDRA_KEYS


def _is_multirun(argv: list[str]) -> bool:
    """A command line that may sweep: ``-m``/``--multirun`` (alone or among short flags) or an override of
    Hydra's mode, sweeper, launcher or search path. Its compositions are never cached."""
    return any(
        a == "--multirun" or (a.startswith("-") and not a.startswith("--") and "m" in a) or a.startswith(_SWEEP_KEYS)
        for a in argv
    )


_is_plain = plain_words  # no flag and no override of Hydra's mode, sweeper, launcher or search path


@contextlib.contextmanager
def _single_compose(argv: list[str]) -> Any:
    """Compose the config once, not twice, for a plain run.

    Hydra composes the whole config a first time only to read ``hydra.mode``
    (``Hydra.get_mode``), then again to run. detcal's own configs never set
    ``hydra.mode`` (a test checks), so for a command line without flags
    (``-m``, ``--cfg``, ``--config-dir``, ...) and without overrides of the
    mode, sweeper, launcher or search path, the answer is known: no mode
    set, a single run, exactly what Hydra concludes after composing. Any
    other command line goes through Hydra unchanged.
    """

    if not _is_plain(argv):
        yield
        return
    original = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _shared_group_listing() -> Any:
    """List each config group's options from one copy of Hydra's config repository, not one per group.

    Hydra's ``ConfigLoaderImpl.get_group_options`` deep-copies the whole
    config repository (sources, search path) on every call; ``--help`` and
    ``--hydra-help`` call it about a hundred times (twice per config group to
    find the groups, once more to list each one's options), which made
    ``detcal-evaluate --help`` cost about 0.9 s of CPU, two thirds of it in
    those copies. Within one command the configs do not change, so a repository
    made for one (config name, overrides) answers every listing for the same
    pair exactly as a fresh copy would: the copy is made once per pair and
    reused. A Hydra without the internal method this relies on is left as it is.
    """

    make = getattr(ConfigLoaderImpl, "_parse_overrides_and_create_caching_repo", None)
    if make is None:
        yield
        return
    original = ConfigLoaderImpl.get_group_options
    repos: dict[tuple[str | None, tuple[str, ...]], Any] = {}

    def get_group_options(
        self: Any,
        group_name: str,
        results_filter: Any = ObjectType.CONFIG,
        config_name: str | None = None,
        overrides: list[str] | None = None,
    ) -> list[str]:
        key = (config_name, tuple(overrides or ()))
        if key not in repos:
            repos[key] = make(self, config_name, list(key[1]))[1]
        return repos[key].get_group_options(group_name, results_filter)

    ConfigLoaderImpl.get_group_options = get_group_options  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.get_group_options = original  # type: ignore[method-assign]


_reuse_freed_memory = reuse_freed_memory


def _config_dir(prog: str) -> Path:
    """detcal's configs folder; a missing one is the user's error (one line, exit status 2)."""
    try:
        from detcal.pipeline.registry import (
            config_dir,  # lazy: the calibrator registry imports the calibration package, which imports scipy (kept out of start-up)
        )

        return Path(config_dir())
    except FileNotFoundError as exc:
        _fail(prog, str(exc))


def run_app(
    config_name: str,
    schema: type,
    task: Callable[[Any, AppContext], Any],
    prog: str,
    *,
    resumable: bool = False,
    record: bool = False,
) -> None:
    """Run ``task(spec, ctx)`` as the Hydra app ``prog`` on ``configs/<config_name>.yaml``.

    ``spec`` is the typed ``schema`` object; ``ctx`` carries the run directory,
    the command-line overrides, the group choices and the resolved config (for
    provenance). Handles the command line (overrides, ``-m``, ``--cfg job``,
    ``--help``) through Hydra; ``overwrite=true`` lets the run replace the run
    already in its directory; ``resumable`` commands may rerun in their own
    directory (detcal-main keeps its finished stages). ``record``: a plain command line that completes stores
    its run record, so that the next run of it is replayed without Hydra (:mod:`detcal.apps._replay`).
    """
    debug = _debug()
    _reuse_freed_memory()
    cdir = _config_dir(prog)
    source = plain_data_source(sys.argv[1:], cdir)
    sources = None if source is None else (source,)
    _register_resolvers()
    _quiet_other_ranks()
    overwrite = pop_overwrite(sys.argv)
    argv = sys.argv[1:]
    # a plain command line read from the compose cache never reads the schemas: they are stored only before
    # Hydra composes (detcal.apps._compose_cache.cached_composition); any other stores them now
    pending = schema_entries(config_name, schema, sources) if _is_plain(argv) else None
    if pending is None:
        register_schema(config_name, schema, sources)

    GlobalHydra.instance().clear()  # a second app in the same process (tests, notebooks)

    @hydra.main(config_path=str(cdir), config_name=config_name, version_base="1.3")
    def _main(cfg: Any) -> Any:
        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        try:
            spec = OmegaConf.to_object(cfg)
            ctx = AppContext(
                prog=prog, run_dir=run_dir, overrides=list(hc.overrides.task), choices=dict(hc.runtime.choices), cfg=cfg
            )
            store = prepare_record(prog, config_name, argv, cfg, HydraConfig.instance().cfg, spec) if record else None
            result = task(spec, ctx)
            if store is not None:
                store()
            return result
        except Exception as exc:
            msg = user_error_message(exc)
            _log_failure(msg or f"{type(exc).__name__}: {exc}")
            if msg is None or debug:
                raise
            _fail(prog, msg)  # SystemExit passes through Hydra's job runner

    with (
        reported_errors(prog, debug, user_error_message),
        full_errors(),  # errors reach us; we decide what the user sees
        _single_compose(argv),
        cached_composition(
            not _is_multirun(argv),
            pending=pending,
            register=None if pending is None else lambda: register_schema(config_name, schema, sources),
        ),
        _shared_group_listing(),
        capture(),
        guarded_jobs(overwrite=overwrite, resumable=resumable),
    ):
        _main()
