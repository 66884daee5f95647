"""Weight layouts built once (docs/simulator.md, "Weight layouts"): a weight LOAD of DRAM bytes that were laid out
before and not written since reads the cached layout, and every write into DRAM (a host copy, a STORE, a region
freed and mapped again) is seen by the next LOAD, while the weight SRAM keeps what was loaded before the write.

Each check runs a LOAD WGT + GEMM program on unsigned inputs (the unsigned-input kernels read the quad layout the
cache holds) and compares the accumulators with numpy; tests/test_kernel_paths.py runs the same checks on every
GEMM kernel path (``reuse_checks``).
"""

from __future__ import annotations

import numpy as np
from test_semantics import finish, gemm, load, store, uops, wrap32

from hw_config import load_config
from simulator.core import Simulator, kernels_supported

N_TILES = 6        # weight tiles (16 x 16) the program loads; the GEMM reads each once
N_INP = 4          # input rows, one per micro-op pair


def _program(cfg, w_addr: int, x_addr: int, u_addr: int, n_uops: int, weights_at: int | None = 0) -> bytes:
    """Reset acc[0..N_INP), then acc[i] += x[i] @ w[k].T for every micro-op (i, i, k), w[k] being weight SRAM tile
    k: loads of the micro-ops, the inputs and the weights (into SRAM tiles from ``weights_at``; None: none), one
    GEMM."""
    parts = [load(cfg, "UOP", 0, u_addr // 4, x=n_uops),
             gemm(cfg, 0, 1, iters=(1, N_INP), dst=(0, 1), reset=1),
             load(cfg, "INP", 0, x_addr // cfg.INP_ELEM_BYTES, x=N_INP)]
    if weights_at is not None:
        parts.append(load(cfg, "WGT", weights_at, w_addr // cfg.WGT_ELEM_BYTES, x=N_TILES))
    parts += [gemm(cfg, 1, n_uops), finish(cfg)]
    return b"".join(parts)


def _triples() -> list[tuple[int, int, int]]:
    """Micro-op 0 for the reset, then (i, i, k): every input row against every weight tile."""
    return [(0, 0, 0)] + [(i, i, k) for i in range(N_INP) for k in range(N_TILES)]


def _want(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """numpy's accumulators for _program: acc[i] = sum_k x[i] @ w[k].T (int32 wrap-around)."""
    acc = np.einsum("ibc,koc->ibo", x.astype(np.int64), w.astype(np.int64))
    return wrap32(acc)


class _Rig:
    """A simulator with the weights, inputs and micro-ops of _program in DRAM."""

    def __init__(self, sim: Simulator, seed: int):
        self.sim, cfg = sim, sim.cfg
        rng = np.random.default_rng(seed)
        self.x = rng.integers(0, 128, (N_INP, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)   # unsigned: quad kernels
        self.w = rng.integers(-128, 128, (N_TILES, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
        micro = uops(cfg, *_triples())
        self.w_addr, self.x_addr = sim.alloc(self.w.nbytes), sim.alloc(self.x.nbytes)
        self.u_addr = sim.alloc(micro.nbytes)
        sim.write(self.w_addr, self.w)
        sim.write(self.x_addr, self.x)
        sim.write(self.u_addr, micro)
        self.n_uops = len(micro)

    def run(self, weights_at: int | None = 0) -> np.ndarray:
        self.sim.run(_program(self.sim.cfg, self.w_addr, self.x_addr, self.u_addr, self.n_uops, weights_at))
        return self.sim.read_sram("acc", 0, N_INP)

    def change_one_byte(self, tile: int, o: int, c: int) -> None:
        """Flip the sign of weight w[tile][o][c] (a nonzero result for any input: +1 where it was -1 or 0) by a
        one-byte host write into DRAM."""
        self.w[tile, o, c] = np.int8(-1) if self.w[tile, o, c] >= 0 else np.int8(1)
        offset = (tile * self.w.shape[1] + o) * self.w.shape[2] + c
        self.sim.write(self.w_addr + offset, self.w[tile, o, c:c + 1])


def check_host_write_is_seen(sim: Simulator, seed: int = 0, quads: bool = True) -> None:
    """Run, change one weight byte in DRAM, run again: the second output is numpy's for the new weights (and
    differs from the first), a third run of the unchanged bytes (the cached layouts) gives the same again.
    ``quads``: the build has the unsigned-input kernels (every x86 build), which a weight LOAD lays out for."""
    rig = _Rig(sim, seed)
    first = rig.run()
    np.testing.assert_array_equal(first, _want(rig.x, rig.w), err_msg=f"{sim.kernel_path}: first run")
    assert ("quads" in sim._weight_layout(0)) == quads, "the program does not take the unsigned-input kernels"
    for tile, o, c in ((3, 5, 7), (0, 0, 0), (N_TILES - 1, 15, 15)):
        rig.change_one_byte(tile, o, c)
        again = rig.run()
        np.testing.assert_array_equal(again, _want(rig.x, rig.w),
                                      err_msg=f"{sim.kernel_path}: after a host write of weight ({tile}, {o}, {c})")
        assert not np.array_equal(again, first)
        first = again
    np.testing.assert_array_equal(rig.run(), first, err_msg=f"{sim.kernel_path}: a rerun of unchanged weights")


def check_store_is_seen(sim: Simulator, seed: int = 1) -> None:
    """A STORE into the weights' DRAM (the accumulators' low bytes) is seen by the next weight LOAD."""
    rig = _Rig(sim, seed)
    cfg = sim.cfg
    rig.run()
    rows = np.random.default_rng(seed).integers(-2**31, 2**31, (cfg.BLOCK_OUT, cfg.BATCH, cfg.BLOCK_OUT))
    sim.write_sram("acc", 0, rows.astype(np.int32))
    # STORE acc[0..16) over weight tile 2 (16 output rows of BATCH x BLOCK_OUT bytes: one 16 x 16 tile at batch 1)
    tile_rows = cfg.WGT_ELEM_BYTES // cfg.OUT_ELEM_BYTES
    sim.run(store(cfg, 0, (rig.w_addr + 2 * cfg.WGT_ELEM_BYTES) // cfg.OUT_ELEM_BYTES, x=tile_rows) + finish(cfg))
    rig.w[2] = (rows[:tile_rows].astype(np.int64) & 0xFF).astype(np.uint8).view(np.int8).reshape(rig.w[2].shape)
    np.testing.assert_array_equal(sim.read(rig.w_addr, rig.w.nbytes).view(np.int8), rig.w.reshape(-1))
    np.testing.assert_array_equal(rig.run(), _want(rig.x, rig.w), err_msg=f"{sim.kernel_path}: after a STORE")


def check_sram_keeps_loaded_weights(sim: Simulator, seed: int = 2) -> None:
    """A write into DRAM after the LOAD leaves the weight SRAM as loaded: a GEMM without a new LOAD, and a read of
    the SRAM, see the old weights, also after the same DRAM bytes were loaded again elsewhere in the SRAM (their
    layouts built anew); after the region is freed (and another mapped, maybe at its address) too."""
    rig = _Rig(sim, seed)
    old_w = rig.w.copy()
    want = rig.run()
    rig.change_one_byte(1, 2, 3)
    np.testing.assert_array_equal(rig.run(weights_at=None), want, err_msg=f"{sim.kernel_path}: SRAM after write")
    np.testing.assert_array_equal(rig.run(weights_at=N_TILES), want,
                                  err_msg=f"{sim.kernel_path}: SRAM after the changed bytes were loaded elsewhere")
    np.testing.assert_array_equal(sim.read_sram("wgt", 0, N_TILES), old_w)
    np.testing.assert_array_equal(sim.read_sram("wgt", N_TILES, N_TILES), rig.w)
    rig.run()   # tiles 0.. from the region's cache again
    old_w, want = rig.w.copy(), _want(rig.x, rig.w)
    sim.free(rig.w_addr)
    other = sim.alloc(old_w.nbytes)
    sim.write(other, np.zeros_like(old_w))
    np.testing.assert_array_equal(rig.run(weights_at=None), want, err_msg=f"{sim.kernel_path}: SRAM after free")
    np.testing.assert_array_equal(sim.read_sram("wgt", 0, N_TILES), old_w)
    rig.w_addr, rig.w = other, np.zeros_like(old_w)   # a region mapped again: its bytes, not the cached ones
    np.testing.assert_array_equal(rig.run(), _want(rig.x, rig.w), err_msg=f"{sim.kernel_path}: a new region")


def reuse_checks(threads: int = 1) -> None:
    """Every check, on a simulator of the kernel path VTA_SIM_KERNEL selects (tests/test_kernel_paths.py); a
    VTA_SIM_PORTABLE=1 build (generic C kernels only, no quad layout) runs them too, without a cache to reuse."""
    cfg = load_config("pynq")
    quads = kernels_supported() != ["portable"]
    check_host_write_is_seen(Simulator(cfg, threads=threads), quads=quads)
    for check in (check_store_is_seen, check_sram_keeps_loaded_weights):
        check(Simulator(cfg, threads=threads))


def test_a_changed_weight_byte_is_seen():
    check_host_write_is_seen(Simulator(load_config("pynq"), threads=1))


def test_a_store_into_the_weights_is_seen():
    check_store_is_seen(Simulator(load_config("pynq"), threads=2))


def test_the_weight_sram_keeps_what_was_loaded():
    check_sram_keeps_loaded_weights(Simulator(load_config("pynq"), threads=1))
