"""Compose every config with the Hydra compose API and convert it into its
app's typed schema (which validates every value); instantiate every
calibrator. The cases are globbed from configs/, so config files added later
are picked up automatically. Each primary config ``configs/<name>.yaml`` is
the config of the app module ``detcal.apps.<name>`` (``CONFIG_NAME``, ``SCHEMA``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf, open_dict

from detcal.apps import _hydra
from detcal.pipeline import registry
from detcal.pipeline.registry import config_dir
from detcal.pipeline.spec import ConfigError, DataSpec, EvaluationSpec, MatchingSpec

CONFIG_DIR = config_dir()
PRIMARIES = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
GROUPS = sorted(p.name for p in CONFIG_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
DATA_FILES = ("classmap",)  # read by path (train_data.class_map), not composed as a group
CASES = [
    (g, f.relative_to(CONFIG_DIR / g).with_suffix("").as_posix())
    for g in GROUPS
    if g not in DATA_FILES
    for f in sorted((CONFIG_DIR / g).rglob("*.yaml"))
]


def _app(primary: str) -> Any:
    return importlib.import_module(f"detcal.apps.{primary}")


def _primary_defaults(primary: str) -> dict[str, str]:
    """Group (with its package, ``calibrator@regression_calibrator``) -> default option."""
    data = yaml.safe_load((CONFIG_DIR / f"{primary}.yaml").read_text()) or {}
    out = {}
    for entry in data.get("defaults", []):
        if isinstance(entry, dict):
            ((k, v),) = entry.items()
            out[k.replace("optional ", "").replace("override ", "").strip().lstrip("/")] = v
    return out


def _groups_of(primary: str) -> set[str]:
    return {k.split("@")[0] for k in _primary_defaults(primary)}


def _compose(overrides: list[str], primary: str = "evaluate", hydra_cfg: bool = False) -> Any:
    app = _app(primary)
    GlobalHydra.instance().clear()
    _hydra.register_schema(app.CONFIG_NAME, app.SCHEMA)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=primary, overrides=overrides, return_hydra_config=hydra_cfg)


def _typed(cfg: Any, primary: str) -> Any:
    """The app's schema object (validated), and every ``_target_`` node instantiated."""
    if "hydra" in cfg:
        with open_dict(cfg):
            del cfg["hydra"]
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, _app(primary).SCHEMA)
    for key in ("calibrator", "regression_calibrator"):
        node = getattr(obj, key, None)
        if node is not None:
            built = instantiate(node)
            assert f"{type(built).__module__}.{type(built).__qualname__}" == node["_target_"]
    return obj


def test_cases_were_found() -> None:
    assert {"evaluate", "calibrate"} <= set(PRIMARIES)
    assert {"data", "matching", "dece_binning", "sigma_binning", "calibrator", "experiment", "hydra"} <= set(GROUPS)
    assert len(CASES) >= 15


@pytest.mark.parametrize("primary", PRIMARIES)
def test_every_primary_composes_into_its_schema(primary: str) -> None:
    cfg = _compose([], primary, hydra_cfg=True)
    run_dir = OmegaConf.to_container(cfg.hydra.run, resolve=True)["dir"]
    assert re.match(rf"outputs/{re.escape(str(cfg.name))}/\d{{4}}-\d\d-\d\d/\d\d-\d\d-\d\d-[0-9a-f]{{6}}$", run_dir)
    assert cfg.hydra.job.name == primary and cfg.hydra.help.app_name == _app(primary).PROG
    _typed(cfg, primary)


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}/{o}" for g, o in CASES])
def test_every_group_option_composes_and_validates(group: str, option: str) -> None:
    """Every option of every group composes with a primary config that uses the group and
    converts into that app's schema (an experiment belongs to at least one app)."""
    if group == "hydra":
        cfg = _compose([f"hydra={option}"], hydra_cfg=True)
        assert cfg.hydra.run.dir and cfg.hydra.sweep.dir
        return
    errors = []
    for primary in PRIMARIES:
        if group not in _groups_of(primary):
            continue
        keys = [k for k in _primary_defaults(primary) if k.split("@")[0] == group]
        for key in keys:
            if (
                group == "calibrator"
                and "@" not in key
                and option in ("std_scaling", "std_scaling_sgd", "kuleshov_isotonic", "sigma_histogram", "conformal")
            ):
                continue  # a box-uncertainty calibrator is not a confidence calibrator
            if (
                group == "calibrator"
                and "@" in key
                and option
                not in ("std_scaling", "std_scaling_sgd", "kuleshov_isotonic", "sigma_histogram", "conformal")
            ):
                continue
            try:
                _typed(_compose([f"{key}={option}"], primary), primary)
                return
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                errors.append(f"{primary} {key}: {type(exc).__name__}: {exc}")
    pytest.fail(f"{group}/{option} composes with no primary config:\n" + "\n".join(errors))


def test_yaml_holds_values_only() -> None:
    """No ``_target_`` outside the calibrator registry and the model builders; experiments are overrides."""
    for f in CONFIG_DIR.rglob("*.yaml"):
        if f.parent.name not in ("calibrator", "model"):
            assert "_target_" not in f.read_text(), f
    for f in sorted((CONFIG_DIR / "experiment").glob("*.yaml")):
        assert f.read_text().splitlines()[0].strip() == "# @package _global_", f
    app = _typed(_compose(["experiment=planted_std_scale"]), "evaluate")
    assert app.data.detector_kwargs["std_scale"] == [1, 1, 2, 0.5] and app.name == "planted_std_scale"


def test_run_and_sweep_dirs_are_declared_once() -> None:
    cfg = _compose([], hydra_cfg=True)
    assert cfg.hydra.job.chdir is False
    for f in CONFIG_DIR.rglob("*.yaml"):
        if f.parent.name != "hydra":
            text = f.read_text()
            assert "sweep:" not in text and "run:\n  dir" not in text, f


def test_run_name_cannot_leave_the_outputs_root() -> None:
    for bad in ("../../x", "a/b", "..", ""):
        with pytest.raises(Exception, match="plain directory name"):
            OmegaConf.to_container(_compose([f"name='{bad}'"], hydra_cfg=True).hydra.run, resolve=True)


def test_group_values_reach_the_spec() -> None:
    app = _typed(
        _compose(
            [
                "data=coco",
                "data.gt=a.json",
                "data.results=b.json",
                "matching=max",
                "matching.iou_thresholds=[0.6]",
                "dece_binning=netcal",
                "sigma_binning=equal_width",
            ]
        ),
        "evaluate",
    )
    assert isinstance(app.data, DataSpec) and (app.data.source, app.data.gt, app.data.results) == (
        "coco",
        "a.json",
        "b.json",
    )
    ev = app.evaluation()
    assert isinstance(ev, EvaluationSpec) and isinstance(ev.matching, MatchingSpec)
    assert ev.matching.mode == "max" and ev.matching.iou_thresholds == [0.6]
    assert type(ev.matching.iou_thresholds) is list  # plain Python below the app boundary
    assert ev.dece_binning.policy == "netcal" and ev.sigma_binning.scheme == "equal_width"
    app = _typed(_compose(["data=kitti", "data.label_dir=l", "data.difficulty=hard", "matching=kitti"]), "evaluate")
    assert app.data.source == "kitti" and app.data.difficulty == "hard" and app.matching.iou_thresholds == "kitti"


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("matching.mode=foo", "matching.mode"),
        ("matching.iou_thresholds=[1.5]", "matching.iou_thresholds"),
        ("dece_binning.bins=[5,5]", "dece_binning.bins"),
        ("bootstrap.level=1.0", "bootstrap.level"),
        ("data.source=nope", "data.source"),
        ("regression.space=pixels", "regression.space"),
    ],
)
def test_invalid_values_name_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _typed(_compose([override]), "evaluate")
    assert info.value.key == key


def test_config_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(registry.CONFIG_ENV, str(tmp_path))
    assert registry.config_dir() == CONFIG_DIR  # no evaluate.yaml there: falls back to the repo
    (tmp_path / "evaluate.yaml").write_text("name: x\n")
    assert registry.config_dir() == tmp_path.resolve()
    monkeypatch.setattr(registry, "_candidates", lambda: [tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match=registry.CONFIG_ENV):
        registry.config_dir()


@pytest.mark.parametrize("primary", PRIMARIES)
def test_help_opens_with_what_the_app_does(primary: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", f"detcal.apps.{primary}", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"{_app(primary).PROG}: ") and "powered by Hydra" not in proc.stdout


def test_class_maps_load() -> None:
    from detcal.data.classmap import load_class_map

    files = sorted((CONFIG_DIR / "classmap").glob("*.yaml"))
    assert files
    for f in files:
        assert load_class_map(f) is not None


def test_no_shipped_config_sets_the_hydra_mode() -> None:
    """A plain command line composes the config once (detcal.apps._hydra._single_compose), which is
    only right while no shipped config sets hydra.mode."""
    import yaml

    root = Path(__file__).resolve().parents[2] / "configs"
    for path in root.rglob("*.yaml"):
        doc = yaml.safe_load(path.read_text()) or {}
        hydra = doc.get("hydra") if isinstance(doc, dict) else None
        in_hydra_group = path.parent.name == "hydra"
        assert not (isinstance(hydra, dict) and "mode" in hydra), path
        assert not (in_hydra_group and "mode" in doc), path


def test_single_compose_only_for_plain_command_lines() -> None:
    from hydra._internal.hydra import Hydra

    from detcal.apps._hydra import _single_compose

    original = Hydra.get_mode
    for argv, patched in (
        (["data=coco", "hydra.run.dir=x"], True),
        (["-m", "seed=1,2"], False),
        (["--cfg", "job"], False),
        (["hydra.mode=MULTIRUN"], False),
        (["hydra/sweeper=basic"], False),
        (["+hydra.searchpath=[pkg://x]"], False),
    ):
        with _single_compose(argv):
            assert (Hydra.get_mode is not original) == patched, argv
        assert Hydra.get_mode is original
