"""The C simulator built for a Pynq board's 32-bit ARM (armv7l, hard float): cross-compiled with Debian's
gcc-arm-linux-gnueabihf, run under qemu-arm, driven by tests/c/hostile.c (random and malformed programs, API
misuse). Its outcome counts and its digest of every run's stats and of the SRAMs and DRAM must equal a native
build's for the same seed: a 32-bit size_t, 4-byte longs and pointers, and the portable kernels (the only ones
an ARM build holds) give the same results as the x86-64 kernels. A second ARM build runs under AddressSanitizer
and UBSan. `bash .ci/arm-cross.sh` installs the toolchain.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from extras import need, needs

from hw_config import load_config
from simulator.params import param_values

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "simulator" / "csrc"
DRIVER = ROOT / "tests" / "c" / "hostile.c"
SOURCES = sorted(CSRC.glob("*.c"))   # the simulator is every C file there (simulator/_build.py)
# GCC 12 for armv7 spends ~8 s in SLP vectorisation of the driver's big switch functions at -O2 (1 s without it):
# the driver alone is built without it; the simulator's sources get exactly the flags given
DRIVER_ONLY = ["-fno-tree-slp-vectorize"]
SYSROOT = "/usr/arm-linux-gnueabihf"   # the armhf libraries qemu-arm loads for a dynamically linked program

pytestmark = needs("armv7-toolchain", "cc")

ARM = ["-march=armv7-a", "-mfpu=neon", "-mfloat-abi=hard"]
WARNINGS = ["-std=c99", "-Wall", "-Wextra", "-Werror"]
PLAIN = [*WARNINGS, "-O2", "-pthread"]
SANITIZE = [*WARNINGS, "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer", "-pthread"]
# (preset, seed, iterations): the pynq preset's 16x16 tiles, batch4's four rows, block32's general-shape kernel
RUNS = [("pynq", 11, 3000), ("batch4", 12, 2000), ("block32", 13, 2000)]
SANITIZED_RUN = ("pynq", 14, 1500)
X86_KERNELS = re.compile(r"\w+_(?:avx|sse|ssse)\d\w*")   # gemm_avx2, gemm_row_ssse3_sum2_16x16, alu_lanes_avx2, ...


def _compile(cc: str, flags: list[str], out: Path) -> Path:
    driver = out.with_suffix(".driver.o")
    for cmd in ([cc, *flags, *DRIVER_ONLY, f"-I{CSRC}", "-c", str(DRIVER), "-o", str(driver)],
                [cc, *flags, f"-I{CSRC}", *map(str, SOURCES), str(driver), "-o", str(out)]):
        res = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"build failed: {' '.join(cmd)}\n{res.stdout}{res.stderr}"
        assert res.stderr.strip() == "", res.stderr
    return out


@pytest.fixture(scope="module")
def drivers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The driver three ways, built side by side: native -O2, armv7 -O2 (static) and armv7 with sanitizers."""
    cross, _ = need("armv7-toolchain")
    native = shutil.which("gcc") or shutil.which("cc")
    d = tmp_path_factory.mktemp("armv7")
    jobs = {"native": (native, PLAIN, d / "hostile"),
            "arm": (cross, [*PLAIN, *ARM, "-static"], d / "hostile-arm"),
            "arm-sanitized": (cross, [*SANITIZE, *ARM], d / "hostile-arm-asan")}
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(_compile, *job) for k, job in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def _run(cmd: list[str], preset: str, iterations: int, seed: int, tmp: Path, **env: str) -> list[str]:
    params = tmp / f"{preset}.params"
    params.write_text(" ".join(str(v) for v in param_values(load_config(preset))) + "\n")
    run_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "VTA_SIM_KERNEL")}
    # LeakSanitizer cannot run under qemu-user (it needs ptrace): leaks are checked natively (test_c_sanitizers.py)
    run_env.update(ASAN_OPTIONS="detect_leaks=0:halt_on_error=1", UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
                   **env)
    res = subprocess.run([*cmd, str(params), str(iterations), str(seed)], check=False, capture_output=True,
                         text=True, env=run_env, timeout=600)
    report = f"{' '.join(cmd)}: exit {res.returncode}\n--- stdout\n{res.stdout}\n--- stderr (tail)\n{res.stderr[-4000:]}"
    assert res.returncode == 0, report
    assert "runtime error" not in res.stderr and "Sanitizer" not in res.stderr, report
    lines = res.stdout.strip().splitlines()
    assert re.fullmatch(r"[1-9]\d* passed, 0 failed", lines[-1]), report
    assert any(re.fullmatch(r"hostile: digest [0-9a-f]{16}", line) for line in lines), report
    return lines[:-1]   # the pass count differs: an ARM build also checks maps past its 32-bit address space


def _qemu() -> list[str]:
    return [need("armv7-toolchain")[1], "-L", SYSROOT]


@pytest.mark.parametrize(("preset", "seed", "iterations"), RUNS)
def test_armv7_build_computes_what_the_native_build_does(drivers: dict[str, Path], preset: str, seed: int,
                                                          iterations: int, tmp_path: Path) -> None:
    native = _run([str(drivers["native"])], preset, iterations, seed, tmp_path)
    arm = _run([*_qemu(), str(drivers["arm"])], preset, iterations, seed, tmp_path)
    assert arm == native   # counts of every outcome, and the digest of what the runs computed
    # the native build's portable kernels too, since they are all the ARM build has
    assert _run([str(drivers["native"])], preset, iterations, seed, tmp_path, VTA_SIM_KERNEL="portable") == native


def test_armv7_build_under_sanitizers(drivers: dict[str, Path], tmp_path: Path) -> None:
    preset, seed, iterations = SANITIZED_RUN
    native = _run([str(drivers["native"])], preset, iterations, seed, tmp_path)
    assert _run([*_qemu(), str(drivers["arm-sanitized"])], preset, iterations, seed, tmp_path) == native


def test_armv7_build_holds_only_the_portable_kernels(drivers: dict[str, Path]) -> None:
    nm = Path(need("armv7-toolchain")[0]).with_name("arm-linux-gnueabihf-nm")
    symbols = subprocess.run([str(nm), str(drivers["arm"])], check=True, capture_output=True, text=True).stdout
    assert re.search(r" [tT] gemm_vec16$", symbols, re.MULTILINE), "no generic GEMM kernel (gemm_vec16)"
    assert not X86_KERNELS.findall(symbols), sorted(set(X86_KERNELS.findall(symbols)))
    native = subprocess.run(["nm", str(drivers["native"])], check=True, capture_output=True, text=True).stdout
    assert X86_KERNELS.search(native), "the x86-64 build should hold its SIMD kernels (is the pattern stale?)"
