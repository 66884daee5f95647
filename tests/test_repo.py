"""Repository invariants: the README's commands are what CI runs, imports point down, C agrees with Python."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from extras import need
from simulator._vta_sim import ffi, lib

from hw_config import load_config, presets
from simulator.params import param_values

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["hw_config", "simulator", "vta", "host", "graph_pack", "tuning"]  # lowest first


def _readme_commands() -> list[str]:
    block = re.search(r"## The two commands.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert block, "README.md must have a '## The two commands' section with a bash block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_states_two_commands_and_ci_runs_exactly_them():
    commands = _readme_commands()
    assert len(commands) == 2
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for command in commands:
        assert command in ci, f".ci/run does not run the README command {command!r}"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_only_point_down(layer):
    higher = set(LAYERS[LAYERS.index(layer) + 1:])
    for path in (ROOT / layer).rglob("*.py"):
        upward = _imports(path) & higher
        assert not upward, f"{path.relative_to(ROOT)} imports higher layer(s) {sorted(upward)}"


def test_the_quick_subset_touches_every_layer_and_names_only_tests_that_exist():
    import quick
    layers = set(quick.QUICK_MODULES) | set(quick.QUICK_TESTS)
    want = {*LAYERS, "hardware"}   # hardware imports only hw_config, so LAYERS' import order leaves it out
    assert want <= layers, f"layers without a quick test: {sorted(want - layers)}"
    whole = [m for modules in quick.QUICK_MODULES.values() for m in modules]
    assert set(quick.QUICK_EXCEPT) <= set(whole), "QUICK_EXCEPT leaves tests out of a module not listed whole"
    listed = [(m, ()) for m in whole]
    listed += [(m, prefixes) for per in quick.QUICK_TESTS.values() for m, prefixes in per.items()]
    listed += [(m, tuple(p.split("[")[0] for p in prefixes)) for m, prefixes in quick.QUICK_EXCEPT.items()]
    for module, prefixes in listed:
        path = ROOT / "tests" / module
        assert path.is_file(), f"tests/quick.py lists {module}, which does not exist"
        tests = [n.name for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        assert tests, module
        for prefix in prefixes:
            assert any(t.startswith(prefix) for t in tests), f"tests/quick.py: no test in {module} starts with {prefix!r}"


def test_the_readme_counts_the_quick_subset(request):
    """README.md says how many tests ``-m quick`` runs: checked in a session that collected the whole subset
    (``-m quick`` or the whole suite, no ``-k``), against the tests this session marked quick."""
    import quick
    config = request.config
    items = [i for i in request.session.items if i.get_closest_marker("quick")]
    listed = {m for modules in quick.QUICK_MODULES.values() for m in modules}
    listed |= {m for per in quick.QUICK_TESTS.values() for m in per}
    seen = {i.nodeid.partition("::")[0].rpartition("/")[2] for i in items}
    if config.option.keyword or config.option.markexpr not in ("", "quick") or not listed <= seen:
        pytest.skip("this session did not collect the whole quick subset (-m quick, or the whole suite)")
    said = re.search(r"runs a subset of about ([\d,]+) tests", " ".join((ROOT / "README.md").read_text().split()))
    assert said, "README.md no longer says how many tests the quick subset runs"
    assert abs(int(said.group(1).replace(",", "")) - len(items)) <= len(items) // 10, \
        f"README.md says about {said.group(1)} quick tests; there are {len(items):,} (and is its time still right?)"

def test_c_field_enums_follow_the_layout_table():
    cfg = load_config()
    prefixes = {"mem": "VTA_MEM_", "gemm": "VTA_LOOP_", "alu": "VTA_LOOP_", "uop": "VTA_UOP_"}
    c_names = {"pop_prev_dep": "POP_PREV", "pop_next_dep": "POP_NEXT", "push_prev_dep": "PUSH_PREV",
               "push_next_dep": "PUSH_NEXT", "reset_reg": "RESET", "dst_factor_out": "DST_OUT",
               "dst_factor_in": "DST_IN", "src_factor_out": "SRC_OUT", "src_factor_in": "SRC_IN",
               "dst_idx": "DST", "src_idx": "SRC", "wgt_idx": "WGT"}
    tails = {("gemm", "wgt_factor_out"): "VTA_GEMM_WGT_OUT", ("gemm", "wgt_factor_in"): "VTA_GEMM_WGT_IN",
             ("alu", "alu_opcode"): "VTA_ALU_OPCODE", ("alu", "use_imm"): "VTA_ALU_USE_IMM",
             ("alu", "imm"): "VTA_ALU_IMM"}
    for fmt, prefix in prefixes.items():
        fields = cfg.insn_formats[fmt].fields
        assert getattr(lib, {"mem": "VTA_MEM_NFIELDS", "gemm": "VTA_GEMM_NFIELDS", "alu": "VTA_ALU_NFIELDS",
                             "uop": "VTA_UOP_NFIELDS"}[fmt]) == len(fields)
        for i, f in enumerate(fields):
            name = tails.get((fmt, f.name)) or prefix + c_names.get(f.name, f.name.upper())
            assert getattr(lib, name) == i, f"{fmt}.{f.name}: C enum {name} is not {i}"


@pytest.mark.parametrize("preset", presets())
def test_c_parameter_block_matches_python(preset):
    assert ffi.sizeof("vta_params_t") == 4 * len(param_values(load_config(preset)))


def test_ruff_clean():
    ruff = need("ruff")
    done = subprocess.run([ruff, "check", str(ROOT)], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_limits_page_states_the_defaults_the_code_uses():
    from graph_pack.frontend_onnx import DEFAULT_MAX_MODEL_BYTES, DEFAULT_MAX_TENSOR_BYTES
    from hw_config.config import MAX_CONFIG_BYTES
    from simulator.errors import DEFAULT_MAX_CYCLES, DEFAULT_MAX_WORK
    from simulator.image import (
        DEFAULT_MAX_DRAM_BYTES,
        DEFAULT_MAX_INSNS,
        DEFAULT_MAX_SEGMENTS,
        DEFAULT_MAX_TEXT_CHARS,
    )
    from simulator.trace import DEFAULT_MAX_TRACE_EVENTS
    from tuning.dse import MAX_RECORD_BYTES, MAX_SPACE_BYTES
    from tuning.records import MAX_LINE_BYTES
    from vta.calibrate import MAX_LINE_BYTES as MEASUREMENT_LINE_BYTES
    from vta.calibrate import MAX_RECORDS as MAX_MEASUREMENTS
    page = (ROOT / "docs" / "limits.md").read_text()
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in page.splitlines()
            if line.startswith("| ") and not line.startswith("| what")}

    def value(text: str) -> int:
        text = text.split(" ")[0] if " units" in text or " characters" in text else text.split(" (")[0]
        units = {"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}
        for unit, scale in units.items():
            if text.endswith(unit):
                return int(text[:-len(unit)].strip()) * scale
        base, _, exp = text.partition("^")
        return int(base) ** int(exp) if exp else int(text)

    expected = {"simulated cycles of one run": DEFAULT_MAX_CYCLES,
                "host work of one run (GEMM MACs, ALU lanes, DMA bytes)": DEFAULT_MAX_WORK,
                "instructions in an image file": DEFAULT_MAX_INSNS,
                "DRAM bytes of an image file (all segments)": DEFAULT_MAX_DRAM_BYTES,
                "segments of an image file": DEFAULT_MAX_SEGMENTS,
                "config/stats text in an image file": DEFAULT_MAX_TEXT_CHARS,
                "trace events of a traced replay": DEFAULT_MAX_TRACE_EVENTS,
                "one tensor of an imported or zoo model": DEFAULT_MAX_TENSOR_BYTES,
                "an ONNX file plus all its constants": DEFAULT_MAX_MODEL_BYTES,
                "a hardware config file": MAX_CONFIG_BYTES,
                "one line of a tuning log": MAX_LINE_BYTES,
                "a co-design space file (`vta dse --space`)": MAX_SPACE_BYTES,
                "one line of co-design records (`vta dse --out DIR`: `records.jsonl`)": MAX_RECORD_BYTES,
                "one line of a measurements file (`vta calibrate`)": MEASUREMENT_LINE_BYTES,
                "records of a measurements file": MAX_MEASUREMENTS}
    for name, default in expected.items():
        assert value(rows[name]) == default, (name, rows[name], default)


# ---------------------------------------------------------------------------------------------------------
# .ci/apt-install.sh, the one apt-get block of the .ci scripts, driven through stub apt-get and sudo commands

APT_STUB = """#!/bin/sh
echo "apt-get $* (DEBIAN_FRONTEND=$DEBIAN_FRONTEND)" >> "$APT_CALLS"
echo "Reading package lists... (apt's chatter)"
case "$1" in install) exit "${APT_INSTALL_RC:-0}" ;; esac
"""


def _stub_path(tmp_path: Path) -> str:
    """A PATH holding only stubs of apt-get and sudo and the few tools the scripts use (no tclsh, no cross gcc)."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(APT_STUB)
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for stub in ("apt-get", "sudo"):
        (bin_dir / stub).chmod(0o755)
    for tool in ("bash", "sh", "dirname", "id", "mktemp", "cat", "rm", "env"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    return str(bin_dir)


def _bash(script: str, tmp_path: Path, rc: int = 0) -> subprocess.CompletedProcess:
    env = {"PATH": _stub_path(tmp_path), "APT_CALLS": str(tmp_path / "calls"), "APT_INSTALL_RC": str(rc)}
    return subprocess.run(["bash", "-c", script], check=False, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_ci_scripts_install_through_apt_install_only():
    scripts = {p.name: p.read_text() for p in (ROOT / ".ci").glob("*.sh")}
    with_apt = sorted(name for name, text in scripts.items() if re.search(r"apt-get (update|install)\b", text))
    assert with_apt == ["apt-install.sh"], with_apt
    for name in ("tcl.sh", "arm-cross.sh"):
        assert 'source "$(dirname "$0")/apt-install.sh"' in scripts[name], name


def test_apt_install_is_quiet_when_apt_succeeds(tmp_path: Path):
    res = _bash("source .ci/apt-install.sh && apt_install demo pkg-a pkg-b", tmp_path)
    assert (res.returncode, res.stdout, res.stderr) == (0, "", "")
    assert (tmp_path / "calls").read_text().splitlines() == [
        "apt-get update -qq (DEBIAN_FRONTEND=noninteractive)",
        "apt-get install -y -qq --no-install-recommends pkg-a pkg-b (DEBIAN_FRONTEND=noninteractive)"]


def test_apt_install_prints_apts_log_and_one_line_when_apt_fails(tmp_path: Path):
    res = _bash("source .ci/apt-install.sh; apt_install demo pkg-a; echo rc=$?", tmp_path, rc=100)
    assert res.stdout == "rc=1\n"
    assert res.stderr.count("(apt's chatter)") == 2                      # update's and install's output
    assert res.stderr.splitlines()[-1] == "demo: apt-get could not install pkg-a"


@pytest.mark.parametrize(("script", "message"), [
    ("tcl.sh", "tcl: apt-get installed tcl, but tclsh is not on PATH"),
    ("arm-cross.sh", ("arm-cross: apt-get installed gcc-arm-linux-gnueabihf libc6-dev-armhf-cross gcc-aarch64-linux-gnu "
                      "libc6-dev-arm64-cross qemu-user, but arm-linux-gnueabihf-gcc qemu-arm aarch64-linux-gnu-gcc "
                      "qemu-aarch64 is still not on PATH"))])
def test_a_ci_script_with_its_tool_missing_runs_apt_then_checks_the_tool(tmp_path: Path, script: str, message: str):
    """The missing-tool path: apt runs (a stub here, which installs nothing), then the script finds the tool still
    missing and says so in one line (exit 1), rather than printing a version of nothing."""
    res = _bash(f"bash .ci/{script}", tmp_path)
    assert res.returncode == 1, res
    assert res.stderr.startswith(message), res.stderr
    assert "install -y -qq --no-install-recommends" in (tmp_path / "calls").read_text()
