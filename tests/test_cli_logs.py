"""Tuning logs as a user meets them on the command line (issue 39): one `vta tune` per log at a time (a second one
is one line naming the first one's pid, a killed one leaves no lock behind), Ctrl-C before the first record says so,
and `vta run --log` with a log that gives the network nothing is an error saying why."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from test_docs import VTA

from hw_config import load_config
from tuning.records import load_records
from vta.rpc.tracker import TrackerClient, TrackerServer

TIMEOUT = 300
CFG = load_config("pynq")
TUNE = ("tune", "resnet-18", "--image-size", "32")
QUICK = ("--tuner", "random", "--n-trial", "1", "--timing-only")


def _vta(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*VTA, *argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def _until(predicate, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"the command ended before {what}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.05)


@pytest.fixture
def waiting_tune(tmp_path):
    """A `vta tune --log two.jsonl` that holds its log and waits (for ever) for the one board of its key, registered
    and never free: a tuning run in progress, without racing a timer against its work. Yields (process, log, stderr
    file)."""
    with TrackerServer("127.0.0.1", 0) as tracker, TrackerClient(tracker.address) as ghost:
        ghost.update_info({"key": "server:nobody", "addr": ["127.0.0.1", 1], "board": "ghost", "device": "sim"})
        err = tmp_path / "holder.err"
        old = signal.signal(signal.SIGINT, signal.default_int_handler)   # (a background job ignores SIGINT)
        try:
            with open(err, "w") as e:
                proc = subprocess.Popen([*VTA, *TUNE, "--rpc", tracker.address, "--key", "nobody", "--log", "two.jsonl"],
                                        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=e, start_new_session=True)
        finally:
            signal.signal(signal.SIGINT, old)
        try:
            _until(lambda: tracker.summary()["queue_info"].get("nobody", {}).get("pending"), proc,
                   "asked the tracker for a board")
            yield proc, tmp_path / "two.jsonl", err
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def test_a_second_tune_on_a_log_in_use_is_one_line_naming_the_first_and_a_killed_one_leaves_no_lock(waiting_tune):
    """Two `vta tune --log X` at once both wrote X (284 records for a budget of 224, 46 configs measured twice). The
    second is refused before any work, naming the first's pid, so is `--fresh` (it would move the log from under the
    first), and so is the Python API's tune_tasks; after kill -9 of the first, its lock is gone with it."""
    holder, log, _ = waiting_tune
    cwd = log.parent
    expected = (f"vta: error: --log two.jsonl: another process (pid {holder.pid}) is writing it; a tuning run into it "
                "is still going (the same command twice?); wait for it to finish (the next run resumes from its "
                "records), or give another --log")
    for extra in ((), ("--fresh",)):
        second = _vta(*TUNE, *QUICK, *extra, "--log", "two.jsonl", cwd=cwd)
        assert second.returncode == 2 and second.stderr.splitlines() == [expected], second.stderr[-3000:]
        assert second.stdout == ""
        assert sorted(p.name for p in cwd.glob("two*")) == ["two.jsonl"] and log.read_text() == ""

    from tuning import tune_tasks
    from tuning.task import conv_task
    task = conv_task(CFG, (1, 16, 8, 8), (16, 16, 3, 3), 1, 1)
    with pytest.raises(ValueError, match=rf"^log {log}: another process \(pid {holder.pid}\) is writing it; "):
        tune_tasks([task], tuner="random", n_trial=1, log=log)
    assert log.read_text() == ""

    os.killpg(holder.pid, signal.SIGKILL)   # no clean-up runs: the kernel drops the lock with the process
    holder.wait(30)
    again = _vta(*TUNE, *QUICK, "--log", "two.jsonl", cwd=cwd)
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
    assert len(load_records(log)) >= 14


def test_ctrl_c_before_the_first_record_says_nothing_was_saved_and_leaves_no_log(waiting_tune):
    """It said "0 record(s) saved in odd.jsonl (0 by this run)" where no file was written."""
    holder, log, err = waiting_tune
    os.killpg(holder.pid, signal.SIGINT)
    assert holder.wait(60) == 130
    assert err.read_text().splitlines() == [
        ("vta: interrupted: no record was saved: the run stopped before its first measurement ended, and two.jsonl "
         "was not written; run the same command again to start")], err.read_text()[-3000:]
    assert not log.exists()


# ------------------------------------------------------------------------------------------------------------
# vta run --log with a log that gives the network nothing

ROOT = Path(__file__).resolve().parents[1]
RUN = ("run", "resnet-18", "--image-size", "32", "--no-layers")


@pytest.fixture(scope="module")
def pynq_log(tmp_path_factory) -> Path:
    """ResNet-18 at 32x32 tuned on pynq, one random trial per task (15 tasks: the stem is one with regions found automatically)."""
    cwd = tmp_path_factory.mktemp("pynq-log")
    done = _vta(*TUNE, *QUICK, "--log", "r18.jsonl", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return cwd / "r18.jsonl"


def _cpu_records(pynq_log: Path, hw: str) -> str:
    """The log's records made over into the host CPU's of ``hw`` (workloads no host layer has)."""
    from host.templates import HOST_TEMPLATE_VERSION
    lines = [json.loads(line) for line in pynq_log.read_text().splitlines()]
    return "".join(json.dumps({**r, "hw": hw, "template": HOST_TEMPLATE_VERSION}) + "\n" for r in lines)


def _failed(pynq_log: Path) -> str:
    """The log's records as failed measurements."""
    lines = [json.loads(line) for line in pynq_log.read_text().splitlines()]
    return "".join(json.dumps({**r, "result": {**r["result"], "error": "timeout"}}) + "\n" for r in lines)


def _unused_params():
    readme_lines = sum(1 for line in (ROOT / "README.md").read_text().splitlines() if line.strip())
    yield pytest.param(lambda log: (ROOT / "README.md").read_text(), RUN, "resnet-18 on pynq_1x16_i8w8a32_15_15_18_17",
                       f"{readme_lines} line(s) are not tuning records (is it a vta tune --log?)", id="not-a-log")
    yield pytest.param(lambda log: "", RUN, "resnet-18 on pynq_1x16_i8w8a32_15_15_18_17",
                       "it holds no record (a tuning run stopped before its first one?)", id="empty")
    yield pytest.param(lambda log: _failed(log), RUN, "resnet-18 on pynq_1x16_i8w8a32_15_15_18_17",
                       "15 record(s) for this config are failed measurements (no time to rank them by)", id="failed")
    yield pytest.param(lambda log: log.read_text(), (*RUN, "--config", "batch4"),
                       "resnet-18 on pynq_4x16_i8w8a32_15_17_18_19",
                       "15 record(s) are for another hardware config (pynq): run with the --config / --set it was "
                       "tuned with", id="another-config")
    yield pytest.param(lambda log: log.read_text(), ("run", "mobilenet", "--image-size", "32", "--no-layers"),
                       "mobilenet on pynq_1x16_i8w8a32_15_15_18_17",
                       "its 15 record(s) for this config are of 15 task(s), none of the network's 19 (tuned with "
                       "another model, --image-size, --batch or --start / --stop?)", id="no-task-matches")
    yield pytest.param(lambda log: log.read_text(), (*RUN, "--target", "cpu"), "resnet-18 on this CPU, ",
                       "15 record(s) are the accelerator's (vta tune without --target cpu): run without --target cpu "
                       "to use them", id="accelerator-log-for-the-cpu")
    yield pytest.param(lambda log: _cpu_records(log, "cpu:x86_64-unknown-linux-gnu:elsewhere:0123456789ab"), RUN,
                       "resnet-18 on pynq_1x16_i8w8a32_15_15_18_17",
                       "15 record(s) are the host CPU's (vta tune --target cpu), none usable here: 15 record(s) were "
                       "made on another CPU (or with another feature set: VTA_HOST_ISA)", id="another-cpus-log")


@pytest.mark.parametrize("content, argv, head, reason", list(_unused_params()))
def test_vta_run_with_a_log_that_gives_the_network_nothing_is_an_error_saying_why(pynq_log, tmp_path, content,
                                                                                   argv, head, reason):
    """`vta run resnet-18 --log README.md` built untuned with exit status 0, the only sign a 1,000-character
    "records skipped" line; so did another config's log, a CPU log, one of another network. Now: exit status 2, a
    line saying the run would be untuned and a line saying why, no traceback."""
    (tmp_path / "the.jsonl").write_text(content(pynq_log))
    done = _vta(*argv, "--log", "the.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    first, second = done.stderr.splitlines()
    assert first.startswith(f"vta: error: --log the.jsonl: no record in it applies to {head}")
    assert first.endswith("; the run would be untuned:")
    assert second == f"  {reason}"
    assert done.stdout == ""


def test_a_host_cpu_log_that_fits_no_layer_of_an_accelerator_run_says_to_use_target_cpu(pynq_log, tmp_path):
    """Records of this CPU (vta tune --target cpu) apply to the layers an accelerator build keeps on the CPU; where
    none of them is such a layer, the run is refused after the build has asked, naming --target cpu."""
    pytest.importorskip("llvmlite")
    from host.templates import host
    (tmp_path / "cpu.jsonl").write_text(_cpu_records(pynq_log, host().fingerprint))
    done = _vta(*RUN, "--log", "cpu.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines()[1:] == [
        ("  15 record(s) are the host CPU's (vta tune --target cpu), none for a layer this build keeps on the CPU: run "
        "with --target cpu to use them")]


def test_a_log_that_gives_some_tasks_a_record_is_used_with_a_one_line_note(pynq_log, tmp_path):
    """Partial use is not an error: one short schedules line names at most three tasks without a record and counts
    the rest."""
    lines = pynq_log.read_text().splitlines()
    keep = json.loads(lines[0])["workload"]
    (tmp_path / "one.jsonl").write_text("".join(line + "\n" for line in lines if json.loads(line)["workload"] == keep))
    done = _vta(*RUN, "--log", "one.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("schedules:")]
    assert line.startswith("schedules: 1 of 15 task(s) from one.jsonl (the best of 1 record(s) for ")
    assert re.search(r"; no record for 14, which keep the template's default: [\w,]+, [\w,]+, \w+ and 11 more$", line), line
    assert len(line) < 400


def test_the_error_docs_tune_md_quotes_is_what_vta_run_prints(pynq_log, tmp_path):
    """docs/tune.md quotes the refusal of another config's log: the command prints those lines (the record count
    aside: the page's log is the default budget's)."""
    text = (ROOT / "docs" / "tune.md").read_text()
    quoted = re.search(r"```text\n(vta: error: --log r18\.jsonl: no record in it applies to .*?)\n```", text, re.DOTALL)
    assert quoted, "docs/tune.md no longer quotes vta run's refusal of a log"
    shutil.copy(pynq_log, tmp_path / "r18.jsonl")
    done = _vta(*RUN, "--config", "batch4", "--log", "r18.jsonl", cwd=tmp_path)
    n = len(pynq_log.read_text().splitlines())
    assert done.returncode == 2
    assert done.stderr.splitlines() == re.sub(r"\b960 record", f"{n} record", quoted.group(1)).splitlines()
