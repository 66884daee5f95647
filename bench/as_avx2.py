"""Run a bench script as an AVX2-only machine runs it, on a machine with AVX-512.

    python bench/as_avx2.py bench/network.py --repeat 15

Every side of the measurement is limited to AVX2 (x86-64-v3) in the same process: the simulator's GEMM kernels
(``VTA_SIM_KERNEL=avx2``), the host layers' LLVM kernels (``VTA_HOST_ISA=avx2``), numpy's OpenBLAS
(``OPENBLAS_CORETYPE=Haswell``) and onnxruntime. onnxruntime's MLAS picks its kernels once, from CPUID and
XGETBV, and has no switch: this script runs a copy of the installed package (made once, cached under
``~/.cache/vta/bench``) whose extension module has each XGETBV replaced by ``push 7; pop rax``: the x87, SSE and
AVX register state enabled and AVX-512's not, which is what the operating system of a CPU without AVX-512
reports, so MLAS takes its AVX2 kernels. The copy is checked before use: its u8 x s8 ``MatMulInteger`` must
saturate as MLAS's AVX2 kernel does (``vpmaddubsw`` sums pairs of products into int16), where the AVX-512 VNNI
kernel is exact. What cannot be emulated is the core: its caches, clock and execution units stay this CPU's,
so the figures are this CPU running AVX2 code, not an AVX2-only CPU (say so wherever they are quoted).

On a machine without AVX-512 the script simply runs the bench (nothing to limit). Needs onnxruntime and
binutils' ``objdump`` (to find the XGETBV instructions) when there is something to limit.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _host import cpu_flags

# x87 | SSE | AVX state: XCR0 of an AVX2-only CPU; `push 7; pop rax` is as long as `xgetbv` (3 bytes)
XGETBV = b"\x0f\x01\xd0"
XCR0_AVX2 = b"\x6a\x07\x58"
ENV = {"VTA_SIM_KERNEL": "avx2", "VTA_HOST_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell", "VTA_BENCH_ISA": "avx2"}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vta" / "bench"

# run in the patched copy: MLAS's AVX2 u8 x s8 kernel saturates 255 * -128 + 255 * -128 to -32768, VNNI does not
CHECK = """
import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "g",
    [helper.make_tensor_value_info("a", TensorProto.UINT8, [16, 64]),
     helper.make_tensor_value_info("b", TensorProto.INT8, [64, 16])],
    [helper.make_tensor_value_info("y", TensorProto.INT32, [16, 16])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]); m.ir_version = 8
s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
a, b = rng.integers(0, 100, (16, 64), dtype=np.uint8), rng.integers(-60, 60, (64, 16), dtype=np.int8)
exact = s.run(None, {"a": a, "b": b})[0] == a.astype(np.int32) @ b.astype(np.int32)
y = s.run(None, {"a": np.full((16, 64), 255, np.uint8), "b": np.full((64, 16), -128, np.int8)})[0]
print(ort.__file__, bool(exact.all()), int(y[0, 0]))
"""


def xgetbv_offsets(lib: Path) -> list[int]:
    """File offsets of every XGETBV instruction in ``lib``'s .text, as objdump disassembles it."""
    if shutil.which("objdump") is None:
        sys.exit("as_avx2.py: needs objdump (binutils) to find onnxruntime's XGETBV instructions")
    heads = subprocess.run(["objdump", "-h", str(lib)], capture_output=True, text=True, check=True).stdout
    m = re.search(r"\s\.text\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", heads)
    if not m:
        sys.exit(f"as_avx2.py: no .text section in {lib}")
    size, vma, offset = (int(v, 16) for v in m.groups())
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(lib)],
                          capture_output=True, text=True, check=True).stdout
    addrs = [int(a, 16) for a in re.findall(r"^\s*([0-9a-f]+):\s+xgetbv\s*$", code, re.MULTILINE)]
    return [a - vma + offset for a in addrs if vma <= a < vma + size]


def onnxruntime_limited_to_avx2() -> Path:
    """A directory holding a checked copy of the installed onnxruntime that takes its AVX2 kernels."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.origin:
        sys.exit("as_avx2.py: onnxruntime is not installed (pip install -e '.[onnx]')")
    package = Path(spec.origin).parent
    libs = sorted(package.glob("capi/onnxruntime_pybind11_state*.so"))
    if len(libs) != 1:
        sys.exit(f"as_avx2.py: expected one onnxruntime extension module in {package / 'capi'}, found {len(libs)}")
    stat = libs[0].stat()
    key = hashlib.sha256(f"{libs[0]}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    try:
        version = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:   # another distribution name (onnxruntime-gpu ...)
        version = "other"
    home = CACHE / f"onnxruntime-{version}-avx2-{key}"
    if (home / "checked").exists():
        return home
    CACHE.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".onnxruntime-avx2-", dir=CACHE))
    try:
        copy = work / "onnxruntime"
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
        lib = copy / libs[0].relative_to(package)
        offsets = xgetbv_offsets(lib)
        data = bytearray(lib.read_bytes())
        if not offsets or any(data[o:o + 3] != XGETBV for o in offsets):
            sys.exit(f"as_avx2.py: cannot find onnxruntime's XGETBV instructions in {libs[0]} ({len(offsets)} found)")
        for o in offsets:
            data[o:o + 3] = XCR0_AVX2
        lib.write_bytes(data)
        out = subprocess.run([sys.executable, "-c", CHECK], check=False, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(work)}, cwd=work)
        fields = out.stdout.split()
        if out.returncode or len(fields) != 3 or not fields[0].startswith(str(work)):
            sys.exit(f"as_avx2.py: the patched onnxruntime did not run: {(out.stderr or out.stdout).strip()[-500:]}")
        exact, saturated = fields[1] == "True", int(fields[2]) != 64 * 255 * -128
        if not (exact and saturated):
            sys.exit(f"as_avx2.py: the patched onnxruntime does not behave as MLAS's AVX2 kernels (exact on small "
                     f"values: {exact}, 255 x -128 saturated: {saturated}); this onnxruntime version is not supported")
        (work / "checked").write_text(f"{len(offsets)} XGETBV patched in {libs[0].name}\n")
        try:
            os.replace(work, home)
        except OSError:
            if not (home / "checked").exists():   # else another run made it first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return home


def main() -> None:
    ap = argparse.ArgumentParser(
        usage="python bench/as_avx2.py SCRIPT [ARGS ...]",
        description=__doc__.splitlines()[0] + " Every side of the run (simulator, host kernels, OpenBLAS, "
        "onnxruntime) is limited to AVX2; onnxruntime through a patched copy of the installed package (~70 MB, made "
        "once under ~/.cache/vta/bench; needs objdump). See the script's docstring.",
        epilog="example: python bench/as_avx2.py bench/network.py --repeat 15")
    ap.add_argument("script", help="the bench script to run")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (its --help too)")
    if len(sys.argv) < 2:
        ap.error("give the bench script to run, e.g. bench/network.py")
    args = ap.parse_args()
    if not Path(args.script).is_file():
        sys.exit(f"as_avx2.py: no such script: {args.script}")
    flags = cpu_flags()
    if "avx2" not in flags:
        sys.exit("as_avx2.py: this CPU has no AVX2")
    env = dict(os.environ)
    if "avx512f" in flags:   # else this is an AVX2-only CPU already: the bench runs as it is
        path = [str(onnxruntime_limited_to_avx2()), os.environ.get("PYTHONPATH", "")]
        env.update(ENV, PYTHONPATH=os.pathsep.join(p for p in path if p))
    os.execve(sys.executable, [sys.executable, args.script, *args.args], env)


if __name__ == "__main__":
    main()
