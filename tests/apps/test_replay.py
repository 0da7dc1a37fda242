"""Replaying a plain command line from its run record (detcal.apps._replay): no Hydra or OmegaConf import, and
the run directory the same, byte for byte, as a run through Hydra (``.hydra/*.yaml``, the log without its time
stamps, metrics.json without its times, summary.md, detections.csv, the PNGs); per-run values made afresh;
errors, refusals and exit statuses as through Hydra; anything the record did not see goes through Hydra."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detcal.apps import _replay, _replay_record
from detcal.pipeline.spec import DataSpec

REPO = Path(__file__).resolve().parents[2]
DRIVER = """import sys
from detcal.apps import evaluate
sys.argv = ["detcal-evaluate", *sys.argv[1:]]
try:
    evaluate.main()
finally:
    hydra = sorted({m.split(".")[0] for m in sys.modules} & {"hydra", "omegaconf"})
    print("imported:", ",".join(hydra) or "neither", file=sys.stderr)
"""
_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", re.M)
_CREATED = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")
LEAN = ["bootstrap.n=0", "output.plots=false", "output.detections_csv=false", "report.enabled=false"]


def _run(argv: list[str], cache: Path, cwd: Path = REPO, **env: str) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr without the import line, whether Hydra or OmegaConf was imported)."""
    environ = {**os.environ, "PYTHONPATH": str(REPO), "DETCAL_CACHE_DIR": str(cache), **env}
    if "DETCAL_COMPOSE_CACHE" not in env:
        environ.pop("DETCAL_COMPOSE_CACHE", None)
    p = subprocess.run([sys.executable, "-c", DRIVER, *argv], capture_output=True, text=True, cwd=cwd, env=environ)
    lines = p.stderr.splitlines()
    assert lines and lines[-1].startswith("imported: "), p.stderr
    return p.returncode, p.stdout, "\n".join(lines[:-1]), lines[-1] != "imported: neither"


def _files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory; the log without time stamps, metrics.json and report.html without times."""
    out = {}
    for p in sorted(run_dir.rglob("*")):
        if not p.is_file() or p.name == ".detcal.lock":
            continue
        data = p.read_bytes()
        if p.suffix == ".log":
            data = _STAMP.sub("[time]", data.decode()).encode()
        if p.suffix == ".html":  # the time the run was made
            data = _CREATED.sub("[created]", data.decode()).encode()
        if p.name == "metrics.json":
            metrics = json.loads(data)
            for key in ("created", "timing_s"):
                metrics.pop(key, None)
            data = json.dumps(metrics, sort_keys=True).encode()
        out[str(p.relative_to(run_dir))] = data
    return out


def _three_runs(argv: list[str], tmp_path: Path) -> list[tuple[dict[str, bytes], int, str, str, bool]]:
    """The same command line into the same directory: Hydra alone, Hydra storing the record, the replay; each
    run's directory moved aside after it."""
    run_dir = tmp_path / "run"
    out = []
    for i, switch in enumerate(("0", "1", "1")):
        code, stdout, stderr, hydra = _run(
            [*argv, f"hydra.run.dir={run_dir}"], tmp_path / "cache", DETCAL_COMPOSE_CACHE=switch
        )
        files = _files(run_dir) if run_dir.is_dir() else {}
        if run_dir.is_dir():
            shutil.move(run_dir, tmp_path / f"run{i}")
        out.append((files, code, stdout, _STAMP.sub("[time]", stderr), hydra))
    return out


def test_a_replayed_default_run_writes_what_hydra_writes(coco: DataSpec, tmp_path: Path) -> None:
    argv = [
        "data=coco",
        f"data.gt={coco.gt}",
        f"data.results={coco.results}",
        "bootstrap.n=20",
        "output.progress=false",
    ]
    (hydra, *_, hydra_imported), stored, (replayed, *_, replay_imported) = _three_runs(argv, tmp_path)
    assert hydra_imported and stored[-1] and not replay_imported
    assert any(name.endswith(".png") for name in hydra) and "detections.csv" in hydra and "report.html" in hydra
    assert sorted(replayed) == sorted(hydra)
    differ = [name for name in hydra if replayed[name] != hydra[name]]
    assert differ == []


def test_a_replayed_run_writes_what_hydra_writes_and_imports_neither(coco: DataSpec, tmp_path: Path) -> None:
    argv = ["data=coco", f"data.gt={coco.gt}", f"data.results={coco.results}", *LEAN, "dece_binning.ece_bins=10"]
    runs = _three_runs(argv, tmp_path)
    assert [r[-1] for r in runs] == [True, True, False]  # Hydra, Hydra storing the record, the replay
    assert [r[1] for r in runs] == [0, 0, 0]
    assert runs[2][0] == runs[0][0] and runs[1][0] == runs[0][0]
    assert runs[2][2] == runs[0][2] and runs[2][3] == runs[0][3]  # stdout and stderr too
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "evaluate.log"} <= set(runs[2][0])
    assert len(list((tmp_path / "cache").glob("replay-*.pkl"))) == 1


def test_per_run_values_are_fresh(coco: DataSpec, tmp_path: Path) -> None:
    """The default run directory (date, time, run id) and a named one are made anew by each replay."""
    argv = ["data=coco", f"data.gt={coco.gt}", f"data.results={coco.results}", *LEAN]
    cache = tmp_path / "cache"
    seen = []
    for _ in range(3):  # Hydra storing the record, then two replays
        code, _, stderr, hydra = _run(argv, cache, cwd=tmp_path)
        assert code == 0, stderr
        seen.append(hydra)
    assert seen == [True, False, False]
    dirs = sorted((tmp_path / "outputs" / "evaluate").glob("*/*"))
    assert len(dirs) == 3 and len({d.name.rsplit("-", 1)[1] for d in dirs}) == 3  # three run ids
    for d in dirs:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", d.parent.name) and re.fullmatch(r"\d\d-\d\d-\d\d-[0-9a-f]{6}", d.name)
        hydra_yaml = (d / ".hydra" / "hydra.yaml").read_text()
        assert f"    output_dir: {d}\n" in hydra_yaml
        assert "dir: outputs/${detcal_name:${name}}/${now:%Y-%m-%d}/${now:%H-%M-%S}-${detcal_run_id:}" in hydra_yaml
        assert json.loads((d / "metrics.json").read_text())["run_dir"] == str(d)
        assert (d / "evaluate.log").is_file()
    named = []
    for name, through_hydra in (("a", True), ("b", False), ("c", False)):  # keyed without its path
        code, _, stderr, hydra = _run([*argv, f"hydra.run.dir={tmp_path / name}"], cache, cwd=tmp_path)
        assert code == 0 and hydra == through_hydra, stderr
        named.append((tmp_path / name / ".hydra" / "hydra.yaml").read_text())
    assert named[2] == named[0].replace(str(tmp_path / "a"), str(tmp_path / "c"))
    assert named[1] == named[0].replace(str(tmp_path / "a"), str(tmp_path / "b"))
    assert f"- hydra.run.dir={tmp_path / 'b'}\n" in named[1] and f"  dir: {tmp_path / 'b'}\n" in named[1]


def test_errors_and_refusals_as_through_hydra(tmp_path: Path) -> None:
    data = tmp_path / "data"
    from detcal.data.synthetic import write_synthetic

    p = write_synthetic(data, n_images=20, seed=1, render=False)
    argv = ["data=coco", f"data.gt={p['coco_instances']}", f"data.results={p['coco_results']}", *LEAN]
    cache = tmp_path / "cache"
    assert _run([*argv, f"hydra.run.dir={tmp_path / 'first'}"], cache)[0] == 0  # stores the record
    outcomes = {}
    for switch in ("0", "1"):
        run_dir = tmp_path / f"taken{switch}"
        run_dir.mkdir()
        (run_dir / "mine.txt").write_text("")
        refused = _run([*argv, f"hydra.run.dir={run_dir}"], cache, DETCAL_COMPOSE_CACHE=switch)
        outcomes[switch] = [(refused[0], refused[2].replace(str(run_dir), "<dir>"), refused[3])]
    Path(p["coco_results"]).rename(tmp_path / "gone.json")  # the task fails: one line, exit 2, in the log
    for switch in ("0", "1"):
        run_dir = tmp_path / f"failed{switch}"
        failed = _run([*argv, f"hydra.run.dir={run_dir}"], cache, DETCAL_COMPOSE_CACHE=switch)
        log = _STAMP.sub("[time]", (run_dir / "evaluate.log").read_text())
        outcomes[switch].append((failed[0], failed[2], failed[3], log))
        outcomes[switch].append(sorted(q.name for q in run_dir.iterdir()))
    assert outcomes["0"][0][0] == 2 and "already holds files" in outcomes["0"][0][1] and outcomes["0"][0][2]
    assert outcomes["0"][1][0] == 2 and "run failed" in outcomes["0"][1][3]
    assert [o[:2] for o in outcomes["1"][:2]] == [o[:2] for o in outcomes["0"][:2]]
    assert outcomes["1"][1][3] == outcomes["0"][1][3] and outcomes["1"][2] == outcomes["0"][2]
    assert not outcomes["1"][0][2] and not outcomes["1"][1][2]  # both replayed


def test_what_the_record_did_not_see_goes_through_hydra(coco: DataSpec, tmp_path: Path) -> None:
    argv = ["data=coco", f"data.gt={coco.gt}", f"data.results={coco.results}", *LEAN]
    cache = tmp_path / "cache"
    run = [*argv, f"hydra.run.dir={tmp_path / 'r0'}"]
    assert _run(run, cache)[3]  # stores the record
    (record,) = cache.glob("replay-*.pkl")
    assert not _run([*argv, f"hydra.run.dir={tmp_path / 'r1'}"], cache)[3]
    assert _run([*argv, f"hydra.run.dir={tmp_path / 'r2'}"], cache, DETCAL_COMPOSE_CACHE="0")[3]
    assert _run([*argv, "hydra.run.dir=plain-name"], cache, cwd=tmp_path)[3]  # no '/': YAML might quote it
    assert _run([*argv, "output.progress=false", f"hydra.run.dir={tmp_path / 'r3'}"], cache)[3]  # another line
    assert _run([*argv, f"hydra.run.dir={tmp_path / 'r4'}"], cache, cwd=tmp_path)[3]  # another working directory
    with open(record, "rb") as f:
        _, _, content = _replay.RecordUnpickler(f).load()
    conf = next(d for d in content["dirs"] if d.endswith("configs"))
    assert _replay.tree(conf) == _replay.tree(str(REPO / "configs"))
    assert any(f.endswith("detcal/apps/evaluate.py") for f in content["files"])
    record.write_bytes(b"damaged")
    assert _run([*argv, f"hydra.run.dir={tmp_path / 'r5'}"], cache)[3]  # damaged: Hydra, and stored again
    assert not _run([*argv, f"hydra.run.dir={tmp_path / 'r6'}"], cache)[3]


def test_run_dir_pieces_and_safe_paths() -> None:
    pieces = _replay_record.run_dir_pieces(
        "outputs/${detcal_name:${name}}/${now:%Y-%m-%d}/${now:%H-%M-%S}-${detcal_run_id:}",
        lambda text: text.replace("${detcal_name:${name}}", "evaluate"),
    )
    assert pieces == [
        ("text", "outputs/evaluate/"),
        ("now", "%Y-%m-%d"),
        ("text", "/"),
        ("now", "%H-%M-%S"),
        ("text", "-"),
        ("id", ""),
    ]
    assert _replay_record.run_dir_pieces("out/${oc.env:USER}", str) is None
    assert _replay_record.run_dir_pieces("out/${now:'%H'}", str) is None
    for good in ("/tmp/a", "out/x-1.2", "./run/"):
        assert _replay.safe_path(good)
    for bad in ("name", "-x/y", ".../x", "/tmp/a b", "/tmp/a:b", "/tmp/é", "/tmp/a#b"):
        assert not _replay.safe_path(bad)


def test_stamps_see_every_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf, module = tmp_path / "conf", tmp_path / "mod.py"
    (conf / "data").mkdir(parents=True)
    (conf / "data" / "a.yaml").write_text("x: 1\n")
    module.write_text("")

    def now() -> tuple[object, ...]:
        return _replay.stamps([str(conf)], [str(module)])

    seen = [now()]
    assert now() == seen[0]
    os.utime(conf / "data" / "a.yaml", ns=(10**9, 10**9))  # an edited config file
    seen.append(now())
    (conf / "data" / "b.yaml").write_text("")  # a new one
    seen.append(now())
    os.utime(module, ns=(10**9, 10**9))  # an edited module
    seen.append(now())
    (tmp_path / "site" / "hydra_plugins").mkdir(parents=True)  # a Hydra plugin folder on the path
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    seen.append(now())
    module.unlink()
    seen.append(now())
    assert all(seen[i] != seen[j] for i in range(len(seen)) for j in range(i))


def test_only_plain_logging_is_replayed() -> None:
    """The replay hands the logging configuration to logging.config.dictConfig; a record keeps only what Hydra's
    authorised configurator builds the same way: formatters, stream and file handlers, logger levels."""
    handler = {"class": "logging.FileHandler", "formatter": "simple", "filename": "x.log", "level": "INFO"}
    conf = {
        "version": 1,
        "formatters": {"simple": {"format": "%(message)s"}},
        "handlers": {"file": handler, "console": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
        "root": {"level": "INFO", "handlers": ["file", "console"]},
        "disable_existing_loggers": False,
    }
    assert _replay_record.plain_logging(conf) and _replay_record.plain_logging(None)
    for bad in (
        {**conf, "handlers": {"file": {**handler, "class": "logging.handlers.SocketHandler"}}},
        {**conf, "handlers": {"file": {**handler, "()": "os.system"}}},
        {**conf, "handlers": {"c": {"class": "logging.StreamHandler", "stream": "ext://os.environ"}}},
        {**conf, "formatters": {"simple": {"()": "my.Formatter"}}},
        {**conf, "filters": {"f": {"name": "x"}}},
        {**conf, "incremental": True},
    ):
        assert not _replay_record.plain_logging(bad)


_LOGGING_PROBE = """import json, logging, sys
from detcal.apps import _replay
confs = json.loads(sys.argv[2])
for name in ("detcal", "logging_example.child", "other.x"):
    logging.getLogger(name).setLevel(logging.WARNING)
logging.getLogger("detcal").addHandler(logging.StreamHandler(sys.stdout))
for conf in confs:
    if sys.argv[1] == "dictConfig":
        import logging.config
        logging.config.dictConfig(conf)
    else:
        _replay.configure_logging(conf)
    logging.getLogger("detcal").info("info %s", 1)
    logging.getLogger("detcal").warning("warning")
    logging.getLogger("other.x").error("error")


def state(lg):
    hs = [
        (type(h).__name__, h.name, h.level, h.formatter and h.formatter._fmt, getattr(h, "baseFilename", None),
         getattr(getattr(h, "stream", None), "name", None), getattr(h, "mode", None))
        for h in lg.handlers
    ]
    return [lg.level, lg.disabled, lg.propagate, hs]


out = {n: state(lg) for n, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
print(json.dumps([state(logging.root), out], sort_keys=True, default=str))
"""


@pytest.mark.parametrize("disable", [False, True])
def test_logging_is_configured_as_dict_config_does(tmp_path: Path, disable: bool) -> None:
    """The replay's logging set-up (no logging.config import) leaves the same handlers, levels, log file and
    console output as logging.config.dictConfig (what Hydra's configurator runs) on the configurations a record
    holds: Hydra's hydra_logging, then detcal's job_logging."""
    import yaml

    hydra_logging = yaml.safe_load(
        (Path(yaml.__file__).parents[1] / "hydra/conf/hydra/hydra_logging/default.yaml").read_text()
    )
    job_logging = yaml.safe_load((REPO / "configs/hydra/default.yaml").read_text())["job_logging"]
    job_logging["disable_existing_loggers"] = disable
    assert _replay_record.plain_logging(hydra_logging) and _replay_record.plain_logging(job_logging)
    seen = []
    for way in ("dictConfig", "replay"):
        log = tmp_path / way / "run.log"
        log.parent.mkdir()
        job_logging["handlers"]["file"]["filename"] = str(log)
        p = subprocess.run(
            [sys.executable, "-c", _LOGGING_PROBE, way, json.dumps([hydra_logging, job_logging])],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=True,
        )
        texts = (p.stdout.replace(str(log), "LOG"), p.stderr, log.read_text())
        seen.append(tuple(_STAMP.sub("[time]", t) for t in texts))
    assert seen[1] == seen[0]
    assert ("warning" in seen[0][2]) != disable and ("error" in seen[0][1]) != disable  # disabled: no record


def test_another_config_directory_is_never_replayed_from_the_first(coco: DataSpec, tmp_path: Path) -> None:
    """``DETCAL_CONFIG_DIR`` picks the configs folder: a record made from one folder is not replayed for another
    (each folder gets its own record, and its own values)."""
    argv = ["data=coco", f"data.gt={coco.gt}", f"data.results={coco.results}", *LEAN]
    cache, edited = tmp_path / "cache", tmp_path / "cfg"
    shutil.copytree(REPO / "configs", edited)
    with open(edited / "dece_binning" / "default.yaml", "a", encoding="utf-8") as f:
        f.write("ece_bins: 7\n")

    def bins(run: str, **env: str) -> tuple[str, bool]:
        hydra = _run([*argv, f"hydra.run.dir={tmp_path / run}"], cache, **env)[3]
        found = re.search(r"^\s*ece_bins: (\d+)$", (tmp_path / run / ".hydra" / "config.yaml").read_text(), re.M)
        assert found, run
        return found.group(1), hydra

    assert bins("r0") == ("15", True)  # the repository's configs, through Hydra: record stored
    assert bins("r1", DETCAL_CONFIG_DIR=str(edited)) == ("7", True)  # another folder: Hydra, its own record
    assert bins("r2", DETCAL_CONFIG_DIR=str(edited)) == ("7", False)  # replayed from its own record
    assert bins("r3") == ("15", False)  # the first record, for the first folder
