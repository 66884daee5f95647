"""The co-design search (tuning/dse.py, ``vta dse``): spaces refused before any work, the Pareto front against a
brute-force dominance check, each point's schedules and cycles against the simulator, the command line as a
subprocess (records, CSV, front, report), resume after a kill -9, and the points on a Dask cluster whose worker
is killed mid-search.

Oracles: the simulator (a network built with a record's schedules runs in exactly the recorded cycles; a task's
chosen config measures the recorded cycles), the analytic resource model (hardware.fpga), brute force.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from extras import need
from test_faults import _cluster, _measure_and_kill

from graph_pack.build import build
from graph_pack.pack import graph_pack
from hardware.fpga import estimate
from hw_config import load_config
from tuning.dse import (
    RECORDS,
    RESOURCES,
    Search,
    check_space,
    csv_rows,
    evaluate,
    latency_parts,
    pareto_front,
    point_key,
    read_records,
    read_space,
    run_search,
    share_host_time,
)
from tuning.task import extract_tasks

# A search small enough for the suite: ResNet-18 on 32x32 images; points VTA's ISA cannot encode (an 8-wide block
# with pynq's buffers), points that do not fit an xc7z020 (a 32-wide block; a 128-bit bus, wider than the Zynq-7000's
# 64-bit ACP port), two that run (32- and 64-bit buses).
NET, IMAGE = "resnet-18", 32
SPACE = {"LOG_BLOCK": [3, 4, 5], "LOG_BUS_WIDTH": [5, 6, 7]}
SEARCH = Search(NET, "pynq", "xc7z020", trials=2, image_size=IMAGE)


# the commands run this checkout's code, wherever the package is installed from (a git worktree beside it)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                     os.environ.get("PYTHONPATH", "")])}


def vta(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False, env=ENV)


PROGRESS: list[str] = []


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    out = tmp_path_factory.mktemp("dse")
    return out, run_search(SEARCH, SPACE, out, progress=PROGRESS.append)


def test_progress_records_the_untunable_points_first_and_estimates_the_time_left_from_the_tuned(searched):
    """The points that are not configs or do not fit are recorded at once (one line); the progress lines count the
    points to tune only, and give a time left from the points after each worker's first (which also builds the
    network) once two of those have finished: from the third point on with one worker, or at the last."""
    _, outcome = searched
    tuned = [r for r in outcome.records if r["status"] in ("ok", "failed")]
    final = len(outcome.records) - len(tuned)
    assert 0 < final and len(tuned) > 1
    assert PROGRESS[0] == (f"{final} of {len(outcome.records)} points are not configs or do not fit xc7z020: "
                           f"recorded without tuning; tuning {len(tuned)}")
    steps = PROGRESS[1:]
    assert [line.split("]")[0] for line in steps] == [f"[{k}/{len(tuned)}" for k in range(1, len(tuned) + 1)]
    first_estimate = min(len(tuned), 3)   # one worker: its first point, then two more
    assert all(line.endswith("estimating the time left)") for line in steps[:first_estimate - 1]), steps
    assert all(re.search(r"\(\d+ s, ~\d+ s left\)$", line) for line in steps[first_estimate - 1:]), steps
    assert outcome.measured == len(outcome.records)


def test_configs_with_the_same_host_work_share_its_fastest_host_time(searched):
    """The host part of each tuned point is the fastest run of its host work (same batch, block and CPU layers) in
    the search, so that such points are ranked by their accelerator time alone, not by the machine's noise."""
    _, outcome = searched
    ok = outcome.of_status("ok")
    assert ok and all(len(r["host_key"]) == 12 for r in ok)
    for key in {r["host_key"] for r in ok}:
        mine = [r for r in ok if r["host_key"] == key]
        assert {r["host_ms"] for r in mine} == {min(r["host_ms_measured"] for r in mine)}
        for r in mine:
            assert r["latency_ms"] == round(r["accel_ms"] + r["host_ms"], 4)
    rec = {"status": "ok", "host_key": "k", "batch": 2, "accel_ms": 10.0}
    raw = [{**rec, "host_ms": 9.0, "point": {"A": 1}}, {**rec, "host_ms": 4.0, "accel_ms": 11.0, "point": {"A": 2}},
           {**rec, "host_key": "other", "host_ms": 7.0, "point": {"A": 3}},
           {"status": "invalid", "point": {"A": 4}}, {**rec, "status": "failed", "host_ms": 1.0, "point": {"A": 5}}]
    shared = share_host_time(raw)
    assert [r.get("host_ms") for r in shared] == [4.0, 4.0, 7.0, None, 1.0]
    assert [r.get("latency_ms") for r in shared[:3]] == [14.0, 15.0, 17.0]
    assert shared[0]["per_image_ms"] == 7.0 and shared[0]["host_ms_measured"] == 9.0
    assert shared[3] == raw[3] and shared[4] == raw[4] and raw[0]["host_ms"] == 9.0   # failed, invalid: as they were


def test_a_records_latency_is_said_as_its_parts_with_their_basis():
    """Issue 39, item 4: a progress line said 113.41 ms where the summary said 99.833 ms for the same point. A record
    as evaluated (progress) gives this run's host part and says the summary differs; after share_host_time (the
    summary) the fastest run of the same host work."""
    raw = {"status": "ok", "point": {"A": 1}, "host_key": "k", "batch": 1, "accel_ms": 95.5, "host_ms": 17.91,
           "latency_ms": 113.41}
    other = {**raw, "point": {"A": 2}, "accel_ms": 97.0, "host_ms": 4.333, "latency_ms": 101.333}
    assert latency_parts(raw) == ("113.4100 ms = accelerator 95.5000 ms (simulated) + host 17.9100 ms (measured, this "
                                  "run; the summary takes the fastest run of the same host work)")
    shared = share_host_time([raw, other])[0]
    assert latency_parts(shared) == ("99.8330 ms = accelerator 95.5000 ms (simulated) + host 4.3330 ms (the fastest "
                                     "measured run of its host work)")


# ---- spaces ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ('{"LOG_BLOK": [3]}', "space axis 'LOG_BLOK': not one a search varies; axes: LOG_BATCH"),
    ('{"LOG_BLOCK": [3.5]}', "space axis LOG_BLOCK: give a non-empty list of integers"),
    ('{"LOG_BLOCK": []}', "space axis LOG_BLOCK: give a non-empty list of integers"),
    ('{"LOG_BLOCK": [4, 4]}', "repeats a value"),
    ("[1, 2]", "a space is a JSON object of config keys to value lists"),
    ("{not json", "not a JSON object"),
    ('{"LOG_BLOCK": [3, 4, 5], "LOG_BUS_WIDTH": [5, 6, 7], "CLOCK_MHZ": [100, 150, 200, 250]}',
     "the space has 36 points, more than --max-points 20"),
])
def test_a_bad_space_is_refused_naming_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "space.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        read_space(path, max_points=20)


@pytest.mark.parametrize("space, message", [
    ({"FOO": [4]}, "space axis 'FOO': not one a search varies; axes: LOG_BATCH"),
    ({"LOG_BLOCK": 4}, "space axis LOG_BLOCK: give a non-empty list of integers, not 4"),
    ({"LOG_BLOCK": [True]}, "space axis LOG_BLOCK: give a non-empty list of integers, not [True]"),
    ({"LOG_BLOCK": [4, 4]}, "space axis LOG_BLOCK: [4, 4] repeats a value"),
    ({}, "a space is a JSON object of config keys to value lists"),
    ([("LOG_BLOCK", [4])], "a space is a JSON object of config keys to value lists"),
    ({"LOG_BLOCK": [3, 4, 5], "LOG_BUS_WIDTH": [5, 6, 7]}, "the space has 9 points, more than --max-points 4"),
])
def test_run_search_checks_a_space_as_read_space_does_before_any_work(tmp_path, space, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run_search(SEARCH, space, tmp_path / "out", max_points=4)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fields, message", [
    ({"trials": 0}, "Search trials=0: an integer >= 1 (configs measured per task)"),
    ({"trials": -5}, "Search trials=-5: an integer >= 1"),
    ({"trials": 2.5}, "Search trials=2.5: an integer >= 1"),
    ({"trials": True}, "Search trials=True: an integer >= 1"),
    ({"image_size": 4}, "Search image_size=4: None (the model's own) or an integer 8..4096"),
    ({"seed": -1}, "Search seed=-1: an integer >= 0"),
    ({"network": ""}, "Search network='': a zoo model name or an .onnx file"),
    ({"base": 3}, "Search base=3: a preset name or a config file's path"),
    ({"part": "xc7z010"}, "unknown FPGA part 'xc7z010'; known parts: xc7z020"),
    ({"network": "bogus-net"}, "Search network='bogus-net': neither an ONNX file nor a zoo model; zoo models: resnet-18"),
    ({"network": "/nonexistent/net.onnx"}, "Search network='/nonexistent/net.onnx': no such ONNX file"),
    ({"network": "/"}, "Search network='/': not a regular file"),
])
def test_a_search_with_a_bad_field_is_refused_naming_it(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Search(**{"network": NET, **fields})


def test_a_search_takes_paths_as_strings(tmp_path):
    (tmp_path / "net.onnx").write_bytes(b"")   # (an existing file: it is not read until the search runs)
    assert Search(tmp_path / "net.onnx", base=tmp_path / "base.json").base == str(tmp_path / "base.json")


def test_vta_dse_passes_its_max_points_to_the_search(tmp_path, monkeypatch):
    """A space the command's --max-points allows is not refused by run_search's default."""
    import tuning.dse_cli
    from vta.cli import main
    seen = {}

    def fake(search, space, out, **options):
        seen.update(options)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuning.dse_cli, "run_search", fake)
    monkeypatch.setattr(tuning.dse_cli, "check_network", lambda search: None)   # the network is not the point here
    (tmp_path / "space.json").write_text(json.dumps({"CLOCK_MHZ": list(range(1, 6001))}))
    main(["dse", NET, "--space", str(tmp_path / "space.json"), "--max-points", "6000", "--out", str(tmp_path / "o")])
    assert seen["max_points"] == 6000


def test_the_default_space_fits_the_pynqs_part_only_with_the_64_bit_bus():
    """216 points, 140 encodable, half of them with each bus: every 64-bit one fits an xc7z020; no 128-bit one does
    (the Zynq-7000's ACP, VTA's DRAM port there, is 64 bits), though each fits the part's resources."""
    from tuning.dse import points_of
    fit = {6: 0, 7: 0}
    encodable = 0
    for point in points_of(read_space(None)):
        try:
            report = estimate(load_config("pynq", **point), part="xc7z020")
        except ValueError:
            continue
        encodable += 1
        fit[point["LOG_BUS_WIDTH"]] += report.fits
        assert all(used <= have for used, have in report.usage().values())
    assert (encodable, fit) == (140, {6: 70, 7: 0})


# ---- the front -------------------------------------------------------------------------------------------------

def test_the_pareto_front_is_exactly_the_undominated_records():
    rng = np.random.default_rng(3)
    for _ in range(20):
        records = [{"status": "ok", "point": {"i": i}, "latency_ms": float(rng.integers(1, 30)),
                    "cost": float(rng.integers(1, 30)) / 30,
                    "usage": {k: float(rng.random()) for k in ("lut", "ff", "bram36", "dsp")}}
                   for i in range(40)]
        records.append({"status": "does-not-fit", "point": {"i": 99}})
        for cost in ("cost", "lut", "dsp"):
            def c(r, cost=cost):
                return r["cost"] if cost == "cost" else r["usage"][cost]
            ok = [r for r in records if r["status"] == "ok"]
            undominated = [r for r in ok if not any(
                (c(o) <= c(r) and o["latency_ms"] <= r["latency_ms"]) and (c(o) < c(r) or o["latency_ms"] <
                                                                           r["latency_ms"]) for o in ok)]
            front = pareto_front(records, cost)
            # ties (same cost and latency) keep one representative: compare the (cost, latency) pairs
            assert sorted({(c(r), r["latency_ms"]) for r in front}) == sorted({(c(r), r["latency_ms"])
                                                                                 for r in undominated})


# ---- points against the simulator -------------------------------------------------------------------------------

def test_each_point_is_what_the_simulator_and_the_resource_model_say(searched):
    """Each timed point against figures worked out by hand (16 x 16 = 256 GEMM products, two per DSP slice: 128
    of the xc7z020's 220; pynq's 448 KiB of SRAM in 36 Kb blocks: at least 100 of its 140 BRAM36; 100 MHz: 100,000 cycles a
    millisecond) and against the simulator run another way than the search ran it: each task's recorded schedule
    and the network built with all of them run with data (the search timed them without), the same cycles, the
    network's output bit for bit the numpy reference's."""
    from test_graph_pipeline import check_exact

    from tuning.dse import _network
    _, outcome = searched
    by_status = {s: [r["point"] for r in outcome.of_status(s)] for s in ("ok", "invalid", "does-not-fit", "failed")}
    assert by_status["invalid"] == [{"LOG_BLOCK": 3, "LOG_BUS_WIDTH": b} for b in (5, 6, 7)]
    assert by_status["does-not-fit"] == [{"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 7},
                                         *({"LOG_BLOCK": 5, "LOG_BUS_WIDTH": b} for b in (5, 6, 7))]
    assert by_status["ok"] == [{"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 5}, {"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 6}]
    # the 128-bit bus fits every resource of the part; the Zynq-7000's ACP, VTA's DRAM port there, is 64 bits
    [wide] = [r for r in outcome.of_status("does-not-fit") if r["point"] == {"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 7}]
    assert all(u <= 1 for u in wide["usage"].values()) and wide["fits"] is False
    assert wide["reason"].startswith("its 128-bit bus is wider than xc7z020's 64-bit DRAM port, S_AXI_ACP ")
    assert not by_status["failed"]
    graph, qgraph, qparams, (start, stop), x = _network(SEARCH, 1)
    sram_bits = (2**15 + 2**15 + 2**18 + 2**17) * 8                       # pynq's uop, inp, wgt and acc SRAMs
    for rec in outcome.of_status("ok"):
        cfg = load_config("pynq", **rec["point"])
        assert rec["fits"] and rec["resources"]["dsp"] == 128 and rec["usage"]["dsp"] == round(128 / 220, 4)  # packed
        assert -(-sram_bits // 36_864) / 140 <= rec["usage"]["bram36"] <= 1
        packed = graph_pack(qgraph, cfg, start_name=start, stop_name=stop)
        tasks = {t.name: t for t in extract_tasks(packed, cfg)}
        assert sorted(t["task"] for t in rec["tasks"]) == sorted(tasks)
        schedules = {}
        for row in rec["tasks"]:
            task = tasks[row["task"]]
            assert task.compile(row["config"]).program.run(compute=True).cycles == row["cycles"]
            assert row["cycles"] <= row["default_cycles"]
            schedules[task.key] = row["config"]
        # the tuned tasks are part of the accelerator's work (its ALU-only layers are the rest)
        assert sum(row["weight"] * row["cycles"] for row in rec["tasks"]) <= rec["accel_cycles"]
        mod = build(packed, cfg, qparams, schedules, fallback="allow")
        check_exact(mod, qgraph, qparams, {graph.inputs[0]: x})
        assert mod.cycles == rec["accel_cycles"]
        assert rec["accel_ms"] == pytest.approx(rec["accel_cycles"] / 100_000, abs=1e-4)
        assert rec["latency_ms"] == pytest.approx(rec["accel_ms"] + rec["host_ms"], abs=2e-3)
    # a wider bus moves the same bytes in fewer beats: never slower on the accelerator
    ok = {r["point"]["LOG_BUS_WIDTH"]: r for r in outcome.of_status("ok")}
    assert ok[6]["accel_cycles"] < ok[5]["accel_cycles"]
    assert outcome.front and all(r["status"] == "ok" for r in outcome.front)


def _verdict_outcome(base_ms: float, other_ms: float):
    from tuning.dse import Outcome
    records = [{"status": "ok", "point": {"LOG_BUS_WIDTH": 6}, "latency_ms": base_ms, "cost": 0.5},
               {"status": "ok", "point": {"LOG_BUS_WIDTH": 7}, "latency_ms": other_ms, "cost": 0.75},
               {"status": "does-not-fit", "point": {"LOG_BUS_WIDTH": 8}}]
    return Outcome(SEARCH, {"LOG_BUS_WIDTH": [6, 7, 8]}, records, 0, 0.0, base_point={"LOG_BUS_WIDTH": 6})


@pytest.mark.parametrize("base_ms, other_ms, says", [
    (10.0, 4.0, "takes 4.000 ms (2.50x faster) using 75.0% of the part"),   # 10 / 4, by hand
    (10.0, 10.0, "No config of the space that fits the part is faster."),    # a tie is not faster
    (10.0, 12.5, "No config of the space that fits the part is faster."),
])
def test_the_reports_verdict_names_a_faster_config_only_when_there_is_one(base_ms, other_ms, says):
    from tuning.dse_report import verdict
    text = verdict(_verdict_outcome(base_ms, other_ms))
    assert "10.000 ms per inference, 50.0% of xc7z020." in text and says in text, text
    assert ("faster) using" in text) == (other_ms < base_ms)


def test_the_base_config_is_measured_even_outside_the_space(tmp_path):
    outcome = run_search(SEARCH, {"LOG_BUS_WIDTH": [5]}, tmp_path)
    points = [r["point"] for r in outcome.records]
    assert points == [{"LOG_BUS_WIDTH": 5}, {"LOG_BUS_WIDTH": 6}]   # pynq's own 64-bit bus, added
    assert outcome.base_point == {"LOG_BUS_WIDTH": 6}
    page = (tmp_path / "report.html").read_text()
    assert "The base config <b>pynq</b>" in page and "No config of the space that fits the part is faster" in page


# ---- resuming ----------------------------------------------------------------------------------------------------

def test_a_changed_base_config_file_is_another_search_and_an_unchanged_one_resumes(tmp_path):
    """The search key holds the base config's content, not only its path: after the file changes (a faster clock),
    its records are another search's and every point is measured again; while it does not,
    they are resumed."""
    base = tmp_path / "base.json"
    base.write_text(load_config("pynq").to_json())
    space, out = {"LOG_BLOCK": [4]}, tmp_path / "out"

    def search() -> Search:
        return Search(NET, str(base), "xc7z020", trials=1, image_size=IMAGE)

    first = run_search(search(), space, out)
    assert first.measured == 1
    said: list[str] = []
    again = run_search(search(), space, out, progress=said.append)
    assert again.measured == 0 and again.records == first.records
    assert said[0].startswith("resuming: 1 of 1 points already in")
    base.write_text(json.dumps({**json.loads(base.read_text()), "CLOCK_MHZ": 200}))
    said.clear()
    changed = run_search(search(), space, out, progress=said.append)
    assert changed.measured == 1 and not any(line.startswith("resuming") for line in said)
    assert changed.records[0]["latency_ms"] < first.records[0]["latency_ms"]
    assert changed.records[0]["fingerprint"] == load_config(str(base), LOG_BLOCK=4).fingerprint
    assert run_search(search(), space, out).measured == 0   # and the changed one resumes in turn


GOOD_OK = {"search": SEARCH.key, "point": {"LOG_BLOCK": 4}, "status": "ok", "cost": 0.5, "batch": 1,
           "usage": dict.fromkeys(RESOURCES, 0.5), "resources": dict.fromkeys(RESOURCES, 10.0), "latency_ms": 5.0,
           "accel_ms": 4.0, "host_ms": 1.0, "per_image_ms": 5.0, "host_key": "k", "tasks": [], "trials": 3}


@pytest.mark.parametrize("line, why", [
    ("[" * 200_000, "not JSON"),
    (json.dumps({k: v for k, v in GOOD_OK.items() if k != "latency_ms"}), "a timed record without latency_ms"),
    (json.dumps({k: v for k, v in GOOD_OK.items() if k != "usage"}), "a timed record without usage"),
    (json.dumps({**GOOD_OK, "latency_ms": "5"}), "latency_ms is not a finite number >= 0"),
    (json.dumps({**GOOD_OK, "latency_ms": float("nan")}), "not JSON"),
    (json.dumps({**GOOD_OK, "cost": 1e400}).replace("Infinity", "1e400"), "cost is not a finite number >= 0"),
    (json.dumps({**GOOD_OK, "latency_ms": -1.0}), "latency_ms is not a finite number >= 0"),
    (json.dumps({**GOOD_OK, "cost": -0.5}), "cost is not a finite number >= 0"),
    (json.dumps({**GOOD_OK, "resources": None}), "resources is not an object of lut, ff, bram36, dsp to numbers >= 0"),
    (json.dumps({**GOOD_OK, "usage": {"lut": 0.5}}), "usage is not an object of lut, ff, bram36, dsp to numbers >= 0"),
    (json.dumps({**GOOD_OK, "status": 5}), "status is not one of ok, invalid, does-not-fit, clock-not-met, failed"),
    (json.dumps({**GOOD_OK, "point": [4]}), "point is not an object of axes to integers"),
    (json.dumps({**GOOD_OK, "point": {"LOG_BLOCK": "4"}}), "point is not an object of axes to integers"),
    (json.dumps({**GOOD_OK, "batch": 0}), "batch is not an integer >= 1"),
    (json.dumps({**GOOD_OK, "reason": ["x"]}), "reason is not a string"),
    ('{"search": "' + SEARCH.key + '", "latency_ms": ' + "9" * 5000 + "}", "not JSON"),
    ("null", "not a JSON object"),
])
def test_a_record_that_is_not_usable_counts_as_absent_and_is_reported_once(tmp_path, line, why):
    """A line of this search whose fields the front, the CSV or the report could not use is skipped (its point is
    measured again), never a traceback there nor a silently wrong front; one progress line says how many and why."""
    path = tmp_path / RECORDS
    good = {**GOOD_OK, "point": {"LOG_BLOCK": 3}}
    path.write_text(json.dumps(good) + "\n" + line + "\n" + json.dumps({**GOOD_OK, "search": "other"}) + "\n")
    said: list[str] = []
    records = read_records(path, SEARCH, report=said.append)
    assert list(records) == [point_key(good["point"])]
    assert said == [(f"{path}: skipped 1 line(s) that are not usable records (1: {why}); a point without one is "
                    "measured again"),
                    (f"{path}: 1 record(s) of another search (network, base config or its content, part, trials, "
                    "image size, --start / --stop or model file changed) are kept but not used")]
    shared = share_host_time(list(records.values()))
    assert pareto_front(shared) == shared and len(csv_rows(shared)) == 2


def test_a_search_measures_again_the_points_whose_records_are_not_usable(tmp_path):
    search, space = Search(NET, "pynq", "xc7z020", trials=1, image_size=IMAGE), {"LOG_BLOCK": [4]}
    first = run_search(search, space, tmp_path)
    path = tmp_path / RECORDS
    rec = json.loads(path.read_text())
    path.write_text("[" * 200_000 + "\n" + json.dumps({**rec, "resources": None}) + "\n"
                    + json.dumps({**rec, "latency_ms": -rec["latency_ms"]}) + "\n")
    said: list[str] = []
    again = run_search(search, space, tmp_path, progress=said.append)
    assert again.measured == 1 and again.records[0]["accel_cycles"] == first.records[0]["accel_cycles"]
    assert said[0].endswith("skipped 3 line(s) that are not usable records (1: not JSON; 1: resources is not an "
                            "object of lut, ff, bram36, dsp to numbers >= 0; 1: latency_ms is not a finite number "
                            ">= 0); a point without one is measured again")
    assert run_search(search, space, tmp_path).measured == 0   # the new record is used


def test_an_onnx_model_files_content_is_in_the_search_key(tmp_path):
    model = tmp_path / "net.onnx"
    model.write_bytes(b"a model")
    key = Search(str(model)).key
    assert Search(str(model)).key == key
    model.write_bytes(b"another model")
    assert Search(str(model)).key != key
    assert Search("resnet-18").key != Search("resnet-18", trials=3).key


def test_an_onnx_models_external_data_is_in_the_search_key(tmp_path):
    """A model whose weights live in an external data file: new weights in that file are another search."""
    onnx = need("onnx")
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.full((4, 4), 0.5, np.float32), "w")   # raw data: it goes external
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, (1, 4))],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, (1, 4))], [weight])
    model = tmp_path / "net.onnx"
    onnx.save(helper.make_model(graph), str(model), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    key = Search(str(model)).key
    assert (tmp_path / "weights.bin").is_file() and Search(str(model)).key == key
    data = bytearray((tmp_path / "weights.bin").read_bytes())
    data[0] ^= 1
    (tmp_path / "weights.bin").write_bytes(bytes(data))
    assert Search(str(model)).key != key


# ---- the command line ------------------------------------------------------------------------------------------

def test_vta_dse_writes_records_csv_front_and_a_self_contained_report(searched, tmp_path):
    (tmp_path / "space.json").write_text(json.dumps(SPACE))
    proc = vta("dse", NET, "--image-size", str(IMAGE), "--space", "space.json", "--trials", "2", "--out", "out",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "out"
    assert "9 configs: 2 tuned and timed, 4 do not fit xc7z020, 3 not encodable, 0 failed" in proc.stdout
    records = [json.loads(line) for line in (out / RECORDS).read_text().splitlines()]
    assert len(records) == 9
    _, reference = searched
    by_point = {point_key(r["point"]): r for r in reference.records}
    for rec in records:   # the same search through the API: the same cycles and resources
        ref = by_point[point_key(rec["point"])]
        assert (rec["status"], rec.get("accel_cycles"), rec.get("resources")) == \
            (ref["status"], ref.get("accel_cycles"), ref.get("resources"))
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) == 10 and rows[0].startswith("status,LOG_BATCH,LOG_BLOCK")
    # the front by brute force over the two timed points: a point is on it unless the other is no worse on cost and
    # latency and better on one (shared host time: the latencies the front compares)
    front = json.loads((out / "front.json").read_text())["front"]
    ok = [r for r in records if r["status"] == "ok"]
    latency = {point_key(r["point"]): r["accel_ms"] + min(o["host_ms"] for o in ok) for r in ok}

    def dominated(r):
        return any(o["cost"] <= r["cost"] and latency[point_key(o["point"])] <= latency[point_key(r["point"])] and
                   (o["cost"] < r["cost"] or latency[point_key(o["point"])] < latency[point_key(r["point"])])
                   for o in ok)

    assert sorted(point_key(r["point"]) for r in front) == sorted(point_key(r["point"]) for r in ok
                                                                     if not dominated(r))
    # each front file is pynq's JSON with the point's keys changed, described as such (written out by hand)
    files = sorted((out / "front").glob("*.json"))
    assert len(files) == len(front)
    base = json.loads((Path(__file__).resolve().parents[1] / "hw_config" / "presets" / "pynq.json").read_text())
    base = {k: int(v, 16) if isinstance(v, str) and v.startswith("0x") else v for k, v in base.items()}  # MMIO_*
    described = {(4, 6): base["DESCRIPTION"], (4, 5): f"pynq with LOG_BUS_WIDTH=5; the base: {base['DESCRIPTION']}"}
    for f, r in zip(files, front, strict=True):
        written = json.loads(f.read_text())
        assert {k: written[k] for k in r["point"]} == r["point"]
        assert {k: v for k, v in written.items() if k not in r["point"] and k != "DESCRIPTION" and k in base} == \
            {k: v for k, v in base.items() if k not in r["point"] and k != "DESCRIPTION"}
        assert written["DESCRIPTION"] == described[(r["point"]["LOG_BLOCK"], r["point"]["LOG_BUS_WIDTH"])]
    # the progress lines give each config's own host run, the summary the shared one (share_host_time): said once
    assert proc.stdout.count("latencies below: the accelerator's time plus the fastest host time") == 1
    # issue 39, item 4: a progress line said 113.41 ms where the summary said 99.833 ms for the same point. Each
    # line now gives its parts with their basis, which add up, and the progress line says why the summary differs
    parts = r"([\d.]+) ms = accelerator ([\d.]+) ms \(simulated\) \+ host ([\d.]+) ms"
    own = {}
    for line in proc.stderr.splitlines():
        if m := re.match(r"\[\d+/\d+\] (\{.*\}): " + parts + r" \(measured, this run; the summary takes the "
                         r"fastest run of the same host work\)", line):
            total, accel, host = (float(x) for x in m.groups()[1:])
            assert total == pytest.approx(accel + host, abs=1e-9)
            own[m.group(1)] = (accel, host)
    by_point = {point_key(r["point"]): r for r in records}
    assert sorted(own) == sorted(k for k, r in by_point.items() if r["status"] == "ok")
    base = re.search(r"^base config pynq \(pynq_1x16_i8w8a32_15_15_18_17\): " + parts + r" \(the fastest measured "
                     r"run of its host work\)", proc.stdout, re.MULTILINE)
    total, accel, host = (float(x) for x in base.groups())
    assert total == pytest.approx(accel + host, abs=1e-9)
    base_key = point_key({"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 6})
    assert accel == own[base_key][0] and host == min(h for _, h in own.values())   # same host work: same batch
    assert host <= own[base_key][1]                                                  # and block on every ok point
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in page and "<script src" not in page
    # the front's table names each config (HwConfig.name) and says each time's basis
    assert "accelerator ms (simulated)" in page and "host ms (measured: the fastest run of its host work)" in page
    assert all(f"front/{i:02d}.json ({load_config('pynq', **r['point']).name}): " in page for i, r in enumerate(front))
    data = json.loads(page.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    assert data["counts"] == {"ok": 2, "does-not-fit": 4, "invalid": 3, "failed": 0}
    assert data["base"]["point"] == {"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 6}
    assert data["best"]["point"] == {"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 6}


@pytest.mark.parametrize("args, message", [
    (["--part", "xc7z010"], "unknown FPGA part 'xc7z010'"),
    (["--config", "nosuch"], "nosuch"),
    (["--space", "missing.json"], "--space missing.json: no such file"),
    (["--trials", "0"], "--trials"),
    (["--max-points", "3"], "more than --max-points 3"),
])
def test_vta_dse_refuses_bad_input_with_one_line_before_any_work(tmp_path, args, message):
    proc = vta("dse", NET, "--out", "out", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_search_killed_with_sigkill_resumes_without_measuring_twice(tmp_path):
    (tmp_path / "space.json").write_text(json.dumps({"LOG_WGT_BUFF_SIZE": [16, 17, 18]}))
    cmd = [sys.executable, "-m", "vta", "dse", NET, "--image-size", str(IMAGE), "--space", "space.json",
           "--trials", "1", "--out", "out"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    records = tmp_path / "out" / RECORDS
    deadline = time.monotonic() + 300
    while not (records.exists() and records.read_text().count("\n") >= 1):
        assert proc.poll() is None, "the search ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    with open(records, "a") as f:
        f.write('{"search": "torn')   # as if killed while writing a line
    kept = read_records(records, Search(NET, "pynq", "xc7z020", 1, IMAGE))
    assert 1 <= len(kept) < 3
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False, env=ENV)
    assert again.returncode == 0, again.stderr
    assert f"resuming: {len(kept)} of 3 points already in" in again.stderr
    final = read_records(records, Search(NET, "pynq", "xc7z020", 1, IMAGE))
    assert len(final) == 3 and all(r["status"] == "ok" for r in final.values())
    for key, rec in kept.items():
        assert final[key] == rec   # not measured again


def test_a_second_search_into_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    """Two `vta dse` with one --out (the same command started twice) both measured every point, appended each
    twice, and wrote the CSV, the front and the report over each other's, emptying front/ under the other (which
    could then fail on a file gone). The second is refused at once, naming the directory; the first's lock is held
    here, as a running search holds it."""
    import fcntl

    from vta.cli import main

    (tmp_path / "space.json").write_text(json.dumps({"LOG_BUS_WIDTH": [6]}))
    out = tmp_path / "out"
    out.mkdir()
    with open(out / RECORDS, "a") as running:
        fcntl.flock(running, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(["dse", NET, "--image-size", str(IMAGE), "--space", str(tmp_path / "space.json"), "--trials",
                     "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"vta: error: --out {out / RECORDS}: another process (pid {os.getpid()}) is writing it; a "
                       f"search into {out} is "
                       "still running (the same command twice?); wait for it to finish (a search resumes from its "
                       "records), or give another --out\n"), err
        with pytest.raises(ValueError, match=rf"another process \(pid {os.getpid()}\) is writing it"):
            run_search(SEARCH, {"LOG_BUS_WIDTH": [6]}, out)
    assert sorted(p.name for p in out.iterdir()) == [RECORDS] and (out / RECORDS).read_text() == ""


def test_a_search_lock_is_not_held_by_the_processes_it_forks(tmp_path):
    """vta dse --parallel forks its workers while it holds the lock: a flock belongs to the open file, so a worker
    kept it after the search was killed, refusing the rerun until the worker's point was done. The children close
    their copies: with the search gone and a child it forked still alive, the lock can be taken."""
    from simulator.files import write_lock
    path = tmp_path / RECORDS
    started, ready = os.pipe()
    with write_lock(path, "--out", "busy"):
        child = os.fork()
        if child == 0:   # a worker, still busy when its parent ends
            os.write(ready, b"x")   # (after the fork's handlers ran)
            time.sleep(30)
            os._exit(0)
        os.read(started, 1)
    os.close(started)
    os.close(ready)
    try:
        with write_lock(path, "--out", "busy"):   # the search is gone; its worker must not hold the lock
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_worker_processes_rerun_the_points_a_dead_worker_lost(searched, tmp_path, monkeypatch):
    """--parallel 2: a point whose worker dies every time fails alone (its worker died twice: in the pool, then
    alone); the points the broken pool lost with it run again and equal the in-process search."""
    from tuning import dse
    _, reference = searched
    by_point = {point_key(r["point"]): r for r in reference.records}
    killer = {"LOG_BLOCK": 4, "LOG_BUS_WIDTH": 5}   # a point that fits, so that a worker tunes it
    assert by_point[point_key(killer)]["status"] == "ok"
    real = dse.evaluate

    def evaluate(search, point):   # the forked workers inherit this
        if point == killer:
            os._exit(9)
        return real(search, point)

    monkeypatch.setattr(dse, "evaluate", evaluate)
    records = run_search(SEARCH, SPACE, tmp_path, parallel=2).records
    assert len(records) == 9
    for rec in records:
        if rec["point"] == killer:
            assert (rec["status"], rec["reason"]) == ("failed", "its worker process died twice")
            continue
        ref = by_point[point_key(rec["point"])]
        assert (rec["status"], rec.get("accel_cycles")) == (ref["status"], ref.get("accel_cycles"))


# ---- Dask ------------------------------------------------------------------------------------------------------

def test_points_on_a_dask_cluster_with_a_worker_killed_are_all_run(searched, tmp_path):
    _, reference = searched
    by_point = {point_key(r["point"]): r for r in reference.records}
    with _cluster() as client:
        address = client.scheduler.address
        pids = client.run(os.getpid)

        def search():
            return run_search(SEARCH, SPACE, tmp_path, dask=address).records

        records, _ = _measure_and_kill(client, search, lambda worker: os.kill(pids[worker], signal.SIGKILL))
    assert len(records) == 9
    for rec in records:
        ref = by_point[point_key(rec["point"])]
        assert (rec["status"], rec.get("accel_cycles")) == (ref["status"], ref.get("accel_cycles"))
    assert evaluate(SEARCH, {"LOG_BLOCK": 3})["status"] == "invalid"


def test_a_search_takes_numpy_integers_as_plain_ones():
    s = Search(NET, trials=np.int64(2), image_size=np.int32(IMAGE), seed=np.uint8(1))
    assert (s.trials, s.image_size, s.seed) == (2, IMAGE, 1) and type(s.trials) is int
    assert s.key == Search(NET, trials=2, image_size=IMAGE, seed=1).key
    assert check_space({"LOG_BLOCK": [np.int64(4)]}) == {"LOG_BLOCK": [4]}


@pytest.mark.parametrize("kwargs, error, message", [
    ({"max_points": None}, TypeError, "max_points=None: an integer >= 1"),
    ({"max_points": "5"}, TypeError, "max_points='5': an integer >= 1"),
    ({"max_points": 0}, ValueError, "max_points=0: an integer >= 1"),
    ({"progress": 3}, TypeError, "progress=3: None or a callable"),
])
def test_run_search_refuses_bad_keywords_before_any_work(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        run_search(SEARCH, {"LOG_BLOCK": [4]}, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()


# ---- failed points, the offload region, the front's configs -------------------------------------------------------

def test_vta_dse_says_why_points_failed_exits_2_when_all_did_and_tries_them_again_on_resume(tmp_path):
    """A point that fails (here the simulator's kernel path asked for is not one) said only `failed`, the summary an empty front,
    and the exit status was 0: the reason was only in the records. The progress line now gives it, a search whose
    every tuned point failed ends with one `vta: error:` line naming the first reason and exit status 2 (its
    records and outputs written), and a failed point is not final: the same command measures it again."""
    (tmp_path / "space.json").write_text(json.dumps({"LOG_BUS_WIDTH": [5, 6]}))
    cmd = [sys.executable, "-m", "vta", "dse", NET, "--image-size", str(IMAGE), "--space", "space.json",
           "--trials", "1", "--out", "out"]
    broken = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False,
                            env={**ENV, "VTA_SIM_KERNEL": "bogus"})
    assert broken.returncode == 2, broken.stderr
    why = "SimulatorError: VTA_SIM_KERNEL=bogus is not a kernel path"
    steps = [line for line in broken.stderr.splitlines() if line.startswith("[")]
    assert len(steps) == 2 and all(f": failed: {why}" in line for line in steps), broken.stderr
    last = broken.stderr.strip().splitlines()[-1]
    assert last.startswith(f"vta: error: all 2 config(s) tuned failed, the first with {why}"), broken.stderr
    assert "2 failed" in broken.stdout and "Traceback" not in broken.stderr
    out = tmp_path / "out"
    assert all((out / name).is_file() for name in (RECORDS, "results.csv", "front.json", "report.html"))
    again = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False, env=ENV)
    assert again.returncode == 0, again.stderr
    assert f"resuming: 2 of 2 points already in {Path('out') / RECORDS}; 2 failed before, trying them again" \
        in again.stderr
    assert "2 configs: 2 tuned and timed" in again.stdout and "0 failed; 2 evaluated" in again.stdout
    final = read_records(out / RECORDS, Search(NET, "pynq", "xc7z020", 1, IMAGE))
    assert sorted(r["status"] for r in final.values()) == ["ok", "ok"]
    rows = (out / "results.csv").read_text().splitlines()[1:]
    assert len(rows) == 2 and all(row.startswith("ok,") for row in rows)
    assert json.loads((out / "front.json").read_text())["front"]
    assert len((out / RECORDS).read_text().splitlines()) == 4   # the failed records stay, the new ones win
    resumed = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False, env=ENV)
    assert resumed.returncode == 0 and "failed before" not in resumed.stderr   # ok points are final
    assert "0 evaluated" in resumed.stdout


def test_a_search_without_start_and_stop_is_another_search_than_those_made_before_automatic_regions():
    """--start / --stop are Search fields, and a field is in the key: given, each makes another search; left out,
    the search offloads the regions found automatically (DCGAN and ONNX files get other groups than their pack
    points), so the records of a search made before, with the model's pack points, are not resumed."""
    import hashlib
    before = {"network": NET, "base": "pynq", "part": "xc7z020", "trials": 2, "image_size": IMAGE, "seed": 0,
              "base_fingerprint": load_config("pynq").fingerprint}
    assert SEARCH.key != hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:16]
    now = {**before, "regions": "automatic"}
    assert SEARCH.key == hashlib.sha256(json.dumps(now, sort_keys=True).encode()).hexdigest()[:16]
    assert len({SEARCH.key, Search(NET, trials=2, image_size=IMAGE, start="nn.conv2d").key,
                Search(NET, trials=2, image_size=IMAGE, stop="nn.conv2d").key}) == 3
    with pytest.raises(ValueError, match="Search start='': None"):
        Search(NET, start="")


def test_vta_dse_takes_start_and_stop_for_an_onnx_model(tmp_path):
    """Without --start / --stop a search offloads the regions found automatically, as vta run does (the ONNX
    default pack points, nn.max_pool2d ..., are not in digits_cnn: such a search used to refuse them); with only
    one flag, the model's own point stands in for the other and a point that matches no op is refused before any
    point (one line, nothing written). --start / --stop, as vta run takes them, choose the offload region."""
    model = str(Path(__file__).resolve().parents[1] / "examples" / "digits_cnn.onnx")
    (tmp_path / "space.json").write_text(json.dumps({"LOG_BUS_WIDTH": [5, 6]}))
    args = ["dse", model, "--space", "space.json", "--trials", "1"]
    found = vta(*args, "--out", "found", cwd=tmp_path)
    assert found.returncode == 0 and "2 configs: 2 tuned and timed" in found.stdout, found.stderr
    search = Search(model, trials=1)
    records = [json.loads(line) for line in (tmp_path / "found" / RECORDS).read_text().splitlines()]
    assert {r["search"] for r in records} == {search.key}
    assert search.key != Search(model, trials=1, start="qnn.quantize", stop="nn.batch_flatten").key
    half = vta(*args, "--stop", "nn.batch_flatten", "--out", "half", cwd=tmp_path)
    assert half.returncode == 2 and "Traceback" not in half.stderr
    [line] = half.stderr.strip().splitlines()
    assert line.startswith("vta: error: --start nn.max_pool2d (the default): no operator matches it; give --start an "
                           "op name (")
    assert not (tmp_path / "half" / RECORDS).exists()
    wrong = vta(*args, "--start", "qnn.quantize", "--stop", "nn.no_such_op", "--out", "wrong", cwd=tmp_path)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1].startswith(
        "vta: error: --stop nn.no_such_op: no operator after the start matches it; give --stop an op name (")
    proc = vta(*args, "--start", "qnn.quantize", "--stop", "nn.batch_flatten", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 configs: 2 tuned and timed" in proc.stdout
    saved = json.loads((tmp_path / "out" / "front.json").read_text())["search"]
    assert (saved["start"], saved["stop"]) == ("qnn.quantize", "nn.batch_flatten")
