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


# ---- files, flags and names: what was wrong and what is allowed ------------------------------------------------

def test_an_input_that_is_not_an_array_file_is_named_without_offering_pickle(tmp_path):
    readme = REPO / "examples" / "README.md"
    line = error_line(vta("run", "resnet-18", "--image-size", "32", "--input", str(readme), cwd=tmp_path))
    assert f"--input {readme}: not a .npy array file" in line
    assert "pickle" not in line.lower()


@pytest.mark.parametrize("argv, says", [
    (["run", "resnet-18", "--image-size", "32", "--input", "nope.npy"], "--input nope.npy: no such file"),
    (["sim", "replay", "nope.npz"], "program image nope.npz: no such file"),
    (["config", "show", "my_accel.json"], "hardware config 'my_accel.json': no such file"),
    (["config", "show", "configs/accel"], "hardware config 'configs/accel': no such file"),
])
def test_a_missing_file_is_named_with_what_it_was_for(argv, says, tmp_path):
    line = error_line(vta(*argv, cwd=tmp_path))
    assert says in line and "Errno" not in line and "neither a preset" not in line


def test_a_misspelt_preset_still_gets_its_suggestion(tmp_path):
    line = error_line(vta("config", "show", "pynqq", cwd=tmp_path))
    assert "neither a preset" in line and "did you mean 'pynq'?" in line


@pytest.mark.parametrize("argv, says", [
    (["compile", "clip", "--data-shape", "1,16,8,8"], "clip needs --bounds LO,HI"),
    (["compile", "clip", "--data-shape", "1,16,8,8", "--bounds", "9,1"], "--bounds LO,HI: two integers with LO <= HI"),
    (["compile", "add", "--data-shape", "1,16,8,8", "--bounds", "0,9"], "--bounds applies only to clip, not add"),
    (["compile", "relu", "--data-shape", "1,16,8,8", "--imm", "3"], "--imm applies only to add, multiply"),
    (["compile", "conv3d", "--data-shape", "1,64,56,56"],
     ("unknown op 'conv3d' (did you mean 'conv2d'?); vta compile knows add, multiply, minimum, maximum, "
      "right_shift, relu, clip, conv2d, group_conv2d, conv2d_transpose, dense")),
])
def test_vta_compile_names_its_flags_and_ops(argv, says, tmp_path):
    line = error_line(vta(*argv, cwd=tmp_path))
    assert says in line and "=(" not in line   # no Python keyword arguments such as bounds=(lo, hi)


@pytest.mark.parametrize("flag, value", [("-m", "0"), ("-k", "-3"), ("-n", "100000")])
def test_vta_demo_range_checks_its_dimensions_by_flag(flag, value, tmp_path):
    line = error_line(vta("demo", flag, value, cwd=tmp_path))
    assert line == f"vta: error: {flag} {value} is out of range; a matrix dimension (-m, -k, -n) is 1..16384"


def test_vta_tune_lists_the_ops_the_network_has_tasks_for(tmp_path):
    line = error_line(vta("tune", "resnet-18", "--image-size", "32", "--ops", "dense", "--log", "t.jsonl",
                          cwd=tmp_path))
    assert line.endswith("resnet-18: no accelerator tasks among --ops dense; this network's accelerator tasks are "
                         "conv2d")
    assert not (tmp_path / "t.jsonl").exists()


# ---- outputs: whole names, readable units ------------------------------------------------------------------------

@pytest.mark.parametrize("argv, op", [(["run", "resnet-18", "--image-size", "32"], "nn.global_avg_pool2d"),
                                      (["run", "dcgan"], "layout_transform")])
def test_the_per_layer_table_shows_every_op_name_whole_in_its_column(argv, op, tmp_path):
    done = vta(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    table = lines[first:next(i for i, line in enumerate(lines) if line.startswith("total: "))]   # basis: after it
    where = table[0].index("where")
    assert all(line[where - 1] == " " and line[where:where + 3] in ("VTA", "CPU") for line in table[1:]), table
    assert any(line.split()[1] == op for line in table[1:]), table


def test_vta_compile_says_milliseconds_above_a_thousand_microseconds(tmp_path):
    done = vta("compile", "conv2d", "--data-shape", "1,64,56,56", "--kernel-shape", "64,64,3,3", "--padding", "1,1",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert " cycles (5.18 ms), bit-exact against numpy: yes" in done.stdout
    done = vta("compile", "add", "--data-shape", "1,16,8,8", "--imm", "2", cwd=tmp_path)
    assert " cycles (9.9 us), bit-exact" in done.stdout
    # the same rule wherever the simulator's stats are printed (simulator.stats.format_duration)
    done = vta("demo", "-m", "512", "-k", "512", "-n", "512", cwd=tmp_path)
    assert "  cycles 716,710 = 7.17 ms at 100 MHz " in done.stdout, done.stdout
    assert "  cycles 31,884 = 318.8 us at 100 MHz " in vta("demo", cwd=tmp_path).stdout


def test_the_rpc_server_of_a_board_takes_a_bitstream_and_names_its_flags(tmp_path):
    """`vta rpc server` (--device pynq by default) finds its bitstream as `vta run --device pynq` does: a missing one
    names the server's own --bitstream flag and the user's config; --bitstream is for boards only."""
    env = {"VTA_CACHE_PATH": str(tmp_path / "cache")}
    line = error_line(vta("rpc", "server", "--config", "batch4", cwd=tmp_path, env=env))
    assert "pass --bitstream PATH." in line and line.endswith("--make-simulated --config batch4")
    line = error_line(vta("rpc", "server", "--device", "sim", "--bitstream", "x.bit", cwd=tmp_path, env=env))
    assert line == "vta: error: --bitstream applies to --device pynq, not --device sim"
    line = error_line(vta("rpc", "server", "--bitstream", str(tmp_path / "nope.bit"), cwd=tmp_path, env=env))
    assert "nope.bit" in line
