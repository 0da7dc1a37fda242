"""A cache of Hydra's composed configuration, one file per command line.

Composing ``detcal-evaluate``'s configuration (``ConfigLoaderImpl.load_configuration``: parsing the
overrides, building the defaults list, loading and merging some twenty YAML files and the schemas) costs
about 0.07 s of CPU, the same for every run of the same command line. :func:`cached_composition` keeps
Hydra's own machinery (the run directory, ``.hydra/*.yaml``, logging, ``--cfg``, ``--help``, its errors) and
replaces only that step: the composed configuration is read back from a pickle written by an earlier run of
the same command line, and composed by Hydra (and stored) otherwise.

The key holds everything the composition reads: the config name, the overrides, the run mode and Hydra's
two switches, the working directory, the job name, the Hydra, OmegaConf, detcal and Python versions and
Hydra's ``version_base``, every config source on the search path (each file under a ``file://`` or
``pkg://`` source by path, size, modification and change times in nanoseconds and inode), and the entries
of Hydra's config store (each schema class by module and name, with the size and modification time of every
loaded module of its package; a plain entry by its content). A file is used only when its stored key equals
the key, so two keys with the same file name cannot pick another command line's configuration. A plain
``hydra.run.dir=<path>`` is keyed without its path (:func:`keyed_overrides`). The stored configuration
holds no value a resolver cached while Hydra composed it (``${now:...}`` of the default run directory is
the time of each run, not of the run that stored it). A plain
command line's schema classes are stored in the config store only when Hydra composes (``register``).

Hydra composes when anything is unusual: a multirun (the cache is not switched on for ``-m`` or an
override of Hydra's mode, sweeper or launcher), another run mode, a config source of another kind, a file
that cannot be stat'ed, a schema class defined inside a function, a composition that adds search paths
(``hydra.searchpath``), copies environment variables (``hydra.job.env_copy``), sets ``hydra.mode`` to a
multirun, warns or fails (its error reaches the user exactly as before). Nothing about the cache is ever
fatal: an unreadable or unwritable directory or a damaged file means Hydra composes.

Where: ``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal``, else ``~/.cache/detcal`` (made with mode
0700; a file is read only when the current user owns it). ``DETCAL_COMPOSE_CACHE=0`` switches the cache
off. Files are written atomically; at most :data:`MAX_ENTRIES` are kept (the least recently written go).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import hydra
import omegaconf
from hydra import version as hydra_version
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.config_store import ConfigNode, ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobRuntime
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from detcal._version import __version__ as detcal_version
from detcal.apps._replay import cache_dir, enabled, evict, keyed_overrides, tree
from detcal.utils.cache_dir import store

__all__ = [
    "cached_composition",
    "cache_dir",
    "cacheable",
    "composition_key",
    "enabled",
    "keyed_overrides",
    "read",
    "with_run_dir",
    "write",
    "MAX_ENTRIES",
    "FORMAT",
]

FORMAT = 2
"""Version of the cache file's layout; part of every key."""

MAX_ENTRIES = 64
"""Cache files kept; writing one more removes the least recently written."""

_PREFIX = "compose-"
_RUN_DIR = "hydra.run.dir="
_tree = tree


def with_run_dir(cfg: DictConfig, line: str) -> DictConfig | None:
    """``cfg`` with the run directory of the override ``line`` (``hydra.run.dir=<path>``) as Hydra applies it,
    or ``None`` when anything is unusual (then Hydra composes)."""
    try:
        (override,) = OverridesParser.create().parse_overrides([line])
        plain = not (override.is_delete() or override.is_add() or override.is_force_add())
        listed = cfg.hydra.overrides.hydra
        at = [i for i, v in enumerate(listed) if str(v).startswith(_RUN_DIR)]
        if not plain or type(override.value()) not in (str, int, float) or len(at) != 1:
            return None
        ConfigLoaderImpl._apply_overrides_to_config([override], cfg)
        listed[at[0]] = line
    except Exception:  # noqa: BLE001 - anything unusual: Hydra composes (and reports any error itself)
        return None
    return cfg


def _package_dir(module: str) -> str | None:
    spec = sys.modules.get(module)
    paths = list(getattr(spec, "__path__", None) or ()) if spec is not None else []
    if not paths:
        import importlib.util  # lazy: only for a package source not imported yet

        found = importlib.util.find_spec(module)
        paths = list(found.submodule_search_locations or ()) if found is not None else []
    return paths[0] if len(paths) == 1 else None


def _source_key(source: Any) -> tuple[Any, ...] | None:
    scheme = source.scheme()
    if scheme == "file":
        files = _tree(source.path)
    elif scheme == "pkg":
        where = _package_dir(source.path)
        files = None if where is None else _tree(where)
    elif scheme == "structured":
        files = []
    else:
        return None
    if files is None:
        return None
    return (scheme, source.provider, source.path, tuple(files))


def _module_files(package: str) -> tuple[tuple[str, int, int], ...] | None:
    out = []
    for name, mod in list(sys.modules.items()):
        if name != package and not name.startswith(package + "."):
            continue
        path = getattr(mod, "__file__", None)
        if path is None:
            continue
        try:
            st = os.stat(path)
        except OSError:
            return None
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def _store_nodes(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, ConfigNode]]:
    for name, value in tree.items():
        if isinstance(value, dict):
            yield from _store_nodes(value, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", value


def _entry(path: str, package: str | None, provider: str | None, typ: type) -> tuple[Any, ...] | None:
    module = getattr(typ, "__module__", "") or ""
    if "<locals>" in typ.__qualname__ or getattr(sys.modules.get(module), "__file__", None) is None:
        return None
    return (path, package, provider, module, typ.__qualname__)


def _store_key(pending: Mapping[str, type]) -> tuple[Any, ...] | None:
    """The config store's entries, with ``pending`` (name -> schema class) as if stored: schema classes by name
    and their package's loaded module files, a plain entry by its content."""
    entries: dict[str, tuple[Any, ...] | None] = {}
    for path, node in _store_nodes(ConfigStore.instance().repo):
        typ = OmegaConf.get_type(node.node) if isinstance(node.node, DictConfig) else type(node.node)
        if typ is None or typ is dict:
            entries[path] = (path, node.package, node.provider, OmegaConf.to_yaml(node.node))
        else:
            entries[path] = _entry(path, node.package, node.provider, typ)
    for name, typ in pending.items():
        entries[f"{name}.yaml"] = _entry(f"{name}.yaml", None, None, typ)
    if any(e is None for e in entries.values()):
        return None
    packages = {str(e[3]).split(".")[0] for e in entries.values() if e is not None and len(e) == 5}
    files = []
    for package in sorted(packages - {"hydra"}):  # Hydra's own entries: its version is in the key
        found = _module_files(package)
        if found is None:
            return None
        files.append(found)
    return (tuple(entries[k] for k in sorted(entries)), tuple(files))


def composition_key(
    loader: ConfigLoaderImpl,
    config_name: str | None,
    overrides: list[str | None],
    *flags: bool,
    pending: Mapping[str, type] | None = None,
) -> str | None:
    """The cache key of one composition (a printable string), ``None`` when it cannot be cached. ``pending``:
    schema classes not stored yet, keyed as if they were (name -> class)."""
    sources = [_source_key(s) for s in loader.repository.get_sources()]
    if any(s is None for s in sources):
        return None
    store = _store_key(pending or {})
    if store is None:
        return None
    key = (
        FORMAT,
        config_name,
        tuple(overrides),
        flags,
        os.getcwd(),
        JobRuntime().get("name"),
        (hydra.__version__, hydra_version.getbase(), omegaconf.__version__, detcal_version, sys.version),
        tuple(sources),
        store,
    )
    return repr(key)


def _file_for(key: str) -> Path:
    data = key.encode()  # two 32-bit checksums name the file; read() compares the whole key
    return cache_dir() / f"{_PREFIX}{zlib.crc32(data):08x}{zlib.adler32(data):08x}.pkl"


def read(key: str) -> DictConfig | None:
    """The configuration stored under ``key``, or ``None`` (no file, another user's, damaged, another key)."""
    try:
        with open(_file_for(key), "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return None
            stored_key, cfg = pickle.load(f)
    except Exception:  # noqa: BLE001 - a missing or damaged cache file: compose
        return None
    if stored_key != key or not isinstance(cfg, DictConfig):
        return None
    OmegaConf.clear_cache(cfg)  # no resolver's value from another run (``${now:...}``: the time of this one)
    return cfg


def write(key: str, cfg: DictConfig) -> None:
    """Store ``cfg`` under ``key`` atomically; silently nothing when the directory cannot be written."""
    target = _file_for(key)
    try:
        data = _pickled(key, cfg)
    except Exception:  # noqa: BLE001 - a config that does not pickle is composed again next time
        return
    if store(target, data):
        with contextlib.suppress(OSError):  # an unreadable cache folder is never fatal
            _evict(target.parent)


def _pickled(key: str, cfg: DictConfig) -> bytes:
    """``(key, cfg)`` pickled without the values its resolvers cached in this run: OmegaConf keeps the
    results of cached resolvers (``${now:%H-%M-%S}``, resolved while Hydra composes) in the root's metadata,
    and a later run must resolve them anew. The configuration of this run keeps them."""
    kept = OmegaConf.get_cache(cfg)
    OmegaConf.clear_cache(cfg)
    try:
        return pickle.dumps((key, cfg), protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        OmegaConf.set_cache(cfg, kept)


def _evict(where: Path) -> None:
    evict(where, _PREFIX, MAX_ENTRIES)


def cacheable(cfg: DictConfig, n_sources: int) -> bool:
    """A composition that read nothing outside the key: no search path added, no environment copied,
    no ``hydra.mode`` but a single run (Hydra adds ``hydra.mode=RUN`` to the overrides of a plain run)."""
    hc = cfg.hydra
    return len(hc.runtime.config_sources) == n_sources and len(hc.job.env_copy) == 0 and hc.mode in (None, RunMode.RUN)


def _compose(original: Any, loader: ConfigLoaderImpl, key: str, args: tuple[Any, ...]) -> DictConfig:
    """Hydra's composition; stored when it warned about nothing and read nothing outside the key."""
    with warnings.catch_warnings(record=True) as caught:
        cfg = original(loader, *args)
    for w in caught:  # shown as they would have been, and such a composition is not stored
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not caught and cacheable(cfg, len(loader.repository.get_sources())):
        write(key, cfg)
    return cfg


@contextlib.contextmanager
def cached_composition(
    active: bool = True, *, pending: Mapping[str, type] | None = None, register: Callable[[], Any] | None = None
) -> Iterator[None]:
    """Within the block, Hydra's single-run compositions are read from the cache when an earlier run stored
    them, and stored after Hydra composes them. ``active=False`` (or ``DETCAL_COMPOSE_CACHE=0``): nothing
    changes.

    ``register`` stores the schema classes ``pending`` in Hydra's config store; it is called before Hydra
    composes (at the start of the block when the cache is off), never when the configuration is read from
    the cache: converting a schema class for the store costs about 10 ms, and only a composition reads it."""
    todo = [register] if register is not None else []

    def ensure_registered() -> None:
        while todo:
            todo.pop()()

    if not active or not enabled():
        ensure_registered()
        yield
        return
    original = ConfigLoaderImpl.load_configuration

    def load_configuration(
        self: ConfigLoaderImpl,
        config_name: str | None,
        overrides: list[str],
        run_mode: RunMode,
        from_shell: bool = True,
        validate_sweep_overrides: bool = True,
    ) -> DictConfig:
        args = (config_name, overrides, run_mode, from_shell, validate_sweep_overrides)
        key, slot = None, None
        if run_mode == RunMode.RUN:
            with contextlib.suppress(Exception):  # anything unusual about the key: Hydra composes
                keyed, slot = keyed_overrides(overrides)
                key = composition_key(
                    self, config_name, keyed, from_shell, validate_sweep_overrides, pending=pending if todo else None
                )
        cfg = None if key is None else read(key)
        if cfg is not None and slot is not None:
            cfg = with_run_dir(cfg, overrides[slot])
        if cfg is not None:
            return cfg
        ensure_registered()
        return original(self, *args) if key is None else _compose(original, self, key, args)

    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]
    try:
        yield
    finally:
        ConfigLoaderImpl.load_configuration = original  # type: ignore[method-assign]
