"""Tuning records: append-only JSON lines, crash-safe reading, foreign records never applied silently."""

from __future__ import annotations

import json
import re

import pytest

from graph_pack.build import workload_key
from hw_config import load_config
from tuning.measure import MeasureResult
from tuning.records import (
    RecordLog,
    RecordWarning,
    load_best,
    load_records,
    make_record,
    parse_line,
    pick_best,
)
from tuning.task import alu_task


@pytest.fixture
def task():
    return alu_task(load_config("pynq"), "add", (1, 32, 8, 8))


def _result(task, cycles, error=None, i=0):
    config = task.space[i]
    return MeasureResult(config, cycles, cycles / 100e6, error, error is None)


def test_append_read_round_trip_and_best(tmp_path, task):
    log = RecordLog(tmp_path / "t.jsonl")
    log.append([make_record(task, _result(task, 900, i=0)), make_record(task, _result(task, 700, i=1)),
                make_record(task, _result(task, 100, "invalid config: too big", i=2))])
    records = log.read()
    assert [r.cycles for r in records] == [900, 700, 100]
    assert records[0].workload == task.key == workload_key(task.workload)
    best = load_best(log.path, load_config("pynq"))
    assert best == {task.key: {k: list(v) if isinstance(v, tuple) else v for k, v in task.space[1].items()}}


def test_a_timed_record_is_preferred_to_a_cycles_only_one_whatever_their_cycles(tmp_path, task):
    """Both readers of a log (tuning.records.load_best for the API, graph_pack.schedule_log.read_schedules for
    ``vta run --log``) rank by the board latency where a record has one, by cycles only where none has: a timed
    config of 900 cycles beats a cycles-only one of 100 (its latency 0: not timed), and among timed configs the
    lower latency wins even with more cycles."""
    from graph_pack.schedule_log import read_schedules

    cfg = load_config("pynq")
    log = RecordLog(tmp_path / "t.jsonl")

    def chosen() -> tuple[dict, dict]:
        return load_best(log.path, cfg)[task.key], read_schedules(log.path, cfg)(task.workload)

    def listed(config: dict) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in config.items()}

    log.append([make_record(task, MeasureResult(task.space[1], 100, 0.0)),              # cycles only
                make_record(task, MeasureResult(task.space[0], 900, 9e-6))])             # timed
    assert chosen() == (listed(task.space[0]),) * 2
    log.append([make_record(task, MeasureResult(task.space[2], 950, 8e-6))])              # timed, faster
    assert chosen() == (listed(task.space[2]),) * 2


def test_truncated_last_line_is_skipped_with_a_warning_and_appends_continue(tmp_path, task):
    path = tmp_path / "t.jsonl"
    log = RecordLog(path)
    log.append([make_record(task, _result(task, 500, i=0))])
    with open(path, "a") as f:
        f.write(make_record(task, _result(task, 400, i=1)).to_json()[:25])  # a run killed mid-write
    with pytest.warns(RecordWarning, match="line 2"):
        assert [r.cycles for r in load_records(path)] == [500]
    log.append([make_record(task, _result(task, 300, i=3))])  # starts on a fresh line
    with pytest.warns(RecordWarning):
        assert [r.cycles for r in load_records(path)] == [500, 300]


def test_garbage_and_missing_fields_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('not json\n[1, 2]\n{"workload": "x"}\n\n')
    with pytest.warns(RecordWarning) as caught:
        assert load_records(path) == []
    text = str(caught[0].message)
    assert "3 unreadable" in text and "line 1" in text and "missing field" in text
    with pytest.raises(ValueError, match="not JSON"):
        parse_line("{")


def test_records_of_another_config_or_template_are_never_applied(tmp_path, task):
    path = tmp_path / "t.jsonl"
    other = alu_task(load_config("batch4"), "add", (1, 32, 8, 8))
    RecordLog(path).append([make_record(other, _result(other, 10, i=0)), make_record(task, _result(task, 50, i=0))])
    lines = path.read_text().splitlines()
    stale = json.loads(lines[1])
    stale["template"] = "0"
    path.write_text("\n".join([*lines, json.dumps(stale)]) + "\n")
    with pytest.warns(RecordWarning, match="2 record"):
        best = load_best(path, load_config("pynq"))
    assert set(best) == {task.key}
    with pytest.raises(FileNotFoundError, match="missing.jsonl: no such file"):   # not {}: a typo builds untuned
        load_best(tmp_path / "missing.jsonl", load_config("pynq"))


def test_pick_best_keeps_one_per_config_and_workload(tmp_path, task):
    src, dst = tmp_path / "all.jsonl", tmp_path / "best.jsonl"
    other = alu_task(load_config("batch4"), "add", (1, 32, 8, 8))
    RecordLog(src).append([make_record(task, _result(task, c, i=i)) for i, c in enumerate((30, 10, 20))]
                          + [make_record(other, _result(other, 5, i=0))])
    assert pick_best(src, dst) == 2
    kept = sorted(r.cycles for r in load_records(dst, template=None))
    assert kept == [5, 10]


def _poisoned_lines(good: str) -> dict[str, str]:
    """A valid record line turned into each hostile variant a log could hold (edited, copied, attacked)."""
    rec = json.loads(good)

    def variant(**changes) -> str:
        obj = json.loads(good)
        for path, value in changes.items():
            where = obj
            *parents, leaf = path.split("__")
            for p in parents:
                where = where[p]
            where[leaf] = value
        return json.dumps(obj)

    return {
        "cycles string": variant(result__cycles="many"),
        "cycles null": variant(result__cycles=None),
        "cycles list": variant(result__cycles=[1, 2]),
        "cycles negative": variant(result__cycles=-5),
        "cycles bool": variant(result__cycles=True),
        "cycles Infinity": good.replace(f'"cycles":{rec["result"]["cycles"]}', '"cycles":Infinity'),
        "latency NaN": good.replace(f'"latency_s":{rec["result"]["latency_s"]}', '"latency_s":NaN'),
        "workload list": variant(workload=[1, 2, 3]),
        "knob a string": variant(config__tile_h="wide"),
        "error a number": variant(result__error=7),
        "time a string": variant(time="now"),
        "future version": variant(version=99),
        "deep nesting": good[:-1] + ',"extra":' + "[" * 20_000 + "]" * 20_000 + "}",   # within the length limit
        "very long line": good[:-1] + ',"pad":"' + "x" * 200_000 + '"}',
    }


# why parse_line refuses each variant above, on its own (what its message must name)
POISON_REASONS = {
    "cycles string": "result cycles must be a non-negative integer, got 'many'",
    "cycles null": "result cycles must be a non-negative integer, got None",
    "cycles list": "result cycles must be a non-negative integer, got [1, 2]",
    "cycles negative": "result cycles must be a non-negative integer, got -5",
    "cycles bool": "result cycles must be a non-negative integer, got True",
    "cycles Infinity": "Infinity is not a JSON number",
    "latency NaN": "NaN is not a JSON number",
    "workload list": "workload must be a string, got list",
    "knob a string": "config knob 'tile_h' must be an integer",
    "error a number": "result error must be a string or null",
    "time a string": "time must be a finite number",
    "future version": "format version 99",
    "deep nesting": "nested too deeply",
    "very long line": "longer than 65536 bytes",
}


def test_poisoned_lines_are_skipped_with_their_line_numbers(tmp_path, task):
    log = RecordLog(tmp_path / "p.jsonl")
    log.append([make_record(task, _result(task, 900, i=0))])
    good = log.path.read_text().splitlines()[0]
    poisoned = _poisoned_lines(good)
    with open(log.path, "a") as f:
        f.write("\n".join(poisoned.values()) + "\n")
    log.append([make_record(task, _result(task, 800, i=1))])
    with pytest.warns(RecordWarning) as caught:
        records = load_records(log.path)
    assert [r.cycles for r in records] == [900, 800]   # the good lines before and after, nothing else
    text = " ".join(str(w.message) for w in caught)
    assert f"skipped {len(poisoned)} unreadable line(s)" in text and "line 2:" in text
    assert set(poisoned) == set(POISON_REASONS)
    for name, line in poisoned.items():   # each variant refused on its own, too, for its own reason
        with pytest.raises(ValueError, match=re.escape(POISON_REASONS[name])):
            parse_line(line)


def test_tuning_resumes_past_a_poisoned_log(tmp_path, task):
    """`vta tune`'s path: a poisoned log warns and tuning goes on (it used to die on one bad line)."""
    from tuning.measure import LocalRunner
    from tuning.tuners import make_tuner
    log = RecordLog(tmp_path / "r.jsonl")
    log.append([make_record(task, _result(task, 900, i=0))])
    with open(log.path, "a") as f:
        f.write("\n".join(_poisoned_lines(log.path.read_text().splitlines()[0]).values()) + "\n")
    with pytest.warns(RecordWarning, match="unreadable"):
        res = make_tuner("random", task, seed=0).tune(4, LocalRunner(timing_only=True, check=False), log=log.path)
    assert res.trials == 4 and res.best_cycles is not None


def test_load_best_never_returns_a_config_the_template_refuses(tmp_path):
    """A record copied from elsewhere with this config's fingerprint, whose config this workload's template
    refuses, would make build fail after all the tuning: load_best skips it and takes the next fastest."""
    from tuning.task import conv_task
    cfg = load_config("pynq")
    conv = conv_task(cfg, (1, 32, 8, 8), (32, 32, 3, 3), 1, 1)
    valid = [c for c in conv.space if conv.check(c) is None][:2]
    refused = next(c for c in conv.space if conv.check(c) is not None)
    log = RecordLog(tmp_path / "b.jsonl")
    log.append([make_record(conv, MeasureResult(valid[0], 5000)), make_record(conv, MeasureResult(valid[1], 4000)),
                make_record(conv, MeasureResult(refused, 10))])
    with pytest.warns(RecordWarning, match="whose config the template refuses"):
        best = load_best(log.path, cfg)
    assert best == {conv.key: json.loads(json.dumps(valid[1]))}
    foreign = make_record(conv, MeasureResult(valid[0], 1))
    foreign.workload = json.dumps({"op": "no_such_op", "data_shape": [1]})
    log.append([foreign])
    with pytest.warns(RecordWarning, match="not a workload of any template"):
        assert set(load_best(log.path, cfg)) == {conv.key}


def test_pick_best_never_writes_through_a_planted_file(tmp_path, task):
    log = RecordLog(tmp_path / "in.jsonl")
    log.append([make_record(task, _result(task, 900, i=0))])
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "best.jsonl"
    (tmp_path / "best.jsonl.tmp").symlink_to(victim)   # the old fixed temporary name, planted
    assert pick_best(log.path, out) == 1
    assert victim.read_text() == "precious" and not out.is_symlink()
    assert [r.cycles for r in load_records(out)] == [900]
    assert {p.name for p in tmp_path.iterdir()} == {"in.jsonl", "victim.txt", "best.jsonl", "best.jsonl.tmp"}


def test_a_record_of_a_workload_past_the_dimension_limit_is_skipped_not_hung_on(tmp_path):
    """A record whose workload has a height of 10^30 (its key edited or poisoned) is skipped by load_best with a
    RecordWarning naming the dimension and the limit, as any record no template takes; the others are kept.
    (Enumerating that height's divisors for the knob space hung.)"""
    from tuning.task import conv_task
    cfg = load_config("pynq")
    conv = conv_task(cfg, (1, 32, 8, 8), (32, 32, 3, 3), 1, 1)
    good = make_record(conv, MeasureResult(conv.default_config, 5000))
    huge = make_record(conv, MeasureResult(conv.default_config, 10))
    workload = json.loads(huge.workload)
    workload["data_shape"] = [1, 32, 10**30, 8]
    huge.workload = json.dumps(workload, sort_keys=True, separators=(",", ":"))
    log = RecordLog(tmp_path / "huge.jsonl")
    log.append([good, huge])
    with pytest.warns(RecordWarning, match=r"data_shape H=1000000000000000000000000000000 is above the limit 4294967295"):
        best = load_best(log.path, cfg)
    assert best == {conv.key: json.loads(json.dumps(conv.default_config))}


def test_a_log_lock_is_its_threads_alone_and_leaves_no_empty_log(tmp_path):
    """``log_lock``: the thread holding a log may take it again (vta tune takes it before tune_tasks does); another
    thread of the process is refused; a log it created and nothing wrote is removed, one with records is kept; a log
    renamed while locked (moved aside) is not removed in its place."""
    import threading

    from tuning.records import log_lock
    log = tmp_path / "t.jsonl"
    refused = []
    with log_lock(log):
        with log_lock(log):
            assert log.exists()
        thread = threading.Thread(target=lambda: refused.append(_refusal(log)))
        thread.start()
        thread.join(30)
    assert refused == [(f"log {log}: another thread of this process is writing it; a tuning run into it is still "
                       "going (the same command twice?); wait for it to finish (a run resumes from its records), or "
                       "give another log")]
    assert not log.exists()          # created here, never written: gone
    with log_lock(log):
        log.write_text("{}\n")
    assert log.read_text() == "{}\n"   # written: kept
    with log_lock(tmp_path / "new.jsonl"):
        (tmp_path / "new.jsonl").rename(tmp_path / "aside.jsonl")
        (tmp_path / "new.jsonl").write_text("")   # another file under the name: not this lock's to remove
    assert (tmp_path / "new.jsonl").exists() and (tmp_path / "aside.jsonl").exists()


def _refusal(log) -> str:
    from tuning.records import log_lock
    try:
        with log_lock(log):
            return "taken"
    except ValueError as e:
        return str(e)
