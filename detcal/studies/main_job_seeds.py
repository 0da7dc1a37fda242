"""The main job's conclusion across training seeds and CPU platforms (issue 22).

Runs ``detcal-main`` (default experiment=smoke, or the overrides given) once per
training seed (``stage1.seed=k stage2.seed=k+1``; the data splits stay fixed),
one after the other with a fixed torch thread count, then again for the first
seed with another thread count (2 when the runs use 1, else 1) and with ``ATEN_CPU_CAPABILITY`` set to ``default``, ``avx2``
and ``avx512`` (those this CPU supports), and writes

* ``seeds.json``: every run's Table 1 numbers, per-coordinate ENCE changes with
  their paired bootstrap intervals, the conclusion, the platform facts and the
  wall time; the per-number spread over the platform runs and over the seeds;
* ``seeds.md``: the same as readable tables (the figures of docs/main_job.md);
* ``seeds.html``: Table 1 of every seed with the mean ± std over the seeds.

    python -m detcal.studies.main_job_seeds --out outputs/main_seeds            # 5 seeds + the platform spread
    python -m detcal.studies.main_job_seeds --seeds 0 1 2 --no-spread
    python -m detcal.studies.main_job_seeds --out outputs/x -- splits.val_images=800   # extra detcal-main overrides

A run directory that already holds a table1.json is read, not rerun (delete it
to recompute). Each run is a separate process, so the thread count and the
CPU capability are fixed before torch starts. The runs are separate
``python -m detcal.apps.main`` processes in the current directory, with this
process's environment (so the same ``detcal`` is imported).

The API: :func:`run_one` (one run), :func:`run_row` / :func:`spread` (its
numbers and their spread), :func:`markdown` and :func:`write_seeds_page` (the
reports), :func:`main` (the command line).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from detcal.reports.html.seeds_page import seeds_page
from detcal.training.determinism import cpu_model
from detcal.utils.io import write_json, write_text

COORDS = ("tx", "ty", "tw", "th")
CAPABILITIES = ("default", "avx2", "avx512")
_CAP_NAME = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}


def supported_capabilities() -> dict[str, str]:
    """``{ATEN_CPU_CAPABILITY value: capability torch reports}`` for the values this CPU can run, plus ``auto``."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    out = {}
    for cap in ("auto",) + CAPABILITIES:
        env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
        if cap != "auto":
            env["ATEN_CPU_CAPABILITY"] = cap
        got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()
        if cap == "auto" or got == _CAP_NAME[cap]:  # torch falls back silently when the CPU lacks it
            out[cap] = got
    return out


def run_one(run_dir: Path, seed: int, threads: int, capability: str | None, overrides: list[str]) -> dict[str, Any]:
    """One detcal-main run (or its existing table1.json); returns the table plus wall time and settings."""
    table_path = run_dir / "table1.json"
    wall = None
    if not table_path.is_file():
        env = dict(os.environ)
        env.pop("ATEN_CPU_CAPABILITY", None)
        # idle OpenMP threads sleep instead of spinning: on a shared, busy machine spinning threads stall each
        # other at every barrier (a 2-thread run slowed 20-fold here); the numbers do not depend on it
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        if capability is not None:
            env["ATEN_CPU_CAPABILITY"] = capability
        cmd = [
            sys.executable,
            "-m",
            "detcal.apps.main",
            f"hydra.run.dir={run_dir}",
            "progress=false",
            "output.plots=false",
            f"stage1.seed={seed}",
            f"stage2.seed={seed + 1}",
            f"trainer.threads={threads}",
            *overrides,
        ]
        print(
            f"[main_job_seeds] {run_dir.name}: seed {seed}, {threads} threads, ATEN_CPU_CAPABILITY={capability}",
            file=sys.stderr,
            flush=True,
        )
        t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = round(time.perf_counter() - t0, 1)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 1)
        write_json(run_dir / "cpu_seconds.json", {"cpu_s": cpu, "wall_s": wall})
        write_text(run_dir.parent / f"{run_dir.name}.log", done.stdout + done.stderr)
        if done.returncode != 0:
            raise SystemExit(f"{run_dir.name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    t = json.loads(table_path.read_text(encoding="utf-8"))
    cpu_file = run_dir / "cpu_seconds.json"
    cpu_s = json.loads(cpu_file.read_text(encoding="utf-8"))["cpu_s"] if cpu_file.is_file() else None
    return {
        "seed": seed,
        "threads": threads,
        "aten_cpu_capability": capability,
        "wall_s": wall,
        "cpu_s": cpu_s,
        "job_s": t["timing_s"]["total"],
        "table": t,
    }


def numbers(t: dict[str, Any]) -> dict[str, float]:
    """The Table 1 numbers of one run, flat: ``<row>/<coord>`` and ``s/<coord>``."""
    out = {f"{row}/{c}": float(v[c]) for row, v in t["rows"].items() for c in COORDS}
    out.update({f"s/{c}": float(t["std_scaling_s"][c]) for c in COORDS})
    return out


def run_row(name: str, r: dict[str, Any]) -> dict[str, Any]:
    t = r["table"]
    ch = t["ence_change"]["std_scaling"]["ence"]
    return {
        "run": name,
        "seed": r["seed"],
        "threads": r["threads"],
        "aten_cpu_capability": r["aten_cpu_capability"],
        "cpu_capability": t["platform"]["cpu_capability"],
        "n_tp_val": t["n_tp_val"],
        "n_recal_tp": t["calibration"]["n_recal_tp"],
        "job_s": r["job_s"],
        "wall_s": r["wall_s"],
        "cpu_s": r["cpu_s"],
        "ence_before": t["ence"]["before"],
        "ence_std_scaling": t["ence"]["std_scaling"],
        "ence_isotonic": t["ence"].get("kuleshov_isotonic"),
        "change": {
            c: {"difference": ch[c]["difference"], "ci": ch[c]["ci"], "excludes_zero": ch[c]["excludes_zero"]}
            for c in COORDS
        },
        "cv": t["rows"]["C_v"],
        "s": t["std_scaling_s"],
        "conclusion": t["conclusion"]["holds"],
        "all_intervals_below_zero": t["conclusion"]["all_intervals_below_zero"],
        "bootstrap": ch[COORDS[0]]["bootstrap"],
        "intervals": _interval_row(t.get("intervals")),
    }


def _interval_row(iv: dict[str, Any] | None) -> dict[str, Any] | None:
    """Coverage [interval] and width per variant, the conformal - std scaling paired difference, the claim."""
    if not iv:
        return None
    v = iv["variants"]
    paired = iv.get("paired_vs_std_scaling", {}).get("conformal", {})
    return {
        "level": iv["level"],
        "coverage": {k: d["coverage"] for k, d in v.items()},
        "coverage_ci": {k: d["coverage_ci"] for k, d in v.items()},
        "width": {k: d["width"] for k, d in v.items()},
        "ence": {k: d["ence"] for k, d in v.items()},
        "interval_ce": {k: d["interval_ce"] for k, d in v.items()},
        "conformal_minus_std": {c: {"difference": d["difference"], "ci": d["ci"]} for c, d in paired.items()},
        "claim": iv["claim"],
    }


def _interval_markdown(seeds: list[dict[str, Any]]) -> list[str]:
    """Per seed: coverage at the nominal level of std scaling, isotonic and conformal, and the claim."""
    rows = [r for r in seeds if r.get("intervals")]
    if not rows:
        return []
    lv = rows[0]["intervals"]["level"]
    lines = [
        f"## Intervals at {lv:.0%}: std scaling, Kuleshov isotonic and split conformal per training seed",
        "",
        f"Coverage of the central {lv:.0%} interval on the val true positives (%, [95% bootstrap interval over "
        "images]); conformal: split conformal fitted on recal (normalised score, pooled), its interval exactly. "
        "Mean width in deltas; conformal - std scaling: paired difference in points [95% paired interval].",
        "",
        "| seed | coord | before | std scaling | isotonic | conformal | width std / iso / conf | conformal - std | "
        "ENCE std / conf | interval CE std / conf |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cov(iv: dict[str, Any], v: str, c: str) -> str:
        if v not in iv["coverage"]:
            return "n/a"
        ci = iv["coverage_ci"][v][c]
        band = "" if ci is None else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
        return f"{100 * iv['coverage'][v][c]:.1f}{band}"

    for r in rows:
        iv = r["intervals"]
        for c in COORDS:
            w = iv["width"]
            d = iv["conformal_minus_std"].get(c)
            diff = (
                "n/a"
                if d is None
                else f"{100 * d['difference']:+.1f} [{100 * d['ci'][0]:+.1f}, {100 * d['ci'][1]:+.1f}]"
            )
            lines.append(
                f"| {r['seed']} | {c} | {cov(iv, 'before', c)} | {cov(iv, 'std_scaling', c)} | "
                f"{cov(iv, 'kuleshov_isotonic', c)} | {cov(iv, 'conformal', c)} | "
                f"{w['std_scaling'][c]:.4f} / {w.get('kuleshov_isotonic', {}).get(c, float('nan')):.4f} / "
                f"{w['conformal'][c]:.4f} | {diff} | {_pct(iv['ence']['std_scaling'][c])} / "
                f"{_pct(iv['ence']['conformal'][c])} | {iv['interval_ce']['std_scaling'][c]:.3f} / "
                f"{iv['interval_ce']['conformal'][c]:.3f} |"
            )
    lines += [
        "",
        "Per seed, whose coverage interval contains the nominal level (neither under- nor over-covering):",
        "",
    ]
    for r in rows:
        cl = r["intervals"]["claim"]
        at = cl.get("interval_contains_nominal", {})
        cells = "; ".join(f"{v}: {', '.join(cs) if cs else 'none'}" for v, cs in at.items())
        lines.append(
            f"- seed {r['seed']}: {cells}. Claim ({cl['statement']}): {'holds' if cl['holds'] else 'does not hold'}."
        )
    n = sum(bool(r["intervals"]["claim"]["holds"]) for r in rows)
    lines += ["", f"The claim holds on {n} of {len(rows)} seeds.", ""]
    return lines


def spread(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per Table 1 number: min, max, max - min and the (sample) standard deviation over ``runs``."""
    nums = {k: numbers(r["table"]) for k, r in runs.items()}
    keys = list(next(iter(nums.values())))
    out = {}
    for key in keys:
        vals = [n[key] for n in nums.values()]
        out[key] = {
            "min": min(vals),
            "max": max(vals),
            "range": max(vals) - min(vals),
            "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        }
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def markdown(res: dict[str, Any]) -> str:
    """seeds.md: Table 1 per training seed, the paired intervals, and the spread over the platform runs."""
    seeds = [r for r in res["rows"] if "_" not in r["run"]]
    lines = [
        "# detcal-main across training seeds and CPU platforms",
        "",
        f"Overrides: `{' '.join(res['overrides']) or '(none: experiment=smoke)'}`; torch {res['torch']}; CPU "
        f"{res['cpu']}. ENCE in %, change = after std scaling - before (percentage points) with its "
        f"{100 * seeds[0]['bootstrap']['level']:.0f}% paired bootstrap interval over the "
        f"{seeds[0]['bootstrap']['n_images']} val images ({seeds[0]['bootstrap']['method']}, "
        f"{seeds[0]['bootstrap']['n_boot']} replicates).",
        "",
        "## Table 1 analogue per training seed",
        "",
        "| seed | N val TP | "
        + " | ".join(f"ENCE {c} before -> std scaling (change [CI])" for c in COORDS)
        + " | C_v tx/ty/tw/th | claim holds | all CIs < 0 | wall s | CPU s |",
        "|---|---|" + "---|" * len(COORDS) + "---|---|---|---|---|",
    ]
    for r in seeds:
        cells = []
        for c in COORDS:
            ch = r["change"][c]
            lo, hi = ch["ci"]
            cells.append(
                f"{_pct(r['ence_before'][c])} -> {_pct(r['ence_std_scaling'][c])} "
                f"({100 * ch['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}])"
            )
        cv = "/".join(f"{r['cv'][c]:.2f}" for c in COORDS)
        lines.append(
            f"| {r['seed']} | {r['n_tp_val']} | "
            + " | ".join(cells)
            + f" | {cv} | {'yes' if r['conclusion'] else 'NO'} | {'yes' if r['all_intervals_below_zero'] else 'no'} "
            f"| {r['job_s']:.0f} | {r['cpu_s'] if r['cpu_s'] is not None else 'n/a'} |"
        )
    n_hold = sum(bool(r["conclusion"]) for r in seeds)
    n_ci = sum(bool(r["all_intervals_below_zero"]) for r in seeds)
    lines += [
        "",
        f"The claim 'std scaling lowers the val ENCE on every coordinate, C_v unchanged' holds on {n_hold} of "
        f"{len(seeds)} seeds; on {n_ci} of {len(seeds)} every coordinate's interval lies below 0.",
        "",
    ]
    lines += _interval_markdown(seeds)
    if res.get("platform_spread"):
        lines += _platform_markdown(res)
    return "\n".join(lines) + "\n"


def _platform_markdown(res: dict[str, Any]) -> list[str]:
    """The runs over threads and CPU capability, and each number's range over them next to the seeds' sd."""
    plat = [r for r in res["rows"] if r["run"] in res["platform_runs"]]
    lines = [
        "## Spread over threads and CPU capability (seed " + str(plat[0]["seed"]) + ")",
        "",
        "| run | threads | ATEN_CPU_CAPABILITY | capability used | ENCE before tx/ty/tw/th | ENCE std scaling "
        "tx/ty/tw/th | s tx/ty/tw/th | claim holds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in plat:
        lines.append(
            f"| {r['run']} | {r['threads']} | {r['aten_cpu_capability'] or '(unset)'} | {r['cpu_capability']} | "
            + "/".join(_pct(r["ence_before"][c]) for c in COORDS)
            + " | "
            + "/".join(_pct(r["ence_std_scaling"][c]) for c in COORDS)
            + " | "
            + "/".join(f"{r['s'][c]:.3f}" for c in COORDS)
            + f" | {'yes' if r['conclusion'] else 'NO'} |"
        )
    lines += [
        "",
        "Range (max - min) of each Table 1 number over those runs, next to the standard deviation over the "
        "training seeds (ENCE and C_v in %/absolute as in Table 1):",
        "",
        "| number | " + " | ".join(COORDS) + " |",
        "|---|" + "---|" * len(COORDS),
    ]
    sp, ss = res["platform_spread"], res["seed_spread"]
    rows = sorted({k.rsplit("/", 1)[0] for k in sp}, key=list(dict.fromkeys(k.rsplit("/", 1)[0] for k in sp)).index)
    for row in rows:
        scale = 1.0 if row in ("C_v", "s") else 100.0
        lines.append(
            f"| {row}: platform range / seed sd | "
            + " | ".join(
                f"{scale * sp[f'{row}/{c}']['range']:.3g} / {scale * ss[f'{row}/{c}']['sd']:.3g}" for c in COORDS
            )
            + " |"
        )
    return lines


def write_seeds_page(out: Path, tables: dict[str, dict[str, Any]]) -> Path:
    """``out/seeds.html``: Table 1 of every seed and the mean ± std over the seeds (from their table1.json)."""
    path = out / "seeds.html"
    write_text(path, seeds_page(tables, about=str(out)))
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("outputs") / "main_seeds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-spread", action="store_true", help="skip the thread / ATEN_CPU_CAPABILITY runs")
    p.add_argument(
        "--capabilities",
        nargs="+",
        default=list(CAPABILITIES),
        choices=CAPABILITIES,
        help="ATEN_CPU_CAPABILITY values to run (those this CPU lacks are skipped; one equal to the "
        "capability torch picks by itself is the seed run again and is skipped unless --rerun-auto)",
    )
    p.add_argument("--rerun-auto", action="store_true")
    p.add_argument("overrides", nargs="*", help="extra detcal-main overrides (after --)")
    a = p.parse_args(argv)
    import torch  # lazy: torch is optional (the [train] extra); the runs need it, importing this module does not

    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    for k in a.seeds:
        runs[f"seed{k}"] = run_one(a.out / f"seed{k}", k, a.threads, None, a.overrides)
    platform_runs = [f"seed{a.seeds[0]}"]
    if not a.no_spread:
        caps = supported_capabilities()
        k = a.seeds[0]
        other = 2 if a.threads == 1 else 1
        runs[f"seed{k}_threads{other}"] = run_one(a.out / f"seed{k}_threads{other}", k, other, None, a.overrides)
        platform_runs.append(f"seed{k}_threads{other}")
        for cap in a.capabilities:
            if cap not in caps:
                print(f"[main_job_seeds] this CPU cannot run ATEN_CPU_CAPABILITY={cap}: skipped", file=sys.stderr)
                continue
            if caps[cap] == caps["auto"] and not a.rerun_auto:
                print(
                    f"[main_job_seeds] ATEN_CPU_CAPABILITY={cap} is what torch picks here: the seed run",
                    file=sys.stderr,
                )
                continue
            name = f"seed{k}_{cap}"
            runs[name] = run_one(a.out / name, k, a.threads, cap, a.overrides)
            platform_runs.append(name)
    res: dict[str, Any] = {
        "about": "detcal-main across training seeds and CPU platforms (python -m detcal.studies.main_job_seeds)",
        "overrides": a.overrides,
        "torch": torch.__version__,
        "cpu": cpu_model(),
        "threads": a.threads,
        "rows": [run_row(n, r) for n, r in runs.items()],
        "platform_runs": platform_runs,
        "seed_spread": spread({n: runs[n] for n in (f"seed{k}" for k in a.seeds)}),
        "platform_spread": spread({n: runs[n] for n in platform_runs}) if len(platform_runs) > 1 else {},
    }
    write_json(a.out / "seeds.json", res)
    md = markdown(res)
    write_text(a.out / "seeds.md", md)
    write_seeds_page(a.out, {f"seed {k}": runs[f"seed{k}"]["table"] for k in a.seeds})
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
