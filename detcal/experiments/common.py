"""Shared pieces of the Hydra apps: where the configs live, the run directory,
and the data sources that the ``data`` config group builds with ``_target_``.

Config directory
----------------
The repository's ``configs/`` directory is the single source of the configs.
:func:`config_dir` finds it, in this order:

1. the environment variable ``DETCAL_CONFIG_DIR`` (any directory holding
   ``evaluate.yaml``; use it for an installed, non-editable package or for a
   private copy of the configs);
2. ``<repo>/configs`` next to the ``detcal`` package (a source checkout or an
   editable install, ``pip install -e .``);
3. ``detcal/_configs`` inside the package (where a wheel build may copy
   ``configs/``).

If none holds ``evaluate.yaml`` the repository path is returned and the app
stops with a message naming the places searched (:func:`require_config_dir`).

Data sources
------------
Each ``data/*.yaml`` builds one of :class:`CocoSource`, :class:`KittiSource`,
:class:`SyntheticSource`; ``load(run_dir)`` returns a :class:`LoadedData`
(ground truth, detections, optional KITTI rules, provenance). Nothing here
imports Hydra; the loaders are imported lazily.
"""
from __future__ import annotations

import sys

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from detcal.errors import DetcalInputError
from detcal.types import Dataset, Detections, KittiRules

__all__ = [
    "CONFIG_ENV",
    "config_dir",
    "require_config_dir",
    "hydra_run_dir",
    "task_overrides",
    "run_hydra_app",
    "run_header",
    "LoadedData",
    "CocoSource",
    "KittiSource",
    "SyntheticSource",
]

CONFIG_ENV = "DETCAL_CONFIG_DIR"
_PRIMARY = "evaluate.yaml"


def _candidates() -> list[Path]:
    pkg = Path(__file__).resolve().parent.parent  # .../detcal
    out = []
    env = os.environ.get(CONFIG_ENV)
    if env:
        out.append(Path(env).expanduser().resolve())
    out += [pkg.parent / "configs", pkg / "_configs"]
    return out


def config_dir() -> Path:
    """Absolute path of the configs directory (see the module docstring for the search order)."""
    cands = _candidates()
    for c in cands:
        if (c / _PRIMARY).is_file():
            return c
    return cands[1] if len(cands) > 2 else cands[0]


def require_config_dir() -> Path:
    """:func:`config_dir`, or a clear error naming every place searched."""
    d = config_dir()
    if not (d / _PRIMARY).is_file():
        where = ", ".join(str(c) for c in _candidates())
        raise FileNotFoundError(
            f"detcal configs not found (looked for {_PRIMARY} in: {where}); "
            f"set {CONFIG_ENV} to the repository's configs/ directory"
        )
    return d


def hydra_run_dir() -> Path:
    """The current Hydra run's output directory (``HydraConfig.runtime.output_dir``)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def task_overrides() -> list[str]:
    """The command-line overrides of the current Hydra job (``[]`` outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        return list(HydraConfig.get().overrides.task)
    except ValueError:
        return []


def run_header(command: str, cfg: Any, out_dir: Path, overrides: Sequence[str] | None) -> dict[str, Any]:
    """The provenance every app's ``metrics.json`` opens with: detcal version, UTC time,
    command, run directory, command-line overrides and the resolved config."""
    import datetime as _dt

    from omegaconf import OmegaConf

    import detcal

    return {
        "detcal_version": detcal.__version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "run_dir": str(Path(out_dir).resolve()),
        "overrides": list(overrides or []),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def run_hydra_app(config_name: str, task: Callable[[Any, Path], Any], prog: str) -> None:
    """Run ``task(cfg, run_dir)`` as a Hydra app on ``configs/<config_name>.yaml``.

    The one entry point of every detcal console script: it finds the config
    directory first (exit 2 with a clear message when it cannot), then hands
    the command line (overrides, ``-m``, ``--cfg job``, ...) to Hydra.
    """
    try:
        require_config_dir()
    except FileNotFoundError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    import hydra

    @hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")
    def _hydra_main(cfg: Any) -> None:
        task(cfg, hydra_run_dir())

    _hydra_main()


@dataclass
class LoadedData:
    """What a data source hands to the app.

    ``dataset`` (images, GT, categories), ``detections`` [D], ``kitti`` the
    devkit rules for KITTI data (None otherwise) and ``provenance`` (paths
    and parameters, written to metrics.json).
    """

    dataset: Dataset
    detections: Detections
    kitti: KittiRules | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


def _need(value: Any, name: str, source: str) -> Path:
    if value in (None, "", "???"):
        raise DetcalInputError(f"data.{name} is required for data={source} (give data.{name}=<path>)",
                               file="configs/data/" + source + ".yaml", field=name)
    p = Path(str(value)).expanduser()
    if not p.exists():
        raise DetcalInputError("does not exist", file=p, field=f"data.{name}")
    return p


def _plain(x: Any) -> Any:
    """Plain dicts/lists from config containers (OmegaConf DictConfig/ListConfig or any Mapping/Sequence)."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        return [_plain(v) for v in x]
    return x


@dataclass
class CocoSource:
    """COCO instances JSON + COCO results JSON (:mod:`detcal.data.coco`)."""

    gt: str | None = None
    results: str | None = None

    def load(self, run_dir: str | os.PathLike) -> LoadedData:
        """Read both files; ``run_dir`` is unused (nothing is written)."""
        from detcal.data.coco import load_coco_instances, load_coco_results

        gt = _need(self.gt, "gt", "coco")
        res = _need(self.results, "results", "coco")
        ds = load_coco_instances(gt)
        dets = load_coco_results(res, dataset=ds)
        return LoadedData(ds, dets, None, {"source": "coco", "gt": str(gt.resolve()), "results": str(res.resolve())})


@dataclass
class KittiSource:
    """KITTI label_2 + results directories with devkit rules (:mod:`detcal.data.kitti`)."""

    label_dir: str | None = None
    results_dir: str | None = None
    image_dir: str | None = None
    sizes: str | None = None
    difficulty: str = "moderate"

    def load(self, run_dir: str | os.PathLike) -> LoadedData:
        """Read labels and results; image sizes from ``image_dir`` or the ``sizes`` file."""
        from detcal.data.kitti import kitti_rules, load_kitti_labels, load_kitti_results

        labels = _need(self.label_dir, "label_dir", "kitti")
        results = _need(self.results_dir, "results_dir", "kitti")
        if self.image_dir is None and self.sizes is None:
            raise DetcalInputError("KITTI needs image sizes: give data.image_dir or data.sizes",
                                   file="configs/data/kitti.yaml", field="image_dir")
        images = None if self.image_dir is None else _need(self.image_dir, "image_dir", "kitti")
        sizes = None if self.sizes is None else _need(self.sizes, "sizes", "kitti")
        ds = load_kitti_labels(labels, image_dir=images, sizes=sizes, difficulty=self.difficulty)
        dets = load_kitti_results(results, dataset=ds)
        prov = {"source": "kitti", "label_dir": str(labels.resolve()), "results_dir": str(results.resolve()),
                "image_dir": None if images is None else str(images.resolve()),
                "sizes": None if sizes is None else str(sizes.resolve()), "difficulty": self.difficulty}
        return LoadedData(ds, dets, kitti_rules(self.difficulty), prov)


@dataclass
class SyntheticSource:
    """A synthetic set from :func:`detcal.data.synthetic.write_synthetic`.

    Generated (deterministically, from ``seed`` and ``detector_kwargs``) into
    ``out_dir`` (default ``<run dir>/synthetic``), then read back through the
    COCO or KITTI adapter (``format``), so the evaluated path is the same as
    for real data. ``render=False`` (default) skips the PNG images, which the
    evaluation does not need.
    """

    out_dir: str | None = None
    n_images: int = 200
    seed: int = 0
    format: str = "coco"
    difficulty: str = "moderate"
    render: bool = False
    detector_kwargs: dict[str, Any] = field(default_factory=dict)

    def paths(self, run_dir: str | os.PathLike) -> dict[str, Path]:
        """Write the set (or reuse it) and return its paths."""
        from detcal.data.synthetic import write_synthetic

        out = Path(self.out_dir).expanduser() if self.out_dir else Path(run_dir) / "synthetic"
        kwargs = _plain(self.detector_kwargs or {})
        paths = write_synthetic(out, n_images=int(self.n_images), seed=int(self.seed),
                                detector_kwargs=kwargs or None, render=bool(self.render))
        return {k: Path(v) for k, v in dict(paths).items()}

    def load(self, run_dir: str | os.PathLike) -> LoadedData:
        """Generate, then load with the adapter named by ``format``."""
        if self.format not in ("coco", "kitti"):
            raise DetcalInputError(f"format must be 'coco' or 'kitti', got {self.format!r}",
                                   file="configs/data/synthetic.yaml", field="format")
        p = self.paths(run_dir)
        prov: dict[str, Any] = {"source": "synthetic", "format": self.format, "n_images": int(self.n_images),
                                "seed": int(self.seed), "detector_kwargs": _plain(self.detector_kwargs or {}),
                                "render": bool(self.render), "paths": {k: str(v) for k, v in p.items()}}
        if self.format == "coco":
            src = CocoSource(gt=str(p["coco_instances"]), results=str(p["coco_results"]))
            data = src.load(run_dir)
        else:
            src_k = KittiSource(label_dir=str(p["kitti_labels"]), results_dir=str(p["kitti_results"]),
                                sizes=str(p["kitti_sizes"]), difficulty=self.difficulty)
            data = src_k.load(run_dir)
        data.provenance = {**prov, "adapter": data.provenance}
        return data
