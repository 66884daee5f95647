"""Tuning logs as a user meets them on the command line (issue 39): one `vta tune` per log at a time (a second one
is one line naming the first one's pid, a killed one leaves no lock behind), Ctrl-C before the first record says so,
and `vta run --log` with a log that gives the network nothing is an error saying why."""

from __future__ import annotations

import os
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
