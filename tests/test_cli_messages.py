"""What a new user reads when a command refuses: one line ``vta: error: ...`` (exit status 2) naming the command's
own flags and files, and what is allowed; never the Python argument names or a raw OS/numpy message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hw_config import load_config
from vta.board.bitstream import BitstreamError, find_bitstream, make_placeholder

REPO = Path(__file__).resolve().parents[1]


def vta(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", *argv], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)


def error_line(done: subprocess.CompletedProcess) -> str:
    """The one ``vta: error:`` line of a refused command (status 2, no traceback)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("vta: error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


# ---- bitstreams and boards: the command's flags and the user's own config --------------------------------------

@pytest.mark.parametrize("config", [["--config", "batch4"], ["--config", "batch4", "--set", "LOG_BUS_WIDTH=6"],
                                    ["--config", str(REPO / "hw_config" / "presets" / "ultra96.json")]])
def test_a_missing_bitstream_names_the_flag_and_the_users_config(config, tmp_path):
    line = error_line(vta("run", "resnet-18", "--device", "pynq", "--board", "127.0.0.1", *config,
                          cwd=tmp_path, env={"VTA_CACHE_PATH": str(tmp_path / "cache")}))
    assert "pass --bitstream PATH." in line and "bitstream=PATH" not in line
    assert line.endswith("For the simulated board: vta board bitstream --make-simulated " + " ".join(config))


def test_the_bitstream_the_message_names_is_the_one_the_run_needs(tmp_path):
    """Doing what the message says makes the bitstream the failed command looks for."""
    env = {"VTA_CACHE_PATH": str(tmp_path / "cache")}
    config = ["--config", "batch4", "--set", "LOG_BUS_WIDTH=6"]
    line = error_line(vta("board", "bitstream", *config, cwd=tmp_path, env=env))
    command = line.rpartition("For the simulated board: vta ")[2].split()
    assert vta(*command, cwd=tmp_path, env=env).returncode == 0
    assert vta("board", "bitstream", *config, cwd=tmp_path, env=env).returncode == 0


def test_python_callers_get_the_argument_and_a_config_that_loads_theirs(tmp_path):
    cfg = load_config("batch4", LOG_BUS_WIDTH=6)
    with pytest.raises(BitstreamError) as e:
        find_bitstream(cfg, cache_dir=tmp_path)
    assert "pass bitstream=PATH." in str(e.value)
    assert str(e.value).endswith(f"--make-simulated --config batch4 --set LOG_BUS_WIDTH=6 --cache-dir {tmp_path}")


def test_no_board_names_the_board_flag(tmp_path):
    cache = tmp_path / "cache"
    make_placeholder(load_config("batch4"), cache_dir=cache)
    env = {k: v for k, v in os.environ.items() if k not in ("PYNQ_REMOTE_DEVICES", "VTA_PYNQ_BOARD")}
    done = subprocess.run([sys.executable, "-m", "vta", "run", "resnet-18", "--device", "pynq", "--config", "batch4"],
                          cwd=tmp_path, env={**env, "VTA_CACHE_PATH": str(cache)}, capture_output=True, text=True,
                          timeout=300, check=False)
    line = error_line(done)
    assert "no PYNQ board found" in line
    assert line.endswith("or pass --board HOST[:PORT]") and "board='host:port'" not in line
