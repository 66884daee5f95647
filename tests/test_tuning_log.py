"""A tuning log across runs (issue 26): what a resumed run says it found, budgets per tuner and per task, --fresh,
and `vta run MODEL --log FILE` applying the best record per task (AutoTVM's apply_history_best)."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest

from graph_pack.cli import load_model
from graph_pack.pack import graph_pack
from graph_pack.quantize import default_skip_conv, quantize
from graph_pack.schedule_log import read_schedules
from hw_config import load_config
from tuning.measure import LocalRunner
from tuning.records import load_best, load_records
from tuning.task import conv_task, extract_tasks
from tuning.tune import tune_tasks
from vta.cli import main as vta_main

SMALL = ("resnet-18", "--image-size", "32", "--timing-only")
CFG = load_config("pynq")


def _tune(capsys, log: Path, *extra: str) -> str:
    assert vta_main(["tune", *SMALL, "--log", str(log), *extra]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def random_log(tmp_path_factory) -> Path:
    """ResNet-18 at 32x32 tuned by the random tuner, 3 trials per task."""
    log = tmp_path_factory.mktemp("log") / "r18.jsonl"
    assert vta_main(["tune", *SMALL, "--tuner", "random", "--n-trial", "3", "--log", str(log)]) == 0
    return log


def _tasks() -> list:
    """The tasks vta tune extracts without --start / --stop: regions found automatically, the stem offloaded."""
    graph, params, _ = load_model("resnet-18", 1, 32, 0)
    qgraph, _ = quantize(graph, params, skip_conv_layers=default_skip_conv(named_region=False))
    return extract_tasks(graph_pack(qgraph, CFG, start_name=None, stop_name=None), CFG)


def test_records_name_their_tuner(random_log):
    records = load_records(random_log)
    assert records and {r.tuner for r in records} == {"random"}
    assert len(records) == 3 * len({r.workload for r in records})


def test_another_tuner_says_what_the_log_holds_and_measures_its_own_budget(random_log, tmp_path, capsys):
    log = tmp_path / "r18.jsonl"
    shutil.copy(random_log, log)
    before = load_records(log)
    n_tasks = len({r.workload for r in before})
    out = _tune(capsys, log, "--tuner", "xgb", "--n-trial", "2")
    line = next((x for x in out.splitlines() if x.startswith("resuming from")), None)
    assert line == (f"resuming from {len(before)} records in {log}: {n_tasks} of {n_tasks} tasks measured before "
                    f"({len(before)} by random; no config is measured twice); xgb shares {2 * n_tasks} trials among "
                    f"the tasks (0 done, {2 * n_tasks} to go); trials of other tuners are known results, not xgb's"), \
        out[:2000]
    after = load_records(log)
    assert after[:len(before)] == before
    new = after[len(before):]
    assert len(new) == 2 * n_tasks and {r.tuner for r in new} == {"xgb"}
    seen = {(r.workload, json.dumps(r.config, sort_keys=True)) for r in before}
    assert not any((r.workload, json.dumps(r.config, sort_keys=True)) in seen for r in new), "measured twice"
    assert re.search(r" cycles; \+3 by another tuner, from the log$", out, re.MULTILINE)
    # the same command again: its budget is spent, and it says so
    out = _tune(capsys, log, "--tuner", "xgb", "--n-trial", "2")
    assert f"xgb shares {2 * n_tasks} trials among the tasks ({2 * n_tasks} done, 0 to go)" in out
    assert "nothing left to measure" in out and load_records(log) == after
    # a larger budget continues up to it
    _tune(capsys, log, "--tuner", "xgb", "--n-trial", "3")
    assert len(load_records(log)) == len(after) + n_tasks


def test_n_trial_is_per_task_under_the_sequential_strategy(tmp_path):
    tasks = [conv_task(CFG, (1, 32, 14, 14), (32, 32, 3, 3), 1, 1), conv_task(CFG, (1, 32, 14, 14), (64, 32, 1, 1), 2, 0)]
    log = tmp_path / "s.jsonl"
    out = io.StringIO()
    summary = tune_tasks(tasks, tuner="random", n_trial=5, strategy="sequential", batch_size=2, log=log,
                         runner=LocalRunner(timing_only=True, check=False), out=out)
    assert [s.trials for s in summary.states] == [5, 5]
    again = io.StringIO()
    tune_tasks(tasks, tuner="ga", n_trial=7, strategy="sequential", batch_size=2, log=log,
               runner=LocalRunner(timing_only=True, check=False), out=again)
    assert "ga tunes each task to 7 trials of its own (0 done, 14 to go)" in again.getvalue()
    by_tuner = [r.tuner for r in load_records(log)]
    assert by_tuner.count("random") == 10 and by_tuner.count("ga") == 14


def test_total_trials_belongs_to_the_gradient_strategy(tmp_path, capsys):
    assert vta_main(["tune", *SMALL, "--strategy", "sequential", "--total-trials", "8", "--log",
                     str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "vta: error: --total-trials applies to --strategy gradient; sequential tunes each task " \
                          "--n-trial times"
    assert not (tmp_path / "x.jsonl").exists()


def test_fresh_moves_the_old_log_aside(random_log, tmp_path, capsys):
    log = tmp_path / "r18.jsonl"
    shutil.copy(random_log, log)
    (tmp_path / "r18.old-1.jsonl").write_text("an older one\n")
    out = _tune(capsys, log, "--tuner", "random", "--n-trial", "2", "--fresh")
    assert f"--fresh: moved the earlier log {log} aside to {tmp_path / 'r18.old-2.jsonl'}; starting a new log" in out
    assert "resuming from" not in out
    assert (tmp_path / "r18.old-2.jsonl").read_bytes() == random_log.read_bytes()   # kept, whole
    assert (tmp_path / "r18.old-1.jsonl").read_text() == "an older one\n"
    assert len(load_records(log)) == 2 * len({r.workload for r in load_records(random_log)})


def test_vta_run_applies_the_best_record_per_task(random_log, tmp_path, capsys):
    tasks = _tasks()
    logged = read_schedules(random_log, CFG)
    best = load_best(random_log, CFG)
    assert {t.key: logged(t.workload) for t in tasks} == best   # the two readers of the format agree
    assert len(best) == len(tasks)
    args = ["run", "resnet-18", "--image-size", "32", "--no-layers"]
    assert vta_main([*args, "--log", str(random_log)]) == 0
    out = capsys.readouterr().out
    assert (f"schedules: {len(tasks)} of {len(tasks)} task(s) from {random_log} (the best of "
            f"{len(load_records(random_log))} record(s) for {CFG.model})") in out.splitlines()
    tuned = int(re.search(r"accelerator ([\d,]+) cycles", out).group(1).replace(",", ""))
    assert vta_main(args) == 0
    untuned = int(re.search(r"accelerator ([\d,]+) cycles", capsys.readouterr().out).group(1).replace(",", ""))
    assert tuned != untuned
    # a task without a record keeps the template's default, and is named
    dropped = tasks[2]
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(line + "\n" for line in random_log.read_text().splitlines()
                               if json.loads(line)["workload"] != dropped.key) + "not a record\n")
    assert vta_main([*args, "--log", str(partial)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("schedules:"))
    assert line.startswith(f"schedules: {len(tasks) - 1} of {len(tasks)} task(s) from {partial} ")
    assert line.endswith(f"; records skipped: 1 unreadable; no record for 1, which keep the template's default: "
                         f"{dropped.name}")


def test_vta_run_log_for_another_config_says_so(random_log, capsys):
    """It built untuned with exit status 0 and said so in its schedules line: now an error naming the config the
    records are for (tests/test_cli_logs.py has the other reasons)."""
    assert vta_main(["run", "resnet-18", "--image-size", "32", "--no-layers", "--config", "batch4",
                     "--log", str(random_log)]) == 2
    n = len(load_records(random_log))
    assert capsys.readouterr().err.splitlines()[1:] == [
        f"  {n} record(s) are for another hardware config (pynq): run with the --config / --set it was tuned with"]


def test_vta_run_missing_log_is_a_one_line_error(tmp_path, capsys):
    assert vta_main(["run", "resnet-18", "--image-size", "32", "--log", str(tmp_path / "none.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"vta: error: --log {tmp_path / 'none.jsonl'}: no such tuning log"


@pytest.mark.parametrize("model", ["resnet-18", "mobilenet"])
def test_task_names_tell_the_tasks_apart(model):
    """The tune table shows one line per task by name: tasks of one shape (with and without a fused residual,
    other groups) have names that say what differs."""
    import graph_pack
    from graph_pack.zoo import get_model, pack_points
    from hw_config import load_config
    from tuning import extract_tasks
    cfg = load_config("pynq")
    graph, params = get_model(model, image_shape=(3, 32, 32))
    qgraph, _ = graph_pack.quantize(graph, params)
    names = [t.name for t in extract_tasks(graph_pack.graph_pack(qgraph, cfg, *pack_points(model)), cfg)]
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    if model == "resnet-18":
        assert "conv2d_1x64x8x8_64x64x3x3_s1x1_p1x1" in names and "conv2d_1x64x8x8_64x64x3x3_s1x1_p1x1_res" in names


@pytest.mark.parametrize("knob, value", [("h_nthread", 2.0), ("h_nthread", True), ("tile_h", [2.9, 4.9]),
                                         ("tile_h", ["2", "4"]), ("tile_h", [[1], 8])])
def test_vta_run_refuses_a_record_whose_knob_is_not_an_integer_and_applies_what_it_checked(tmp_path, knob, value):
    """A record edited to h_nthread 2.0 (faster than every other) made emit_conv fail with a TypeError, and
    tile_h [2.9, 4.9] or ["2", "4"] were applied as ints: such a record is refused like any the template refuses
    (counted in the summary), the next one is taken, and what is applied is the config as the template normalised it."""
    from tuning.measure import MeasureResult
    from tuning.records import RecordLog, make_record
    task = conv_task(CFG, (1, 32, 8, 8), (32, 32, 3, 3), 1, 1)
    good = next(c for c in task.space if task.check(c) is None and c["h_nthread"] == 2 and c["tile_h"] == [2, 4])
    bad = make_record(task, MeasureResult(good, 1, 1e-12))
    bad.config = {**bad.config, knob: value}
    log = tmp_path / "edited.jsonl"
    RecordLog(log).append([make_record(task, MeasureResult(good, 5000, 5e-5))])
    with open(log, "a") as f:
        f.write(bad.to_json() + "\n")
    logged = read_schedules(log, CFG)
    applied = logged(task.workload)
    assert applied == good and logged.refused == 1
    assert all(type(v) is int for x in applied.values() for v in (x if isinstance(x, list) else [x]))
    assert "records skipped: 1 refused by the template" in logged.summary()


def test_logged_schedules_apply_the_config_as_normalised():
    """What LoggedSchedules hands build is the config the template checked (plain ints, splits as lists), not the
    record's raw values."""
    import numpy as np

    from graph_pack.build import workload_key
    from graph_pack.schedule_log import LoggedSchedules
    task = conv_task(CFG, (1, 32, 8, 8), (32, 32, 3, 3), 1, 1)
    good = next(c for c in task.space if task.check(c) is None)
    raw = {k: tuple(np.int64(x) for x in v) if isinstance(v, list) else np.int16(v) for k, v in good.items()}
    logged = LoggedSchedules("log", CFG, candidates={workload_key(task.workload): [raw]})
    applied = logged(task.workload)
    assert applied == good and logged.refused == 0
    assert all(type(v) is int for x in applied.values() for v in (x if isinstance(x, list) else [x]))
    assert all(type(v) is list for v in applied.values() if not isinstance(v, int))
