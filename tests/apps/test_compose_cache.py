"""The cache of Hydra's composed configuration (detcal.apps._compose_cache): a run that reads it writes the same
``.hydra/*.yaml``, metrics.json and log as Hydra's own composition; anything it cannot see (a sweep, a changed
user config file, a failed composition) composes through Hydra; a broken cache directory is never fatal."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.config_store import ConfigStore

from detcal.apps import _compose_cache, _hydra, evaluate
from detcal.apps._hydra import AppContext, _is_multirun, run_app
from detcal.data.specs import DATA_SPECS
from detcal.pipeline.spec import DataSpec

_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", re.M)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(where))
    monkeypatch.delenv("DETCAL_COMPOSE_CACHE", raising=False)
    return where


@pytest.fixture
def compositions(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Counts Hydra's own compositions (the cache wraps whatever ``load_configuration`` is when a run starts)."""
    seen: list[str] = []
    original = ConfigLoaderImpl.load_configuration

    def counted(self: ConfigLoaderImpl, *args: Any, **kwargs: Any) -> Any:
        seen.append(str(kwargs.get("run_mode", args[2] if len(args) > 2 else "")))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    yield seen


def _run(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], task: Callable[[Any, AppContext], Any] = evaluate.task
) -> None:
    monkeypatch.setattr(sys, "argv", ["detcal-evaluate", *argv])
    run_app(evaluate.CONFIG_NAME, evaluate.SCHEMA, task, evaluate.PROG)


def _outputs(run_dir: Path) -> dict[str, str]:
    """What a run wrote that must not depend on the cache: the .hydra files, metrics.json without its time
    stamp and timings, the log without its time stamps."""
    out = {p.name: p.read_text() for p in sorted((run_dir / ".hydra").iterdir())}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics.pop("created", None)
    metrics.pop("timing_s", None)
    out["metrics.json"] = json.dumps(metrics, sort_keys=True)
    logs = sorted(run_dir.glob("*.log"))
    assert logs
    out["log"] = _STAMP.sub("[time]", logs[0].read_text())
    return out


LEAN = ["bootstrap.n=0", "output.plots=false", "output.detections_csv=false", "output.progress=false"]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["matching.iou_thresholds=[0.5]", "dece_binning=netcal", "dece_binning.ece_bins=10", "report.enabled=false"],
    ],
    ids=["defaults", "overrides"],
)
def test_a_cached_run_writes_what_hydra_composes(
    coco: DataSpec,
    extra: list[str],
    tmp_path: Path,
    cache: Path,
    compositions: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv = ["data=coco", f"data.gt={coco.gt}", f"data.results={coco.results}", *LEAN, *extra]

    def run(switch: str, run_dir: Path) -> dict[str, str]:
        monkeypatch.setenv("DETCAL_COMPOSE_CACHE", switch)
        _run(monkeypatch, [*argv, f"hydra.run.dir={run_dir}", "overwrite=true"])
        return _outputs(run_dir)

    hydra_b = run("0", tmp_path / "b")  # Hydra alone
    run("1", tmp_path / "a")  # composed by Hydra and stored (a plain run directory is keyed without its path)
    assert run("1", tmp_path / "b") == hydra_b  # read from the cache, with its own run directory put in
    assert run("1", tmp_path / "b") == hydra_b
    assert len(compositions) == 2
    assert len(list(cache.glob("compose-*.pkl"))) == 1


def test_a_sweep_composes_through_hydra(
    tmp_path: Path, cache: Path, compositions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    argv = ["-m", "data=synthetic", "data.n_images=5,6", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    counts = []
    for switch in ("0", "1", "1"):
        monkeypatch.setenv("DETCAL_COMPOSE_CACHE", switch)
        before = len(compositions)
        _run(monkeypatch, [*argv, "overwrite=true"], lambda spec, ctx: seen.append(spec.data.n_images))
        counts.append(len(compositions) - before)
    assert seen == [5, 6] * 3
    assert not cache.exists()
    assert counts[0] >= 4 and counts == [counts[0]] * 3  # the mode, the sweep, each job: all composed by Hydra
    assert _is_multirun(["-m"]) and _is_multirun(["--multirun"]) and _is_multirun(["hydra.mode=MULTIRUN"])
    assert not _is_multirun(["--cfg", "job", "data.n_images=5", "--config-dir", "x"])


def test_a_bad_override_fails_as_before(
    tmp_path: Path,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["data=synthetic", "dece_binning.ece_binz=3", f"hydra.run.dir={tmp_path / 'run'}"]
    errors = []
    for switch in ("0", "1", "1"):
        monkeypatch.setenv("DETCAL_COMPOSE_CACHE", switch)
        with pytest.raises(SystemExit) as exit_:
            _run(monkeypatch, argv, lambda spec, ctx: None)
        errors.append((exit_.value.code, capsys.readouterr().err))
    assert errors[0][0] == 2 and "ece_binz" in errors[0][1]
    assert errors[1] == errors[0] and errors[2] == errors[0]
    assert not list(cache.glob("compose-*.pkl"))  # a failed composition is not stored


def test_a_changed_user_config_file_is_read_again(
    tmp_path: Path, cache: Path, compositions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "user"
    (user / "dece_binning").mkdir(parents=True)
    mine = user / "dece_binning" / "mine.yaml"
    argv = ["--config-dir", str(user), "data=synthetic", "dece_binning=mine", f"hydra.run.dir={tmp_path / 'run'}"]
    seen: list[int] = []
    for bins in (10, 10, 12):
        if not mine.is_file() or mine.read_text() != f"ece_bins: {bins}\n":
            mine.write_text(f"ece_bins: {bins}\n")
        _run(monkeypatch, [*argv, "overwrite=true"], lambda spec, ctx: seen.append(spec.dece_binning.ece_bins))
    assert seen == [10, 10, 12]
    runs = [m for m in compositions if "RUN" in m and "MULTI" not in m]
    assert len(runs) == 2  # the first and the changed file; the second read the cache
    assert len(list(cache.glob("compose-*.pkl"))) == 2


def test_the_switch_and_a_broken_cache(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["data=synthetic", "data.n_images=7", f"hydra.run.dir={tmp_path / 'run'}", "overwrite=true"]
    seen: list[int] = []

    def task(spec: Any, ctx: AppContext) -> None:
        seen.append(spec.data.n_images)

    monkeypatch.setenv("DETCAL_COMPOSE_CACHE", "off")
    _run(monkeypatch, argv, task)
    assert not cache.exists()
    monkeypatch.setenv("DETCAL_COMPOSE_CACHE", "1")
    _run(monkeypatch, argv, task)
    (stored,) = cache.glob("compose-*.pkl")
    stored.write_bytes(b"not a pickle")  # damaged: Hydra composes and the file is written again
    _run(monkeypatch, argv, task)
    assert stored.read_bytes() != b"not a pickle"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(blocked / "cache"))  # cannot be made: never fatal
    _run(monkeypatch, argv, task)
    assert seen == [7, 7, 7, 7]


def test_keyed_overrides() -> None:
    keyed, slot = _compose_cache.keyed_overrides(["data=coco", "hydra.run.dir=/tmp/a-1/b_2", "x=1"])
    assert slot == 1 and keyed == ["data=coco", None, "x=1"]  # None: what no command line can spell
    literal = ["data=coco", "hydra.run.dir=<any>", "x=1"]  # not a plain path: keyed as it is, another key
    assert _compose_cache.keyed_overrides(literal) == (literal, None)
    for unusual in (
        ["hydra.run.dir='/tmp/a b'"],  # quoted
        ["hydra.run.dir=/tmp/${now:%H}"],  # an interpolation
        ["hydra.run.dir=a,b"],  # a sweep
        ["hydra.run.dir=/a", "hydra.run.dir=/b"],  # twice
        ["++hydra.run.dir=/a"],
        ["data=coco"],
        ["hydra.run.dir=/a", "hydra.run={dir:/b}"],  # a later override of the node (Hydra applies them in order)
        ["hydra.run.dir=/a", "+hydra.run.extra=1"],
        ["~hydra.run", "hydra.run.dir=/a"],
        ["hydra.run.dir=/a", "hydra={run:{dir:/b}}"],
    ):
        assert _compose_cache.keyed_overrides(unusual) == (unusual, None)


def test_cache_dir_and_eviction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DETCAL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _compose_cache.cache_dir() == tmp_path / "xdg" / "detcal"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as the XDG rules say
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _compose_cache.cache_dir() == tmp_path / "home" / ".cache" / "detcal"
    monkeypatch.setenv("DETCAL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setattr(_compose_cache, "MAX_ENTRIES", 3)
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"a": 1})
    for i in range(5):
        _compose_cache.write(f"key {i}", cfg)
        os.utime(_compose_cache._file_for(f"key {i}"), ns=(i * 10**9, i * 10**9))
    assert [_compose_cache.read(f"key {i}") is not None for i in range(5)] == [False, False, True, True, True]
    assert _compose_cache.read("key 4") == cfg and _compose_cache.read("key 5") is None


def test_a_run_read_from_the_cache_stores_no_schema(
    tmp_path: Path, cache: Path, compositions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain command line stores its schema classes only when Hydra composes (converting them costs ~10 ms)."""
    repo = ConfigStore.instance().repo
    argv = ["data=synthetic", "data.n_images=7", f"hydra.run.dir={tmp_path / 'run'}", "overwrite=true"]
    stored: list[list[str]] = []
    try:
        for _ in range(2):
            for name in [k for k in repo if k.endswith("_schema.yaml")]:
                del repo[name]
            _run(
                monkeypatch,
                argv,
                lambda spec, ctx: stored.append(sorted(k for k in repo if k.endswith("_schema.yaml"))),
            )
    finally:
        _hydra.register_schema(evaluate.CONFIG_NAME, evaluate.SCHEMA)  # later tests find every schema stored
    assert stored == [["data_synthetic_schema.yaml", "evaluate_schema.yaml"], []]
    assert len(compositions) == 1
    assert _hydra.schema_entries("evaluate", evaluate.SCHEMA, ("coco",)) == {
        "evaluate_schema": evaluate.SCHEMA,
        "data_coco_schema": DATA_SPECS["coco"],
    }


def test_a_run_read_from_the_cache_resolves_now_anew(
    tmp_path: Path, cache: Path, compositions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """OmegaConf keeps cached resolvers' values (``${now:...}``, resolved while Hydra composes) in the
    configuration; a stored one must not carry them to a later run (the default run directory is dated)."""
    import datetime as dt

    import hydra.core.utils
    from hydra.core.hydra_config import HydraConfig

    clock = iter(dt.datetime(2026, 1, 1, 10, 0, s) for s in range(0, 60, 7))

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return next(clock)

    monkeypatch.setattr(hydra.core.utils, "datetime", Clock)
    monkeypatch.chdir(tmp_path)
    dirs: list[str] = []
    for _ in range(3):  # composed, then twice from the cache
        _run(monkeypatch, ["data=synthetic"], lambda spec, ctx: dirs.append(HydraConfig.get().runtime.output_dir))
    assert len([m for m in compositions if "RUN" in m and "MULTI" not in m]) == 1
    stamps = [re.search(r"/(\d\d-\d\d-\d\d)-", d).group(1) for d in dirs]  # type: ignore[union-attr]
    assert len(set(stamps)) == 3 and stamps == sorted(stamps), dirs
