"""Command-line values a user can get wrong are refused before any work, naming the flag and what is allowed,
with exit status 2 and no traceback; nothing on disk is touched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vta.cli import main as vta_main

TUNE = ["tune", "resnet-18", "--image-size", "32", "--n-trial", "1", "--timing-only"]


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--total-trials", "-5", "argument --total-trials: -5 is out of range; a trial count is 1.."),
    ("--early-stopping", "-1", "argument --early-stopping: -1 is out of range; a trial count is 1.."),
    ("--n-trial", "0", "argument --n-trial: 0 is out of range"),
    ("--parallel", "0", "argument --parallel: 0 is out of range"),
    ("--n-trial", "many", "argument --n-trial: 'many' is not an integer"),
    ("--seed", "-1", "argument --seed: -1 is out of range; a seed is 0..4294967295"),
])
def test_vta_tune_refuses_bad_numbers(flag, value, message, capsys, tmp_path):
    assert vta_main([*TUNE, "--log", str(tmp_path / "t.jsonl"), flag, value]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()


def test_vta_tune_refuses_a_binary_file_as_its_log(tmp_path, capsys):
    image = tmp_path / "g1.npz"
    import numpy as np
    np.savez_compressed(image, insns=np.zeros((1, 16), np.uint8))
    before = image.read_bytes()
    assert vta_main([*TUNE, "--log", str(image)]) == 2
    assert "not a JSON-lines record log" in capsys.readouterr().err
    assert image.read_bytes() == before
    assert vta_main([*TUNE, "--log", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize(("schedule", "message"), [("not json", "argument --schedule: not valid JSON"),
                                                   ("[1, 2]", "argument --schedule: expected a JSON object")])
def test_vta_compile_names_the_schedule_flag(schedule, message, capsys):
    args = ["compile", "conv2d", "--data-shape", "1,16,8,8", "--kernel-shape", "16,16,3,3", "--schedule", schedule]
    assert vta_main(args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("script", "args", "message"), [
    ("tuning.tune_conv2d", ["--layers", "C99"], "tune_conv2d: error: --layers: unknown layer(s) C99; allowed: C2"),
    ("tuning.tune_alu", ["--ops", "divide"], "tune_alu: error: --ops: not a binary ALU op: divide"),
    ("tuning.tune_alu", ["--config", "nope"], "tune_alu: error: hardware config 'nope'"),
    ("tuning.tune_conv2d", ["--early-stopping", "-1"], "argument --early-stopping: -1 is out of range"),
    ("tuning.tune_network", ["resnet-18", "--total-trials", "-5"], "argument --total-trials: -5 is out of range"),
])
def test_tuning_scripts_refuse_cleanly(script, args, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", script, *args, "--log", str(tmp_path / "x.jsonl")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(("script", "says"), [
    ("tuning.tune_alu", ("workloads of VTA's tune_alu_vta (ResNet feature-map shapes).", "(default alu.tune.jsonl)",
                         "trials per task (default 50)", "--ops")),
    ("tuning.tune_conv2d", ("as VTA's tune_conv2d.py did on boards.", "(default conv2d.tune.jsonl)",
                            "trials per layer (default 100)", "--layers")),
])
def test_tuning_scripts_help_says_what_they_tune_and_where_they_log(script, says):
    done = subprocess.run([sys.executable, "-m", script, "--help"], capture_output=True, text=True, timeout=120,
                          check=False)
    text = " ".join(done.stdout.split())
    assert done.returncode == 0 and done.stdout.startswith(f"usage: python -m {script} ")
    assert all(s in text for s in says), text


def test_vta_version_is_the_installed_packages():
    from importlib.metadata import version
    done = subprocess.run([sys.executable, "-m", "vta", "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == f"vta {version('vta-stack')} (vta-stack)"


@pytest.mark.parametrize("argv, hint", [
    (["config", "show", "pynqq"], "did you mean 'pynq'?"),
    (["config", "show", "ultra69"], "did you mean 'ultra96'?"),
    (["config", "show", "pynq", "--set", "LOG_BLCK=5"], "unknown key 'LOG_BLCK' (did you mean 'LOG_BLOCK'?)"),
    (["run", "resnet18"], "(did you mean 'resnet-18'?)"),
    (["run", "xyzzy"], None),
])
def test_a_misspelt_preset_or_model_gets_a_suggestion(argv, hint):
    done = subprocess.run([sys.executable, "-m", "vta", *argv], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert (hint in last) if hint else "did you mean" not in last, last


DIGITS = str(Path(__file__).resolve().parents[1] / "examples" / "digits_cnn.onnx")
OPS = ("(add, cast, clip, nn.batch_flatten, nn.bias_add, nn.conv2d, nn.dense, nn.global_avg_pool2d, nn.max_pool2d, "
       "nn.relu, nn.softmax, qnn.dequantize, qnn.quantize, right_shift)")


@pytest.mark.parametrize("argv, error", [
    (["run", "resnet-18", "--image-size", "32", "--start", "qnn.quantise"],
     (f"--start qnn.quantise: no operator matches it (did you mean 'qnn.quantize' or 'qnn.dequantize'?); give --start "
     f"an op name {OPS} or a node name")),
    (["run", "resnet-18", "--image-size", "32", "--stop", "layer4.1.conv3"],
     ("--stop layer4.1.conv3: no operator after the start matches it (did you mean 'layer4.1.conv2', 'layer4.1.conv1' "
     f"or 'layer4.0.conv2'?); give --stop an op name {OPS} or a node name")),
    (["run", DIGITS, "--start", "qnn.quantize", "--stop", "nn.batch_flaten"],
     ("--stop nn.batch_flaten: no operator after the start matches it (did you mean 'nn.batch_flatten'?); give --stop "
     "an op name (")),
    (["run", DIGITS, "--stop", "nn.batch_flatten"],   # one flag names VTA's region: the other is the model's default
     "--start nn.max_pool2d (the default): no operator matches it; give --start an op name ("),
    (["tune", "resnet-18", "--image-size", "32", "--start", "nn.maxpool2d", "--log", "x.jsonl"],
     "--start nn.maxpool2d: no operator matches it (did you mean 'nn.max_pool2d'?); give --start an op name ("),
])
def test_a_region_op_that_matches_nothing_names_the_flag_and_the_closest_names(argv, error, tmp_path):
    """--start qnn.quantise said "no operator matches start_name=...; give ... a predicate": Python's argument, no
    suggestion. The command line names its flag (and says when the failing name is the model's default) and offers
    the closest op and node names, as the model and config typos do."""
    done = subprocess.run([sys.executable, "-m", "vta", *argv], capture_output=True, text=True, timeout=300,
                          check=False, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = done.stderr.splitlines()
    assert line.startswith(f"vta: error: {error}"), line
    assert not list(tmp_path.iterdir())   # vta tune's log is not left behind


def test_an_option_typo_shows_the_subcommands_usage():
    done = subprocess.run([sys.executable, "-m", "vta", "config", "show", "pynq", "--jsn"], capture_output=True,
                          text=True, timeout=60, check=False)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines[0].startswith("usage: vta config show ")
    assert lines[-1] == "vta config show: error: unrecognized arguments: --jsn"


@pytest.mark.parametrize("argv, usage, error", [
    (["run", "resnet-18", "--n-trial", "3"], "vta run [options] model", "unrecognized arguments: --n-trial 3"),
    (["tune", "resnet-18", "--tuner", "foo"], "vta tune [options] model", "argument --tuner: invalid choice: 'foo'"),
    (["sim", "replay"], "vta sim replay [options] IMAGE", "the following arguments are required: IMAGE"),
    (["config", "shw"], "vta config [options] SUBCOMMAND ...", "argument SUBCOMMAND: invalid choice: 'shw'"),
])
def test_a_usage_error_is_one_usage_line_then_the_error_last(argv, usage, error):
    """argparse printed the command's whole usage, a dozen lines for vta run, above the error: the usage is now one
    line (the positionals, and where the options are listed) and the error is the last line."""
    done = subprocess.run([sys.executable, "-m", "vta", *argv], capture_output=True, text=True, timeout=60,
                          check=False)
    prog = usage.split(" [options]")[0]
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 2, done.stderr
    assert lines[0] == f"usage: {usage}  ({prog} --help lists them)"
    assert lines[1].startswith(f"{prog}: error: {error}")


def test_a_tuning_scripts_usage_error_is_short_too():
    done = subprocess.run([sys.executable, "-m", "tuning.tune_alu", "--n-trial", "x"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "usage: python -m tuning.tune_alu [options]  (python -m tuning.tune_alu --help lists them)",
        "python -m tuning.tune_alu: error: argument --n-trial: 'x' is not an integer; a trial count is 1..10000000"]


def test_a_warning_is_one_line_once_without_python_source(tmp_path):
    """A log with an unreadable line: tuning goes on, and says so once, as a CLI line (no source line)."""
    log = tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "vta", "tune", "resnet-18", "--image-size", "32", "--n-trial", "1",
            "--timing-only", "--tuner", "random", "--log", str(log)]
    assert subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False).returncode == 0
    with open(log, "a") as f:
        f.write("garbage line\n")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stderr.splitlines() if "unreadable" in line]
    line = len(log.read_text().splitlines())
    assert warned == [f"vta: warning: {log}: skipped 1 unreadable line(s): line {line}: not JSON (Expecting value)"]
    assert "warnings.warn" not in done.stderr and ".py:" not in done.stderr


def test_config_show_json_loads_back_as_the_same_config(tmp_path):
    from hw_config import load_config
    path = tmp_path / "mine.json"
    done = subprocess.run([sys.executable, "-m", "vta", "config", "show", "pynq", "--set", "LOG_BLOCK=5", "--json"],
                          capture_output=True, text=True, timeout=60, check=True)
    path.write_text(done.stdout)
    loaded, want = load_config(path), load_config("pynq", LOG_BLOCK=5)
    assert loaded.replace(DESCRIPTION=want.DESCRIPTION) == want and loaded.DESCRIPTION.startswith("pynq with LOG_BLOCK=5")
    again = subprocess.run([sys.executable, "-m", "vta", "config", "show", str(path)], capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 0 and again.stdout.startswith("pynq_1x32_")


UNWRITABLE = "/proc"   # no file can be created there, whoever runs the test (root ignores permission bits)


@pytest.mark.parametrize(("argv", "message"), [
    (["hw", "generate", "--out", ""], "--out '': empty path; give the directory to write into"),
    (["hw", "generate", "--out", "{tmp}/no/such"], "--out {tmp}/no/such: the directory {tmp}/no does not exist"),
    (["hw", "generate", "--out", "{unwritable}/x"], "--out {unwritable}/x: cannot write in the directory"),
    (["hw", "generate", "--out", "{tmp}/clash"], "{tmp}/clash/manifest.json is a directory, where a file"),
    (["dse", "resnet-18", "--out", ""], "--out '': empty path; give the directory to write into"),
    (["dse", "resnet-18", "--out", "{unwritable}/x"], "--out {unwritable}/x: cannot write in the directory"),
    (["dse", "resnet-18", "--out", "{tmp}/clash"], "{tmp}/clash/front.json is a directory, where a file"),
    (["dse", "resnet-18", "--out", "{tmp}/fronts"], "{tmp}/fronts/front is a file, where a directory"),
    ([*TUNE, "--log", ""], "--log: an empty path; give a file name such as tune.jsonl"),
    ([*TUNE, "--log", "{unwritable}/x.jsonl"], "--log {unwritable}/x.jsonl: cannot write in the directory"),
    ([*TUNE, "--log", "{tmp}/no/x.jsonl"], "--log {tmp}/no/x.jsonl: the directory {tmp}/no does not exist"),
    ([*TUNE, "--ops", ""], "--ops '': an empty op name"),
    ([*TUNE, "--ops", "conv2d,,dense"], "--ops 'conv2d,,dense': an empty op name"),
    (["calibrate", "examples/pynq_conv2d_measured.jsonl", "--out", "{unwritable}/x.json"],
     "--out {unwritable}/x.json: cannot write in the directory"),
])
def test_output_paths_are_checked_before_any_work(argv, message, tmp_path, capsys, monkeypatch):
    """An output a command could not write is refused before it works (a search or a fit used to run first and
    fail at the end), naming the flag; an empty --out / --log / --ops is refused instead of meaning the current
    directory, the default log or every op; a missing directory chain is not created."""
    from pathlib import Path
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    (tmp_path / "clash" / "manifest.json").mkdir(parents=True)
    (tmp_path / "clash" / "front.json").mkdir()
    (tmp_path / "fronts").mkdir()
    (tmp_path / "fronts" / "front").write_text("")
    fill = {"tmp": str(tmp_path), "unwritable": UNWRITABLE}
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert vta_main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vta: error: ") and message.format(**fill) in err and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_an_unknown_host_template_in_ops_lists_the_networks_own(capsys):
    """--target cpu --ops conv2d (the accelerator's name) matches no host task: the error lists the host templates
    the network has, which is what --ops takes there."""
    assert vta_main(["tune", "resnet-18", "--target", "cpu", "--image-size", "32", "--n-trial", "1",
                     "--ops", "conv2d"]) == 2
    err = capsys.readouterr().err
    assert "among --ops conv2d; this network's host templates are conv2d_" in err, err   # x86 or ARM family


def test_a_cycle_budget_error_names_the_flag_that_raises_it(capsys, monkeypatch):
    """As the work budget's error names --max-work, the cycle budget's names --max-cycles (the C simulator's and
    the reference simulator's alike)."""
    from pathlib import Path

    from simulator.errors import CycleBudgetExceeded
    from simulator.image import load_image
    from simulator.reference import ReferenceSimulator

    root = Path(__file__).resolve().parents[1]
    assert vta_main(["sim", "replay", str(root / "examples" / "gemm_0.npz"), "--max-cycles", "100"]) != 0
    err = capsys.readouterr().err
    assert "past the budget of max_cycles=100 (raise max_cycles, or --max-cycles on the command line" in err, err
    image = load_image(root / "examples" / "gemm_0.npz")
    with pytest.raises(CycleBudgetExceeded, match=r"max_cycles=100 \(raise max_cycles, or --max-cycles on the"):
        ReferenceSimulator(image.config, max_cycles=100).replay(image)
