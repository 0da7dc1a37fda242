"""Start-up of the commands (issue 29, 29x): a plain command line stores only the data spec class it composes,
the imports of the Hydra boundary run with the cyclic collector paused and end frozen, and the run directory
is read without copying Hydra's node when nothing needs it. Each shortcut composes, names and writes exactly
what the full path does; the composition tests fail if a Hydra upgrade starts reading the store otherwise."""

from __future__ import annotations

import gc
import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from detcal.apps import _hydra, _run_dir
from detcal.apps._hydra import AppContext, plain_data_source, run_app
from detcal.data.specs import DATA_SPECS
from detcal.pipeline.registry import config_dir
from detcal.utils import collector
from detcal.utils.collector import collector_paused

REPO = Path(__file__).resolve().parents[2]
CONFIGS = config_dir()
SOURCES_WITH_FILES = sorted(s for s in DATA_SPECS if (CONFIGS / "data" / f"{s}.yaml").is_file())
APPS_WITH_DATA = ("evaluate", "calibrate", "compare", "main")


def _stored_data_schemas() -> list[str]:
    return sorted(k for k in ConfigStore.instance().repo if k.startswith("data_") and k.endswith("_schema.yaml"))


def _forget_data_schemas() -> None:
    repo = ConfigStore.instance().repo
    for name in _stored_data_schemas():
        del repo[name]


@pytest.fixture
def every_source_stored_after() -> Iterator[None]:
    """Tests below empty the store's data entries; later tests find every source stored again."""
    yield
    from detcal.apps import evaluate

    _hydra.register_schema(evaluate.CONFIG_NAME, evaluate.SCHEMA)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["data=coco", "data.gt=g.json", "data.results=r.json", "bootstrap.n=0", "hydra.run.dir=x"], "coco"),
        (["data=kitti", "overwrite=true"], "kitti"),
        (["data.gt=g.json"], None),  # the primary config's default data: not told by the words
        ([], None),
        (["data=coco_mini79"], None),  # an option that is not a source's own file
        (["data=bundled"], None),  # a source without a file of its own
        (["data=coco", "data=kitti"], None),
        (["data=coco,kitti"], None),
        (["-m", "data=coco"], None),
        (["--cfg", "job", "data=coco"], None),
        (["data=coco", "+data@eval_data=kitti"], None),
        (["data=coco", "data@eval_data=kitti"], None),
        (["data=coco", "experiment=planted_std_scale"], None),
        (["data=coco", "~experiment"], None),
        (["data=coco", "hydra.searchpath=[file:///elsewhere]"], None),
        (["data=coco", "hydra/sweeper=basic"], None),
        (["data=coco", "hydra.mode=MULTIRUN"], None),
        (["data=coco", "stray"], None),
    ],
)
def test_plain_data_source(argv: list[str], expected: str | None) -> None:
    assert plain_data_source(argv, CONFIGS) == expected


@pytest.mark.parametrize("source", SOURCES_WITH_FILES)
def test_a_source_file_composes_its_own_schema_only(source: str) -> None:
    """What plain_data_source relies on: configs/data/<source>.yaml takes its spec class, and no other
    config file takes a data spec class from the store."""
    doc = yaml.safe_load((CONFIGS / "data" / f"{source}.yaml").read_text())
    assert doc["defaults"][0] == f"/{_hydra.data_schema_name(source)}@_here_"
    for path in CONFIGS.rglob("*.yaml"):
        text = path.read_text()
        named = {s for s in DATA_SPECS if _hydra.data_schema_name(s) in text}
        assert path.parent.name == "data" or not named, path
        if path.parent.name == "data" and path.stem in DATA_SPECS:
            assert named == {path.stem}, path


def _composed(app_name: str, source: str, sources: tuple[str, ...] | None) -> str:
    """The composed config (Hydra's node included, unresolved) of ``app_name data=<source>`` with the data
    spec classes of ``sources`` stored (``None``: every one), or the error it raises."""
    app = importlib.import_module(f"detcal.apps.{app_name}")
    GlobalHydra.instance().clear()
    _forget_data_schemas()
    _hydra.register_schema(app.CONFIG_NAME, app.SCHEMA, sources)
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            cfg = compose(config_name=app.CONFIG_NAME, overrides=[f"data={source}"], return_hydra_config=True)
    except Exception as exc:  # noqa: BLE001 - the same error either way is what is compared
        return f"{type(exc).__name__}: {exc}"
    return OmegaConf.to_yaml(cfg)


@pytest.mark.parametrize("app_name", APPS_WITH_DATA)
def test_one_stored_source_composes_what_every_source_does(app_name: str, every_source_stored_after: None) -> None:
    for source in SOURCES_WITH_FILES:
        full = _composed(app_name, source, None)
        assert _composed(app_name, source, (source,)) == full, (app_name, source)
    assert _composed(app_name, "coco", ("coco",)).startswith(("name:", "hydra:", "matching:", "data:"))


def test_a_plain_run_stores_one_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_source_stored_after: None
) -> None:
    from detcal.apps import evaluate

    seen: dict[str, Any] = {}

    def task(spec: Any, ctx: AppContext) -> None:
        seen.update(stored=_stored_data_schemas(), run_dir=ctx.run_dir)

    _forget_data_schemas()
    monkeypatch.setattr(sys, "argv", ["detcal-evaluate", "data=synthetic", f"hydra.run.dir={tmp_path / 'run'}"])
    run_app(evaluate.CONFIG_NAME, evaluate.SCHEMA, task, evaluate.PROG)
    assert seen["stored"] == ["data_synthetic_schema.yaml"]
    assert seen["run_dir"] == tmp_path / "run" and (tmp_path / "run" / ".hydra" / "hydra.yaml").is_file()


def test_the_command_imports_are_frozen_without_collections() -> None:
    """Importing a command leaves the collector on, its imports frozen, and (nearly) no collection run."""
    code = (
        "import gc, json\n"
        "import detcal.apps.evaluate\n"
        "print(json.dumps([gc.isenabled(), gc.get_freeze_count(), sum(s['collections'] for s in gc.get_stats())]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    enabled, frozen, collections = json.loads(out.stdout)
    assert enabled and frozen > 20_000
    assert collections < 50  # about 100 before (each walking every young object); the rest of the imports
    # (detcal.apps.schema, detcal.pipeline.evaluation) run after the Hydra boundary's, collector on


def test_pause_and_resume() -> None:
    assert gc.isenabled()
    running = collector.pause()
    assert running and not gc.isenabled()
    assert collector.pause() is False  # paused already: the inner resume leaves it paused
    collector.resume(False, freeze=True)
    assert not gc.isenabled()
    collector.resume(running)
    assert gc.isenabled()


def test_collector_paused() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused(freeze=True):
            assert not gc.isenabled()
        assert not gc.isenabled()  # a disabled collector stays disabled, nothing frozen by the block
    finally:
        gc.enable()
    before = gc.get_freeze_count()
    kept = [[] for _ in range(1000)]
    try:
        with collector_paused(freeze=True):
            kept += [[] for _ in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= before + 2000
        assert not any(o is kept for o in gc.get_objects())  # frozen: in no generation
    finally:
        gc.unfreeze()  # the test process's import freeze goes back to the oldest generation too: harmless
        gc.freeze()


def test_a_run_directory_that_reads_hydra_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``${hydra:job.name}`` in hydra.run.dir needs the HydraConfig set: read as before, same directory."""
    from detcal.apps import evaluate

    seen: list[Path] = []
    run_dir = str(tmp_path) + "/${hydra:job.name}-${name}"
    monkeypatch.setattr(sys, "argv", ["detcal-evaluate", f"hydra.run.dir={run_dir}"])
    run_app(evaluate.CONFIG_NAME, evaluate.SCHEMA, lambda spec, ctx: seen.append(ctx.run_dir), evaluate.PROG)
    assert seen == [tmp_path / "evaluate-evaluate"]
    assert (tmp_path / "evaluate-evaluate" / "evaluate.log").is_file()


def test_output_dir_without_and_with_hydra_config_agree(every_source_stored_after: None) -> None:
    """The shortcut of ``_output_dir`` (no HydraConfig set, nothing reads it) gives the directory the full
    path gives; a directory that reads the HydraConfig takes the full path."""
    from detcal.apps import evaluate

    GlobalHydra.instance().clear()
    _hydra.register_schema(evaluate.CONFIG_NAME, evaluate.SCHEMA)
    hc = HydraConfig.instance()
    saved = hc.cfg
    try:
        for run_dir in ("out/${name}/x", "out/${hydra:job.name}"):
            with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
                cfg = compose(config_name="evaluate", overrides=[f"hydra.run.dir={run_dir}"], return_hydra_config=True)
            hc.cfg = None  # as in a single run when Hydra's run_job is called
            fast = _run_dir._output_dir(cfg, "hydra.run.dir", None)
            assert hc.cfg is None
            hc.set_config(cfg)
            full = Path(str(OmegaConf.select(cfg, "hydra.run.dir"))).absolute()
            assert fast == full and fast.name in ("x", "evaluate"), run_dir
    finally:
        hc.cfg = saved
