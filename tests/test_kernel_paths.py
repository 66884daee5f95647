"""Every GEMM kernel path this CPU supports gives today's results bit for bit (docs/simulator.md, "Kernel paths").

One build holds the portable, AVX2, AVX-512, AVX-512 VNNI and AMX kernels (and the AMX kernels again over a C model
of the tile instructions, amx-emulated); VTA_SIM_KERNEL forces one. For each path
the CPU supports, a subprocess with the variable set replays the golden programs against VTA's bytes and
counters, runs a sample of the C/Python differential fuzz (tests/test_fuzz.py's generator) against the
pure-Python reference, and checks GEMMs on block shapes that reach every vector and tail loop against numpy,
with random micro-ops and with runs of micro-ops sharing a weight tile (one and several threads).
Paths the CPU lacks are skipped here (the test says which) and refused with a clear error at Simulator creation;
the AVX-512 kernels are also checked on any AVX2 CPU in a build over SIMDe's emulation of their intrinsics, the AMX
kernels on any AVX2 CPU as amx-emulated, and the generic C kernels (non-x86 hosts) in a VTA_SIM_PORTABLE=1 build.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from extras import needs

from hw_config import load_config
from simulator.core import Simulator, kernel_path, kernels_supported
from simulator.errors import SimulatorError

PATHS = ("portable", "avx2", "avx512", "avx512vnni", "amx")   # in order of preference ("auto" takes the last)
FUZZ_STREAMS = 150  # per fuzz config and path (tests/test_fuzz.py runs 2000 on the default path)
# square blocks 2, 4, 8 (tails below one vector), 16, 32 and 64 (every vector loop), and batch 4
SMALL_BUFFERS = {"LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 11, "LOG_WGT_BUFF_SIZE": 12, "LOG_ACC_BUFF_SIZE": 12}
GEMM_CONFIGS = {f"block{1 << b}": {"LOG_BLOCK": b, **(SMALL_BUFFERS if b <= 3 else {})} for b in range(1, 7)}
GEMM_CONFIGS["batch4"] = {"LOG_BATCH": 2}


def _run_triples(rng: np.random.Generator) -> list[tuple[int, int, int]]:
    """Micro-ops in runs that share a weight tile and step dst / src by constants (the simulator runs each such run
    through one kernel call): steps of +1, 0 and negative, a run broken by a step change, a lone micro-op, and
    runs of rows (2D: alike runs whose starts step by constants, up or down)."""
    w = int(rng.integers(0, 4))
    rows = [(5 * r + i, 6 * r + i, w + 2) for r in range(3) for i in range(3)]      # rows of a 2D run
    rows += [(13 - 4 * r + i, 20 - 7 * r + 2 * i, w) for r in range(3) for i in range(2)]   # rows stepping down
    rows += [(1 + i, 2 + 2 * i, w) for i in range(2)]   # at the next row step of dst, not of src: a new run
    rows += [(4 * r + i, 5 * r + i, w + 3) for r in range(3) for i in range(4)]   # rows of contiguous indices
    return ([(d, 3 + d, w) for d in range(6)] + [(9, 20 - 2 * k, w) for k in range(3)] +
            [(12 - 3 * k, 5, w + 1) for k in range(4)] + [(0, 0, w + 1), (1, 2, w + 1), (4, 4, w + 1)] +
            [(2, 9, w + 2)] + rows)


def _lanes(block_in: int, quads: int) -> list[np.ndarray]:
    """The input channels whose products one int16 lane of the unsigned-input kernels sums when ``quads`` quads'
    vpmaddubsw results add before widening (2: tiles marked sum2, 4: sum4): channel c = 4k + 2h + e goes to lane
    (h, k // quads)."""
    c = np.arange(block_in)
    key = (c % 4) // 2 + 2 * (c // (4 * quads))
    return [c[key == k] for k in np.unique(key)]


def _lane_abs_sums(w: np.ndarray, quads: int) -> np.ndarray:
    """Per tile, the largest sum of |w| over one output's lane (_lanes): the sums are exact while it is <= 258."""
    a = np.abs(w.astype(np.int64))
    return np.max([a[..., lane].sum(axis=-1).max(axis=-1) for lane in _lanes(w.shape[-1], quads)], axis=0)


def _tile_at_limit(rng: np.random.Generator, shape: tuple[int, int], quads: int, total: int,
                   sign: int) -> np.ndarray:
    """A weight tile each of whose lanes (_lanes) has |w| adding up to ``total`` (as near as the lane's size
    allows), all of sign ``sign``: with inputs of 127 a lane's int16 sum is 127 x total, 32766 for 258 (the most
    that fits) and past int16 for 259."""
    cap = 127 if sign > 0 else 128
    w = np.zeros(shape, np.int64)
    for o in range(shape[0]):
        for lane in _lanes(shape[1], quads):
            want = min(total, cap * len(lane))
            part = np.full(len(lane), want // len(lane))
            part[: want % len(lane)] += 1
            for _ in range(8):   # move random amounts between the lane's weights, keeping the sum and the cap
                a, b = rng.integers(0, len(lane), 2)
                move = int(rng.integers(0, min(part[a], cap - part[b]) + 1))
                part[a] -= move
                part[b] += move
            w[o, lane] = sign * part
    return w.astype(np.int8)


def _gemm_check(name: str, overrides: dict, seed: int, runs: bool = False, threads: int = 1,
                unsigned: bool = False, sums: int = 1, fused: bool = False) -> None:
    """Random GEMMs (several micro-ops, both loops, extreme operands) against numpy with int32 wrap-around; with
    ``runs`` the micro-ops come in runs (``_run_triples``), with ``threads`` every GEMM is split over that many,
    with ``unsigned`` every input is in [0, 127] (what the unsigned-input kernel takes: ReLU outputs), with
    ``sums`` 2 or 4 most weight tiles allow that many quads' int16 sums (small weights) and four sit at the limit,
    two just inside it (a lane's sum of |w| is 258) and two just outside (259), each sign. Where the unsigned-input
    kernels built a tile's quad layout, its sum2 / sum4 marks must be what numpy computes. With ``fused`` the inner
    loop's iterations (5 of them: more than the avx512vnni kernel's four tiles a call) all add into the same
    accumulators (dst_factor_in 0), which that path's unsigned kernel takes in one call per run."""
    cfg = load_config("pynq", **overrides)
    rng = np.random.default_rng(seed)
    n_inp, n_wgt, n_acc = (24 + 4 * 24, 12 + 4 * 2, 16) if fused else (24, 12, 16)
    x = rng.integers(0 if unsigned else -128, 128, (n_inp, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    bound = {1: 128, 2: 65, 4: 33}[sums]
    w = rng.integers(-bound, min(bound, 128), (n_wgt, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    x[0], w[0] = (127 if unsigned else -128), -128  # largest products
    w[1] = 127
    if sums > 1:   # tiles at the limit of the int16 sums: with inputs of 127, those outside it would wrap
        x[1:4] = 127
        for t, (total, sign) in enumerate(((258, -1), (258, 1), (259, 1), (259, -1))):
            w[t] = _tile_at_limit(rng, w.shape[1:], sums, total, sign)
    acc = rng.integers(-2**31, 2**31, (n_acc, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    acc[0] = 2**31 - 1  # wraps
    triples = [(int(rng.integers(0, 4)), int(rng.integers(0, 6)), int(rng.integers(0, 4))) for _ in range(5)]
    iters, dst, src, wf = (2, 3), (4, 1), (6, 2), (3, 1)
    if runs:
        triples, iters, dst, src, wf = _run_triples(rng), (2, 1), (1, 0), (1, 0), (3, 0)
    if fused:   # 5 inner iterations into the same accumulators, each with its own inputs and tile
        iters, dst, src, wf = (2, 5), (dst[0], 0), (1, 24), (1, 2)
    sim = _gemm_against_numpy(name, cfg, x, w, acc, triples, iters, dst, src, wf, threads)
    _assert_sum_marks(sim, w, name)


def _gemm_against_numpy(name: str, cfg, x: np.ndarray, w: np.ndarray, acc: np.ndarray,
                        triples: list[tuple[int, int, int]], iters: tuple[int, int], dst: tuple[int, int],
                        src: tuple[int, int], wf: tuple[int, int], threads: int) -> Simulator:
    """One GEMM of these micro-ops and loop factors on a simulator of the VTA_SIM_KERNEL path (split over
    ``threads``), its accumulators against numpy's with int32 wrap-around; returns the simulator."""
    from test_semantics import finish, gemm, uops, wrap32

    sim = Simulator(cfg, threads=threads)
    sim._set_threads(threads, 0)
    assert sim.kernel_path == os.environ["VTA_SIM_KERNEL"]
    sim.write_sram("inp", 0, x)
    sim.write_sram("wgt", 0, w)
    sim.write_sram("acc", 0, acc)
    sim.write_sram("uop", 0, uops(cfg, *triples))
    sim.run(gemm(cfg, 0, len(triples), iters=iters, dst=dst, src=src, wgt=wf) + finish(cfg))
    want = acc.astype(np.int64)
    for i in range(iters[0]):
        for j in range(iters[1]):
            for d, s, k in triples:
                d2, s2, k2 = d + i * dst[0] + j * dst[1], s + i * src[0] + j * src[1], k + i * wf[0] + j * wf[1]
                want[d2] = wrap32(want[d2] + x[s2].astype(np.int64) @ w[k2].astype(np.int64).T)
    np.testing.assert_array_equal(sim.read_sram("acc", 0, len(acc)), wrap32(want), err_msg=f"{name}: GEMM differs")
    return sim


def _long_runs_check(overrides: dict, seed: int, threads: int, fused: bool) -> None:
    """Runs of more than 16 micro-ops (the amx kernels' blocks of 16: in place at a stride of +1, +2 and -1, a tail,
    all 18 on one accumulator row, rows that continue each other's accumulator steps but not their input steps and
    the reverse), with signed and extreme operands, against numpy; ``fused``: three inner iterations into the same
    accumulators (one kernel call for all three where the path fuses them)."""
    cfg = load_config("pynq", **overrides)
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (96, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-128, 128, (8, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    x[:4], w[0] = -128, -128
    acc = rng.integers(-2**31, 2**31, (80, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    acc[:4] = 2**31 - 1
    triples = ([(i, 2 * i, 0) for i in range(40)] + [(79 - i, i, 1) for i in range(20)] +
               [(50, i, 2) for i in range(18)] + [(8 * r + i, 10 * r + i, 3) for r in range(4) for i in range(8)] +
               [(16 * r + i, 8 * r + i, 0) for r in range(3) for i in range(8)])
    iters, dst, src, wf = ((1, 3), (0, 0), (0, 5), (0, 1)) if fused else ((2, 1), (0, 0), (3, 0), (4, 0))
    _gemm_against_numpy(f"long runs {overrides}", cfg, x, w, acc, triples, iters, dst, src, wf, threads)


def _assert_sum_marks(sim: Simulator, w: np.ndarray, where: str) -> int:
    """Tiles in the unsigned-input kernels' quad layout carry the sum2 / sum4 marks numpy computes for their
    weights; returns how many tiles were in that layout."""
    quads = 0
    for t in range(len(w)):
        layout = sim._weight_layout(t)
        if "quads" in layout:
            quads += 1
            want = {f"sum{q}" for q in (2, 4) if _lane_abs_sums(w[t], q) <= 258}
            assert layout & {"sum2", "sum4"} == want, f"{where}: tile {t} has {layout}, want {want}"
    return quads


def _child() -> None:
    """Runs in a subprocess with VTA_SIM_KERNEL set: every check on that path, exits nonzero on a difference."""
    path = os.environ["VTA_SIM_KERNEL"]
    assert kernel_path() == path, (kernel_path(), path)
    for i, (name, overrides) in enumerate(GEMM_CONFIGS.items()):
        for seed in range(3):
            _gemm_check(name, overrides, 100 * i + seed)
            _gemm_check(name, overrides, 100 * i + seed, runs=True)
            _gemm_check(name, overrides, 100 * i + seed, runs=True, threads=2 + seed)
            _gemm_check(name, overrides, 100 * i + seed, unsigned=True)
            _gemm_check(name, overrides, 100 * i + seed, runs=True, threads=1 + seed, unsigned=True)
            _gemm_check(name, overrides, 100 * i + seed, unsigned=True, fused=True)
            _gemm_check(name, overrides, 100 * i + seed, runs=True, threads=1 + seed, unsigned=True, fused=True)
            _gemm_check(name, overrides, 100 * i + seed, runs=True, threads=2, fused=True)
            for sums in (2, 4) if overrides.get("LOG_BLOCK", 4) == 4 else ():   # the quad kernels: 16x16 blocks
                _gemm_check(name, overrides, 100 * i + seed, unsigned=True, sums=sums)
                _gemm_check(name, overrides, 100 * i + seed, runs=True, threads=1 + seed, unsigned=True, sums=sums)

    for i, overrides in enumerate(({}, {"LOG_BATCH": 2}, GEMM_CONFIGS["block32"])):
        for fused in (False, True):
            _long_runs_check(overrides, 40 + i, threads=1 + i % 2, fused=fused)

    from test_weight_reuse import reuse_checks
    reuse_checks(threads=1)
    reuse_checks(threads=2)

    from golden_files import GOLDEN_DIR
    golden = 0
    if GOLDEN_DIR.is_dir():
        from test_golden import NAMES, assert_matches, image_path

        from simulator.replay import replay
        for name in NAMES:
            result = replay(image_path(name))
            assert_matches(name, result.segments, result.stats)
            golden += 1

    from test_fuzz import CONFIGS, _prepared, outcome, random_stream

    from simulator.reference import ReferenceSimulator
    streams = 0
    for ci, (name, cfg) in enumerate(CONFIGS.items()):
        for seed in range(FUZZ_STREAMS):
            rng = np.random.default_rng([seed, ci, 15])
            stream = random_stream(cfg, rng)
            compute = seed % 7 != 0
            ref = outcome(_prepared(ReferenceSimulator, cfg, seed), stream, compute)
            fast = outcome(_prepared(Simulator, cfg, seed), stream, compute)
            assert fast == ref, f"{path}: fuzz {name} seed {seed} differs from the reference"
            streams += 1
    print(f"kernel {path} (supported: {' '.join(kernels_supported())}): gemm configs {len(GEMM_CONFIGS)}, "
          f"golden {golden}, fuzz streams {streams}: ok")


def _run_child(path: str, **env: str) -> str:
    res = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"], cwd=Path(__file__).parent,
                         env={**os.environ, "VTA_SIM_KERNEL": path, **env}, capture_output=True, text=True,
                         timeout=900, check=False)
    assert res.returncode == 0, f"{path}:\n{res.stdout}\n{res.stderr[-6000:]}"
    assert f"kernel {path} " in res.stdout and res.stdout.strip().endswith(": ok"), res.stdout
    return res.stdout


@pytest.mark.parametrize("path", PATHS)
def test_path_is_bit_exact(path: str) -> None:
    if path not in kernels_supported():
        pytest.skip(f"this CPU (or build) lacks the {path} kernel path; supported here: {kernels_supported()}")
    _run_child(path)


def _variant_build(tmp_path: Path, **env: str) -> Path:
    """The simulator package copied to tmp_path with its extension built beside it, under ``env`` (the build
    flags simulator/_build.py reads); a child with PYTHONPATH=tmp_path imports this build."""
    root = Path(__file__).resolve().parent.parent
    shutil.copytree(root / "simulator", tmp_path / "simulator", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    build = "import runpy, sys; runpy.run_path(sys.argv[1])['ffibuilder'].compile(tmpdir='.')"
    res = subprocess.run([sys.executable, "-c", build, str(tmp_path / "simulator" / "_build.py")], cwd=tmp_path,
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    return tmp_path


@needs("cc")
def test_generic_build_is_bit_exact(tmp_path: Path) -> None:
    """A ``VTA_SIM_PORTABLE=1`` build (the generic C kernels, what a non-x86 host runs) passes the same checks."""
    out = _run_child("portable", PYTHONPATH=str(_variant_build(tmp_path, VTA_SIM_PORTABLE="1")))
    assert "(supported: portable)" in out, out


@needs("cc", "simde")
@pytest.mark.skipif(not {"avx2"} <= set(kernels_supported()), reason="the emulated build needs an AVX2 CPU")
def test_avx512_kernels_are_bit_exact_under_emulation(tmp_path: Path) -> None:
    """The AVX-512 and AVX-512 VNNI kernels, built over SIMDe's portable implementations of their intrinsics
    (``VTA_SIM_EMULATE_AVX512=1``; Intel's definitions, in plain C), pass the same checks on this CPU: their
    arithmetic is verified here, the hardware that runs them natively is not (test_path_is_bit_exact does that
    where the CPU has it)."""
    pythonpath = str(_variant_build(tmp_path, VTA_SIM_EMULATE_AVX512="1"))
    for path in ("avx512", "avx512vnni"):
        out = _run_child(path, PYTHONPATH=pythonpath)
        # amx too where the CPU has it: the emulating build leaves that path native
        assert re.search(r"\(supported: portable avx2 avx512 avx512vnni( amx)?\)", out), out
    probe = subprocess.run([sys.executable, "-c", "from simulator.core import kernel_path; print(kernel_path())"],
                           env={**os.environ, "PYTHONPATH": pythonpath, "VTA_SIM_KERNEL": "auto"}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, check=False)
    assert probe.stdout.strip() == "avx2", probe   # emulated paths run only when asked for


def test_amx_kernels_are_bit_exact_under_emulation() -> None:
    """The AMX kernels compiled over a C model of the tile instructions (VTA_SIM_KERNEL=amx-emulated: the same
    source as the native path, vta_amx_kernels.h) pass the same checks: their blocking, strides, staging, tile shapes
    and per-thread configuration are verified on this CPU; the instructions themselves and the OS permission request
    only where the CPU has AMX (test_path_is_bit_exact and test_amx_is_chosen_where_the_cpu_has_it there)."""
    if "avx2" not in kernels_supported():
        pytest.skip(f"amx-emulated needs an AVX2 CPU; supported here: {kernels_supported()}")
    out = _run_child("amx-emulated")
    assert "amx-emulated" not in out.split("(supported:")[1], out   # never chosen by "auto"


def _cpuinfo_flags() -> set[str] | None:
    """The CPU flags Linux reports (/proc/cpuinfo), or None where there is no such file."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


def test_amx_is_chosen_where_the_cpu_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's own CPUID and permission check agrees with what Linux reports: on a CPU with amx_tile and
    amx_int8 (a Linux new enough to list them grants the tile state on request) "auto" is the amx path, so CI's
    AMX machine runs the native kernels (test_path_is_bit_exact[amx] checks them there); elsewhere amx is not
    offered and naming it is refused with the reason."""
    flags = _cpuinfo_flags()
    if flags is None:
        pytest.skip("no /proc/cpuinfo to compare with")
    monkeypatch.delenv("VTA_SIM_KERNEL", raising=False)
    if {"amx_tile", "amx_int8", "avx512_vnni"} <= flags:
        assert kernel_path() == "amx" == kernels_supported()[-1]
        return
    assert "amx" not in kernels_supported()
    monkeypatch.setenv("VTA_SIM_KERNEL", "amx")
    with pytest.raises(SimulatorError, match=r"VTA_SIM_KERNEL=amx, but this CPU (lacks AMX|does not support)"):
        Simulator("pynq")


def test_gemm_runs_follow_micro_op_writes() -> None:
    """The simulator keeps GEMM kernels' runs while their micro-ops are unchanged: new micro-ops at the same range,
    written through the API or loaded by an instruction, are what the next GEMM runs, and overlapping kernels
    run alternately each run their own micro-ops."""
    from test_semantics import finish, gemm, load, uops, wrap32

    cfg = load_config("pynq")
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (24, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-128, 128, (8, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    first = [(d, d + 1, 2) for d in range(6)]
    second = [(d, 2 * d, 3) for d in range(6)]
    third = [(5 - d, d, 1) for d in range(6)]
    for threads in (1, 2):
        sim = Simulator(cfg, threads=threads)
        sim._set_threads(threads, 0)
        sim.write_sram("inp", 0, x)
        sim.write_sram("wgt", 0, w)
        addr = sim.alloc(4 * 6)
        sim.write(addr, uops(cfg, *third).view(np.uint8))
        want = np.zeros((16, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
        sim.write_sram("acc", 0, want.astype(np.int32))
        for triples, program in ((first, b""), (second, b""), (third, load(cfg, "UOP", 0, addr // 4, 1, 6))):
            if not program:
                sim.write_sram("uop", 0, uops(cfg, *triples))
            sim.run(program + gemm(cfg, 0, 6) + finish(cfg))
            for d, src, k in triples:
                want[d] = wrap32(want[d] + x[src].astype(np.int64) @ w[k].astype(np.int64).T)
            np.testing.assert_array_equal(sim.read_sram("acc", 0, 16), wrap32(want), err_msg=f"{threads} threads")
        # overlapping kernels [0, 6) and [1, 9) run alternately: A's runs are (0-1), (2-3), (4-5), B's start at
        # micro-op 1, so B's runs would overwrite A's unless each kernel keeps its own
        both = [(0, 0, 1), (1, 1, 1), (2, 5, 2), (3, 6, 2), (4, 0, 3), (5, 1, 3), (8, 0, 3), (7, 2, 3), (6, 4, 3)]
        sim.write_sram("uop", 0, uops(cfg, *both))
        sim.run(gemm(cfg, 0, 6) + gemm(cfg, 1, 9) + gemm(cfg, 0, 6) + gemm(cfg, 1, 9) + finish(cfg))
        for lo, hi in ((0, 6), (1, 9), (0, 6), (1, 9)):
            for d, src, k in both[lo:hi]:
                want[d] = wrap32(want[d] + x[src].astype(np.int64) @ w[k].astype(np.int64).T)
        np.testing.assert_array_equal(sim.read_sram("acc", 0, 16), wrap32(want), err_msg=f"{threads} threads")


def test_gemm_kernel_follows_input_signs_and_weight_writes() -> None:
    """A GEMM whose reachable inputs are all >= 0 may take the unsigned-input kernel over its own weight shadow
    (avx2, avx512, avx512vnni; amx's kernel takes every GEMM over that shadow), and its sum2 / sum4 variants (avx2,
    avx512) on tiles with small enough weights, any other the path's kernel; shadows are built when a GEMM first
    reads a tile after its write. So: the same tiles alternate between the two kinds of GEMM, a negative byte appears in and then leaves the inputs a GEMM reaches (and one lies just outside
    them), and tiles are rewritten through the API and by a LOAD between GEMMs, small-weight tiles becoming wide
    and back (with large inputs, so that a stale sum mark would wrap int16); every result must match numpy."""
    from test_semantics import finish, gemm, load, uops, wrap32

    cfg = load_config("pynq")
    rng = np.random.default_rng(12)
    x = rng.integers(64, 128, (24, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = rng.integers(-64, 65, (8, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)   # sum2 tiles
    w[2] = rng.integers(-32, 33, w[2].shape)   # a sum4 tile
    x[0], w[0], w[3] = 127, -64, 127
    # runs of micro-ops on tiles 1, 2, 0 and 3 (a run goes through the row kernels), reaching inputs 0 .. 6
    triples = ([(d, d + 1, 1 + d // 3) for d in range(6)] + [(6 + d, 2 * d, 0) for d in range(4)] +
               [(10 + d, 3 + d, 3) for d in range(3)])
    for threads in (1, 2):
        sim = Simulator(cfg, threads=threads)
        sim._set_threads(threads, 0)
        sim.write_sram("uop", 0, uops(cfg, *triples))
        sim.write_sram("wgt", 0, w)
        want = np.zeros((16, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
        sim.write_sram("acc", 0, want.astype(np.int32))
        addr = sim.alloc(w[:2].nbytes)
        assert addr % w[0].nbytes == 0
        steps = [("unsigned", None), ("negative input", (6, -1)), ("unsigned again", (6, 3)),
                 ("negative input just outside the reach", (7, -128)), ("tiles rewritten", "api"),
                 ("negative input", (0, -128)), ("tiles loaded", "load"), ("unsigned", (0, 127))]
        for label, change in steps:
            program = b""
            if isinstance(change, tuple):
                x[change[0], 0, change[0] % cfg.BLOCK_IN] = change[1]
            elif change == "api":   # small-weight tiles become wide: the sum kernels' int16 sums would wrap
                w[1:3] = rng.integers(100, 128, w[1:3].shape)
                sim.write_sram("wgt", 1, w[1:3])
            elif change == "load":   # a wide tile gets small weights (sum4) and a sum2 one wide
                w[0], w[1] = rng.integers(-32, 33, w[0].shape), -128
                sim.write(addr, w[0:2].view(np.uint8))
                program = load(cfg, "WGT", 0, addr // w[0].nbytes, 1, 2)
            sim.write_sram("inp", 0, x)
            sim.run(program + gemm(cfg, 0, len(triples)) + finish(cfg))
            for d, src, k in triples:
                want[d] = wrap32(want[d] + x[src].astype(np.int64) @ w[k].astype(np.int64).T)
            np.testing.assert_array_equal(sim.read_sram("acc", 0, 16), wrap32(want),
                                          err_msg=f"{threads} threads, {label}")
            quads = _assert_sum_marks(sim, w, f"{threads} threads, {label}")
            if label.startswith("unsigned") and sim.kernel_path in ("avx2", "avx512", "avx512vnni"):
                assert quads == len({k for _, _, k in triples}), f"{label}: the unsigned-input kernel did not run"
            if sim.kernel_path in ("amx", "amx-emulated"):   # TDPBSSD takes signed inputs: every GEMM, quads
                assert quads == len({k for _, _, k in triples}), f"{label}: the amx kernel did not run"
            # a LOAD may leave a tile in the unsigned kernel's layout only: a read still gives its bytes
            np.testing.assert_array_equal(sim.read_sram("wgt", 0, len(w)), w, err_msg=f"{threads} threads, {label}")


def test_default_is_the_best_supported_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: the best path the CPU supports (the list is in order of preference)."""
    monkeypatch.delenv("VTA_SIM_KERNEL", raising=False)
    supported = kernels_supported()
    assert supported[0] == "portable" and set(supported) <= set(PATHS)
    assert supported == [p for p in PATHS if p in supported]
    assert kernel_path() == supported[-1] == Simulator("pynq").kernel_path
    monkeypatch.setenv("VTA_SIM_KERNEL", "auto")
    assert kernel_path() == supported[-1]


def test_unknown_or_unsupported_path_is_refused_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTA_SIM_KERNEL", "sse9")
    with pytest.raises(SimulatorError, match=r"VTA_SIM_KERNEL=sse9 is not a kernel path \(allowed: auto, portable, "
                       r"avx2, avx512, avx512vnni, amx, amx-emulated;"):
        Simulator("pynq")
    with pytest.raises(SimulatorError, match="not a kernel path"):
        kernel_path()
    missing = [p for p in PATHS if p not in kernels_supported()]
    if not missing:
        pytest.skip("this CPU supports every kernel path")
    monkeypatch.setenv("VTA_SIM_KERNEL", missing[0])
    with pytest.raises(SimulatorError, match=f"VTA_SIM_KERNEL={missing[0]}, but this (CPU|build)"):
        Simulator("pynq")


if __name__ == "__main__" and sys.argv[1:] == ["--child"]:
    _child()
