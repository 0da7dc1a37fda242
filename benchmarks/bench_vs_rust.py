"""detcal-evaluate against the compiled COCO evaluators, interleaved on the same files (issue 29).

    pip install -e '.[bench]'                       # hotcoco, ultrafast-pycocotools, faster-coco-eval, polars (wheels)
    python benchmarks/bench_vs_rust.py                  # the 5,000-image set (~300k detections), 2 interleaved rounds
    python benchmarks/bench_vs_rust.py --sets 5k,20k,o365 --rounds 1 --files /tmp/bench   # the large sets too
    python benchmarks/bench_vs_rust.py --profile        # and the stage profile of the default 5k run (CPU seconds)
    python benchmarks/bench_vs_rust.py --tree-memory    # and every tool's whole process tree's memory (summed PSS)

Sets (made by :func:`detcal.data.synthetic.generate_coco_scale`, the generator
of the other speed scripts, and cached with ``--files``): ``5k`` 5,000 images
with ~60 detections each; ``20k`` 20,000 images, the same per image (~1.2M);
``o365`` an Objects365-shaped set: 20,000 images, ``--o365-dets`` (100)
detections asked per image (the generator draws U{50..100}), the categories
spread over 365 ids (a fixed hash of image and category, the same for the
ground truth and the detections of an image).

Each run is a fresh process timed by ``/usr/bin/time`` (wall, user + sys CPU,
peak resident memory): ``detcal default`` (``detcal-evaluate`` with its
defaults: every measure, BCa intervals, report.html, figures, CSV), ``detcal
lean`` (intervals, figures, CSV and report off: every measure and
metrics.json), ``baseline default`` / ``baseline lean`` (the same two
commands with another detcal source tree first on ``PYTHONPATH``:
``--baseline``), ``hotcoco AP`` (load, evaluate, accumulate, summarize),
``hotcoco AP+cal`` (the same and its ``calibration()``: ECE, MCE,
reliability bins), ``ultrafast-pycocotools``, ``faster-coco-eval`` and
``pycocotools`` (5k only: minutes at the large sets). The runs of one round are interleaved,
so a change of load hits every tool; the ratios are to hotcoco AP in the same
round. The load average is printed before and after.

``peak MB`` is ``/usr/bin/time``'s: the peak resident size of the largest
single process of the run. ``detcal default`` draws its figures in a second
process that lives through the run (forked at start-up), whose memory that
figure leaves out. ``--tree-memory`` adds, from one more untimed run of
each tool, the peak of the summed proportional set size (PSS) of the
command's whole process tree, sampled every 5 ms (:func:`tree_memory`):
the memory the run holds at once, a page shared by two processes counted
once; for a one-process tool it is close to ``peak MB``.

Every command runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE``
is dropped from its environment) and the detcal trees are byte-compiled once
before the first round (:func:`compile_tree`), as ``pip install`` does: a user
does not recompile detcal's ~100 modules on every run, and a machine that sets
``PYTHONDONTWRITEBYTECODE=1`` would otherwise add about 0.13-0.16 s of CPU to
every detcal run that no installed copy pays.

``detcal-evaluate`` keeps, in its cache folder (``DETCAL_CACHE_DIR``,
docs/configuration.md), the configuration Hydra composed for a command line,
a record of the run that lets the same command line run again without Hydra,
and the SHA-256 digests of the input files report.html names (reused while a
file's size, times and inode are unchanged). The benchmark points that folder
at a fresh one of its own, so its first round of each set runs every detcal
command line cold (Hydra composes and runs it, every input file is hashed:
a user's first run) and later rounds warm (a user's re-runs); ``--cold``
keeps every round cold (a fresh cache folder per run).

The header prints what a fresh process pays per MiB the first time it writes
new memory (:func:`first_touch_ms_per_mib`): the kernel's zeroing, about
0.11-0.19 ms/MiB on the machine of issue 29's thirteenth pass when the memory
was freed moments before, but 3-4 ms/MiB there when the host had taken it
back (a virtual machine that hands freed memory to its host within seconds:
10-20 s after it was freed the cost was back at 3-4 ms/MiB). On such a
machine every tool's timings depend on how much fresh memory it writes and
on what ran just before; the probe says which state a run began in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

EVAL = {
    "hotcoco AP": """
import sys, contextlib, io
from hotcoco import COCO, COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
print(E.stats[0])
""",
    "hotcoco AP+cal": """
import sys, contextlib, io
from hotcoco import COCO, COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
    cal = E.calibration(n_bins=10, iou_threshold=0.5)
print(E.stats[0], cal["ece"])
""",
    "ultrafast-pycocotools": """
import sys, contextlib, io
from ultrafast_pycocotools.coco import COCO
from ultrafast_pycocotools.cocoeval import COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
print(E.stats[0])
""",
    "faster-coco-eval": """
import sys, contextlib, io
from faster_coco_eval import COCO, COCOeval_faster
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval_faster(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
print(E.stats[0])
""",
    "pycocotools": """
import sys, contextlib, io
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
print(E.stats[0])
""",
}

LEAN = ["bootstrap.n=0", "output.plots=false", "output.detections_csv=false", "report.enabled=false"]
SETS = {"5k": (5000, 60, None), "20k": (20000, 60, None), "o365": (20000, 100, 365)}


def make_set(root: Path, name: str, o365_dets: int) -> tuple[Path, Path, int]:
    """instances.json and results.json of one set under ``root / name`` (reused when present)."""
    from detcal.data.coco import write_coco_instances, write_coco_results
    from detcal.data.synthetic import generate_coco_scale

    images, per, n_cat = SETS[name]
    per = o365_dets if name == "o365" else per
    d = root / name
    gt, res = d / "instances.json", d / "results.json"
    if gt.exists() and res.exists():
        return gt, res, len(json.loads(res.read_bytes()))
    d.mkdir(parents=True, exist_ok=True)
    ds, dets = generate_coco_scale(n_images=images, dets_per_image=per, seed=0)
    if n_cat is not None:  # spread over n_cat ids, the same map for the GT and the detections of an image

        def remap(cat: np.ndarray, img: np.ndarray) -> np.ndarray:
            return (cat.astype(np.int64) * 7919 + img.astype(np.int64) * 31) % n_cat + 1

        ds = dataclasses.replace(
            ds,
            gt=dataclasses.replace(ds.gt, category=remap(ds.gt.category, ds.gt.image_id)),
            categories={i: f"class{i}" for i in range(1, n_cat + 1)},
        )
        dets = dataclasses.replace(dets, category=remap(dets.category, dets.image_id))
    dets = dataclasses.replace(dets, box=np.round(dets.box, 2), proposal=None, delta_mean=None, delta_std=None)
    write_coco_instances(gt, ds)
    write_coco_results(res, dets)
    return gt, res, len(dets)


def run_env(pythonpath: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a timed command: this one, with the bytecode cache on and ``PYTHONPATH`` if given."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def compile_tree(tree: Path) -> None:
    """Byte-compile a detcal source tree's package (what ``pip install`` does), so no timed run compiles it."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "detcal")], check=True, env=run_env())


def timed(cmd: list[str], cwd: Path, pythonpath: str | None = None) -> dict[str, float]:
    """Wall, CPU (user + sys) seconds and peak resident MB of one fresh process (``/usr/bin/time``)."""
    fmt = "%e %U %S %M"
    env = run_env(pythonpath)
    proc = subprocess.run(["/usr/bin/time", "-f", fmt, *cmd], cwd=cwd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stderr[-3000:]}")
    wall, user, sys_, rss = proc.stderr.strip().splitlines()[-1].split()
    return {"wall": float(wall), "cpu": float(user) + float(sys_), "peak_mb": float(rss) / 1024.0}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``/proc/<pid>/task/<pid>/children``, Linux)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid] + [q for k in kids for q in _tree(int(k))]


def _pss_kb(pid: int) -> int:
    """The proportional set size of one process in kB (its private pages plus its share of shared ones)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def tree_memory(cmd: list[str], cwd: Path, pythonpath: str | None = None, every: float = 0.005) -> dict[str, float]:
    """The peak of the summed PSS of a command's process tree (MB), sampled every ``every`` seconds, and the
    most processes seen at once. ``/usr/bin/time`` reports the largest single process's peak resident size;
    ``detcal-evaluate`` draws its figures in a second process that lives through the run, so its memory is
    the two processes' together (PSS counts a page shared by both once). Not timed: an extra run."""
    with tempfile.TemporaryFile() as err:  # a file, not a pipe: a command's long stderr cannot stall it
        proc = subprocess.Popen(cmd, cwd=cwd, env=run_env(pythonpath), stdout=subprocess.DEVNULL, stderr=err)
        peak, most = 0, 1
        while proc.poll() is None:
            pids = _tree(proc.pid)
            peak = max(peak, sum(_pss_kb(q) for q in pids))
            most = max(most, len(pids))
            time.sleep(every)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"{cmd[:4]} failed:\n{err.read().decode(errors='replace')[-3000:]}")
    return {"tree_pss_mb": peak / 1024.0, "processes": float(most)}


def commands(gt: Path, res: Path, run_dir: Path, with_pycoco: bool, baseline: bool) -> dict[str, list[str]]:
    py = sys.executable
    detcal = [py, "-m", "detcal.apps.evaluate", "data=coco", f"data.gt={gt}", f"data.results={res}"]
    cmds = {
        "detcal default": detcal + [f"hydra.run.dir={run_dir / 'default'}"],
        "detcal lean": detcal + LEAN + [f"hydra.run.dir={run_dir / 'lean'}"],
    }
    if baseline:
        cmds["baseline default"] = detcal + [f"hydra.run.dir={run_dir / 'base_default'}"]
        cmds["baseline lean"] = detcal + LEAN + [f"hydra.run.dir={run_dir / 'base_lean'}"]
    for name, code in EVAL.items():
        if name != "pycocotools" or with_pycoco:
            cmds[name] = [py, "-c", code, str(gt), str(res)]
    return cmds


STAGES = (
    ("evaluate (in process)", "detcal/pipeline/evaluation.py", "evaluate"),
    ("load", "detcal/pipeline/evaluation.py", "_load"),
    ("match", "detcal/pipeline/evaluation.py", "match_data"),
    ("confidence block", "detcal/pipeline/confidence_block.py", "confidence_blocks"),
    ("  of which intervals", "detcal/metrics/bootstrap.py", "suite_intervals"),
    ("COCO AP/LRP shared matching", "detcal/matching/engine.py", "layout_and_match"),
    ("COCO AP/AR", "detcal/metrics/accuracy.py", "coco_ap"),
    ("localisation", "detcal/pipeline/accuracy_block.py", "localisation_block"),
    ("OCE", "detcal/pipeline/oce_block.py", "oce_block"),
    ("box features", "detcal/pipeline/evaluation.py", "relative_box_features"),
    ("diagnostics", "detcal/pipeline/evaluation.py", "_diagnostics"),
    ("worst detections", "detcal/pipeline/evaluation.py", "_worst"),
    ("write (files)", "detcal/pipeline/result.py", "Result.write"),
    ("  figures", "detcal/reports/evaluation_plots.py", "evaluation_plots"),
    ("  per-class figure", "detcal/reports/per_class.py", "draw_per_class_panels"),
    ("  per-class figure", "detcal/pipeline/result.py", "EvaluationResult._per_class_plot"),  # trees before 98f7ebb
    ("  detections.csv", "detcal/reports/detections_csv.py", "write_columns_csv"),
    ("  report.html", "detcal/reports/html/__init__.py", "write_report"),
)


def stage_profile(prof: Path) -> dict[str, float]:
    """Cumulative seconds of each stage of :data:`STAGES` in a cProfile file of the command."""
    st = pstats.Stats(str(prof))
    raw: dict = st.stats  # type: ignore[attr-defined]
    out: dict[str, float] = {"whole command": max(v[3] for v in raw.values())}
    for label, path, fn in STAGES:
        hits = [v[3] for (f, _, name), v in raw.items() if name == fn.split(".")[-1] and f.endswith(path)]
        out[label] = out.get(label, 0.0) + sum(hits)  # a label may name a stage in two places
    out["start-up, Hydra, other"] = out["whole command"] - out["evaluate (in process)"] - out["write (files)"]
    return out


PROFILE = """
import importlib, json, resource, runpy, sys, time
import detcal.apps  # first, as in the command: its settings made before numpy loads (BLAS threads, huge pages)
out, stages, sys.argv = sys.argv[1], json.loads(sys.argv[2]), ["detcal-evaluate"] + sys.argv[3:]
spent = {}


def wrap(label, f):
    def timed(*a, **k):
        t, s = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
        try:
            return f(*a, **k)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - t
            system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - s  # the kernel's part (page faults)
            spent[label + SYSTEM] = spent.get(label + SYSTEM, 0.0) + system
    return timed


for label, path, name in stages:  # wrap each stage function wherever a detcal module holds it
    owner = importlib.import_module(path[:-3].replace("/", ".").removesuffix(".__init__"))
    if "." in name:  # a method: wrap it on its class (where the timed tree's class has it)
        cls, meth = name.split(".")
        m = vars(getattr(owner, cls)).get(meth)
        if m is not None:
            setattr(getattr(owner, cls), meth, wrap(label, m))
        continue
    f = getattr(owner, name, None)
    if f is None:  # a stage the timed tree does not have (e.g. a baseline from before it)
        continue
    w = wrap(label, f)
    for mod in [m for k, m in list(sys.modules.items()) if k.startswith("detcal")]:
        for attr, v in list(vars(mod).items()):
            if v is f:
                setattr(mod, attr, w)
try:
    runpy.run_module("detcal.apps.evaluate", run_name="__main__")
except SystemExit:
    pass
spent["whole command"] = time.process_time()  # the process's CPU from its start
spent["whole command" + SYSTEM] = resource.getrusage(resource.RUSAGE_SELF).ru_stime
json.dump(spent, open(out, "w"))
"""

SYSTEM = " [system]"
"""Suffix of a stage's system CPU seconds in :func:`profile`'s result (the kernel's share of the stage's CPU,
mostly page faults of memory the process had not held before: on a virtual machine that hands freed
memory back to its host, the stage that first grows the heap pays them)."""


def profile(gt: Path, res: Path, root: Path, pythonpath: str | None = None) -> dict[str, float]:
    """CPU seconds (``time.process_time``) per stage (:data:`STAGES`) of the default run, and each stage's
    system seconds (``<label>`` + :data:`SYSTEM`; ``getrusage``'s ``ru_stime``).

    Each stage function is wrapped where the detcal modules hold it (no per-call
    profiler overhead, which would inflate the call-heavy figure drawing). The
    figures are drawn inline here (``DETCAL_INLINE_WRITERS=1``): in a timed run
    they are drawn in a forked child, whose CPU ``/usr/bin/time`` counts too."""
    out = root / "stages.json"
    out.unlink(missing_ok=True)
    stages = json.dumps([list(s) for s in STAGES])
    code = f"SYSTEM = {SYSTEM!r}\n" + PROFILE
    cmd = [sys.executable, "-c", code, str(out), stages, "data=coco", f"data.gt={gt}", f"data.results={res}"]
    # the figures inline, so that their CPU is counted in this process (a timed run draws them in a child)
    env = run_env(pythonpath, DETCAL_INLINE_WRITERS="1")
    run_dir = tempfile.mkdtemp(prefix="profile-", dir=root)
    proc = subprocess.run(cmd + [f"hydra.run.dir={run_dir}"], cwd=root, capture_output=True, text=True, env=env)
    spent = json.loads(out.read_text()) if out.exists() else {}
    if proc.returncode or "evaluate (in process)" not in spent:
        raise SystemExit(f"the profiled run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    got = {"whole command": spent["whole command"]}
    got.update({label: spent.get(label, 0.0) for label, _, _ in STAGES})
    system = {k: v for k, v in spent.items() if k.endswith(SYSTEM)}  # each stage's kernel seconds
    got["start-up, Hydra, other"] = got["whole command"] - got["evaluate (in process)"] - got["write (files)"]
    inner = ("load", "match", "confidence block", "COCO AP/LRP shared matching", "COCO AP/AR", "localisation")
    inner += ("OCE", "box features")
    inner += ("diagnostics", "worst detections")
    got["  rest of evaluate"] = got["evaluate (in process)"] - sum(got[k] for k in inner)
    got.update(system)
    return got


FLOORS = {
    "interpreter start": "pass",
    "import numpy": "import numpy",
    "import numpy, OpenBLAS on one thread": "import detcal.apps, numpy",  # as detcal's commands import it
    "msgspec decode of results.json to dicts": (
        "import sys, msgspec; msgspec.json.decode(open(sys.argv[2], 'rb').read())"
    ),
    "detcal load (instances + results)": (
        "import sys, detcal.apps; from detcal.data.coco import load_coco_instances, load_coco_results; "
        "load_coco_results(sys.argv[2], load_coco_instances(sys.argv[1]))"
    ),
    "import detcal.apps.evaluate (no Hydra)": "import detcal.apps.evaluate, detcal.pipeline.evaluation",
    "import matplotlib as the figure process does": (
        "import detcal.apps, numpy, PIL.Image; from detcal.reports.plots import import_matplotlib_for_drawing; "
        "import_matplotlib_for_drawing()"
    ),
}
"""Floors of the stages: what the interpreter, the imports and a bare JSON decode cost by themselves
(detcal's loader decodes straight into typed records with msgspec, below the generic decode to dicts).
The figure process imports matplotlib (its drawing modules, without the artists' ``set()`` docstrings)
before it draws: that import less the one of numpy is a floor of the figures' CPU.
``import detcal.apps`` first runs numpy's OpenBLAS on one thread, as every detcal command does (its
default pool of threads costs about 0.05 s of CPU at the import alone)."""


# One write per 4 KiB page of fresh arrays in a fresh process: the seconds per MiB a process pays the first
# time it writes memory (the kernel's zeroing, and on some virtual machines the host backing the page).
TOUCH = """
import sys, time
import numpy as np
mib, reps = int(sys.argv[1]), int(sys.argv[2])
keep = []
t = time.perf_counter()
for _ in range(reps):
    a = np.empty(mib << 17)
    a[::512] = 1.0
    keep.append(a)
print((time.perf_counter() - t) / (mib * reps))
"""


def first_touch_ms_per_mib(mib: int = 256) -> float:
    """Milliseconds a fresh process spends per MiB the first time it writes ``mib`` MiB of new arrays."""
    out = subprocess.run([sys.executable, "-c", TOUCH, str(mib), "1"], capture_output=True, text=True, check=True)
    return 1000.0 * float(out.stdout)


def floors(gt: Path, res: Path, cwd: Path) -> dict[str, dict[str, float]]:
    return {k: timed([sys.executable, "-c", code, str(gt), str(res)], cwd) for k, code in FLOORS.items()}


# The CSV writer against a compiled one, in one process on the same columns: detcal's writer
# (detcal.reports.detections_csv.write_columns_csv) and polars' (Rust, its own threads), best of three
# each, interleaved. The columns are read back from the default run's detections.csv (flags as bool for
# detcal, as it holds them; polars reads them as the 0/1 integers they are written as). CPU is the process's
# (every thread); the lines whose text differs are counted (polars writes no exponent: 0.00002 for 2e-05).
CSV_FLOOR = """
import json, sys, time
import detcal.apps  # the command's settings (one BLAS thread, no huge pages) before numpy loads
import polars as pl
from detcal.reports.detections_csv import write_columns_csv
src, out = sys.argv[1], sys.argv[2]
df = pl.read_csv(src, infer_schema_length=None)  # every row read for the column types, not the first 100
flags = [c for c in df.columns if c in ("considered", "clipped") or c.startswith(("matched@", "ignored@"))]
cols = {c: df[c].to_numpy().astype(bool) if c in flags else df[c].to_numpy() for c in df.columns}
write = {"detcal": lambda: write_columns_csv(out + ".detcal", cols), "polars": lambda: df.write_csv(out + ".polars")}
best = {k: {"cpu": 1e9, "wall": 1e9} for k in write}
for _ in range(3):
    for k, f in write.items():
        c, w = time.process_time(), time.perf_counter()
        f()
        c, w = time.process_time() - c, time.perf_counter() - w
        best[k] = {"cpu": min(best[k]["cpu"], c), "wall": min(best[k]["wall"], w)}
a, b = (open(out + s, "rb").read().split(b"\\n") for s in (".detcal", ".polars"))
best["lines differing"] = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
best["equal to the run file"] = open(out + ".detcal", "rb").read() == open(src, "rb").read()
print(json.dumps(best))
"""


def csv_floor(csv: Path, cwd: Path) -> dict | None:
    """:data:`CSV_FLOOR` on the default run's ``csv`` (None without polars, the ``[bench]`` extra)."""
    try:
        import polars  # noqa: F401  (lazy: only its presence is checked here)
    except ImportError:
        return None
    out = Path(tempfile.mkdtemp(prefix="csv-floor-", dir=cwd)) / "columns.csv"
    proc = subprocess.run(
        [sys.executable, "-c", CSV_FLOOR, str(csv), str(out)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=run_env(None),
    )
    if proc.returncode:
        raise SystemExit(f"the CSV floor failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="5k", help="comma-separated: 5k, 20k, o365")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per set (the best is reported)")
    ap.add_argument("--o365-dets", type=int, default=100)
    ap.add_argument("--files", type=Path, default=None, help="keep the generated sets here and reuse them")
    ap.add_argument(
        "--profile", action="store_true", help="print the stage profile (CPU seconds) of the default run per set"
    )
    ap.add_argument("--stage-profile", type=Path, default=None, help="only print the stages of this cProfile file")
    ap.add_argument(
        "--baseline", default=None, help="a detcal source tree (e.g. a checkout of main) timed beside this one"
    )
    ap.add_argument(
        "--floors",
        action="store_true",
        help="also time the floors (start-up, imports, bare decode; detections.csv against polars' writer)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--cold", action="store_true", help="every detcal run with an empty configuration cache")
    ap.add_argument(
        "--tree-memory",
        action="store_true",
        help="one more (untimed) run of each tool, its process tree's summed PSS sampled (the figure process too)",
    )
    args = ap.parse_args()
    if args.stage_profile is not None:
        for k, v in stage_profile(args.stage_profile).items():
            print(f"  {k:28s} {v:7.2f} s")
        return
    import detcal  # lazy: only to find the tree that is timed

    compile_tree(Path(detcal.__file__).resolve().parents[1])
    if args.baseline is not None:
        compile_tree(Path(args.baseline))
    report: dict = {"loadavg_before": os.getloadavg(), "sets": {}}
    report["first_touch_ms_per_mib"] = first_touch_ms_per_mib()
    print(_touch_line(report))
    with tempfile.TemporaryDirectory() as tmp:
        root = args.files or Path(tmp)
        os.environ["DETCAL_CACHE_DIR"] = str(Path(tempfile.mkdtemp(prefix="compose-cache-", dir=tmp)))
        for name in args.sets.split(","):
            gt, res, n = make_set(root, name, args.o365_dets)
            best: dict[str, dict[str, float]] = {}
            for rnd in range(args.rounds):  # a run directory holds one run: fresh ones each round
                rd = Path(tempfile.mkdtemp(prefix=f"{name}-round{rnd}-", dir=tmp))
                cmds = commands(gt, res, rd, with_pycoco=name == "5k", baseline=args.baseline is not None)
                for tool, cmd in cmds.items():  # interleaved: every tool once per round
                    if args.cold:
                        os.environ["DETCAL_CACHE_DIR"] = tempfile.mkdtemp(prefix="compose-cache-", dir=tmp)
                    r = timed(cmd, Path(tmp), args.baseline if tool.startswith("baseline") else None)
                    if tool not in best or r["wall"] < best[tool]["wall"]:
                        best[tool] = r
            entry: dict = {"detections": n, "runs": best, "loadavg_after": os.getloadavg()}
            if args.tree_memory:
                rd = Path(tempfile.mkdtemp(prefix=f"{name}-tree-", dir=tmp))
                cmds = commands(gt, res, rd, with_pycoco=name == "5k", baseline=args.baseline is not None)
                for tool, cmd in cmds.items():
                    best[tool].update(
                        tree_memory(cmd, Path(tmp), args.baseline if tool.startswith("baseline") else None)
                    )
            if args.profile:
                entry["stages"] = profile(gt, res, Path(tmp))
                if args.baseline is not None:
                    entry["baseline_stages"] = profile(gt, res, Path(tmp), args.baseline)
            if args.floors:
                entry["floors"] = floors(gt, res, Path(tmp))
                written = rd / "default" / "detections.csv"  # the last round's default run
                entry["csv_floor"] = csv_floor(written, Path(tmp)) if written.exists() else None
            report["sets"][name] = entry
            _print(name, entry)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1))


def _touch_line(report: dict) -> str:
    """The memory probe's line: what a fresh process paid per MiB to write new memory."""
    return f"first write of new memory: {report['first_touch_ms_per_mib']:.2f} ms/MiB in a fresh process"


def _print(name: str, entry: dict) -> None:
    base = entry["runs"]["hotcoco AP"]
    print(f"\n{name}: {entry['detections']} detections (load average after: {entry['loadavg_after']})")
    tree = all("tree_pss_mb" in r for r in entry["runs"].values())
    head = f" {'tree PSS MB':>12s} {'tree/hotcoco':>13s}" if tree else ""
    print(f"  {'':24s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s} {'wall/hotcoco':>13s} {'CPU/hotcoco':>12s}" + head)
    for tool, r in entry["runs"].items():
        extra = f" {r['tree_pss_mb']:12.0f} {r['tree_pss_mb'] / base['tree_pss_mb']:12.2f}x" if tree else ""
        print(
            f"  {tool:24s} {r['wall']:8.2f} {r['cpu']:8.2f} {r['peak_mb']:8.0f} "
            f"{r['wall'] / base['wall']:12.1f}x {r['cpu'] / base['cpu']:11.1f}x" + extra
        )
    stages = entry.get("stages", {})
    for k, v in stages.items():
        if k.endswith(SYSTEM):
            continue
        was = entry.get("baseline_stages", {}).get(k)
        system = stages.get(k + SYSTEM)
        line = f"  stage (CPU) {k:28s} {v:7.2f} s" + ("" if system is None else f" (system {system:5.2f} s)")
        print(line + ("" if was is None else f"   baseline {was:7.2f} s"))
    for k, r in entry.get("floors", {}).items():
        print(f"  floor {k:44s} wall {r['wall']:6.2f} s  CPU {r['cpu']:6.2f} s  peak {r['peak_mb']:5.0f} MB")
    cf = entry.get("csv_floor")
    if cf:
        for k in ("detcal", "polars"):
            print(
                f"  floor detections.csv written by {k:13s} (same columns)   wall {cf[k]['wall']:6.2f} s  CPU {cf[k]['cpu']:6.2f} s"
            )
        print(
            f"  floor detections.csv: {cf['lines differing']} lines differ (exponents); detcal's equal to the run's: "
            f"{cf['equal to the run file']}"
        )


if __name__ == "__main__":
    main()
