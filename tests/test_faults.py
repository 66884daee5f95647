"""Real faults, not simulated ones (issue #9).

- A real ``vta tune`` process is SIGKILLed mid-run and the same command is run again: the log stays readable,
  every batch the run had reported done survived the kill, nothing is measured twice, and the result is the
  one an uninterrupted run with the same seed gives.
- Real Dask worker processes are SIGKILLed while a batch is being measured: Dask reruns their configs and
  the batch comes back with exactly the LocalRunner's results; when Dask gives up on a config (no retries
  allowed) or no worker is left at all, ``DaskRunner`` returns a per-config error instead of raising or
  hanging.
- A ``LocalRunner`` pool worker killed mid-batch (an OOM kill, a simulator crash) does not hang ``measure``:
  the configs it lost are measured again and every result equals the undisturbed run's.

Every wait is bounded (a hang fails the test instead of blocking the suite); no assert is about speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import pytest
from extras import need

from hw_config import load_config
from tuning.measure import LocalRunner, MeasureResult
from tuning.records import Record, RecordWarning, load_records, parse_line
from tuning.task import conv_task

WAIT_S = 300.0  # the bound on any single wait: only ever reached when something hangs

# ---------------------------------------------------------------------------------------------------------
# 1. `vta tune` killed with SIGKILL mid-run, then rerun

# 14 tasks x 16 trials in batches of 16, timing only: a few seconds of measuring after ~1 s of start-up.
# The run is killed once two batches are reported (or ~50 records are logged), long before its ~220 records.
TUNE_ARGS = ["resnet-18", "--image-size", "32", "--n-trial", "16", "--timing-only", "--tuner", "random"]
KILL_AFTER_BATCHES, KILL_AFTER_RECORDS = 2, 50
PROGRESS = re.compile(r"\[Task\s*(\d+)/\s*(\d+)\]\s+Current/Best:.*\| Progress: \((\d+)/(\d+)\)")


def _vta_tune(*args: str) -> list[str]:
    """The `vta tune` command line, run by this interpreter (the console script next to it if installed)."""
    script = Path(sys.executable).with_name("vta")
    if script.is_file():
        return [sys.executable, str(script), "tune", *args]
    return [sys.executable, "-c", "import sys; from vta.cli import main; sys.exit(main())", "tune", *args]


def _reported(stdout: str, strategy: str) -> tuple[int, int]:
    """(batches, trials) the run had announced as done in its progress lines. A line is printed after its
    batch was appended to the log; the default configs, measured before any line, are trials too."""
    lines = [tuple(map(int, m.groups())) for m in PROGRESS.finditer(stdout)]
    if not lines:
        return 0, 0
    if strategy == "gradient":  # Progress: (trials of all tasks / budget)
        return len(lines), max(done for _, _, done, _ in lines)
    n_tasks = lines[0][1]        # sequential: Progress: (trials of this task / n_trial)
    per_task: dict[int, int] = {}
    for task, _, done, _ in lines:
        per_task[task] = max(per_task.get(task, 0), done)
    return len(lines), n_tasks + sum(done - 1 for done in per_task.values())


def _count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _key(r: Record) -> tuple:
    """What "the same measurement" means: one config of one workload on one hardware config and template."""
    return r.workload, r.hw, r.template, json.dumps(r.config, sort_keys=True)


def _outcome(r: Record) -> tuple:
    return tuple(r.result.get(k) for k in ("cycles", "latency_s", "error", "checked"))


def _records(path: Path) -> list[Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecordWarning)
        return load_records(path)


def _run_and_kill(cmd: list[str], log: Path, stdout_path: Path, strategy: str) -> tuple[bytes, str]:
    """Start ``cmd``, SIGKILL it mid-run once it has reported two batches or logged some records; returns
    the log's bytes and the run's output as they were when it died."""
    with open(stdout_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)
    try:
        deadline = time.monotonic() + WAIT_S
        while proc.poll() is None:
            batches, _ = _reported(stdout_path.read_text(errors="replace"), strategy)
            if batches >= KILL_AFTER_BATCHES or _count_lines(log) >= KILL_AFTER_RECORDS:
                break
            assert time.monotonic() < deadline, f"no progress within {WAIT_S} s:\n{stdout_path.read_text()}"
            time.sleep(0.01)
        assert proc.poll() is None, (f"vta tune ended (rc {proc.returncode}) before it could be killed; make "
                                     f"the run longer:\n{stdout_path.read_text(errors='replace')}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=WAIT_S) == -signal.SIGKILL  # it was killed while running, not finished
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT_S)
    return log.read_bytes() if log.exists() else b"", stdout_path.read_text(errors="replace")


def _run(cmd: list[str], cwd: Path) -> str:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=WAIT_S, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "outputs identical" in res.stdout
    return res.stdout


def _latency_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("end-to-end, the accelerator's part:"))


@pytest.mark.parametrize("strategy", ["gradient", "sequential"])
def test_vta_tune_killed_mid_run_resumes_without_losing_or_repeating_work(tmp_path, strategy):
    args = [*TUNE_ARGS, "--strategy", strategy]
    log = tmp_path / "killed.jsonl"
    cmd = _vta_tune(*args, "--log", str(log))

    before, printed = _run_and_kill(cmd, log, tmp_path / "killed.out", strategy)
    # what the killed run left: whole lines, then at most the torn start of one (killed mid-write)
    complete, _, torn = before.rpartition(b"\n")
    pre_lines = complete.decode().splitlines() if complete else []
    pre = [parse_line(line) for line in pre_lines]  # every whole line is a valid record
    torn_error = _parse_error(torn.decode(errors="replace")) if torn else None
    if torn and torn_error is None:
        pre.append(parse_line(torn.decode()))  # killed between a record and its newline
    batches, trials = _reported(printed, strategy)
    assert batches > 0 and trials > 0, printed
    # every batch the run reported done was on disk when it died: only the batch in flight can be lost
    assert len(pre) >= trials, (len(pre), trials)

    resumed = _run(cmd, tmp_path)   # the same command, to completion
    after = log.read_bytes()
    assert after.startswith(before)  # append-only: nothing written before the kill was lost or rewritten
    lines = after.decode().splitlines()
    # the torn line (if the kill hit a write) is the only unreadable one, and the rerun started on a fresh line
    bad = [number for number, line in enumerate(lines) if _parse_error(line) is not None]
    assert bad == ([len(pre_lines)] if torn_error else [])
    if torn:
        assert lines[len(pre_lines)] == torn.decode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        final = load_records(log)
    named = [str(w.message) for w in caught if issubclass(w.category, RecordWarning)]
    assert len(named) == (1 if torn_error else 0)
    assert all(m.startswith(f"{log}: skipped 1 unreadable line(s): line {len(pre_lines) + 1}: ") for m in named)
    assert [_key(r) for r in final[:len(pre)]] == [_key(r) for r in pre]

    # nothing measured twice: one record per (workload, hardware, template, config), and the rerun's new
    # records repeat none of those the killed run had logged
    counts = Counter(_key(r) for r in final)
    assert [k for k, n in counts.items() if n > 1] == []
    new = final[len(pre):]
    assert new and {_key(r) for r in new}.isdisjoint(_key(r) for r in pre)

    # the same result as a run that was never killed (same seed)
    ref_log = tmp_path / "reference.jsonl"
    reference = _run(_vta_tune(*args, "--log", str(ref_log)), tmp_path)
    ref = _records(ref_log)
    assert len(final) == len(ref)  # the same budget was spent: the lost batch was measured once, no more
    ref_outcome = {_key(r): _outcome(r) for r in ref}
    assert all(_outcome(r) == ref_outcome[_key(r)] for r in final if _key(r) in ref_outcome)
    # the random tuner measures a prefix of each task's seeded order: per task, one run's configs contain
    # the other's
    mine, theirs = defaultdict(set), defaultdict(set)
    for r in final:
        mine[r.workload].add(_key(r))
    for r in ref:
        theirs[r.workload].add(_key(r))
    assert mine.keys() == theirs.keys()
    assert all(mine[w] <= theirs[w] or theirs[w] <= mine[w] for w in mine)
    if strategy == "sequential":  # each task spends its n_trial: exactly the uninterrupted run's records
        assert set(ref_outcome) == set(counts)
        assert _latency_line(resumed) == _latency_line(reference)
    else:  # the scheduler shares the budget; after a resume it may share it out differently
        assert _latency_line(resumed).split(", tuned")[0] == _latency_line(reference).split(", tuned")[0]


def _parse_error(line: str) -> ValueError | None:
    """Why ``line`` is not a record (None: it is one)."""
    try:
        parse_line(line)
    except ValueError as e:
        return e
    return None


# ---------------------------------------------------------------------------------------------------------
# 2. Dask worker processes killed mid-batch

def _task():
    return conv_task(load_config("pynq"), (1, 32, 14, 14), (32, 32, 3, 3), 1, 1)


def _configs(task, n: int) -> list[dict]:
    return [task.default_config, *[c for c in task.space if task.check(c) is None][:n - 1]]


def _same(a: MeasureResult, b: MeasureResult) -> bool:
    return (a.config, a.cycles, a.latency_s, a.error, a.checked) == (b.config, b.cycles, b.latency_s, b.error,
                                                                      b.checked)


@contextmanager
def _cluster(**scheduler_config):
    """A LocalCluster of two single-threaded worker processes (each under a nanny that restarts it)."""
    distributed = need("distributed")
    import dask
    with dask.config.set({f"distributed.scheduler.{k}": v for k, v in scheduler_config.items()}):
        cluster = distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                           dashboard_address=":0", death_timeout=60)
        try:
            client = distributed.Client(cluster, timeout=60)
            try:
                client.wait_for_workers(2, timeout=WAIT_S)
                yield client
            finally:
                client.close(timeout=60)
        finally:
            cluster.close(timeout=60)


def _measure_and_kill(client, measure: Callable[[], list[MeasureResult]], kill: Callable[[str], None]):
    """Run ``measure`` in a thread; once a worker is busy with the batch, ``kill(address)``; returns the
    results (bounded wait: a hang fails)."""
    box: dict[str, object] = {}

    def target():
        try:
            box["results"] = measure()
        except BaseException as e:  # noqa: BLE001 - reported by the test, not lost in a thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while True:
        busy = [w for w, keys in client.processing().items() if keys]
        if busy:
            break
        assert thread.is_alive(), f"the batch ended before any worker was seen busy: {box}"
        assert time.monotonic() < deadline, "no worker picked up the batch"
        time.sleep(0.005)
    assert thread.is_alive()  # mid-batch
    kill(busy[0])
    thread.join(WAIT_S)
    assert not thread.is_alive(), f"DaskRunner.measure hung after a worker was killed ({WAIT_S} s)"
    assert "error" not in box, f"DaskRunner.measure raised: {box['error']!r}"
    return box["results"], busy[0]


@pytest.fixture(scope="module")
def measured():
    """A batch and its LocalRunner results, the reference every Dask run must reproduce exactly."""
    task = _task()
    configs = _configs(task, 64)
    local = LocalRunner(check=True).measure(task, configs)
    assert all(r.ok and r.checked for r in local)
    return task, configs, local


def test_dask_worker_killed_mid_batch_is_rerun_with_the_same_results(measured):
    from tuning.measure import DaskRunner
    task, configs, local = measured
    with _cluster() as client:
        runner = DaskRunner(client, check=True)
        first = runner.measure(task, configs)   # worker processes, no fault: LocalRunner's results exactly
        assert all(_same(a, b) for a, b in zip(first, local, strict=True))

        pids = client.run(os.getpid)            # {worker address: worker process id}
        results, victim = _measure_and_kill(client, lambda: runner.measure(task, configs),
                                            lambda address: os.kill(pids[address], signal.SIGKILL))
        assert all(_same(a, b) for a, b in zip(results, local, strict=True))  # nothing lost, nothing wrong
        client.wait_for_workers(2, timeout=WAIT_S)
        assert pids[victim] not in client.run(os.getpid).values()   # it died; its nanny started another
        assert all(_same(a, b) for a, b in zip(runner.measure(task, configs), local, strict=True))


def test_dask_config_whose_worker_died_is_a_per_config_error_not_an_exception(measured):
    from tuning.measure import DaskRunner
    task, configs, local = measured
    with _cluster(**{"allowed-failures": 0}) as client:   # Dask gives up on a task at its first lost worker
        runner = DaskRunner(client, check=True)
        pids = client.run(os.getpid)
        results, _ = _measure_and_kill(client, lambda: runner.measure(task, configs),
                                       lambda address: os.kill(pids[address], signal.SIGKILL))
    assert len(results) == len(configs)
    failed = [r for r in results if not r.ok]
    assert failed and len(failed) < len(configs)  # what the dead worker held, not the whole batch
    for r, ref, config in zip(results, local, configs, strict=True):
        assert r.config == config
        assert _same(r, ref) or (r.error.startswith("failed on the Dask cluster: KilledWorker")
                                 and r.cycles == 0 and not r.checked), r


def test_dask_cluster_with_no_worker_left_times_out_per_config_instead_of_hanging(measured):
    """Workers without a nanny (``dask worker --no-nanny``, each its own process): once both are killed
    nothing restarts them, and the batch would wait forever."""
    distributed = need("distributed")
    from tuning.measure import DaskRunner
    task, configs, local = measured
    workers: list[subprocess.Popen] = []
    cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0")
    try:
        workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address,
                                     "--no-nanny", "--nthreads", "1", "--no-dashboard"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        with distributed.Client(cluster, timeout=60) as client:
            client.wait_for_workers(2, timeout=WAIT_S)
            runner = DaskRunner(client, check=True, timeout=10)

            def kill_every_worker(_address):   # the hosts of all workers go down
                for w in workers:
                    os.kill(w.pid, signal.SIGKILL)

            results, _ = _measure_and_kill(client, lambda: runner.measure(task, configs), kill_every_worker)
            assert all(w.wait(timeout=WAIT_S) == -signal.SIGKILL for w in workers)
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait(timeout=WAIT_S)
        cluster.close(timeout=60)
    assert len(results) == len(configs)
    timed_out = [r for r in results if r.error == "timed out: no result from the Dask cluster within 10 s"]
    assert timed_out  # the configs no worker was left to run
    for r, ref in zip(results, local, strict=True):
        assert _same(r, ref) or r in timed_out or r.error.startswith("failed on the Dask cluster: "), r


# ---------------------------------------------------------------------------------------------------------
# 3. LocalRunner pool worker killed mid-batch

def _workers_cpu(process) -> dict[int, float]:
    """CPU seconds of each live child of ``process`` (a psutil.Process): the runner's workers."""
    import psutil
    out = {}
    for child in process.children(recursive=True):
        try:
            out[child.pid] = sum(child.cpu_times()[:2])
        except psutil.Error:   # ended meanwhile
            pass
    return out


def test_local_runner_worker_killed_mid_batch_does_not_hang(measured):
    need("distributed")  # brings psutil
    import psutil
    task, configs, local = measured
    runner = LocalRunner(n_parallel=2, check=True)
    me = psutil.Process()
    before = {p.pid for p in me.children()}
    thread = None
    try:
        # a batch long enough that the kill lands in the middle of it, however fast a trial gets
        configs, local = configs[:32] * 4, local[:32] * 4
        runner.measure(task, configs[:4])    # starts the pool
        workers = sorted({p.pid for p in me.children()} - before)
        assert len(workers) == 2
        box: dict[str, object] = {}
        thread = threading.Thread(target=lambda: box.update(results=runner.measure(task, configs)), daemon=True)
        victim = psutil.Process(workers[0])
        busy_from = victim.cpu_times().user
        thread.start()
        while thread.is_alive() and victim.cpu_times().user < busy_from + 0.02:
            time.sleep(0.005)                # until the worker is busy with the batch (bounded: the batch ends)
        assert thread.is_alive()
        os.kill(workers[0], signal.SIGKILL)
        # the batch takes under a second of CPU when nothing hangs; a hang is a wait on the dead worker, when no
        # worker uses CPU any more: 20 s without a worker's progress is a hang (a clock alone fails on a loaded
        # machine, where the batch itself can take longer)
        used, idle_since = _workers_cpu(me), time.monotonic()
        while thread.is_alive() and time.monotonic() - idle_since < 20:
            thread.join(1)
            now = _workers_cpu(me)
            if any(cpu > used.get(pid, 0.0) + 0.01 for pid, cpu in now.items()):
                idle_since = time.monotonic()
            used = now
        assert not thread.is_alive(), "LocalRunner.measure hung after a worker was killed"
        results = box["results"]
        assert len(results) == len(configs)
        assert all(_same(r, ref) for r, ref in zip(results, local, strict=True))   # the lost ones measured again
    finally:
        if thread is None or not thread.is_alive():
            runner.close()
        else:   # a hung batch holds the runner's lock: report the failure, leave its workers to no one
            for child in me.children(recursive=True):
                child.kill()


def test_local_runner_reports_a_config_that_kills_its_worker_every_time(measured, monkeypatch):
    """A config whose measurement kills the process (a crash in native code, say) is a failed result naming
    that; the batch's other configs are measured as usual and the runner keeps working."""
    import tuning.measure as measure_mod
    task, configs, local = measured
    configs, local = configs[:8], local[:8]
    victim = configs[3]
    real = measure_mod.measure_one

    def crashing(task_, config, *args, **kwargs):
        if config == victim:
            os._exit(3)   # what a segfault in a worker looks like to the pool
        return real(task_, config, *args, **kwargs)

    monkeypatch.setattr(measure_mod, "measure_one", crashing)   # inherited by the forked workers
    with LocalRunner(n_parallel=2, check=True) as runner:
        results = runner.measure(task, configs)
        assert not results[3].ok and "worker process measuring it died" in results[3].error
        assert all(_same(r, ref) for i, (r, ref) in enumerate(zip(results, local, strict=True)) if i != 3)
        again = runner.measure(task, configs[:2])   # a fresh pool serves the next batch
        assert all(_same(r, ref) for r, ref in zip(again, local[:2], strict=True))
