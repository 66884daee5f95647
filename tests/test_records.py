"""Tuning records: append-only JSON lines, crash-safe reading, foreign records never applied silently."""

from __future__ import annotations

import json
import warnings

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
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_best(tmp_path / "missing.jsonl", load_config("pynq")) == {}


def test_pick_best_keeps_one_per_config_and_workload(tmp_path, task):
    src, dst = tmp_path / "all.jsonl", tmp_path / "best.jsonl"
    other = alu_task(load_config("batch4"), "add", (1, 32, 8, 8))
    RecordLog(src).append([make_record(task, _result(task, c, i=i)) for i, c in enumerate((30, 10, 20))]
                          + [make_record(other, _result(other, 5, i=0))])
    assert pick_best(src, dst) == 2
    kept = sorted(r.cycles for r in load_records(dst, template=None))
    assert kept == [5, 10]
