"""check_program, the gate in front of a board's DMA engines: it passes every real program (VTA's golden ones,
compiled operators) and refuses exactly the DRAM accesses the simulator refuses, before anything runs."""

from __future__ import annotations

import numpy as np
import pytest
from golden_files import GOLDEN_DIR, requires_golden

from hw_config import MEM_TYPES, OPCODES, load_config
from simulator import MemoryAccessError, Simulator, SimulatorError
from simulator.image import load_image
from vta import compile_op
from vta.isa import AluInsn, FinishInsn, GemmInsn, MemInsn, assemble
from vta.program_check import ProgramRejected, check_program

CFG = load_config("pynq")
PAGE = 4096


def _insn_region(image, n):
    """Where the image's stream sits: its own address, or a free page past its segments ("anywhere")."""
    if image.insn_addr:
        return int(image.insn_addr), n * 16
    top = max(int(a) + d.size for a, d in image.segments)
    return (top + PAGE) // PAGE * PAGE, n * 16


@requires_golden
@pytest.mark.parametrize("path", sorted(p for p in GOLDEN_DIR.glob("*.npz") if not p.name.endswith(".expect.npz"))
                         if GOLDEN_DIR.is_dir() else [], ids=lambda p: p.stem)
def test_every_golden_program_passes(path):
    """On hardware built from VTA's current HLS source; on the Pynq's published 0.0.2 bitstream, which predates
    padded ACC loads, exactly the padded-load programs (VTA's test_padded_load) are refused, at their load."""
    image = load_image(path)
    insn = _insn_region(image, len(image.insns))
    regions = [(int(a), int(d.size)) for a, d in image.segments] + [insn]
    current = image.config.replace(CAPABILITIES="vta-hls")
    check_program(image.insns, current, regions, insn)
    with pytest.raises(ProgramRejected, match="not inside one buffer"):   # and its DMA really uses the buffers
        check_program(image.insns, current, regions[1:] if len(image.segments) > 1 else [insn], insn)
    assert image.config.CAPABILITIES == "vta-hls-0.0.2"   # VTA's pynq config, HW_VER 0.0.2
    if path.stem.startswith("padded_load"):
        with pytest.raises(ProgramRejected, match=r"instruction 0: LOAD ACC with padding: capability set "
                                                  r"vta-hls-0.0.2 ignores padding") as refused:
            check_program(image.insns, image.config, regions, insn)
        assert refused.value.index == 0
    else:
        check_program(image.insns, image.config, regions, insn)


@pytest.mark.parametrize("op, kw", [("conv2d", {"data_shape": (1, 32, 8, 8), "kernel_shape": (32, 32, 3, 3),
                                                "padding": 1, "epilogue": [("bias",), ("shr", 8)]}),
                                    ("add", {"data_shape": (1, 32, 4, 4)})])
def test_compiled_operators_pass_and_a_missing_buffer_is_caught(op, kw):
    compiled = compile_op(op, CFG, **kw)
    program = compiled.program
    regions = compiled.device.sim._space.regions()
    top = max(a + n for a, n in regions)
    insn = ((top + PAGE) // PAGE * PAGE, max(len(s.insns) for s in program.streams) * 16)
    for stream in program.streams:
        check_program(stream.insns, CFG, [*regions, insn], (insn[0], len(stream.insns) * 16))
    without_uops = [r for r in regions if r[0] != program.uop_buffer.addr]
    with pytest.raises(ProgramRejected, match=r"\(LOAD UOP\)"):
        check_program(program.streams[0].insns, CFG, [*without_uops, insn], (insn[0], len(program.streams[0].insns) * 16))


def _program(*insns):
    return assemble([*insns, FinishInsn()], CFG)


def test_refusals_name_the_instruction_and_the_range():
    data = (0x10000, PAGE)
    insn = (0x20000, PAGE)
    regions = [data, insn]
    inp = MEM_TYPES["INP"]
    ok = MemInsn(memory_type=inp, dram_base=0x10000 // 16, y_size=2, x_size=16, x_stride=16)
    check_program(_program(ok), CFG, regions, (0x20000, 32))
    over = MemInsn(memory_type=inp, dram_base=0x10000 // 16, y_size=3, x_size=100, x_stride=100)
    with pytest.raises(ProgramRejected, match=r"instruction 1 \(LOAD INP\): DRAM bytes \[0x10000, 0x112c0\)") as e:
        check_program(_program(ok, over), CFG, regions, (0x20000, 48))
    assert e.value.index == 1
    store = MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"], dram_base=0, y_size=1, x_size=1,
                    x_stride=1)
    with pytest.raises(ProgramRejected, match=r"instruction 0 \(STORE OUT\): DRAM bytes \[0x0, 0x10\)"):
        check_program(_program(store), CFG, regions, (0x20000, 32))
    with pytest.raises(ProgramRejected, match="padding"):
        check_program(_program(MemInsn(opcode=OPCODES["STORE"], memory_type=MEM_TYPES["OUT"],
                                       dram_base=0x10000 // 16, y_size=1, x_size=1, x_stride=1, x_pad_0=1)),
                      CFG, regions, (0x20000, 32))
    with pytest.raises(ProgramRejected, match="instruction fetch of 2 instructions"):
        check_program(_program(ok), CFG, regions, (0x30000, 32))           # the stream is not in a buffer
    with pytest.raises(ProgramRejected, match="instruction fetch"):
        check_program(_program(ok), CFG, regions, (0x20000, 16))           # larger than its buffer
    bad = _program(ok)
    bad[0, 0] = (bad[0, 0] & ~0b111) | 7
    with pytest.raises(ProgramRejected, match="instruction 0: opcode 7"):
        check_program(bad, CFG, regions, (0x20000, 32))
    with pytest.raises(ProgramRejected, match="empty"):
        check_program(np.zeros((0, 16), np.uint8), CFG, regions, (0x20000, 32))
    check_program(_program(GemmInsn(), AluInsn()), CFG, regions, (0x20000, 48))   # no DRAM access: nothing to check


def test_the_boards_range_check_passes_over_memory_types_the_isa_does_not_define():
    """check_dma_ranges (what the simulated board checks on every launch): a LOAD or STORE of memory type 6 or 7
    (the ISA defines 0-5) moves nothing, so it has no DRAM range to refuse, wherever its dram_base points; the
    LOAD INP beside it that leaves the buffers is still refused, by its index."""
    from vta.program_check import check_dma_ranges

    regions = [(0x10000, PAGE), (0x20000, PAGE)]
    odd = [MemInsn(opcode=OPCODES[op], memory_type=mt, dram_base=0x90000 // 16, y_size=2, x_size=4, x_stride=4)
           for op in ("LOAD", "STORE") for mt in (6, 7)]
    check_dma_ranges(_program(*odd), CFG, regions, (0x20000, 16 * (len(odd) + 1)))
    outside = MemInsn(memory_type=MEM_TYPES["INP"], dram_base=0x90000 // 16, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(ProgramRejected, match=r"instruction 4 \(LOAD INP\): DRAM bytes \[0x90000, 0x90010\)"):
        check_dma_ranges(_program(*odd, outside), CFG, regions, (0x20000, 16 * (len(odd) + 2)))


def test_agrees_with_the_simulator_on_random_dma():
    """For random LOAD/STORE geometry against two mapped regions, check_program refuses exactly what the
    simulator refuses with a DRAM access error (the simulator's other checks, e.g. SRAM ranges, are its own)."""
    rng = np.random.default_rng(7)
    cfg = CFG.replace(CAPABILITIES="fsim")   # every load form (the capability refusals have their own tests)
    sim = Simulator(cfg)
    regions = [(0x100000, 2 * PAGE), (0x104000, PAGE)]
    for addr, size in regions:
        sim.map(addr, size)
    insn_at = (0x200000, 2 * 16)
    sim.map(insn_at[0], PAGE)
    regions_all = [*regions, (insn_at[0], PAGE)]
    agree = refused = 0
    for _ in range(400):
        mem_type = ["INP", "WGT", "ACC", "UOP", "OUT", "ACC_8BIT"][int(rng.integers(0, 6))]
        elem = cfg.elem_bytes(mem_type)
        store = mem_type == "OUT"
        base = int(rng.integers(0x0FF000, 0x106000)) // elem
        fields = {"memory_type": MEM_TYPES[mem_type], "dram_base": base, "y_size": int(rng.integers(0, 4)),
                  "x_size": int(rng.integers(0, 40)), "sram_base": 0}
        fields["x_stride"] = fields["x_size"] + int(rng.integers(0, 8))
        insn = MemInsn(opcode=OPCODES["STORE" if store else "LOAD"], **fields)
        program = _program(insn)
        try:
            check_program(program, cfg, regions_all, insn_at)
            ours = None
        except ProgramRejected as e:
            ours = e
        try:
            sim.run(program, compute=True)
            theirs = None
        except MemoryAccessError as e:
            theirs = e
        except SimulatorError:
            continue   # refused by a rule of the simulator's own (SRAM range, ...): not a DRAM question
        assert (ours is None) == (theirs is None), (fields, mem_type, ours, theirs)
        agree += 1
        refused += ours is not None
    assert agree > 200 and 0.2 < refused / agree < 0.9, (agree, refused)


def test_a_program_may_not_touch_its_own_instructions_and_must_finish():
    data, insn = (0x10000, PAGE), (0x20000, PAGE)
    into_insns = MemInsn(memory_type=MEM_TYPES["INP"], dram_base=0x20000 // 16, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(ProgramRejected, match=r"instruction 0: .* touch the instruction buffer \[0x20000, 0x20020\)"):
        check_program(_program(into_insns), CFG, [data, insn], (0x20000, 32))
    with pytest.raises(ProgramRejected, match=r"touch the instruction buffer \[0x20000, 0x21000\)"):   # all of it
        check_program(_program(into_insns), CFG, [data, insn], (0x20010, 32), protected=[insn])
    no_finish = assemble([GemmInsn()], CFG)
    with pytest.raises(ProgramRejected, match="instruction 0: the program does not end with FINISH"):
        check_program(no_finish, CFG, [data, insn], (0x20000, 16))
