"""Compose every config with the Hydra compose API and instantiate every
``_target_`` node. The cases are globbed from configs/, so config files that
other parts of the project add later are picked up automatically."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from detcal.experiments import common
from detcal.experiments.common import CocoSource, KittiSource, SyntheticSource, config_dir

CONFIG_DIR = config_dir()
PRIMARY = "evaluate"


def _primary_defaults(primary: str = PRIMARY) -> dict[str, str]:
    """Group -> default option of a primary config's defaults list."""
    data = yaml.safe_load((CONFIG_DIR / f"{primary}.yaml").read_text()) or {}
    out = {}
    for entry in data.get("defaults", []):
        if isinstance(entry, dict):
            (k, v), = entry.items()
            out[k.replace("optional ", "").replace("override ", "").strip()] = v
    return out


DEFAULTS = _primary_defaults()
PRIMARIES = sorted(f.stem for f in CONFIG_DIR.glob("*.yaml"))
GROUPS = sorted(p.name for p in CONFIG_DIR.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
CASES = [(g, f.relative_to(CONFIG_DIR / g).with_suffix("").as_posix())
         for g in GROUPS for f in sorted((CONFIG_DIR / g).rglob("*.yaml"))]


def _compose(overrides: list[str], hydra_cfg: bool = False, primary: str = PRIMARY) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=primary, overrides=overrides, return_hydra_config=hydra_cfg)


def _instantiate_all(cfg: DictConfig) -> None:
    """Instantiate every ``_target_`` node and check it builds the named object."""
    for path, node in _target_nodes(cfg):
        obj = instantiate(node)
        assert obj is not None, path
        target = node._target_
        if isinstance(obj, functools.partial):
            assert f"{obj.func.__module__}.{obj.func.__name__}" == target, path
        else:
            assert f"{type(obj).__module__}.{type(obj).__qualname__}" == target, path


def _target_nodes(node: Any, path: str = "") -> Iterator[tuple[str, DictConfig]]:
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield path, node
            return
        for k in node:
            if path == "" and k == "hydra":
                continue
            yield from _target_nodes(node[k], f"{path}.{k}" if path else str(k))
    elif isinstance(node, ListConfig):
        for i, v in enumerate(node):
            yield from _target_nodes(v, f"{path}[{i}]")


def test_cases_were_found() -> None:
    assert (CONFIG_DIR / f"{PRIMARY}.yaml").is_file()
    assert {"data", "matching", "binning", "metrics", "hydra"} <= set(GROUPS)
    assert len(CASES) >= 10


def test_primary_config_composes_with_defaults() -> None:
    cfg = _compose([])
    assert cfg.data._target_ == "detcal.experiments.common.SyntheticSource"
    assert list(cfg.matching.iou_thresholds) == [0.5, 0.75]
    assert cfg.binning.scheme == "equal_count" and cfg.binning.bins == 10
    assert cfg.bootstrap.n > 0 and cfg.metrics.confidence.policy in ("drop", "netcal")


def _primaries_for(group: str) -> list[str]:
    """Primary configs whose defaults list declares ``group`` (the evaluate app first)."""
    names = [PRIMARY] + [p for p in PRIMARIES if p != PRIMARY]
    return [p for p in names if group in _primary_defaults(p)] or [PRIMARY]


@pytest.mark.parametrize(("group", "option"), CASES, ids=[f"{g}/{o}" for g, o in CASES])
def test_compose_and_instantiate_every_config(group: str, option: str) -> None:
    """Every option of every group composes (and instantiates) with a primary config that uses the group.

    An experiment belongs to one app (``main`` for the R-FCN experiments,
    ``evaluate`` for the planted-miscalibration one, ...): it must compose with
    at least one primary that declares the group; all failures are reported.
    """
    if group == "hydra":
        cfg = _compose([f"hydra={option}"] if group in DEFAULTS else [f"+hydra={option}"], hydra_cfg=True)
        assert cfg.hydra.run.dir and cfg.hydra.sweep.dir
        return
    errors = []
    for primary in _primaries_for(group):
        override = f"{group}={option}" if group in _primary_defaults(primary) else f"+{group}={option}"
        try:
            cfg = _compose([override], primary=primary)
            OmegaConf.to_container(cfg, resolve=True)  # every interpolation resolves
            _instantiate_all(cfg)
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors.append(f"{primary}: {type(exc).__name__}: {exc}")
            continue
        return
    pytest.fail(f"{group}/{option} composes with no primary config:\n" + "\n".join(errors))


@pytest.mark.parametrize("primary", PRIMARIES)
def test_compose_and_instantiate_every_primary_config(primary: str) -> None:
    cfg = _compose([], hydra_cfg=True, primary=primary)
    run_dir = OmegaConf.to_container(cfg.hydra.run, resolve=True)["dir"]
    assert run_dir.startswith("outputs/")  # configs/hydra/default.yaml
    cfg = _compose([], primary=primary)
    OmegaConf.to_container(cfg, resolve=True)
    _instantiate_all(cfg)


def test_run_and_sweep_dirs_are_declared_once() -> None:
    cfg = _compose([], hydra_cfg=True)
    run_dir = OmegaConf.to_container(cfg.hydra.run, resolve=True)["dir"]
    sweep_dir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)["dir"]
    assert run_dir.startswith("outputs/evaluate/") and sweep_dir.startswith("multirun/")
    assert cfg.hydra.job.chdir is False
    # no other config file touches the run/sweep directories
    for f in CONFIG_DIR.rglob("*.yaml"):
        if f.parent.name != "hydra":
            assert "sweep:" not in f.read_text() and "run:\n  dir" not in f.read_text(), f


def test_experiment_files_hold_overrides_only() -> None:
    files = sorted((CONFIG_DIR / "experiment").glob("*.yaml"))
    assert files
    for f in files:
        assert f.read_text().splitlines()[0].strip() == "# @package _global_", f
        data = yaml.safe_load(f.read_text()) or {}
        assert "_target_" not in str(data), f  # overrides, not new objects
    cfg = _compose(["experiment=planted_std_scale"])
    assert list(cfg.data.detector_kwargs.std_scale) == [1, 1, 2, 0.5]
    assert cfg.name == "planted_std_scale"


def test_data_sources_instantiate_with_values() -> None:
    cfg = _compose(["data=coco", "data.gt=a.json", "data.results=b.json"])
    src = instantiate(cfg.data)
    assert isinstance(src, CocoSource) and (src.gt, src.results) == ("a.json", "b.json")
    cfg = _compose(["data=kitti", "data.label_dir=l", "data.difficulty=hard"])
    src = instantiate(cfg.data)
    assert isinstance(src, KittiSource) and src.difficulty == "hard"
    src = instantiate(_compose(["data.n_images=7"]).data)
    assert isinstance(src, SyntheticSource) and src.n_images == 7


def test_matching_builds_a_partial_of_match() -> None:
    from detcal.matching import match

    m = instantiate(_compose(["matching=max", "matching.iou_thresholds=[0.6]"]).matching)
    assert m.func is match and m.keywords["mode"] == "max" and m.keywords["iou_thresholds"] == [0.6]
    assert type(m.keywords["iou_thresholds"]) is list  # _convert_: all, no ListConfig leaks into the core


def test_config_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(common.CONFIG_ENV, str(tmp_path))
    assert common.config_dir() == CONFIG_DIR  # no evaluate.yaml there: falls back to the repo
    (tmp_path / "evaluate.yaml").write_text("name: x\n")
    assert common.config_dir() == tmp_path.resolve()
    monkeypatch.setenv(common.CONFIG_ENV, str(tmp_path / "nowhere"))
    monkeypatch.setattr(common, "_candidates", lambda: [tmp_path / "nowhere"])
    with pytest.raises(FileNotFoundError, match=common.CONFIG_ENV):
        common.require_config_dir()
