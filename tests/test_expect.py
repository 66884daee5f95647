"""`vta sim replay --expect` (and simulator.expect): a run compared with what it must leave, the bytes VTA's own
run stored (examples/*.expect.npz, made by VTA's stack) and its counters, matched by address."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from test_docs import ROOT, VTA

from simulator.expect import differences
from simulator.image import ReplayResult, load_result, save_result

EXAMPLES = ROOT / "examples"


def vta(*argv: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([*VTA, *argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", ["gemm_0", "gemm_1", "relu_0"])
def test_each_example_matches_what_vtas_run_stored(name, tmp_path):
    done = vta("sim", "replay", str(EXAMPLES / f"{name}.npz"), "--expect", str(EXAMPLES / f"{name}.expect.npz"),
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"matches {EXAMPLES / name}.expect.npz: " in done.stdout and "7 VTA counter(s)" in done.stdout


def test_a_changed_byte_and_counter_are_named_and_fail_the_command(tmp_path):
    """The expect file altered by hand at one known address and one counter: both reported, exit status 1."""
    expected = load_result(EXAMPLES / "gemm_0.expect.npz")
    (addr, data), = expected.segments
    data = data.copy()
    data[37] ^= 0x5A
    stats = {**expected.stats, "gemm_counter": expected.stats["gemm_counter"] + 1}
    save_result(tmp_path / "bad.expect.npz", ReplayResult([(addr, data)], stats))
    done = vta("sim", "replay", str(EXAMPLES / "gemm_0.npz"), "--expect", "bad.expect.npz", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "differs from bad.expect.npz in 2 place(s)" in done.stdout
    assert f"1 of 256 bytes differ, the first at 0x{addr + 37:x}" in done.stdout
    assert f"counter gemm_counter: {stats['gemm_counter'] - 1} instead of {stats['gemm_counter']}" in done.stdout


def test_a_bad_expect_file_is_refused_before_the_run(tmp_path):
    (tmp_path / "notes.npz").write_text("not a zip")
    done = vta("sim", "replay", str(EXAMPLES / "gemm_0.npz"), "--expect", "notes.npz", "--out", "r.npz", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("vta: error: --expect: ") and "Traceback" not in done.stderr
    assert not (tmp_path / "r.npz").exists()   # no run happened


def test_differences_match_by_address_not_by_segment_number():
    result = ReplayResult([(0x1000, np.arange(16, dtype=np.uint8)), (0x2000, np.full(8, 7, np.uint8))],
                          {"out_store_nbytes": 8})
    same = ReplayResult([(0x2002, np.full(4, 7, np.uint8))], {"out_store_nbytes": 8})   # inside the 2nd segment
    assert differences(result, same) == []
    assert differences(result, ReplayResult([(0x1ff8, np.zeros(16, np.uint8))], {})) == [
        "0x1ff8..0x2008 (16 bytes): no segment of the result holds it"]
    off = ReplayResult([(0x1004, np.array([4, 5, 0, 7], np.uint8))], {"out_store_nbytes": 9})
    assert differences(result, off) == ["0x1004..0x1008: 1 of 4 bytes differ, the first at 0x1006 (6 instead of 0)",
                                        "counter out_store_nbytes: 8 instead of 9"]
    assert differences(result, off, counters=False) == [off_line for off_line in differences(result, off)[:1]]
