"""The ``vta`` command line, run in-process."""

import json
from pathlib import Path

import numpy as np
import pytest
from golden_files import golden_path

from hw_config import load_config, presets
from vta.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_help_everywhere(capsys):
    for argv in ([], ["config"], ["config", "list"], ["config", "show"], ["sim"], ["sim", "disasm"]):
        status, out, _ = run(capsys, *argv, "--help")
        assert status == 0 and out.startswith("usage: vta")


def test_missing_command_is_a_usage_error_that_lists_the_commands(capsys):
    status, _, err = run(capsys)
    assert status == 2 and err.startswith("usage: vta") and all(f"    {c} " in err for c in ("config", "sim", "hw"))
    status, _, err = run(capsys, "sim")
    assert status == 2 and "SUBCOMMAND" in err and all(f"    {c} " in err for c in ("replay", "disasm"))


def test_config_list(capsys):
    status, out, _ = run(capsys, "config", "list")
    assert status == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == presets()
    assert "pynq_1x16_i8w8a32_15_15_18_17" in out


def test_config_show(capsys):
    status, out, _ = run(capsys, "config", "show", "pynq")
    assert status == 0
    config_part, derived_part = out.split("\nderived:\n")
    assert "LOG_BLOCK" in config_part and "ACC_BUFF_DEPTH" not in config_part
    assert "ACC_BUFF_DEPTH" in derived_part and "pynq_1x16_i8w8a32_15_15_18_17" in derived_part
    assert run(capsys, "config", "show")[1] == out  # pynq is the default


def test_config_show_set_and_json(capsys, tmp_path):
    status, out, _ = run(capsys, "config", "show", "pynq", "--set", "LOG_BLOCK=5", "--set", "TARGET=sim",
                         "--json")
    assert status == 0
    data = json.loads(out)
    assert data["config"]["LOG_BLOCK"] == 5 and data["config"]["TARGET"] == "sim"
    assert data["derived"]["BLOCK_IN"] == 32 and data["derived"]["model"] == "sim_1x32_i8w8a32_15_15_18_17"
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data["config"]))
    status, out, _ = run(capsys, "config", "show", str(path), "--json")
    base = load_config("pynq")
    expected = base.replace(LOG_BLOCK=5, TARGET="sim", DESCRIPTION=f"pynq with LOG_BLOCK=5, TARGET=sim; the base: "
                                                                    f"{base.DESCRIPTION}").to_dict()
    assert status == 0 and json.loads(out)["config"] == expected   # the preset's description is not claimed as is
    status, out, _ = run(capsys, "config", "show", "pynq", "--set", "LOG_BLOCK=5", "--set", "DESCRIPTION=mine")
    assert status == 0 and out.splitlines()[0] == "pynq_1x32_i8w8a32_15_15_18_17  (mine)"


def test_sim_disasm_golden(capsys):
    path = golden_path("gemm_1.npz")
    status, out, err = run(capsys, "sim", "disasm", str(path))
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("#") and "29 instructions" in lines[0]
    assert len(lines) == 1 + len(np.load(path)["insns"])
    assert lines[-1] == "  28  FINISH"


@pytest.mark.parametrize("argv, message", [
    (["config", "show", "nosuchpreset"], "nosuchpreset"),
    (["config", "show", "pynq", "--set", "LOG_BLOCK=9"], "LOG_BLOCK=9"),
    (["config", "show", "pynq", "--set", "NOPE=1"], "unknown key 'NOPE'"),
    (["sim", "disasm", "/nonexistent/prog.npz"], "program image /nonexistent/prog.npz: no such file"),
])
def test_errors_exit_2_with_message(capsys, argv, message):
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("vta: error: ") and message in err and "Traceback" not in err


def test_bad_image_is_an_error_not_a_traceback(capsys, tmp_path):
    path = tmp_path / "x.npz"
    path.write_text("not a zip")
    status, _, err = run(capsys, "sim", "disasm", str(path))
    assert status == 2 and err.startswith("vta: error: program image") and "not an .npz" in err


def test_bad_set_syntax(capsys):
    status, _, err = run(capsys, "config", "show", "--set", "LOG_BLOCK")
    assert status == 2 and "KEY=VALUE" in err


def test_python_dash_m_vta():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", "vta", "config", "list"], cwd=root, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0 and "pynq" in proc.stdout and proc.stderr == ""
