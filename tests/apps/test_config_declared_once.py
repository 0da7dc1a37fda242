"""The configuration is declared once: each option's default lives in its dataclass; the YAML files under
configs/ hold only the values that differ from it (and the defaults lists and comments a user needs);
the data group picks one spec class per source; the resolved configuration of every bundled run is the
one it was before the YAML files were thinned (tests/data/resolved_configs/before_issue28.json)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, ListConfig, OmegaConf

from detcal.apps import _hydra
from detcal.apps.options_doc import options_markdown
from detcal.data.formats import FORMATS
from detcal.data.specs import DATA_SPECS, CocoDataSpec, KittiDataSpec, SyntheticDataSpec
from detcal.pipeline.registry import config_dir
from detcal.pipeline.spec import ConfigError, DataSpec, DeceBinningSpec, MatchingSpec, SigmaBinningSpec
from detcal.training.spec import ModelSpec, TrainerSpec

REPO = Path(__file__).resolve().parents[2]
CONFIGS = config_dir()
SNAPSHOT = REPO / "tests" / "data" / "resolved_configs" / "before_issue28.json"

GROUP_SCHEMAS: dict[str, type | None] = {
    "matching": MatchingSpec,
    "dece_binning": DeceBinningSpec,
    "sigma_binning": SigmaBinningSpec,
    "model": ModelSpec,
    "trainer": TrainerSpec,
    "data": None,  # the file's own spec class: its first default, /data_<source>_schema@_here_
}
EXEMPT = {
    "calibrator": "a calibrator's keyword arguments (no dataclass): they show its parameters in the resolved config",
    "regression": "defaults lists only (the short form of calibrator@regression_calibrator)",
    "experiment": "pins a published setup: its values stay when a default changes",
    "hydra": "Hydra's own run directories and logging",
    "classmap": "a data file read by path (train_data.class_map), not a config group",
}
PRIMARY_SCHEMAS = {p.stem: importlib.import_module(f"detcal.apps.{p.stem}").SCHEMA for p in CONFIGS.glob("*.yaml")}


def _leaves(node: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in node.items():
        if isinstance(v, dict) and v:
            out += _leaves(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _same(a: Any, b: Any) -> bool:
    """Equal, and a bool only equals a bool (``1 == True`` restates nothing)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _restated(values: dict[str, Any], schema: type) -> list[str]:
    """The keys of ``values`` (a YAML file's mapping) equal to ``schema``'s default at that key."""
    defaults = OmegaConf.structured(schema)
    absent = object()
    out = []
    for key, value in _leaves(values):
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation links two keys; it restates no default
        node = OmegaConf.select(defaults, key, default=absent, throw_on_missing=False)
        if node is absent:
            continue  # not a key of the schema (composition refuses it; tests/test_configs.py)
        default = OmegaConf.to_container(node) if isinstance(node, (DictConfig, ListConfig)) else node
        if _same(default, value):
            out.append(f"{key}: {value!r}")
    return out


def _group_schema(group: str, defaults: list[Any]) -> type:
    schema = GROUP_SCHEMAS[group]
    if schema is not None:
        return schema
    (entry,) = [d for d in defaults if isinstance(d, str) and d.startswith("/data_")]
    return DATA_SPECS[entry.removeprefix("/data_").removesuffix("_schema@_here_")]


def _config_files() -> list[Path]:
    """Every primary config and every option file of a checked group (the exempt ones say why above)."""
    return [p for p in sorted(CONFIGS.rglob("*.yaml")) if p.relative_to(CONFIGS).parts[0] not in EXEMPT]


def test_every_config_group_is_checked_or_exempt_with_a_reason() -> None:
    groups = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    assert groups == set(GROUP_SCHEMAS) | set(EXEMPT)


@pytest.mark.parametrize("path", _config_files(), ids=lambda p: p.relative_to(CONFIGS).as_posix())
def test_no_yaml_value_restates_its_dataclass_default(path: Path) -> None:
    rel = path.relative_to(CONFIGS)
    values = yaml.safe_load(path.read_text()) or {}
    defaults = values.pop("defaults", [])
    values.pop("hydra", None)
    if len(rel.parts) == 1:
        schema = PRIMARY_SCHEMAS[path.stem]
    else:
        schema = _group_schema(rel.parts[0], defaults)
    restated = _restated(values, schema)
    assert not restated, f"{rel} restates the defaults of {schema.__name__}: {restated} (docs/options.md has them)"


def _app(name: str) -> type:
    return PRIMARY_SCHEMAS[name]


def test_the_check_catches_a_restated_default() -> None:
    assert _restated({"ece_bins": 15, "bins": 6}, DeceBinningSpec) == ["ece_bins: 15"]
    assert _restated({"confidence": {"per_class": True, "maps": [["cx", "cy"], ["w", "h"]]}}, _app("evaluate")) == [
        "confidence.per_class: True",
        "confidence.maps: [['cx', 'cy'], ['w', 'h']]",
    ]
    assert _restated({"stage2": {"lr": 0.001, "iterations": 5}}, _app("main")) == ["stage2.lr: 0.001"]
    assert _restated({"max_dets": None, "iou_thresholds": [0.5]}, MatchingSpec) == []


# ---- the resolved configurations of the bundled runs ------------------------------------------------

RUNS: dict[str, tuple[str, list[str]]] = {
    "evaluate": ("evaluate", []),
    "evaluate_coco_tfzoo": ("evaluate", ["data=coco_tfzoo"]),
    "evaluate_coco_mini79": ("evaluate", ["data=coco_mini79"]),
    "evaluate_coco": ("evaluate", ["data=coco"]),
    "evaluate_kitti": ("evaluate", ["data=kitti"]),
    "evaluate_yolo": ("evaluate", ["data=yolo"]),
    "evaluate_voc": ("evaluate", ["data=voc"]),
    "evaluate_lvis": ("evaluate", ["data=lvis"]),
    "evaluate_openimages": ("evaluate", ["data=openimages"]),
    "evaluate_planted": ("evaluate", ["experiment=planted_std_scale"]),
    "evaluate_netcal": ("evaluate", ["dece_binning=netcal", "sigma_binning=equal_width", "matching=netcal_example"]),
    "evaluate_max": ("evaluate", ["matching=max"]),
    "calibrate": ("calibrate", []),
    "calibrate_eval_data": ("calibrate", ["data=coco", "data@eval_data=coco"]),
    "compare": ("compare", []),
    "study": ("study", []),
    "study_kuzucu": ("study", ["experiment=kuzucu2024_coco"]),
    "main": ("main", []),
    "main_kitti": ("main", ["experiment=levi2019_kitti"]),
    "main_ddp_r50": ("main", ["trainer=ddp", "model=rfcn_r50"]),
    "levi_synthetic": ("levi_synthetic", []),
}
"""Each bundled run (primary config, overrides). The snapshot holds their resolved configs (Hydra's own
node left out) as composed from the configs and schemas of commit b5ac754, before the YAML files were
thinned and the data spec split: ``{name: resolved(*RUNS[name])}``, written with ``json.dump(...,
indent=1, sort_keys=True)``."""


def resolved(primary: str, overrides: list[str]) -> dict[str, Any]:
    """The resolved config of ``primary`` with ``overrides``, without Hydra's own node."""
    app = importlib.import_module(f"detcal.apps.{primary}")
    GlobalHydra.instance().clear()
    _hydra.register_schema(app.CONFIG_NAME, app.SCHEMA)
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        cfg = compose(config_name=primary, overrides=overrides)
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize("run", list(RUNS))
def test_resolved_config_is_the_one_before(run: str) -> None:
    """Number for number the same configuration; the one change of structure: ``data`` (and ``eval_data``)
    hold exactly the fields of their source's spec class, with the values they had."""
    before = json.loads(SNAPSHOT.read_text())[run]
    after = resolved(*RUNS[run])
    for key in ("data", "eval_data"):
        if isinstance(after.get(key), dict):
            spec = DATA_SPECS[after[key]["source"]]
            assert set(after[key]) == {f.name for f in dataclasses.fields(spec)}, key
            before[key] = {k: v for k, v in before[key].items() if k in after[key]}
    if primary_of(run) == "compare":  # part 1 gave compare the grids it had hard-coded (15 ECE bins, 5 per
        # D-ECE dimension, threshold 8): a new key whose values are those constants
        grid = after.pop("dece_binning")
        assert (grid["ece_bins"], grid["bins"], grid["sample_threshold"], grid["policy"]) == (15, 5, 8, "drop")
    assert after == before


def primary_of(run: str) -> str:
    return RUNS[run][0]


# ---- one spec class per data source -----------------------------------------------------------------


def test_every_format_and_source_has_its_spec() -> None:
    assert set(FORMATS) | {"synthetic", "bundled"} == set(DATA_SPECS)
    for name, cls in DATA_SPECS.items():
        assert cls().source == name and issubclass(cls, DataSpec)


def test_dataspec_builds_the_source_class_and_refuses_a_foreign_field() -> None:
    spec = DataSpec(source="kitti", label_dir="l", difficulty="hard")
    assert type(spec) is KittiDataSpec and spec.label_dir == "l" and spec.difficulty == "hard"
    assert type(DataSpec()) is SyntheticDataSpec
    assert DataSpec(source="coco", gt="g") == CocoDataSpec(gt="g")
    with pytest.raises(ConfigError, match=r"'data.label_dir': data=coco has no field 'label_dir' .*read by data=kitti"):
        DataSpec(source="coco", gt="g", label_dir="l")
    with pytest.raises(ConfigError, match="'data.source': 'nope' is not one of coco, kitti"):
        DataSpec(source="nope")
    with pytest.raises(ConfigError, match="'data.source': 'coco' is another source"):
        KittiDataSpec(source="coco")
    with pytest.raises(TypeError):
        CocoDataSpec(label_dir="l")  # type: ignore[call-arg]


def test_the_data_group_composes_the_source_class() -> None:
    from detcal.apps import evaluate

    for option, cls in (("kitti", KittiDataSpec), ("coco", CocoDataSpec), ("synthetic", SyntheticDataSpec)):
        GlobalHydra.instance().clear()
        _hydra.register_schema(evaluate.CONFIG_NAME, evaluate.SCHEMA)
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            cfg = compose(config_name="evaluate", overrides=[f"data={option}"])
        assert type(OmegaConf.to_object(cfg).data) is cls


def test_a_foreign_field_on_the_command_line_is_one_line_naming_it(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", "data=coco", "data.label_dir=x", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 2
    (line,) = r.stderr.strip().splitlines()
    assert "data=coco has no field 'label_dir'" in line and "read by data=kitti | yolo | voc" in line


# ---- the options page -------------------------------------------------------------------------------


def test_the_options_page_lists_every_option_with_its_default() -> None:
    page = (REPO / "docs" / "options.md").read_text()
    assert page == options_markdown(), (
        "docs/options.md is out of date: regenerate it with python -m detcal.apps.options_doc > docs/options.md"
    )
    for key in ("`ece_bins` | `15`", "`gt_ignore` | `pycocotools`", "`detector_kwargs` | `{}`", "`chunk_bytes`"):
        assert key in page
    assert "| `stage2.*` | | [StageSpec](#stage1) with stage=2, iterations=1000, batch_size=6, lr=0.001," in page


def test_help_lists_the_config_groups_only(tmp_path: Path) -> None:
    """The data spec classes are stored beside the configs, not as a group --help would list."""
    r = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert r.returncode == 0
    section = r.stdout.split("== Configuration groups ==")[1].split("== Config ==")[0]
    groups = {line.split(":")[0] for line in section.splitlines() if ": " in line}
    assert groups == {p.name for p in CONFIGS.iterdir() if p.is_dir()} - {"hydra"}  # hydra: --hydra-help
