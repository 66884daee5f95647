"""Ctrl-C (issue 26): a long command stops with one line saying what was saved and how to resume, exit status 130,
and no traceback, from the main process or its workers. Each test runs the command as a terminal does: in a
process group of its own that receives SIGINT as a whole (workers included)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_docs import VTA

INTERRUPTED = 130
TUNE = ("tune", "resnet-18", "--image-size", "32", "--n-trial", "500", "--timing-only", "--parallel", "2",
        "--tuner", "random", "--log", "r18.jsonl")


def _start(argv: list[str], cwd: Path) -> tuple[subprocess.Popen, Path, Path]:
    """The command with SIGINT's default action: a shell's background job (pytest run as one) has SIGINT ignored,
    which a child inherits, while a handled signal is reset to its default in the child."""
    out, err = cwd / "stdout.txt", cwd / "stderr.txt"
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=o, stderr=e, start_new_session=True)
    finally:
        signal.signal(signal.SIGINT, old)
    return proc, out, err


def _ctrl_c(proc: subprocess.Popen, when, timeout: float = 120) -> int:
    """Once ``when()`` holds, SIGINT to the command's whole process group (as Ctrl-C in a terminal); its status."""
    deadline = time.monotonic() + timeout
    try:
        while not when():
            assert proc.poll() is None, "the command ended before it could be interrupted"
            assert time.monotonic() < deadline, "the moment to interrupt never came"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        return proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_ctrl_c_in_vta_tune_says_what_was_saved_and_the_same_command_resumes(tmp_path):
    log = tmp_path / "r18.jsonl"
    proc, out, err = _start([*VTA, *TUNE], tmp_path)
    status = _ctrl_c(proc, lambda: len(_lines(log)) >= 40)
    saved = _lines(log)
    assert status == INTERRUPTED, err.read_text()[-3000:]
    assert err.read_text().splitlines() == [
        (f"vta: interrupted: {len(saved)} record(s) saved in r18.jsonl ({len(saved)} by this run); run the same "
         "command again to resume from them (nothing is measured twice)")], err.read_text()[-3000:]
    assert all(json.loads(line)["workload"] for line in saved)   # whole lines only, none cut by the signal
    assert "[Task" in out.read_text()
    # the same command: it says what it found, and measures on from there
    proc, out, err = _start([*VTA, *TUNE], tmp_path)
    status = _ctrl_c(proc, lambda: len(_lines(log)) >= len(saved) + 16)
    assert status == INTERRUPTED and "Traceback" not in err.read_text(), err.read_text()[-3000:]
    assert f"resuming from {len(saved)} records in r18.jsonl: " in out.read_text()
    again = _lines(log)
    assert again[:len(saved)] == saved
    assert f"({len(again) - len(saved)} by this run)" in err.read_text()
    configs = [(json.loads(line)["workload"], json.dumps(json.loads(line)["config"], sort_keys=True)) for line in again]
    assert len(set(configs)) == len(configs), "a config was measured twice"


def test_ctrl_c_in_a_tuning_script(tmp_path):
    proc, _, err = _start([sys.executable, "-m", "tuning.tune_conv2d", "--layers", "C2", "--n-trial", "500",
                           "--timing-only", "--log", "c2.jsonl"], tmp_path)
    status = _ctrl_c(proc, lambda: len(_lines(tmp_path / "c2.jsonl")) >= 8)
    n = len(_lines(tmp_path / "c2.jsonl"))
    assert status == INTERRUPTED
    assert err.read_text().splitlines() == [
        (f"tune_conv2d: interrupted: {n} record(s) saved in c2.jsonl ({n} by this run); run the same command again "
         "to resume from them (nothing is measured twice)")], err.read_text()[-3000:]


def _has_loaded(proc: subprocess.Popen, library: str) -> bool:
    """Whether the process has mapped ``library`` (a moment in its run that no clock can tell on a loaded
    machine: there, the imports alone can outlast any fixed delay)."""
    try:
        return library in Path(f"/proc/{proc.pid}/maps").read_text()
    except OSError:   # ended meanwhile: _ctrl_c says so
        return False


def test_ctrl_c_in_vta_run(tmp_path):
    proc, _, err = _start([*VTA, "run", "resnet-18", "--check"], tmp_path)
    # llvmlite's library loads when the run compiles its host layers, inside the command's body
    status = _ctrl_c(proc, lambda: _has_loaded(proc, "libllvmlite"))
    assert status == INTERRUPTED
    assert err.read_text().splitlines() == [
        "vta: interrupted: nothing was written (--out is written whole, after the run); run the command again"], \
        err.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stderr.txt", "stdout.txt"]
