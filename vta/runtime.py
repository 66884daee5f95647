"""The runtime: builds instruction streams and micro-op kernels the way VTA's runtime does.

- 2D DMA loads/stores with zero padding (``load_2d``, ``store_2d``);
- micro-op kernels with up to two affine loops (``UopKernel``), cached in the micro-op SRAM with ring
  eviction and loaded only when not resident;
- dependency tokens with VTA's rules: a pop is *pending* until the next instruction of its stage absorbs it
  (a second pending pop of the same kind is first committed as a NOP); a push rides on the last
  instruction when it belongs to the pushing stage and the flag is free, else on a NOP;
- ``mark`` / ``recording`` / ``replay``: a template may record the instructions of one stretch of its work and
  emit them again for a stretch that differs only in DRAM offsets, from the same queue state (the conv
  template's tile groups; docs/operators.md, "Program generation"); replayed stretches are kept as blocks and
  assembled as numpy tables;
- ``flush`` ends the stream like VTA's Synchronize (FINISH after the load->compute and store->compute
  tokens) and runs it. Every flushed stream is token-balanced: tokens still outstanding (e.g. a double
  buffer's credits) are drained before FINISH and restored at the start of the next stream, because
  hardware token queues persist across runs while the simulator's start empty.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain, pairwise
from operator import attrgetter

import numpy as np

from hw_config import ALU_OPCODES, MEM_TYPES, OPCODES, HwConfig
from hw_config.checks import is_whole
from hw_config.isa_rules import QUEUE_BETWEEN, dep_flag, module_of
from hw_config.layout import FormatSet
from simulator.stats import VTA_COUNTERS, RunStats
from vta.device import Buffer, SimDevice

LOAD, COMPUTE, STORE = 1, 2, 3  # stages, numbered as in VTA's runtime
STAGE_NAMES = {LOAD: "load", COMPUTE: "compute", STORE: "store"}
_STAGE_OF = {name: stage for stage, name in STAGE_NAMES.items()}
# (from, to) -> token queue name (hw_config.isa_rules.QUEUE_BETWEEN by stage number), in stage order: the order
# in which flush drains outstanding tokens.
QUEUES = dict(sorted(((_STAGE_OF[a], _STAGE_OF[b]), q) for (a, b), q in QUEUE_BETWEEN.items()))
# (from, to) -> the flag with which ``to`` pops a token from ``from`` / ``from`` pushes one to ``to``
_POP_FLAG = {(a, b): dep_flag(STAGE_NAMES[b], STAGE_NAMES[a], "pop") for a, b in QUEUES}
_PUSH_FLAG = {(a, b): dep_flag(STAGE_NAMES[a], STAGE_NAMES[b], "push") for a, b in QUEUES}
# (from, to) -> (token queue, pop flag, the pop flag as a pending set of one), for dep_pop
_POP = {edge: (queue, _POP_FLAG[edge], frozenset((_POP_FLAG[edge],))) for edge, queue in QUEUES.items()}
UOP_DRAM_WORDS = 1 << 18  # micro-ops a stream may load from DRAM before it is flushed
_LOAD_OP, _STORE_OP, _GEMM_OP, _ALU_OP = (OPCODES[n] for n in ("LOAD", "STORE", "GEMM", "ALU"))
_OUT_MEM = MEM_TYPES["OUT"]
_HEAD = ("opcode", "pop_prev_dep", "pop_next_dep", "push_prev_dep", "push_next_dep")
_LOOP = ("reset_reg", "uop_bgn", "uop_end", "iter_out", "iter_in", "dst_factor_out", "dst_factor_in",
         "src_factor_out", "src_factor_in")
# the field order the fast paths write instructions in (checked against the layout table when a queue is made)
_FIELD_ORDER = {
    "mem": (*_HEAD, "memory_type", "sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0", "y_pad_1",
            "x_pad_0", "x_pad_1"),
    "gemm": (*_HEAD, *_LOOP, "wgt_factor_out", "wgt_factor_in"),
    "alu": (*_HEAD, *_LOOP, "alu_opcode", "use_imm", "imm"),
}


_ENCODED = ("mem", "gemm", "alu", "finish")   # the formats a stream's instructions come in
_rec_insns, _insn_fmt, _insn_values = attrgetter("insns"), attrgetter("fmt"), attrgetter("values")


@lru_cache(maxsize=16)
def _format_set(cfg: HwConfig) -> FormatSet:
    """The ``FormatSet`` of a config's instruction formats, built once per config (a few live at a time)."""
    return FormatSet(tuple(cfg.insn_formats[fmt] for fmt in _ENCODED))


def _pad_columns(deltas: list[np.ndarray]) -> np.ndarray:
    """Per-buffer delta tables of different widths stacked, missing buffers 0 (no instruction is tagged with one)."""
    out = np.zeros((sum(len(d) for d in deltas), max(d.shape[1] for d in deltas)), dtype=np.int64)
    k = 0
    for d in deltas:
        out[k:k + len(d), :d.shape[1]] = d
        k += len(d)
    return out


class ScheduleError(ValueError):
    """A program the hardware cannot run as asked (micro-op hazard, loop limits, capacity)."""


@dataclass
class UopKernel:
    """Micro-ops (dst, src, wgt) run inside up to two affine loops ``(extent, dst_f, src_f, wgt_f)``.

    ``loops`` is outermost first; with one loop a GEMM uses it as iter_out and an ALU as iter_in, as in
    VTA's runtime.
    """

    mode: str  # "gemm" or "alu"
    uops: np.ndarray  # int64 (n, 3)
    loops: tuple[tuple[int, int, int, int], ...] = ()
    reset: bool = False
    alu_op: str = "ADD"
    use_imm: bool = False
    imm: int = 0
    key: tuple = field(init=False)
    fields: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.uops = np.asarray(self.uops, dtype=np.int64).reshape(-1, 3)
        if self.mode not in ("gemm", "alu"):
            raise ScheduleError(f"kernel mode {self.mode!r}: allowed 'gemm' or 'alu'")
        if len(self.loops) > 2:
            raise ScheduleError(f"a micro-op kernel has at most 2 loops, got {len(self.loops)}")
        if len(self.uops) == 0:
            raise ScheduleError("a micro-op kernel needs at least one micro-op")
        dst = self.uops[:, 0]
        # VTA's VerifyDep: the accumulator pipeline has no forwarding between back-to-back micro-ops (one micro-op,
        # as most ALU kernels have, cannot clash: skip the numpy calls)
        if len(dst) > 1:
            clash = np.nonzero(dst[1:] == dst[:-1])[0]
            clash2 = np.nonzero(dst[2:] == dst[:-2])[0]
            if len(clash) or len(clash2):
                i = int(clash[0]) + 1 if len(clash) else int(clash2[0]) + 2
                raise ScheduleError(f"micro-op {i} writes accumulator row {int(dst[i])}, which one of the two "
                                    f"micro-ops before it also writes (VTA's GEMM/ALU pipeline hazard)")
        self.key = (self.mode, self.reset, self.alu_op, self.use_imm, self.imm, self.loops, self.uops.tobytes())
        # the instruction's field values around [uop_bgn, uop_end), in the layout table's order (_FIELD_ORDER)
        loops = list(self.loops)
        if len(loops) == 1 and self.mode == "alu":   # one loop: a GEMM's iter_out, an ALU's iter_in (as VTA)
            loops = [(1, 0, 0, 0), loops[0]]
        loops += [(1, 0, 0, 0)] * (2 - len(loops))
        (n_out, d_out, s_out, w_out), (n_in, d_in, s_in, w_in) = loops
        loop = [n_out, n_in, d_out, d_in, s_out, s_in]
        if self.mode == "gemm":
            self.fields = ((_GEMM_OP, 0, 0, 0, 0, int(self.reset)), (*loop, w_out, w_in))
        else:
            self.fields = ((_ALU_OP, 0, 0, 0, 0, int(self.reset)),
                           (*loop, ALU_OPCODES[self.alu_op], int(self.use_imm), self.imm))

    @property
    def iterations(self) -> int:
        n = len(self.uops)
        for extent, *_ in self.loops:
            n *= extent
        return n


@dataclass
class _Insn:
    fmt: str
    stage: int
    values: list[int]   # one per field of the format, in the layout table's order


@dataclass(eq=False)   # compared and hashed by identity: a run of replays counts its recordings
class Recording:
    """Instructions a template emitted for one stretch of its work, kept to be emitted again for a stretch that
    differs only in DRAM offsets (``CommandQueue.replay``): each instruction with the index of the buffer its
    ``dram_base`` points into (-1: none, e.g. the queue's own micro-op buffer), and the queue state around it."""

    start: tuple                       # CommandQueue.state() before
    insns: list[tuple[str, int, list[int], int]]
    end: tuple                         # the state after, as (pending, resident, uop_ptr, uop_dram_used)
    tokens: dict[str, int]             # tokens pushed minus popped per queue
    anchors: tuple[int, ...] = ()      # the template's DRAM anchor per buffer (replay shifts by the difference)
    # filled by the first assembly that replays it (CommandQueue._encode): the instructions encoded as recorded
    # (uint8 rows), and per instruction the buffer its DRAM address lies in (-1: none) and that address
    encoded: np.ndarray | None = field(default=None, repr=False)
    moving: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    def values(self, i: int, deltas: tuple[int, ...], dram_slot: int) -> list[int]:
        """Instruction ``i``'s field values with its DRAM address moved by ``deltas``."""
        _, _, values, tag = self.insns[i]
        values = values.copy()
        if tag >= 0:
            values[dram_slot] += deltas[tag]
        return values


@dataclass
class _Block:
    """Instructions [0, n) of a recording, replayed with DRAM addresses moved by ``deltas`` (per buffer)."""

    rec: Recording
    deltas: tuple[int, ...]
    n: int


@dataclass
class _Run:
    """Whole recordings replayed one after another (``replay_run``): ``recs[k]`` with DRAM addresses moved by
    ``deltas[k]`` (per buffer)."""

    recs: list[Recording]
    deltas: np.ndarray   # (len(recs), buffers) int64


@dataclass
class Stream:
    """One flushed stream: its instructions and the micro-op words it loads from the uop DRAM buffer."""

    insns: np.ndarray
    uop_words: np.ndarray

    def run(self, device: SimDevice, uop_buffer: Buffer, *, compute: bool = True, trace: bool = False) -> RunStats:
        """Put the stream's micro-ops where its LOAD UOPs expect them, then run it."""
        if self.uop_words.size:
            device.copy_in(uop_buffer, self.uop_words)
        return device.run(self.insns, compute=compute, trace=trace)


def combine_stats(runs: list[RunStats]) -> RunStats:
    """Stats of streams run one after another: counters, cycles, busy and stall figures add up."""
    total = RunStats(clock_mhz=runs[0].clock_mhz if runs else 0.0)
    for st in runs:
        for name in VTA_COUNTERS:
            setattr(total, name, getattr(total, name) + getattr(st, name))
        total.finish_cycle = total.cycles + st.finish_cycle
        total.cycles += st.cycles
        total.work += st.work
        total.latency_s += st.latency_s
        for m in st.busy:
            total.busy[m] += st.busy[m]
            total.insns[m] += st.insns[m]
            for cause, v in st.stalls[m].items():
                total.stalls[m][cause] += v
    return total


@dataclass
class Program:
    """Recorded streams with their device buffers' addresses baked in; run as often as wanted."""

    device: SimDevice
    streams: list[Stream]
    uop_buffer: Buffer

    @property
    def num_insns(self) -> int:
        return sum(len(s.insns) for s in self.streams)

    def run(self, *, compute: bool = True, trace: bool = False) -> RunStats:
        """Run every stream in order; with ``trace`` (single-stream programs) keep the per-instruction trace."""
        if trace and len(self.streams) != 1:
            raise ScheduleError(f"trace needs a single-stream program, this one has {len(self.streams)}")
        runs = [stream.run(self.device, self.uop_buffer, compute=compute, trace=trace) for stream in self.streams]
        if len(runs) == 1:  # most programs: the stream's own stats, fresh from this run (combining copies them)
            return runs[0]
        total = combine_stats(runs)
        total.trace = None
        return total


class CommandQueue:
    """Accumulates one instruction stream for a device and runs it on ``flush``."""

    def __init__(self, device: SimDevice, max_insns: int = 1 << 20, record: bool = False):
        """``record=True`` keeps flushed streams in ``self.streams`` (see ``program()``) instead of running them."""
        if not is_whole(max_insns) or not 1 <= max_insns <= 2**32 - 1:
            raise ValueError(f"max_insns={max_insns!r}: an integer 1..2^32-1 (the instructions a stream is flushed "
                             "near, at a tile boundary)")
        self.device = device
        self.cfg: HwConfig = device.cfg
        self.max_insns = int(max_insns)
        self.record = record
        self.stats: list[RunStats] = []
        self.streams: list[Stream] = []
        self._uop_dram = device.alloc(4 * UOP_DRAM_WORDS)
        # each format's field positions, from the layout table (instructions are built as lists in that order)
        self._slot = {fmt: {name: i for i, name in enumerate(self.cfg.insn_formats[fmt].names)} for fmt in _ENCODED}
        self._formats = _format_set(self.cfg)   # assemble's encoder: format k is _ENCODED[k]
        self._fmt_id = {fmt: k for k, fmt in enumerate(_ENCODED)}
        self._fmt_size = np.array([len(self._slot[fmt]) for fmt in _ENCODED], dtype=np.int64)
        for fmt, order in _FIELD_ORDER.items():   # the order load_2d / store_2d / push_kernel write values in
            if self.cfg.insn_formats[fmt].names != order:
                raise AssertionError(f"{fmt}: the layout table's field order changed: {self.cfg.insn_formats[fmt].names}")
        self._elem_bytes = {name: self.cfg.elem_bytes(name) for name in MEM_TYPES}
        self._elem_bytes_of_type = {MEM_TYPES[name]: nbytes for name, nbytes in self._elem_bytes.items()}
        self._load_stage = {name: _STAGE_OF[module_of(OPCODES["LOAD"], value)] for name, value in MEM_TYPES.items()}
        caps = self.cfg.capabilities   # what the target executes: loads it would skip or pad wrongly are refused
        self._padded_loads = caps.padded_loads
        self._loadable = {"INP", "WGT"} | caps.compute_loads
        self._alu_opcodes = caps.alu_opcodes
        # what load_2d needs per memory the target loads: element bytes, stage, memory type, whether it may pad
        self._load_kind = {name: (self._elem_bytes[name], self._load_stage[name], MEM_TYPES[name],
                                  name in self._padded_loads) for name in self._loadable}
        self._reset_stream()

    def _reset_stream(self) -> None:
        self._stream_no = getattr(self, "_stream_no", -1) + 1   # recordings never cross streams (state())
        self.insns: list[_Insn | _Block | _Run] = []   # instructions, or replayed blocks of them
        self._count = 0                          # instructions in self.insns
        # pending pop flags per stage, immutable so that a recording's end state is shared, not copied
        self._pending: dict[int, frozenset[str]] = dict.fromkeys((LOAD, COMPUTE, STORE), frozenset())
        self._tokens = dict.fromkeys(QUEUES.values(), 0)  # pushed minus popped, per queue
        self._uop_rows: list[np.ndarray] = []   # micro-ops put in the uop DRAM buffer, encoded at flush (at once)
        self._uop_dram_used = 0
        self._uop_dram_of: dict[tuple, int] = {}  # kernel key -> word offset in the uop DRAM buffer
        self._resident: dict[tuple, tuple[int, int]] = {}  # kernel key -> [begin, end) in uop SRAM
        self._uop_ptr = 0

    # ---- instructions and dependencies ----
    def _append(self, fmt: str, stage: int, fields: dict[str, int]) -> _Insn:
        slot = self._slot[fmt]
        values = [0] * len(slot)
        for name, value in fields.items():
            values[slot[name]] = value
        return self._append_values(fmt, stage, values)

    def _append_values(self, fmt: str, stage: int, values: list[int]) -> _Insn:
        """Append an instruction given as its field values in the layout table's order."""
        pending = self._pending[stage]
        if pending:
            slot = self._slot[fmt]
            for flag in pending:
                values[slot[flag]] = 1
            self._pending[stage] = frozenset()
        insn = _Insn(fmt, stage, values)
        self.insns.append(insn)
        self._count += 1
        return insn

    def _nop(self, stage: int, **flags: int) -> _Insn:
        if stage == STORE:  # memory type as VTA's PushNoop gives it
            fields = {"opcode": OPCODES["STORE"], "memory_type": MEM_TYPES["UOP"]}
        else:
            fields = {"opcode": OPCODES["LOAD"], "memory_type": MEM_TYPES["INP" if stage == LOAD else "UOP"]}
        return self._append("mem", stage, {**fields, **flags})

    def _commit_pending(self, stage: int) -> None:
        if self._pending[stage]:
            self._nop(stage)

    def dep_pop(self, frm: int, to: int) -> None:
        """Stage ``to`` waits for a token from ``frm`` before its next instruction."""
        queue, flag, alone = _POP[(frm, to)]
        pending = self._pending[to]
        if flag in pending:
            self._commit_pending(to)
            pending = self._pending[to]
        self._pending[to] = pending | alone if pending else alone
        self._tokens[queue] -= 1

    def dep_push(self, frm: int, to: int) -> None:
        """Stage ``frm`` signals ``to`` once its last instruction so far is done."""
        if self._pending[frm]:
            self._nop(frm)
        flag = _PUSH_FLAG[(frm, to)]
        last = self.insns[-1] if self.insns else None
        if type(last) is not _Insn:   # none, or a replayed block: it gives up its last instruction
            last = self._last_insn()
        if last is not None and last.stage == frm and not last.values[slot := self._slot[last.fmt][flag]]:
            last.values[slot] = 1
        else:
            self._nop(frm, **{flag: 1})
        self._tokens[QUEUES[(frm, to)]] += 1

    def _last_insn(self) -> _Insn | None:
        """The last instruction, as one that may be changed (a replayed block gives up its last one)."""
        if not self.insns:
            return None
        last = self.insns[-1]
        if isinstance(last, _Run):   # its last recording becomes a block of its own
            rec, deltas = last.recs[-1], tuple(int(d) for d in last.deltas[-1])
            self.insns[-1:] = [_Run(last.recs[:-1], last.deltas[:-1])] if len(last.recs) > 1 else []
            self.insns.append(_Block(rec, deltas, len(rec.insns)))
            last = self.insns[-1]
        if isinstance(last, _Block):
            rec = last.rec
            fmt, stage, _, _ = rec.insns[last.n - 1]
            insn = _Insn(fmt, stage, rec.values(last.n - 1, last.deltas, self._slot["mem"]["dram_base"]))
            self.insns[-1:] = [_Block(rec, last.deltas, last.n - 1), insn] if last.n > 1 else [insn]
            return insn
        return last

    # ---- recording and replay (templates emitting many tiles alike) ----
    def state(self) -> tuple:
        """What decides how the next instructions come out, besides the template's own arguments: the stream,
        pending dependency flags, resident micro-op kernels and where the next one goes, micro-op DRAM in use."""
        return (self._stream_no, (self._pending[LOAD], self._pending[COMPUTE], self._pending[STORE]),
                frozenset(self._resident.items()), self._uop_ptr, self._uop_dram_used)

    def mark(self) -> tuple:
        """Where a recording starts (``recording``)."""
        last = self.insns[-1] if self.insns else None
        values = last.values.copy() if isinstance(last, _Insn) else None
        return self.insns, len(self.insns), self.state(), dict(self._tokens), last, values

    def recording(self, mark: tuple, buffers: list[Buffer | None]) -> Recording | None:
        """The instructions emitted since ``mark``, each tagged with which of ``buffers`` its DRAM address lies
        in; None when they cannot be replayed (the stream was flushed, an earlier instruction was changed, new
        micro-op words went to DRAM, or the buffers overlap, so that an address's buffer would be ambiguous)."""
        insns, n0, start, tokens0, last, values = mark
        if insns is not self.insns or (n0 and (self.insns[n0 - 1] is not last or  # a block is never changed
                                              (isinstance(last, _Insn) and last.values != values))) or \
                self._uop_dram_used != start[-1]:
            return None
        spans = sorted((b.addr, b.addr + b.nbytes, i) for i, b in enumerate(buffers) if b is not None)
        if any(a_end > b_start for (_, a_end, _), (b_start, _, _) in pairwise(spans)):
            return None
        starts = [span[0] for span in spans]
        slot = self._slot["mem"]
        dram, mem_type = slot["dram_base"], slot["memory_type"]
        elem = self._elem_bytes_of_type
        out = []
        for insn in self.insns[n0:]:
            if type(insn) is not _Insn:   # only instructions emitted one by one
                return None
            values = insn.values
            tag = -1
            if insn.fmt == "mem":
                addr = values[dram] * elem[values[mem_type]]
                k = bisect_right(starts, addr) - 1   # the one buffer that can hold it: they do not overlap
                if k >= 0 and addr < spans[k][1]:
                    tag = spans[k][2]
            out.append((insn.fmt, insn.stage, values, tag))
        if out:   # only the last instruction can still change (a push riding on it): keep it as it is now
            fmt, stage, values, tag = out[-1]
            out[-1] = (fmt, stage, values.copy(), tag)
        end = (dict(self._pending), dict(self._resident), self._uop_ptr,
               self._uop_dram_used)
        return Recording(start, out, end, {q: n - tokens0[q] for q, n in self._tokens.items()})

    def replay(self, rec: Recording, deltas: list[int]) -> None:
        """Emit ``rec``'s instructions again, each DRAM address moved by ``deltas[its buffer]`` elements; the
        queue must be in the state the recording started from."""
        if self.state() != rec.start:
            raise ScheduleError("replay: the queue is not in the state the recording started from")
        self.replay_run([rec], [deltas])

    def replay_run(self, recs: list[Recording], deltas) -> None:
        """``replay(recs[k], deltas[k])`` for each k, as one queue element and unchecked: the queue must be in the
        state ``recs[0]`` starts from and each recording must start from the state the one before ends in (the
        caller knows: it keyed them by those states)."""
        if not recs:
            return
        deltas = np.array(deltas, dtype=np.int64).reshape(len(recs), -1)   # a copy: the run keeps it
        times = Counter(recs)
        if all(rec.insns for rec in times):
            self.insns.append(_Run(list(recs), deltas))
        else:   # an empty recording only moves the state
            emitting = [k for k, rec in enumerate(recs) if rec.insns]
            if emitting:
                self.insns.append(_Run([recs[k] for k in emitting], deltas[emitting]))
        tokens = self._tokens
        for rec, k in times.items():
            self._count += k * len(rec.insns)
            for q, n in rec.tokens.items():
                tokens[q] += k * n
        self._enter_end_state(recs[-1])

    def _enter_end_state(self, rec: Recording) -> None:
        """The pending flags, resident kernels and micro-op ring pointer ``rec`` ends with (after replaying it)."""
        pending, resident, self._uop_ptr, _ = rec.end
        self._pending = dict(pending)
        self._resident = dict(resident)

    def near_full(self, extra: int = 0) -> bool:
        """Whether ``checkpoint`` would flush with ``extra`` more instructions in the stream."""
        return extra >= self.room()

    def room(self) -> int:
        """The fewest more instructions with which ``near_full`` holds (16 are kept for the stream's end)."""
        return self.max_insns - 16 - self._count

    # ---- DMA ----
    def load_2d(self, buf: Buffer, elem_offset: int, x_size: int, y_size: int, x_stride: int, sram: int, mem: str,
                pad: tuple[int, int, int, int] = (0, 0, 0, 0)) -> None:
        """DMA a 2D tile of DRAM elements into SRAM; ``pad`` = (y_before, y_after, x_before, x_after) zeros."""
        kind = self._load_kind.get(mem)
        if kind is None or (not kind[3] and any(pad)):
            raise ScheduleError(f"LOAD {mem}{' with padding' if any(pad) else ''}: capability set "
                                f"{self.cfg.CAPABILITIES} cannot ({self.cfg.capabilities.describe()})")
        elem_bytes, stage, mem_type, _ = kind
        self._append_values("mem", stage, [
            _LOAD_OP, 0, 0, 0, 0, mem_type, sram, buf.elem_offset(elem_bytes) + elem_offset, y_size, x_size, x_stride,
            *pad])

    def store_2d(self, sram: int, buf: Buffer, elem_offset: int, x_size: int, y_size: int, x_stride: int) -> None:
        """DMA accumulator rows (low 8 bits of each lane) out to DRAM."""
        dram = buf.elem_offset(self._elem_bytes["OUT"]) + elem_offset
        self._append_values("mem", STORE, [
            _STORE_OP, 0, 0, 0, 0, _OUT_MEM, sram, dram, y_size, x_size, x_stride, 0, 0, 0, 0])

    # ---- micro-op kernels ----
    def _make_resident(self, kernel: UopKernel) -> tuple[int, int]:
        where = self._resident.get(kernel.key)
        if where is not None:
            return where
        n = len(kernel.uops)
        depth = self.cfg.UOP_BUFF_DEPTH
        if n > depth:
            raise ScheduleError(f"micro-op kernel of {n} micro-ops exceeds the micro-op buffer ({depth})")
        if self._uop_ptr + n > depth:
            self._uop_ptr = 0  # ring: wrap and evict whatever the new range overlaps
        begin, end = self._uop_ptr, self._uop_ptr + n
        self._resident = {k: r for k, r in self._resident.items() if r[1] <= begin or r[0] >= end}
        self._uop_ptr = end
        offset = self._uop_dram_of.get(kernel.key)
        if offset is None:
            if self._uop_dram_used + n > UOP_DRAM_WORDS:
                raise ScheduleError("micro-op DRAM buffer full: flush the queue more often")
            offset = self._uop_dram_used
            self._uop_rows.append(kernel.uops)
            self._uop_dram_of[kernel.key] = offset
            self._uop_dram_used += n
        self.load_2d(self._uop_dram, offset, n, 1, n, begin, "UOP")
        self._resident[kernel.key] = (begin, end)
        return begin, end

    def _encode_uops(self, uops: np.ndarray) -> np.ndarray:
        fmt = self.cfg.insn_formats["uop"]   # fields dst_idx, src_idx, wgt_idx: a kernel's columns, in order
        return fmt.encode_table(uops, nbytes=4).view("<u4").reshape(-1)

    def push_kernel(self, kernel: UopKernel) -> None:
        """Emit the GEMM or ALU instruction running ``kernel`` (loading its micro-ops first if needed)."""
        if kernel.mode == "alu" and kernel.alu_op not in self._alu_opcodes:
            raise ScheduleError(f"ALU {kernel.alu_op}: capability set {self.cfg.CAPABILITIES} has no such ALU op "
                                f"({self.cfg.capabilities.describe()})")
        begin, end = self._resident.get(kernel.key) or self._make_resident(kernel)
        head, tail = kernel.fields
        self._append_values(kernel.mode, COMPUTE, [*head, begin, end, *tail])

    # ---- streams ----
    def assemble(self) -> np.ndarray:
        """The stream so far as uint8 (N, 16). The instructions emitted one by one and the rows of recordings not
        yet encoded are encoded together (one flat table of field values, ``FormatSet.encode_flat``); the output is
        then one gather from those rows (each replay copies its recording's), after which replayed DRAM addresses
        are moved in the encoded 64-bit words (the field never straddles one; a moved address is range-checked as
        encoding it would be)."""
        singles: list[_Insn] = []
        before: list[int] = []           # per replaying element (_Block, _Run): instructions emitted one by one before it
        per: list[int] = []              # its replays
        replayed: list[Recording] = []   # per replay, in stream order
        deltas: list[np.ndarray] = []    # per replaying element: DRAM deltas per replay and buffer
        cut: list[tuple[int, int]] = []  # blocks: (replay, instructions it keeps)
        for e in self.insns:
            if isinstance(e, _Insn):
                singles.append(e)
                continue
            before.append(len(singles))
            if isinstance(e, _Run):
                per.append(len(e.recs))
                replayed.extend(e.recs)
                deltas.append(e.deltas)
            else:
                per.append(1)
                cut.append((len(replayed), e.n))
                replayed.append(e.rec)
                deltas.append(np.array(e.deltas, dtype=np.int64).reshape(1, -1))
        ids = list(map(id, replayed))
        distinct = dict(zip(ids, replayed)).values()
        new = [rec for rec in distinct if rec.encoded is None]
        old = [rec for rec in distinct if rec.encoded is not None]   # encoded by an earlier assembly of the stream
        words, tags, bases = self._encode(singles, new)
        if old:
            words = np.concatenate([words, *(rec.encoded.view("<u8") for rec in old)])
            tags = np.concatenate([tags, *(rec.moving[0] for rec in old)])
            bases = np.concatenate([bases, *(rec.moving[1] for rec in old)])
        if not replayed:
            return words.view(np.uint8)
        order = new + old   # the recordings' rows follow the singles' in ``words`` in this order
        lengths = np.fromiter(map(len, map(_rec_insns, order)), np.int64, len(order))
        first = len(singles) + np.cumsum(lengths) - lengths   # each recording's first row in ``words``
        slot = dict(zip(map(id, order), range(len(order))))
        which = np.fromiter(map(slot.__getitem__, ids), np.int64, len(replayed))
        sizes = lengths[which]
        for r, n in cut:
            sizes[r] = n
        # pieces in stream order: a stretch of instructions emitted one by one before each replaying element (and
        # one after the last), each element's replays; src: each output row's row in ``words``
        before_a = np.array(before + [len(singles)], dtype=np.int64)
        stretch = np.arange(len(before_a))
        stretch[1:] += np.cumsum(np.array(per, dtype=np.int64))   # the stretches' places among the pieces
        is_replay = np.ones(len(before_a) + len(replayed), dtype=bool)
        is_replay[stretch] = False
        size, origin = np.empty((2, len(is_replay)), dtype=np.int64)
        size[stretch] = before_a
        size[stretch[1:]] -= before_a[:-1]
        size[is_replay] = sizes
        origin[stretch] = before_a - size[stretch]
        first_r = first.take(which)   # each replay's recording's first row in ``words``
        origin[is_replay] = first_r
        ends = np.cumsum(size)
        starts = ends - size
        out = np.take(words, np.repeat(origin - starts, size) + np.arange(int(ends[-1])), axis=0)
        # replayed DRAM addresses: replay r moves the tagged rows of its recording among its first sizes[r]
        tagged = np.flatnonzero(tags >= 0)
        lo = np.searchsorted(tagged, first_r)
        cnt = np.searchsorted(tagged, first_r + sizes) - lo
        if tagged.size and cnt.any():
            m = int(cnt.sum())
            offset = np.cumsum(cnt) - cnt
            g = np.repeat(lo - offset, cnt) + np.arange(m)   # per moved address: its place in ``tagged``
            rows = tagged.take(g) + np.repeat(starts[is_replay] - first_r, cnt)   # the output rows it went to
            delta = np.concatenate(deltas) if len({d.shape[1] for d in deltas}) == 1 else _pad_columns(deltas)
            delta = delta.take(np.repeat(np.arange(len(replayed)) * delta.shape[1], cnt) + tags.take(tagged).take(g))
            moved = bases.take(tagged).take(g) + delta
            dram = self.cfg.insn_formats["mem"].field("dram_base")
            if moved.min() < dram.min_value or moved.max() > dram.max_value:
                value = int(moved[(moved < dram.min_value) | (moved > dram.max_value)][0])
                raise ScheduleError(f"instruction field out of range: mem.dram_base={value} is out of range: allowed "
                                    f"[{dram.min_value}, {dram.max_value}] ({dram.width} bits)")
            # in range before and after, so moving the field is adding the delta to its word (mod 2**64)
            column = out[:, dram.offset // 64]
            column[rows] = column.take(rows) + (delta.view(np.uint64) << np.uint64(dram.offset % 64))
        return out.view(np.uint8)

    def _encode(self, singles: list[_Insn], new: list[Recording]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Encode ``singles`` and the rows of the recordings in ``new`` (filling their ``encoded`` and ``moving``)
        as one table: its 64-bit words (N, 2), and per row the buffer its DRAM address moves with (-1: none) and
        that address."""
        rows = list(chain.from_iterable(map(_rec_insns, new)))
        fmts, _, values, tagged = zip(*rows) if rows else ((), (), (), ())
        fmt_id = self._fmt_id
        which = np.fromiter(chain(map(fmt_id.__getitem__, map(_insn_fmt, singles)), map(fmt_id.__getitem__, fmts)),
                            np.int64, len(singles) + len(rows))
        singles_values = list(map(_insn_values, singles))
        n = sum(map(len, singles_values)) + sum(map(len, values))
        try:   # struct converts Python ints about twice as fast as numpy.fromiter
            flat = np.frombuffer(struct.pack(f"<{n}q", *chain.from_iterable(singles_values),
                                             *chain.from_iterable(values)), dtype=np.int64)
        except struct.error as e:
            raise ScheduleError(f"instruction field out of range: {e}") from None
        try:
            words = self._formats.encode_flat(which, flat).view("<u8")
        except ValueError as e:
            raise ScheduleError(f"instruction field out of range: {e}") from None
        tags = np.full(len(which), -1, dtype=np.int64)
        tags[len(singles):] = tagged
        bases = np.zeros(len(which), dtype=np.int64)
        if rows:
            at = np.flatnonzero(tags >= 0)   # only mem instructions are tagged
            starts = np.cumsum(self._fmt_size[which]) - self._fmt_size[which]
            bases[at] = flat[starts[at] + self._slot["mem"]["dram_base"]]
        k = len(singles)
        for rec in new:
            n = len(rec.insns)
            rec.encoded = words[k:k + n].view(np.uint8)
            rec.moving = (tags[k:k + n], bases[k:k + n])
            k += n
        return words, tags, bases

    def checkpoint(self) -> bool:
        """Flush when the stream is near ``max_insns`` (called by templates at tile boundaries); whether it did."""
        if self.near_full():
            self.flush(restore=True)
            return True
        return False

    def flush(self, *, restore: bool = False, compute: bool = True, trace: bool = False) -> RunStats | None:
        """End the stream like VTA's Synchronize, run it, and start a new one.

        Outstanding tokens are drained first (and, with ``restore``, pushed again in the new stream).
        """
        if not self.insns:
            return None
        outstanding = dict(self._tokens)
        for (frm, to), queue in QUEUES.items():
            for _ in range(outstanding[queue]):
                self.dep_pop(frm, to)
            self._commit_pending(to)
        self.dep_push(STORE, COMPUTE)
        self.dep_push(LOAD, COMPUTE)
        self.dep_pop(STORE, COMPUTE)
        self.dep_pop(LOAD, COMPUTE)
        self._commit_pending(COMPUTE)
        self._append("finish", COMPUTE, {"opcode": OPCODES["FINISH"]})
        unbalanced = {q: n for q, n in self._tokens.items() if n}
        if unbalanced:  # a template bug: pops without pushes
            raise ScheduleError(f"unbalanced dependency tokens at flush: {unbalanced}")
        stream = Stream(self.assemble(), self._encode_uops(np.concatenate(self._uop_rows)) if self._uop_rows
                        else np.zeros(0, dtype=np.uint32))
        self._reset_stream()
        stats = None
        if self.record:
            self.streams.append(stream)
        else:
            stats = stream.run(self.device, self._uop_dram, compute=compute, trace=trace)
            self.stats.append(stats)
            self.last_insns = stream.insns
        if restore:
            for (frm, to), queue in QUEUES.items():
                for _ in range(outstanding[queue]):
                    self.dep_push(frm, to)
        return stats

    def program(self) -> Program:
        """Flush what remains and hand over the recorded streams (``record=True`` queues only)."""
        if not self.record:
            raise ScheduleError("program() needs a queue created with record=True")
        self.flush()
        return Program(self.device, self.streams, self._uop_dram)

    @property
    def uop_buffer(self) -> Buffer:
        """The device buffer the streams' micro-op kernels are loaded from (the queue allocated it)."""
        return self._uop_dram

    def close(self) -> None:
        self.device.free(self._uop_dram)
