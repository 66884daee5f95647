"""The demo (the README's main job) and the Chrome/Perfetto trace export."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hw_config import load_config
from simulator.trace import chrome_trace, write_json_atomic
from vta.cli import main
from vta.demo import reference, run_demo


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
def test_demo_is_bit_exact_and_counts_what_it_moves(preset):
    cfg = load_config(preset)
    r = run_demo(cfg, m=8 * cfg.BATCH, k=4 * cfg.BLOCK_IN, n=2 * cfg.BLOCK_OUT, seed=3)
    rng = np.random.default_rng(3)  # the demo's own draw, repeated independently
    a = rng.integers(-128, 128, (8 * cfg.BATCH, 4 * cfg.BLOCK_IN), dtype=np.int8)
    w = rng.integers(-128, 128, (2 * cfg.BLOCK_OUT, 4 * cfg.BLOCK_IN), dtype=np.int8)
    want = np.clip((a.astype(np.int64) @ w.astype(np.int64).T) >> 8, 0, 127).astype(np.int8)
    np.testing.assert_array_equal(r.out, want)
    np.testing.assert_array_equal(reference(a, w, 8), want)
    st = r.stats
    # inputs are fetched once per output-channel tile, weights once per batch tile
    assert st.inp_load_nbytes == a.nbytes * r.config["tile_co"][0]
    assert st.wgt_load_nbytes == w.nbytes * r.config["tile_b"][0]
    assert st.out_store_nbytes == want.nbytes
    assert st.gemm_counter == 8 * 4 * 2  # row tiles x K tiles x column tiles
    assert st.alu_counter == 3 * 8 * 2    # SHR, MAX, MIN over every output tile


def test_demo_refuses_bad_arguments():
    cfg = load_config("pynq")
    with pytest.raises(ValueError, match=r"shift count must be an integer in \[0, 31\]"):
        run_demo(cfg, m=4, k=16, n=16, shift=1 << 20)
    with pytest.raises(ValueError, match="positive"):
        run_demo(cfg, m=0, k=16, n=16)


def test_chrome_trace_has_one_event_per_instruction_on_its_module_track():
    cfg = load_config("pynq")
    r = run_demo(cfg, m=16, k=64, n=32, trace=True)
    trace = chrome_trace(r.stats, r.insns, cfg)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(r.insns)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert names == {"load", "compute", "store"}
    for e, (module, start, end) in zip(events, r.stats.trace, strict=True):
        assert e["tid"] == ["load", "compute", "store"].index(module)
        assert e["ts"] == pytest.approx(start / cfg.CLOCK_MHZ) and e["dur"] == pytest.approx((end - start) / 100)
    assert events[-1]["name"] == "FINISH" and {"GEMM", "ALU", "LOAD INP", "LOAD WGT", "STORE OUT"} <= {
        e["name"] for e in events}
    assert max(e["args"]["end_cycle"] for e in events) == r.stats.cycles


def test_chrome_trace_needs_a_traced_run():
    cfg = load_config("pynq")
    r = run_demo(cfg, m=16, k=16, n=16)
    with pytest.raises(ValueError, match="trace=True"):
        chrome_trace(r.stats, r.insns, cfg)


def test_write_json_atomic_refuses_nan_and_leaves_nothing(tmp_path):
    out = tmp_path / "t.json"
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_json_atomic(out, {"dur": float("nan")})
    assert list(tmp_path.iterdir()) == []      # neither the file nor a temporary one
    write_json_atomic(out, {"dur": 1.5})
    assert json.loads(out.read_text()) == {"dur": 1.5}


def test_vta_demo_command_prints_report_and_writes_trace(tmp_path, capsys):
    path = tmp_path / "demo.trace.json"
    assert main(["demo", "--config", "batch4", "-m", "16", "-k", "32", "-n", "32", "--trace", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bit-exact against numpy: yes" in out and "gemm_counter=" in out and "compute" in out
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert events and events[-1]["name"] == "FINISH"


def test_vta_demo_bad_shape_is_a_clean_error(capsys):
    assert main(["demo", "-m", "0"]) == 2
    assert "vta: error:" in capsys.readouterr().err
