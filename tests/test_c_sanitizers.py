"""The C simulator under AddressSanitizer + UBSan, driven by tests/c/hostile.c (no Python in that process).

The driver runs random and malformed programs and misuses the API; it exits nonzero on any violated
expectation, and the sanitizers abort on the first memory error, undefined behaviour or leak.
A build under ThreadSanitizer runs the same programs with every GEMM split over three threads (the pool's
lock-free hand-off, and its caller taking over shares whose worker has not started them).
A last test checks that the C sources compile warning-free as strict C99 (-pedantic), and one that the AMX tile
instructions are in the AMX file's object only.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from extras import needs

from hw_config import load_config
from simulator.params import param_values

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "simulator" / "csrc"
DRIVER = ROOT / "tests" / "c" / "hostile.c"
SOURCES = sorted(CSRC.glob("*.c"))   # the simulator is every C file there (simulator/_build.py)

CC = shutil.which("gcc") or shutil.which("cc")
pytestmark = needs("cc")

PRESETS = ("pynq", "batch4", "block32")
# (preset, VTA_SIM_KERNEL): every preset on the default path, and the portable one's SSE2 kernels on pynq (16x16
# run kernel) and block32 (the general-shape kernel), and the AMX kernels over their C model of the tile instructions
# on both shapes (amx-emulated: its staging buffers and strided tile loads and stores)
RUNS = [(p, "auto") for p in PRESETS] + [("pynq", "portable"), ("block32", "portable"), ("pynq", "amx-emulated"),
                                          ("block32", "amx-emulated")]
# About 2-3 s per preset on an idle core with the sanitizers (~25 s for the whole file with 2 busy cores); deeper:
# VTA_HOSTILE_ITERATIONS=200000 python -m pytest tests/test_c_sanitizers.py
ITERATIONS = int(os.environ.get("VTA_HOSTILE_ITERATIONS", "12000"))
SEEDS = {("pynq", "auto"): 1, ("batch4", "auto"): 2, ("block32", "auto"): 3, ("pynq", "portable"): 4,
         ("block32", "portable"): 5, ("pynq", "amx-emulated"): 7, ("block32", "amx-emulated"): 8}

SANITIZE = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


# GEMM threads on for every GEMM (they are off by default in a C build), under ThreadSanitizer
TSAN = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-fsanitize=thread", "-DVTA_SIM_DEFAULT_THREADS=3",
        "-DVTA_SIM_PAR_MIN_MACS=0", "-pthread"]
TSAN_ITERATIONS = int(os.environ.get("VTA_HOSTILE_TSAN_ITERATIONS", "2000"))


def _build_driver(out: Path, flags: list[str]) -> Path:
    cmd = [CC, *flags, f"-I{CSRC}", str(DRIVER), *map(str, SOURCES), "-o", str(out)]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"build failed: {' '.join(cmd)}\n{res.stdout}{res.stderr}"
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_driver(tmp_path_factory.mktemp("hostile") / "hostile", SANITIZE)


def _run_driver(driver: Path, preset: str, kernel: str, iterations: int, seed: int, tmp_path: Path) -> str:
    values = param_values(load_config(preset))
    assert len(values) == 118
    params = tmp_path / f"{preset}.params"
    params.write_text(" ".join(str(v) for v in values) + "\n")

    env = dict(os.environ)
    # LeakSanitizer works in this sandbox (ptrace is allowed), so leaks are checked too.
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:halt_on_error=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env["TSAN_OPTIONS"] = "halt_on_error=1"
    env.pop("LD_PRELOAD", None)
    env["VTA_SIM_KERNEL"] = kernel
    res = subprocess.run([str(driver), str(params), str(iterations), str(seed)], check=False, capture_output=True,
                         text=True, env=env, timeout=600)
    report = f"exit {res.returncode}\n--- stdout\n{res.stdout}\n--- stderr (tail)\n{res.stderr[-6000:]}"
    print(res.stdout)  # the outcome counts, visible with -s

    assert "runtime error" not in res.stderr, report
    assert "ERROR: AddressSanitizer" not in res.stderr, report
    assert "ERROR: LeakSanitizer" not in res.stderr, report
    assert "WARNING: ThreadSanitizer" not in res.stderr, report
    assert res.returncode == 0, report
    assert re.search(rf"^hostile: {iterations} programs: ok=\d+, insn=\d+, mem=\d+, deadlock=\d+, budget=\d+",
                     res.stdout, re.MULTILINE), report
    last = res.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"(\d+) passed, 0 failed", last)
    assert m and int(m.group(1)) > 0, report
    return res.stdout


@pytest.mark.parametrize(("preset", "kernel"), RUNS)
def test_hostile_programs_under_sanitizers(hostile: Path, preset: str, kernel: str, tmp_path: Path) -> None:
    _run_driver(hostile, preset, kernel, ITERATIONS, SEEDS[preset, kernel], tmp_path)


def test_amx_emulated_computes_what_portable_does(hostile: Path, tmp_path: Path) -> None:
    """The driver's digest of every run's stats, SRAMs and DRAM is the same on amx-emulated as on the portable path,
    over the shrunk machines' odd shapes too (BLOCK_OUT 17-32: the AMX general kernel's zero-padded last outputs;
    BLOCK_IN not a multiple of 4: its padded inputs), which no hw_config preset has."""
    # seed 7's shrunk machines have such shapes (a wrong last-output group changed this digest; seed 9's did not)
    runs = {k: _run_driver(hostile, "pynq", k, 3000, 7, tmp_path) for k in ("portable", "amx-emulated")}
    assert re.search(r"^hostile: digest [0-9a-f]{16}$", runs["portable"], re.MULTILINE), runs["portable"]
    assert runs["amx-emulated"] == runs["portable"]


def test_hostile_programs_with_gemm_threads_under_tsan(tmp_path: Path) -> None:
    driver = _build_driver(tmp_path / "hostile_tsan", TSAN)
    _run_driver(driver, "pynq", "auto", TSAN_ITERATIONS, 6, tmp_path)


@pytest.mark.parametrize("source", [c.name for c in SOURCES])
def test_vta_sim_compiles_as_pedantic_c99(tmp_path: Path, source: str) -> None:
    cmd = [CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c", str(CSRC / source),
           "-o", str(tmp_path / "out.o")]
    res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout}{res.stderr}"
    assert res.stderr.strip() == "", res.stderr


TILE_INSTRUCTIONS = {"ldtilecfg", "tilerelease", "tileloadd", "tilestored", "tilezero", "tdpbssd"}


@pytest.mark.skipif(platform.machine() != "x86_64" or not shutil.which("objdump"),
                    reason="needs an x86-64 host with objdump")
def test_amx_instructions_only_in_their_file(tmp_path: Path) -> None:
    """The AMX target is enabled in vta_amx_native.c only (docs/simulator.md, "Kernel paths"): its object holds
    every tile instruction the kernels use (a build that compiled them away would leave the amx path empty), and no
    other file's object holds any (tile code outside the CPUID / OS check would fault on CPUs without AMX)."""
    found = {}
    for source in SOURCES:
        obj = tmp_path / f"{source.stem}.o"
        res = subprocess.run([CC, "-std=c99", "-O1", f"-I{CSRC}", "-c", str(source), "-o", str(obj)],
                             check=False, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        text = subprocess.run(["objdump", "-d", str(obj)], check=True, capture_output=True, text=True).stdout
        found[source.name] = {m for m in TILE_INSTRUCTIONS if re.search(rf"\s{m}\s", text)}
    assert found.pop("vta_amx_native.c") == TILE_INSTRUCTIONS
    assert not any(found.values()), found
