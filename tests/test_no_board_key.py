"""A tracker without a board of the requested key (issue 26): `vta run --rpc`, `vta tune --rpc`, connect_device and
the RPC runner fail at once with the tracker's boards by key, instead of waiting for a board that is not coming;
a key whose boards are registered but busy is still waited for."""

from __future__ import annotations

import time

import pytest
from test_docs import VTA, run

from tuning.rpc_runner import RPCRunner
from tuning.task import conv_task
from vta.rpc import BoardLost, LocalCluster, TrackerServer, connect_device
from vta.rpc.tracker import TrackerClient


@pytest.fixture(scope="module")
def lab():
    with LocalCluster(boards=1, key="sim") as cluster:
        yield cluster


def _never_requested(address: str, key: str = "pynq") -> None:
    """"At once", without a clock (a loaded machine takes any time to start a CLI): the tracker has no queue for
    ``key``, so no request for it was ever made (a request makes the queue, which then outlives it)."""
    with TrackerClient(address) as client:
        assert key not in client.summary()["queue_info"]


def _no_pynq(address: str, boards: str = "sim: 1 free of 1") -> str:
    return (f"the tracker at {address} has no 'pynq' board (boards by key: {boards}); register one (vta rpc server "
            f"--tracker {address} --key pynq ...) or ask for a key it has")


@pytest.mark.parametrize("command", [("run", "resnet-18", "--image-size", "32"),
                                     ("tune", "resnet-18", "--image-size", "32", "--n-trial", "2", "--log", "x.jsonl")],
                         ids=["run", "tune"])
def test_the_commands_fail_at_once_naming_the_keys_the_tracker_has(lab, tmp_path, command):
    proc = run([*VTA, *command, "--rpc", lab.address, "--key", "pynq"], tmp_path)
    _never_requested(lab.address)
    assert proc.returncode == 2 and proc.stderr.strip() == f"vta: error: {_no_pynq(lab.address)}", proc.stderr[-2000:]


def test_connect_device_and_the_runner_fail_at_once(lab):
    with pytest.raises(BoardLost) as e:
        connect_device(lab.address, "pynq", timeout=60)
    assert str(e.value) == _no_pynq(lab.address)
    _never_requested(lab.address)
    task = conv_task("pynq", (1, 16, 8, 8), (16, 16, 3, 3), 1, 1)
    with pytest.raises(BoardLost) as e:
        RPCRunner("pynq", *lab.tracker, request_timeout=60).measure(task, [task.default_config])
    assert str(e.value) == _no_pynq(lab.address)
    _never_requested(lab.address)


def test_a_tracker_without_boards_says_so():
    with TrackerServer(port=0) as tracker:
        with pytest.raises(BoardLost) as e:
            connect_device(tracker.address, "pynq", timeout=60)
        assert str(e.value) == _no_pynq(tracker.address, "none")


def test_a_busy_board_of_the_key_is_waited_for(lab):
    with connect_device(lab.address, "sim", timeout=30):   # the one board, taken
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="no 'sim' board became free"):
            connect_device(lab.address, "sim", request_timeout=1.5)
        assert time.monotonic() - t0 >= 1.5
