"""hw_config.isa_rules is the one statement of VTA's instruction-set rules: its tables agree with each other, the C
simulator's generated header is current, and C follows the header (routing, names, parameter limits)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from simulator._vta_sim import ffi, lib

from hw_config import ConfigError, load_config, presets
from hw_config.config import INT_RANGES, sim_param_ranges
from hw_config.isa_rules import (
    DEP_FLAGS,
    DEP_QUEUES,
    MEM_TYPE_NAMES,
    MODULES,
    OPCODE_NAMES,
    QUEUE_BETWEEN,
    QUEUES,
    SIM_ANY_SHAPE,
    SIM_PARAMS,
    c_header,
    dep_flag,
    module_indices,
    module_of,
    queue_table,
    sim_param_limits,
)
from hw_config.layout import MEMOP_ID_BITS, OPCODE_BITS
from simulator import Simulator
from simulator.errors import InvalidInstruction, SimulatorError
from simulator.params import SCALARS, param_values
from vta.isa import FinishInsn, GemmInsn, MemInsn, assemble

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "simulator" / "csrc"


# ---- the Python tables agree with each other ----

def test_every_queue_has_one_popper_and_one_pusher_between_its_modules():
    for (frm, to), queue in QUEUE_BETWEEN.items():
        pops = [(m, f) for m in MODULES for f in DEP_FLAGS if f.startswith("pop") and DEP_QUEUES[m][f] == queue]
        pushes = [(m, f) for m in MODULES for f in DEP_FLAGS if f.startswith("push") and DEP_QUEUES[m][f] == queue]
        assert [m for m, _ in pops] == [to] and [m for m, _ in pushes] == [frm], queue
        assert dep_flag(to, frm, "pop") == pops[0][1] and dep_flag(frm, to, "push") == pushes[0][1]
    assert sorted(QUEUE_BETWEEN.values()) == sorted(QUEUES)
    table = queue_table()
    for i, m in enumerate(MODULES):
        for j, f in enumerate(DEP_FLAGS):
            assert table[i, j] == (QUEUES.index(DEP_QUEUES[m][f]) if DEP_QUEUES[m][f] else -1)


def test_module_indices_is_module_of_over_arrays():
    op, mt = np.meshgrid(np.arange(1 << OPCODE_BITS), np.arange(1 << MEMOP_ID_BITS), indexing="ij")
    got = module_indices(op.ravel(), mt.ravel())
    assert [MODULES[i] for i in got] == [module_of(int(o), int(t)) for o, t in zip(op.ravel(), mt.ravel())]


def test_simulator_params_follow_the_struct():
    """SIM_PARAMS names vta_params_t's scalar members in declaration order (vta_sim.h)."""
    header = (CSRC / "vta_sim.h").read_text()
    body = re.search(r"typedef struct vta_params \{(.*?)vta_field_t", header, re.DOTALL).group(1)
    members = re.findall(r"\b([a-z_]+)\s*[,;]", body)
    assert tuple(members) == tuple(member for member, _ in SIM_PARAMS)
    assert SCALARS == tuple(attr for _, attr in SIM_PARAMS)


# ---- the C side ----

def test_c_header_is_current():
    """simulator/csrc/vta_isa.h is exactly what `python -m hw_config.isa_rules --c-header` prints."""
    assert (CSRC / "vta_isa.h").read_text() == c_header(), (
        "regenerate: python -m hw_config.isa_rules --c-header > simulator/csrc/vta_isa.h, then rebuild the extension")


def test_vta_sim_c_takes_its_rules_from_the_header():
    source = (CSRC / "vta_sim.c").read_text()
    assert '#include "vta_isa.h"' in source
    for restated in (r"enum\s*\{\s*(OP|MEM|ALU|MOD|Q)_", r'"l2g"', r'"ACC_8BIT"', r"Q_(L2G|G2L|S2G|G2S)\b",
                     r"\b0 LOAD, 1 STORE", r"\b0 MIN, 1 MAX"):
        assert not re.search(restated, source), f"vta_sim.c restates {restated!r}: take it from vta_isa.h"


def _params(**changes: int):
    values = np.array(param_values(load_config("pynq")), dtype=np.uint32)
    p = ffi.new("vta_params_t *")
    ffi.memmove(p, ffi.from_buffer(values), values.nbytes)
    for member, value in changes.items():
        setattr(p, member, value)
    return p


def _c_accepts(**changes: int) -> bool:
    err = ffi.new("char[]", 512)
    sim = lib.vta_sim_create(_params(**changes), err, 512)
    if sim == ffi.NULL:
        assert ffi.string(err).decode(), "a refusal without a message"
        return False
    lib.vta_sim_destroy(sim)
    return True


@pytest.mark.parametrize("member", [m for m, _ in SIM_PARAMS])
def test_c_accepts_exactly_its_generated_limits(member):
    lo, hi = sim_param_limits()[member]
    assert _c_accepts(**{member: lo}) and _c_accepts(**{member: hi})
    assert not _c_accepts(**{member: hi + 1})
    if lo > 0:
        assert not _c_accepts(**{member: lo - 1})


def _valid_configs():
    """Every preset with each integer key swept over its range and one step beyond, and for each SRAM the largest
    buffer beside the smallest others, at every block size: the corners of what hw_config accepts."""
    out = []

    def attempt(preset: str, **kw: int) -> None:
        try:
            out.append(load_config(preset, **kw))
        except ConfigError:
            pass

    for preset in presets():
        for key, (lo, hi, _) in INT_RANGES.items():
            for v in (range(lo - 1, hi + 2) if hi - lo < 40 else (lo - 1, lo, hi, hi + 1)):
                attempt(preset, **{key: v})
    buffers = ("LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE", "LOG_ACC_BUFF_SIZE")
    for log_block in range(INT_RANGES["LOG_BLOCK"][0], INT_RANGES["LOG_BLOCK"][1] + 1):
        # each buffer two tiles deep (or as small as its key allows), int8 inputs and weights, int32 accumulators
        tiles = {"LOG_UOP_BUFF_SIZE": 2, "LOG_INP_BUFF_SIZE": log_block, "LOG_WGT_BUFF_SIZE": 2 * log_block,
                 "LOG_ACC_BUFF_SIZE": log_block + 2}
        smallest = {"LOG_BLOCK": log_block, "LOG_BATCH": 0,
                    **{key: max(INT_RANGES[key][0], tiles[key] + 1) for key in buffers}}
        assert _accepted(**smallest), smallest
        for key in buffers:
            for v in range(INT_RANGES[key][1], INT_RANGES[key][0] - 1, -1):
                if _accepted(**{**smallest, key: v}):
                    attempt("pynq", **{**smallest, key: v})
                    break
    return out


def _accepted(**kw: int) -> bool:
    try:
        load_config("pynq", **kw)
    except ConfigError:
        return False
    return True


def test_c_limits_are_hw_configs_ranges():
    """C refuses no value a valid config has, its highest values are hw_config's, and its lowest are hw_config's
    except for shapes (C runs any positive shape: the sanitizer driver's odd machines)."""
    limits, ranges = sim_param_limits(), sim_param_ranges()
    seen: dict[str, set[int]] = {attr: set() for _, attr in SIM_PARAMS}
    for cfg in _valid_configs():
        for attr, value in zip(SCALARS, param_values(cfg)):
            seen[attr].add(value)
    for member, attr in SIM_PARAMS:
        lo, hi = ranges[attr]
        assert limits[member][1] == hi and limits[member][0] == (1 if attr in SIM_ANY_SHAPE else lo), member
        assert lo <= min(seen[attr]) and max(seen[attr]) <= hi, attr
        assert min(seen[attr]) == lo, f"{attr}: no valid config has the lowest value {lo}"
        if attr == "ACC_BUFF_DEPTH":
            # The 32-bit micro-op (dst_idx and src_idx both address the accumulators) caps the accumulator depth
            # below what sram_base could address; C's limit is the looser bound, which is safe.
            assert max(seen[attr]) < hi
        else:
            assert max(seen[attr]) == hi, f"{attr}: no valid config has the highest value {hi}"
        if attr in SIM_ANY_SHAPE:
            assert all(v & (v - 1) == 0 for v in seen[attr]), attr


@pytest.mark.parametrize("preset", presets())
def test_c_creates_every_preset(preset):
    Simulator(preset)


# ---- C routes and names as the rules say ----

CFG = load_config("pynq")
ONE_OF_EACH_MODULE = {"load": {"opcode": 0, "memory_type": 2}, "compute": {"opcode": 0, "memory_type": 0},
                      "store": {"opcode": 1, "memory_type": 4}}


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("flag", DEP_FLAGS)
def test_c_refuses_a_flag_exactly_where_the_module_has_no_queue(module, flag):
    """A NOP of each module with one flag set: refused as an invalid instruction iff DEP_QUEUES has no queue."""
    insns = [MemInsn(**ONE_OF_EACH_MODULE[module], **{flag: 1}), FinishInsn()]
    sim = Simulator(CFG)
    if DEP_QUEUES[module][flag] is None:
        with pytest.raises(InvalidInstruction, match=f"{flag} is set but the {module} module"):
            sim.run(assemble(insns, CFG))
    else:
        try:
            sim.run(assemble(insns, CFG))
        except InvalidInstruction as e:  # pragma: no cover - the failure message
            pytest.fail(f"C refused {flag} on {module}: {e}")
        except SimulatorError:
            pass   # a pop never pushed deadlocks: routed, not refused


def test_c_counts_each_module_as_module_of_routes():
    insns = [MemInsn(opcode=0, memory_type=t) for t in (0, 1, 2, 3, 5)] + [
        MemInsn(opcode=1, memory_type=4), GemmInsn(), FinishInsn()]
    stats = Simulator(CFG).run(assemble(insns, CFG))
    want = dict.fromkeys(MODULES, 0)
    for insn in insns:
        want[module_of(insn.op, getattr(insn, "memory_type", 0))] += 1
    assert stats.insns == want


def test_c_names_opcodes_and_memory_types_as_the_rules_do():
    bad = assemble([MemInsn(opcode=0, memory_type=4, x_size=1, y_size=1, x_stride=1), FinishInsn()], CFG)
    with pytest.raises(InvalidInstruction) as e:
        Simulator(CFG).run(bad)
    loadable = ", ".join(f"{v} {n}" for v, n in MEM_TYPE_NAMES.items() if v != 4)
    assert f"LOAD {MEM_TYPE_NAMES[4]}" in str(e.value) and loadable in str(e.value)
    row = assemble([FinishInsn()], CFG)
    row[0, 0] = (row[0, 0] & ~7) | 7   # opcode 7
    with pytest.raises(InvalidInstruction) as e:
        Simulator(CFG).run(row)
    assert ", ".join(f"{v} {n}" for v, n in OPCODE_NAMES.items()) in str(e.value)
