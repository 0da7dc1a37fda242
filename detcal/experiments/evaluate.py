"""``detcal-evaluate``: the Hydra app that evaluates one detector's calibration.

Pipeline (data flows one way; ../shared/METRICS.md sections 2-4)::

    data source (configs/data) -> match (configs/matching) -> confidence metrics
    per IoU threshold (configs/metrics) -> regression sample + metrics
    (configs/metrics, configs/binning) -> metrics.json, summary.md,
    detections.csv, PNG diagrams

Everything is written to the run's output directory only
(``HydraConfig.runtime.output_dir``; run/sweep directories are declared in
configs/hydra/default.yaml)::

    metrics.json     every number with its variant and parameters, the
                     matching description (MatchResult.describe()), the data
                     sources, the detcal version, the METRICS.md variants used,
                     a flat ``headline`` section (stable keys for sweeps) and
                     the D-ECE maps
    summary.md       Markdown tables (also printed)
    detections.csv   one row per detection: match outcome per threshold,
                     relative box features
    *.png            reliability diagram (per threshold), D-ECE maps, RMSE vs
                     RMV, QCE coverage, retention curves

Usage::

    detcal-evaluate                                        # synthetic set, default
    detcal-evaluate data=coco data.gt=gt.json data.results=dets.json
    detcal-evaluate -m matching.iou_thresholds='[0.5]','[0.75]'
    detcal-gather multirun/evaluate/<date>/<time>

Configs: see :mod:`detcal.experiments.common` for how the configs directory
is found (repository ``configs/``, or ``DETCAL_CONFIG_DIR``).
"""
from __future__ import annotations

import functools
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from detcal.boxes import relative_features, xyxy_to_cxcywh
from detcal.errors import DetcalInputError
from detcal.experiments.common import LoadedData, run_header
from detcal.reports import plots
from detcal.reports.tables import comparison_table, format_value, metrics_table, write_table
from detcal.types import MatchResult, MetricResult
from detcal.utils.io import to_jsonable, write_text

__all__ = ["FEATURES", "evaluate", "main", "threshold_label"]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")
"""Relative box features (METRICS.md section 1), columns of ``relative_features``."""

HEADLINE_CONFIDENCE: tuple[str, ...] = ("ece", "dece", "mce", "nll", "brier")
HEADLINE_REGRESSION: tuple[str, ...] = ("ence", "m_qce", "c_qce", "nll")


def threshold_label(t: float) -> str:
    """``iou=0.50`` (``iou=kitti`` for the per-class KITTI row, stored as NaN)."""
    return "iou=kitti" if not np.isfinite(t) else f"iou={t:.2f}"


def _cfg_get(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if node is None or part not in node:
            return default
        node = node[part]
    return node


def _plain(x: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(x, (DictConfig, ListConfig)):
        return OmegaConf.to_container(x, resolve=True)
    return x


def _feature_columns(names: Any) -> list[int]:
    names = list(_plain(names) or [])
    bad = [n for n in names if n not in FEATURES]
    if bad:
        raise DetcalInputError(f"unknown box feature(s) {bad}; known: {list(FEATURES)}",
                               file="configs/metrics", field="confidence.dece_features")
    return [FEATURES.index(n) for n in names]


# ----------------------------------------------------------------------------- confidence


def _confidence_block(
    cfg: Any, data: LoadedData, mr: MatchResult, feats: np.ndarray, progress: Any, exclude: list[float] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Confidence metrics (METRICS.md section 3) and D-ECE maps per IoU threshold.

    Thresholds in ``metrics.confidence.iou_thresholds`` (null: all matched ones
    except ``exclude``, the regression-only threshold)."""
    from detcal.metrics.confidence import ConfidenceConfig, confidence_metrics, dece

    c = cfg.metrics.confidence
    dets = data.detections
    cols = _feature_columns(c.dece_features)
    ccfg = ConfidenceConfig(
        ece_bins=int(c.bins), dece_bins=_plain(c.dece_bins), sample_threshold=int(c.sample_threshold),
        policy=str(c.policy), n_boot=int(cfg.bootstrap.n), ci_level=float(cfg.bootstrap.level),
        seed=int(cfg.bootstrap.seed),
    )
    wanted = _plain(c.get("iou_thresholds"))
    out: dict[str, Any] = {}
    maps: dict[str, Any] = {}
    for i, t in enumerate(mr.iou_thresholds):
        if wanted is not None and not any(abs(float(t) - float(w)) < 1e-9 for w in wanted):
            continue
        if wanted is None and any(abs(float(t) - float(w)) < 1e-9 for w in exclude):
            continue
        label = threshold_label(float(t))
        progress.set_description(f"confidence {label}")
        keep = mr.considered & ~mr.ignored[i]
        rows = np.flatnonzero(keep)
        p, y = dets.score[rows], mr.matched[i, rows]
        f = feats[rows][:, cols] if cols else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = confidence_metrics(p, y, f, dets.category[rows] if bool(c.per_class) else None,
                                     ccfg, dets.image_id[rows])
        block = {k: r.to_dict() for k, r in res.items()}
        _strip_cell_index(block)
        block["_sample"] = {"n": int(len(rows)), "n_matched": int(y.sum()), "features": [FEATURES[j] for j in cols],
                            "warnings": sorted({str(w.message) for w in caught})}
        out[label] = block
        maps[label] = {}
        for pair in _plain(c.get("maps")) or []:
            a, b = (FEATURES.index(n) if n in FEATURES else -1 for n in pair)
            if a < 0 or b < 0:
                raise DetcalInputError(f"unknown feature in map {pair}; known: {list(FEATURES)}",
                                       file="configs/metrics", field="confidence.maps")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = dece(p, y, feats[rows][:, [a, b]], bins=_plain(c.dece_bins),
                         sample_threshold=int(c.sample_threshold), policy=str(c.policy))
            shape = tuple(int(v) for v in r.params.get("bins", ())) or (1, 1, 1)
            m = plots.marginal_gap_map(r.table.get("count", np.zeros(int(np.prod(shape)))),
                                       r.table.get("confidence", np.full(int(np.prod(shape)), np.nan)),
                                       r.table.get("precision", np.full(int(np.prod(shape)), np.nan)),
                                       shape, keep_axes=(1, 2), kept=r.table.get("kept"))
            maps[label][f"{pair[0]}_{pair[1]}"] = {
                "axes": [pair[0], pair[1]], "bins": list(shape[1:]), "gap": m["gap"], "count": m["count"],
                "kept_count": m["kept_count"], "sample_threshold": int(c.sample_threshold), "policy": str(c.policy),
                "dece": float(r.value),
                "definition": "M(i,j) = sum_kept N_c gap(c) / sum_kept N_c over the confidence bins of "
                              "position cell (i,j) of a D-ECE grid over (confidence, f1, f2)",
            }
        progress.update(1)
    return out, maps


# ----------------------------------------------------------------------------- regression


def _regression_block(cfg: Any, data: LoadedData, mr: MatchResult, progress: Any) -> dict[str, Any]:
    """Regression metrics (METRICS.md section 4) with bootstrap intervals on the headline ones."""
    from detcal.metrics.bootstrap import with_ci
    from detcal.metrics.regression import ence, m_qce, m_qce_joint, regression_metrics
    from detcal.metrics.spaces import regression_sample

    r = cfg.metrics.regression
    dets = data.detections
    progress.set_description("regression")
    if dets.uncertainty_kind is None:
        progress.update(1)
        return {"_sample": {"n": 0, "skipped": "the detections carry no box uncertainty (METRICS.md section 1)"}}
    t = float(r.iou_threshold)
    sample = regression_sample(dets, data.dataset.gt, mr, iou_threshold=t, space=str(r.space))
    levels = np.linspace(0.05, 0.95, int(r.quantile_levels))
    b = cfg.binning
    res = regression_metrics(
        sample, bins=int(b.bins), binning=str(b.scheme), qce_bins=int(b.get("qce_bins", b.bins)),
        qce_binning=str(b.get("qce_scheme", "equal_width")), qce_sample_threshold=int(r.sample_threshold),
        levels=levels,
    )
    n_boot = int(cfg.bootstrap.n)
    if n_boot > 0 and len(sample) > 0:
        boot = dict(n_boot=n_boot, level=float(cfg.bootstrap.level), seed=int(cfg.bootstrap.seed))
        g = sample.image_id
        for k, name in enumerate(sample.coords):
            arrays = (sample.mu[:, k], sample.sigma[:, k], sample.y[:, k])
            res["ence"][name] = with_ci(res["ence"][name], functools.partial(ence, bins=int(b.bins),
                                        binning=str(b.scheme)), g, *arrays, **boot)
            res["m_qce"][name] = with_ci(res["m_qce"][name], functools.partial(m_qce, levels=levels), g, *arrays,
                                         **boot)
        if "joint" in res["m_qce"]:
            def _joint(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, cov: np.ndarray | None) -> MetricResult:
                return m_qce_joint(mu, sigma, y, cov=cov, levels=levels)

            res["m_qce"]["joint"] = with_ci(res["m_qce"]["joint"], _joint, g, sample.mu, sample.sigma, sample.y,
                                            sample.cov, **boot)
    out: dict[str, Any] = {m: {c: v.to_dict() for c, v in per.items()} for m, per in res.items()}
    out["_sample"] = {"n": int(len(sample)), "space": sample.space, "coords": list(sample.coords),
                      "iou_threshold": t, "notes": to_jsonable(sample.notes)}
    progress.update(1)
    return out


# ----------------------------------------------------------------------------- outputs


def _headline(conf: Mapping[str, Any], reg: Mapping[str, Any]) -> dict[str, Any]:
    """Flat, sweep-stable headline numbers: confidence at the first evaluated threshold, regression per coordinate."""
    out: dict[str, Any] = {}
    if conf:
        label = next(iter(conf))
        for name in HEADLINE_CONFIDENCE:
            node = conf[label].get(name)
            if node is not None:
                out[name] = {"value": node["value"], "ci": node.get("ci"), "ci_level": node.get("ci_level"),
                             "source": f"confidence/{label}/{name}"}
    for name in HEADLINE_REGRESSION:
        for coord, node in (reg.get(name) or {}).items():
            out[f"{name}_{coord}"] = {"value": node["value"], "ci": node.get("ci"), "ci_level": node.get("ci_level"),
                                      "source": f"regression/{name}/{coord}"}
    return out


def _variants(cfg: Any) -> dict[str, str]:
    """Which METRICS.md definitions and variants produced the numbers."""
    c, r, b = cfg.metrics.confidence, cfg.metrics.regression, cfg.binning
    return {
        "boxes": "METRICS.md 1: xyxy pixels; relative features cx/W, cy/H, w/W, h/H clipped to [0, 1] (count reported)",
        "matching": f"METRICS.md 2: mode={cfg.matching.mode}" + (" + KITTI devkit rules" if "kitti" in str(
            _cfg_get(cfg, "data._target_", "")).lower() or _cfg_get(cfg, "data.format") == "kitti" else ""),
        "confidence": f"METRICS.md 3: equal-width cells over [0, 1], ECE bins={c.bins}, D-ECE bins={_plain(c.dece_bins)} "
                      f"over (confidence, {', '.join(_plain(c.dece_features))}), sample_threshold={c.sample_threshold}, "
                      f"sparse-cell policy={c.policy}",
        "regression": f"METRICS.md 4: space={r.space}, TP at IoU {r.iou_threshold}, ENCE bins={b.bins} {b.scheme}, "
                      f"C-QCE bins={b.get('qce_bins', b.bins)} {b.get('qce_scheme', 'equal_width')}, "
                      f"QCE levels={r.quantile_levels}, UCE equal-width over sigma^2",
        "bootstrap": f"METRICS.md 3: percentile bootstrap over images, n={cfg.bootstrap.n}, "
                     f"level={cfg.bootstrap.level}, seed={cfg.bootstrap.seed}",
    }


def _detections_csv(data: LoadedData, mr: MatchResult, feats: np.ndarray, clipped: np.ndarray) -> str:
    """Per-detection CSV: the ``detcal-match`` CSV (:func:`detcal.cli.match.format_csv`: image_id,
    category, score, considered, iou, matched@T, ignored@T, gt_id@T) plus the box (x1, y1, x2, y2)
    and the relative features rel_cx, rel_cy, rel_w, rel_h (clipped to [0, 1]) with a clipped flag."""
    from detcal.cli.match import format_csv

    dets = data.detections
    per_class = not bool(np.all(np.isfinite(mr.iou_thresholds)))
    base = format_csv(dets, mr, data.dataset.gt.id, per_class).splitlines()
    extra_cols = [dets.box[:, 0], dets.box[:, 1], dets.box[:, 2], dets.box[:, 3], *feats.T]
    text_cols = [list(map(repr, c.tolist())) for c in extra_cols] + [list(map(str, clipped.astype(int).tolist()))]
    header = "x1,y1,x2,y2," + ",".join(f"rel_{n}" for n in FEATURES) + ",clipped"
    extra = [header] + list(map(",".join, zip(*text_cols)))
    return "\n".join(map(",".join, zip(base, extra))) + "\n"


def _json_text(obj: Any, indent: int = 0) -> str:
    """JSON with dicts one key per line and lists of scalars on one line (readable, compact).

    ``obj`` must already be plain Python (:func:`detcal.utils.io.to_jsonable`);
    NaN/Infinity are written as Python's json does.
    """
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(str(k))}: {_json_text(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        if all(isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v) for v in obj):
            return "[\n" + ",\n".join(inner + json.dumps(v) for v in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(inner + _json_text(v, indent + 2) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def _strip_cell_index(block: dict[str, Any]) -> None:
    """Drop the per-cell ``bin_index [C,F]`` tables: cells are in C order over ``params.bins``
    (``np.unravel_index(c, bins)`` recovers them); keeps metrics.json small."""
    for node in block.values():
        if isinstance(node, dict) and isinstance(node.get("table"), dict):
            node["table"].pop("bin_index", None)


def _summary_md(m: Mapping[str, Any]) -> str:
    parts = [f"# detcal-evaluate summary (detcal {m['detcal_version']})", ""]
    d = m["data"]
    parts.append(f"- data: {d.get('source')} ({d['counts']['images']} images, {d['counts']['gt']} GT, "
                 f"{d['counts']['detections']} detections; uncertainty: {d['counts']['uncertainty']})")
    mt = m["matching"]
    parts.append(f"- matching: mode={mt['mode']}, IoU thresholds={mt['iou_thresholds']}, "
                 f"class_agnostic={mt['class_agnostic']}, score_threshold={mt['score_threshold']}, "
                 f"max_dets={mt['max_dets']}")
    parts.append(f"- relative features clipped to [0, 1]: {m['features']['n_clipped']} detections")
    for k, v in m["variants"].items():
        parts.append(f"- {k}: {v}")
    head = {k: {"value [CI]": v, "source": v.get("source", "")} for k, v in m["headline"].items()}
    parts += ["", "## Headline", "", comparison_table(head, ["value [CI]", "source"], label="metric")]
    for label, block in m["confidence"].items():
        shown = {k: v for k, v in block.items() if not k.startswith("_")}
        parts += [metrics_table(shown, title=f"Confidence calibration at {label} "
                                             f"(N = {block['_sample']['n']}, matched {block['_sample']['n_matched']})")]
        ex = (block.get("dece") or {}).get("extra") or {}
        if ex:
            parts.append(f"D-ECE grid: {ex.get('cells')} cells, {ex.get('occupied_cells')} occupied, "
                         f"{ex.get('kept_cells')} kept (N_c >= threshold); sparse-sample fraction "
                         f"{format_value(ex.get('sparse_fraction'))}, dropped fraction "
                         f"{format_value(ex.get('dropped_fraction'))}"
                         + (" -- WARNING: more cells than samples/10" if ex.get("sparse_warning") else ""))
        parts.append("")
    reg = {k: v for k, v in m["regression"].items() if not k.startswith("_")}
    if reg:
        coords = list(dict.fromkeys(c for per in reg.values() for c in per))
        s = m["regression"]["_sample"]
        parts += [f"### Regression calibration ({s['space']} space, N = {s['n']} TP at IoU {s['iou_threshold']})", "",
                  comparison_table(reg, coords, label="metric"), ""]
    else:
        parts += ["### Regression calibration", "", f"skipped: {m['regression']['_sample'].get('skipped')}", ""]
    for label, mp in m["dece_maps"].items():
        for name, spec in mp.items():
            g = np.asarray(spec["gap"], dtype=float)
            parts.append(f"- D-ECE map {name} at {label}: grid {list(g.shape)}, "
                         f"max gap {format_value(np.nanmax(g) if np.isfinite(g).any() else np.nan)}")
    parts += ["", "Files: " + ", ".join(m["files"]), ""]
    return "\n".join(parts)


def _plots(out_dir: Path, m: Mapping[str, Any], cfg: Any) -> list[str]:
    files: list[str] = []
    for label, block in m["confidence"].items():
        e = block.get("ece")
        if e:
            t = e["table"]
            name = f"reliability_{label.replace('=', '')}.png"
            plots.reliability_diagram(out_dir / name, t.get("confidence", []), t.get("precision", []),
                                      t.get("count", []), ece=e["value"], title=f"Reliability at {label}")
            files.append(name)
        mp = m["dece_maps"].get(label)
        if mp:
            name = f"dece_maps_{label.replace('=', '')}.png"
            d = block.get("dece", {}).get("value")
            plots.dece_heatmaps(out_dir / name, mp, sample_threshold=int(cfg.metrics.confidence.sample_threshold),
                                dece=d, title=f"D-ECE maps at {label}")
            files.append(name)
    reg = m["regression"]
    if "ence" in reg:
        plots.rmse_rmv_diagram(out_dir / "rmse_rmv.png", {c: v["table"] for c, v in reg["ence"].items()},
                               ence={c: v["value"] for c, v in reg["ence"].items()},
                               log=bool(cfg.metrics.regression.get("log_plot", False)))
        files.append("rmse_rmv.png")
    if "m_qce" in reg:
        per = reg["m_qce"]
        tau = next((v["table"].get("tau") for v in per.values() if v.get("table", {}).get("tau") is not None), [])
        plots.qce_coverage_diagram(out_dir / "qce_coverage.png", tau,
                                   {c: v["table"].get("coverage", [np.nan] * len(tau)) for c, v in per.items()},
                                   mqce={c: v["value"] for c, v in per.items()})
        files.append("qce_coverage.png")
    if "r_auc" in reg:
        curves = {c: {"retained": v["table"].get("retained_fraction", []), "error": v["table"].get("error", []),
                      "auc": v["value"]} for c, v in reg["r_auc"].items()}
        plots.retention_diagram(out_dir / "retention.png", curves, ylabel="RMSE on retained")
        files.append("retention.png")
    return files


# ----------------------------------------------------------------------------- the task


def _match(cfg: Any, data: LoadedData, reg_on: bool) -> tuple[MatchResult, MatchResult, list[float]]:
    """Match with the configured matcher (METRICS.md section 2).

    The regression IoU threshold is added to the matched thresholds when it
    is missing (returned as the regression-only thresholds, not evaluated
    for confidence); with ``iou_thresholds="kitti"`` (per-class thresholds)
    the regression sample is matched in a second call at that threshold.
    Returns (match for confidence, match for regression, regression-only thresholds).
    """
    from hydra.utils import instantiate

    ds, dets = data.dataset, data.detections
    matcher = instantiate(cfg.matching)
    thresholds = _plain(cfg.matching.get("iou_thresholds", [0.5]))
    t_reg = float(cfg.metrics.regression.iou_threshold)
    extra: list[float] = []
    if reg_on and isinstance(thresholds, list) and not any(abs(float(t) - t_reg) < 1e-9 for t in thresholds):
        extra = [t_reg]
    kw = {"iou_thresholds": thresholds + extra} if extra else {}
    mr = matcher(dets, ds.gt, kitti=data.kitti, images=ds.images, **kw)
    mr_reg = mr
    if reg_on and not isinstance(thresholds, list):
        mr_reg = matcher(dets, ds.gt, kitti=data.kitti, images=ds.images, iou_thresholds=[t_reg])
    return mr, mr_reg, extra


def _features(data: LoadedData) -> tuple[np.ndarray, int, np.ndarray]:
    """Relative box features [D,4] (clipped to [0, 1]), the clipped count, and the per-detection clipped flag [D]."""
    ds, dets = data.dataset, data.detections
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError("image id not in the dataset", file=ds.source or None, record=bad, field="image_id")
    w, h = ds.images.width[row], ds.images.height[row]
    feats, n_clipped = relative_features(dets.box, w, h)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = xyxy_to_cxcywh(dets.box) / np.stack([w, h, w, h], axis=-1).reshape(-1, 4)
    return feats, n_clipped, np.any((rel < 0) | (rel > 1), axis=-1)


def _metrics_record(
    cfg: Any, data: LoadedData, mr: MatchResult, extra_thr: list[float], n_clipped: int, conf: dict[str, Any],
    maps: dict[str, Any], reg: dict[str, Any], out_dir: Path, overrides: list[str] | None,
) -> dict[str, Any]:
    """The metrics.json content: provenance (version, config, data, matching, variants) and every result."""

    ds, dets = data.dataset, data.detections
    match_counts = {threshold_label(float(t)): {
        "considered": int(mr.considered.sum()),
        "true_positives": int((mr.matched[i] & mr.considered).sum()),
        "false_positives": int((mr.considered & ~mr.matched[i] & ~mr.ignored[i]).sum()),
        "ignored": int((mr.considered & mr.ignored[i]).sum())} for i, t in enumerate(mr.iou_thresholds)}
    metrics: dict[str, Any] = {
        **run_header("detcal-evaluate", cfg, out_dir, overrides),
        "data": {**data.provenance, "counts": {
            "images": len(ds.images), "gt": len(ds.gt), "detections": len(dets),
            "categories": {str(k): v for k, v in ds.categories.items()},
            "uncertainty": dets.uncertainty_kind}},
        "matching": {**mr.describe(), "counts": match_counts, "regression_only_thresholds": extra_thr},
        "features": {"names": list(FEATURES), "n_clipped": int(n_clipped),
                     "note": "relative (cx/W, cy/H, w/W, h/H), values outside [0, 1] clipped"},
        "variants": _variants(cfg),
        "headline": _headline(conf, reg),
        "confidence": conf,
        "dece_maps": maps,
        "regression": reg,
        "files": ["metrics.json", "summary.md", "detections.csv"],
    }
    return metrics


def evaluate(cfg: Any, out_dir: str | Path, *, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run the evaluation described by the composed config ``cfg``; write everything under ``out_dir``.

    Returns the metrics.json content. Hydra-free apart from ``hydra.utils.instantiate``
    (so tests may call it with a composed config and a temporary directory).
    """
    from hydra.utils import instantiate
    from tqdm import tqdm

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    timing: dict[str, float] = {}
    conf_on = bool(cfg.metrics.confidence.enabled)
    reg_on = bool(cfg.metrics.regression.enabled)
    n_steps = 3 + int(reg_on) + int(bool(cfg.plots))
    with tqdm(total=n_steps, disable=not bool(cfg.get("progress", True)), file=sys.stderr,
              desc="detcal-evaluate", leave=False) as progress:
        t0 = time.perf_counter()
        progress.set_description("load data")
        data: LoadedData = instantiate(cfg.data).load(out_dir)
        timing["load"] = time.perf_counter() - t0
        progress.update(1)

        t0 = time.perf_counter()
        progress.set_description("match")
        mr, mr_reg, extra_thr = _match(cfg, data, reg_on)
        feats, n_clipped, clipped = _features(data)
        timing["match"] = time.perf_counter() - t0
        progress.update(1)

        t0 = time.perf_counter()
        n_thr = len(mr.iou_thresholds) - len(extra_thr)
        progress.total = n_steps - 1 + (n_thr if conf_on else 0)
        conf, maps = _confidence_block(cfg, data, mr, feats, progress, exclude=extra_thr) if conf_on else ({}, {})
        timing["confidence"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        reg = _regression_block(cfg, data, mr_reg, progress) if reg_on else {"_sample": {"n": 0, "skipped": "disabled"}}
        timing["regression"] = time.perf_counter() - t0

        metrics = _metrics_record(cfg, data, mr, extra_thr, n_clipped, conf, maps, reg, out_dir, overrides)
        t0 = time.perf_counter()
        write_text(out_dir / "detections.csv", _detections_csv(data, mr, feats, clipped))
        if bool(cfg.plots):
            progress.set_description("plots")
            metrics["files"] += _plots(out_dir, to_jsonable(metrics), cfg)
            progress.update(1)
        timing["write"] = time.perf_counter() - t0
        metrics["timing_s"] = {k: round(v, 3) for k, v in timing.items()}
        metrics = to_jsonable(metrics)
        write_text(out_dir / "metrics.json", _json_text(metrics) + "\n")
        summary = _summary_md(metrics)
    write_table(out_dir / "summary.md", summary, echo=bool(cfg.get("print_summary", True)))
    return metrics


def main() -> None:
    """Console entry point ``detcal-evaluate`` (Hydra command line: overrides, ``-m``, ``--cfg job``...)."""
    from detcal.experiments.common import run_hydra_app, task_overrides

    run_hydra_app("evaluate", lambda cfg, run_dir: evaluate(cfg, run_dir, overrides=task_overrides()), "detcal-evaluate")


if __name__ == "__main__":  # pragma: no cover
    main()
