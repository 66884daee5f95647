"""Tuning on boards: `vta tune --rpc` on four simulated boards gives the local run's records and best
configs, names the boards, survives a board killed mid-trial (its trial re-runs elsewhere, nothing lost or
doubled), takes a rebooted board back, frees the board of a client that vanished; and the same through TVM's
own tracker (tvm-venv)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from extras import need, needs

from hw_config import load_config
from tuning.measure import LocalRunner
from tuning.records import load_best, load_records
from tuning.rpc_runner import RPCRunner
from tuning.task import conv_task
from tuning.tuners import RandomTuner
from vta.rpc import BoardLost, LocalCluster, TrackerClient, connect_device, format_summary
from vta.rpc.local import _first_line

ROOT = Path(__file__).resolve().parents[1]
CFG = load_config("pynq")
BOARDS = [f"sim-{i}" for i in range(4)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(boards=4, key="sim", log_dir=tmp_path_factory.mktemp("rpc-logs")) as c:
        yield c


@pytest.fixture
def healthy(cluster):
    """The cluster with its four boards up and free (a test that killed one restarted it)."""
    for name in BOARDS:
        if cluster.boards[name].poll() is not None:
            cluster.add_board(name)
    cluster.wait_free(4, timeout=30)
    return cluster


def _vta(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


def _start_vta(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vta", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _trials(log: Path) -> list[tuple[str, str, int, str | None]]:
    return [(r.workload, json.dumps(r.config, sort_keys=True), r.cycles, r.result.get("error"))
            for r in load_records(log)]


@pytest.mark.slow
def test_vta_tune_on_four_boards_equals_the_local_run(healthy, tmp_path):
    tune = ("tune", "resnet-18", "--n-trial", "32", "--image-size", "32")
    local_run = _start_vta(*tune, "--log", "local.jsonl", cwd=tmp_path)   # the local run alongside
    remote = _vta(*tune, "--rpc", healthy.address, "--key", "sim", "--log", "rpc.jsonl", cwd=tmp_path)
    out, err = local_run.communicate(timeout=300)
    local = subprocess.CompletedProcess(local_run.args, local_run.returncode, out, err)
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert local.returncode == 0, local.stderr[-3000:]
    assert _trials(tmp_path / "rpc.jsonl") == _trials(tmp_path / "local.jsonl")   # same trials, same order
    assert load_best(tmp_path / "rpc.jsonl", CFG) == load_best(tmp_path / "local.jsonl", CFG)
    boards = Counter(r.result.get("board") for r in load_records(tmp_path / "rpc.jsonl"))
    assert set(boards) == set(BOARDS) and min(boards.values()) >= 20, boards   # all four busy, each named
    line = re.search(r"^boards: (.*)$", remote.stdout, re.MULTILINE).group(1)
    assert sorted(re.findall(r"(sim-\d) \(\d+ trials\)", line)) == BOARDS
    e2e = re.compile(r"^end-to-end, the accelerator's part: .* outputs identical$", re.MULTILINE)
    assert e2e.search(remote.stdout).group(0) == e2e.search(local.stdout).group(0)   # the same tuned network


def _task_and_configs(n: int = 48):
    task = conv_task(CFG, (1, 64, 14, 14), (64, 64, 3, 3), 1, 1)
    space = task.space
    configs = [space[i] for i in range(len(space)) if task.check(space[i]) is None][:n]
    assert len(configs) == n
    return task, configs


def test_a_board_killed_mid_trial_loses_nothing(healthy, tmp_path):
    task, configs = _task_and_configs()
    expected = LocalRunner().measure(task, configs)
    done: list[str] = []

    def on_result(i, result):   # once sim-1 is at work (it measured one), kill it while it works on the next
        done.append(result.board)
        if "sim-1" in done and result.board != "sim-1" and healthy.boards["sim-1"].poll() is None:
            healthy.kill_board("sim-1", signal.SIGKILL)

    runner = RPCRunner("sim", *healthy.tracker, timeout=20, on_result=on_result)
    log = tmp_path / "kill.jsonl"
    results = RandomTuner(task).measure(runner, configs, log)
    assert [(r.ok, r.cycles) for r in results] == [(e.ok, e.cycles) for e in expected]   # nothing lost
    assert [r.config for r in results] == configs
    lost = [r for r in results if r.failed_boards]
    assert [r.failed_boards for r in lost] == [["sim-1"]], lost          # one trial, re-run on another board
    assert lost[0].board != "sim-1" and runner.board_failures == {"sim-1": 1}
    assert sum(runner.boards_used.values()) == len(configs)              # nothing doubled
    records = load_records(log)
    assert len(records) == len(configs) and len({json.dumps(r.config, sort_keys=True) for r in records}) == len(configs)
    # the rebooted board registers again and measures the next batch
    healthy.add_board("sim-1")
    healthy.wait_free(4, timeout=30)
    again = RPCRunner("sim", *healthy.tracker, timeout=20)
    results = again.measure(task, configs[:16])
    assert all(r.ok for r in results) and set(again.boards_used) == set(BOARDS), again.boards_used


def test_a_client_that_vanishes_frees_its_board(healthy):
    code = ("import sys, time\nfrom vta.rpc import connect_device\n"
            "d = connect_device(sys.argv[1], 'sim')\n"
            "[d.copy_in(d.alloc(1 << 20), b'x' * (1 << 20)) for _ in range(8)]\n"
            "print('holding', d.board, flush=True)\ntime.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, healthy.address], stdout=subprocess.PIPE, text=True)
    try:
        line = _first_line(proc, 60, "the client")
        board = line.split()[1]
        assert healthy.counts() == (4, 3)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        healthy.wait_free(4, timeout=10)
        assert re.search(r"session from 127\.0\.0\.1 ended \(the client vanished\)", healthy.log(board))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()


def test_boards_refuse_a_key_they_do_not_share(healthy, tmp_path):
    key = tmp_path / "lab.key"
    key.write_text("k" * 64)
    task, configs = _task_and_configs(4)
    runner = RPCRunner("sim", *healthy.tracker, key_file=key, request_timeout=10)
    with pytest.raises(BoardLost, match="does not authenticate"):   # keyless boards cannot prove the key:
        runner.measure(task, configs)                                # nothing is sent to them
    assert not runner.boards_used
    healthy.wait_free(4, timeout=15)


def test_no_tracker_is_an_error_not_a_failed_trial(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    task, configs = _task_and_configs(2)
    with pytest.raises(BoardLost, match="cannot reach the tracker"):
        RPCRunner("sim", "127.0.0.1", port).measure(task, configs)
    done = _vta("tune", "resnet-18", "--n-trial", "2", "--image-size", "32", "--rpc", f"127.0.0.1:{port}",
                "--key", "sim", "--log", "x.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "vta: error: no usable 'sim' board" in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_the_tuning_scripts_take_the_rpc_flags(healthy, tmp_path, capsys):
    from tuning import tune_alu, tune_conv2d
    assert tune_conv2d.main(["--layers", "C2", "--n-trial", "4", "--rpc", healthy.address, "--key", "sim",
                             "--log", str(tmp_path / "c.jsonl")]) == 0
    assert tune_alu.main(["--ops", "add", "--n-trial", "3", "--rpc", healthy.address, "--key", "sim",
                          "--log", str(tmp_path / "a.jsonl")]) == 0
    out = capsys.readouterr().out
    used = re.findall(r"^boards: (.*)$", out, re.MULTILINE)   # each script says which boards it used, as vta tune
    assert len(used) == 2 and all(b.split(" (")[0] in BOARDS for line in used for b in line.split(", ")), used
    for log in ("c.jsonl", "a.jsonl"):
        records = load_records(tmp_path / log)
        assert records and all(r.result.get("board") in BOARDS for r in records)


@needs("distributed")
def test_vta_tune_takes_a_dask_scheduler(tmp_path):
    from tuning import tune_conv2d
    assert tune_conv2d.main(["--layers", "C2", "--n-trial", "3", "--dask", "local", "--parallel", "1",
                             "--log", str(tmp_path / "d.jsonl")]) == 0
    assert load_records(tmp_path / "d.jsonl")


def test_the_documented_rpc_commands_parse(monkeypatch):
    """docs/rpc.md's commands (in text blocks: they need a tracker and boards running) use real flags."""
    import importlib

    from vta.cli import build_parser, load_plugins
    load_plugins()
    parser = build_parser()
    text = (ROOT / "docs" / "rpc.md").read_text()
    lines = [line.strip() for block in re.findall(r"```text\n(.*?)```", text, re.DOTALL)
             for line in block.replace("\\\n", " ").splitlines()]
    commands = [shlex.split(line.split("  #")[0]) for line in lines if line.startswith(("vta ", "python -m tuning."))]
    assert len(commands) >= 8, commands
    for argv in commands:
        if argv[0] == "vta":
            parser.parse_args(argv[1:])   # SystemExit on a flag that does not exist
        else:
            module = importlib.import_module(argv[2])
            monkeypatch.setattr(module, "run_reporting_errors", lambda prog, fn: 0)   # parse, do not run
            assert module.main(argv[3:]) == 0


# ------------------------------------------------------------------------------------------------------------
# TVM's own tracker

@pytest.fixture
def tvm_tracker(tmp_path):
    python = need("tvm-venv")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    with open(tmp_path / "tvm-tracker.log", "w") as log:
        proc = subprocess.Popen([python, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                                 "--port-end", str(port + 1)], stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        end = time.monotonic() + 60
        while True:
            try:
                TrackerClient(("127.0.0.1", port), timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < end, (tmp_path / "tvm-tracker.log").read_text()
                time.sleep(0.2)
        yield python, f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)   # the tracker and its popen worker, started here
        proc.wait(10)


def _servers_in_order(summary: str) -> str:
    """A tracker summary with its server lines sorted: TVM's tracker lists servers of one key in the order of a
    Python set of connections, which a new connection (the query itself) may reshuffle between two queries."""
    lines = summary.split("\n")
    rules = [i for i, line in enumerate(lines) if line == "-" * 30]
    first, last = rules[1] + 1, rules[2]
    return "\n".join(lines[:first] + sorted(lines[first:last]) + lines[last:])


@needs("tvm-venv")
def test_our_boards_and_runner_work_through_tvms_tracker(tvm_tracker, tmp_path):
    python, address = tvm_tracker
    with LocalCluster(boards=2, key="sim", tracker=address, log_dir=tmp_path) as boards:
        task, configs = _task_and_configs(12)
        runner = RPCRunner("sim", *boards.tracker, timeout=20)
        results = runner.measure(task, configs)
        expected = LocalRunner().measure(task, configs)
        assert [(r.ok, r.cycles) for r in results] == [(e.ok, e.cycles) for e in expected]
        assert set(runner.boards_used) == {"sim-0", "sim-1"}
        boards.wait_free(2, timeout=30)
        with connect_device(address, "sim", CFG) as dev:   # a session through TVM's tracker
            assert dev.board in ("sim-0", "sim-1")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        host, port = address.split(":")
        query = subprocess.run([python, "-m", "tvm.exec.query_rpc_tracker", "--host", host, "--port", port],
                               capture_output=True, text=True, timeout=90, env=env, check=False)
        assert query.returncode == 0, query.stderr[-2000:]
        boards.wait_free(2, timeout=30)
        with TrackerClient(address) as q:   # TVM's tracker and ours print the same
            ours = format_summary(q.summary())
        assert _servers_in_order(query.stdout).endswith(_servers_in_order(ours) + "\n"), (query.stdout, ours)
        assert "sim   2      2     0" in query.stdout
        boards.kill_board("sim-1")   # TVM's tracker drops a board that went away
        boards.wait_free(1, timeout=30)


def test_vta_run_deploys_through_the_tracker(healthy):
    """`vta run MODEL --rpc HOST:PORT --key KEY`: the accelerator groups run on a board the tracker hands out,
    bit-exact against numpy; the board is free again afterwards."""
    done = subprocess.run([sys.executable, "-m", "vta", "run", "resnet-18", "--image-size", "32", "--rpc",
                           healthy.address, "--key", "sim", "--check", "--no-layers"], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the board sim-" in done.stdout and "matches the numpy reference bit-exactly" in done.stdout
    # a --device sim board server measures nothing: its board time is the board model's prediction
    assert "ms predicted by the board model" in done.stdout and "measured" not in done.stdout
    healthy.wait_free(4, timeout=30)
    refused = subprocess.run([sys.executable, "-m", "vta", "run", "resnet-18", "--rpc", healthy.address,
                              "--device", "pynq"], capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode == 2 and "--rpc and --device pynq" in refused.stderr


def test_a_local_cluster_leaves_nothing_behind(tmp_path, monkeypatch):
    """LocalCluster (the docs' way to try the RPC flow) writes its logs to a temporary directory of its own when
    not given one, and stop() removes it: each cluster used to leave one in TMPDIR, and its processes end."""
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with LocalCluster(boards=1, key="sim") as lab:
        assert lab.log_dir.parent == tmp_path and lab.log_dir.is_dir()
        procs = [lab.tracker_proc, *lab.boards.values()]
        with connect_device(lab.address, "sim", CFG) as board:
            board.alloc(4096)
    assert list(tmp_path.iterdir()) == [] and all(p.poll() is not None for p in procs)
