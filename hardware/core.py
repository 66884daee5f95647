"""The accelerator's top level: fetch, the three modules, the four token queues, the SRAMs, the DRAM arbiter
and its AXI4 master, the control registers and their AXI4-Lite slaves.

```
 host --AXI4-Lite x4--> [axi_lite] --> [registers] --launch--> [fetch] --insn--> load / compute / store queues
                                                                  |
   DRAM <==AXI4== [axi] <== [arbiter_rd] <== fetch, load.inp, load.wgt, compute.uop, compute.acc, compute.acc8
                        <== [arbiter_wr] <== store
                 load --l2g--> compute --g2s--> store ;  compute --g2l--> load ; store --s2g--> compute
   SRAMs: inp, wgt (load writes, compute reads); uop, acc (compute); out (compute writes, store reads)
```

The ports are flat and named as Vivado's interface inference expects: ``m_axi_*`` (AXI4 master),
``s_axi_fetch_*``, ``s_axi_load_*``, ``s_axi_compute_*``, ``s_axi_store_*`` (AXI4-Lite slaves, one per
register block, VTA's offsets within each), ``clk``, ``rst`` (synchronous, active high), ``events``
(trace pulses, for simulation; leave it unconnected) and ``interrupt_<block>`` (each block's HLS interrupt,
hardware/control.py; VTA's block design leaves them unconnected).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import Out

from hardware import registers as R
from hardware.axi import AXI_ADDR_BITS, AxiLiteRegs, AxiMaster, axi4, axi4_lite
from hardware.control import ctrl_value, hls_control, read_mux
from hardware.counters import PerfCounters
from hardware.fetch import Fetch
from hardware.modules import ComputeModule, LoadModule, StoreModule
from hardware.params import DRAM_CLIENTS, REG_DATA_BITS, RtlParams
from hardware.token_queue import TokenQueue
from hw_config import HwConfig
from hw_config.config import MMIO_BLOCKS
from hw_config.isa_rules import MODULES, QUEUE_BETWEEN, QUEUES

# The DRAM clients, in the arbiter's round-robin order.
DRAM_WRITERS = ("store",)                                    # each client's index in DRAM_CLIENTS is its AXI ID
DRAM_READERS = tuple(c for c in DRAM_CLIENTS if c not in DRAM_WRITERS)


# The ``events`` port's bits, two per module in MODULES order: it started an instruction (its tokens popped),
# it finished one (its tokens pushed). For traces; nothing in the design reads them.
EVENT_BITS = 2 * len(MODULES)


def lite_addr_bits(p: RtlParams) -> int:
    """Address bits of each AXI4-Lite slave port: offsets within one register block (MMIO_RANGE bytes)."""
    return (p.cfg.MMIO_RANGE - 1).bit_length()


def bus_ports(p: RtlParams) -> dict[str, tuple[str, str, wiring.Signature]]:
    """prefix -> (bus name, protocol, the interface's signature as the top level has it)."""
    out = {"m_axi": ("dram", "AXI4", axi4(AXI_ADDR_BITS, p.bus_bits))}
    for block in MMIO_BLOCKS:
        out[f"s_axi_{block}"] = (block, "AXI4-Lite", axi4_lite(lite_addr_bits(p)).flip())
    return out


def core_signature(p: RtlParams) -> wiring.Signature:
    """The top level's ports, flat: the AXI4 master, the four AXI4-Lite slaves, the trace events, each register
    block's interrupt (``interrupt_<block>``, as each of VTA's HLS IPs has an ``interrupt`` pin)."""
    members = {}
    for prefix, (_, _, sig) in bus_ports(p).items():
        for name, member in sig.members.items():
            members[f"{prefix}_{name}"] = member
    members["events"] = Out(EVENT_BITS)
    for block in MMIO_BLOCKS:
        members[f"interrupt_{block}"] = Out(1)
    return wiring.Signature(members)


def _connect_flat(m: Module, top, prefix: str, inner) -> None:
    """Wire an interface (``inner``, a sub-component's port) to the top level's flat ``<prefix>_<name>`` ports."""
    for name in inner.signature.members:
        outer, sig = getattr(top, f"{prefix}_{name}"), getattr(inner, name)
        if top.signature.members[f"{prefix}_{name}"].flow == Out:
            m.d.comb += outer.eq(sig)
        else:
            m.d.comb += sig.eq(outer)


class VTACore(wiring.Component):
    """The whole accelerator for one config."""

    def __init__(self, cfg: HwConfig, dsp_packing: bool | None = None):
        self.p = RtlParams(cfg, dsp_packing)
        super().__init__(core_signature(self.p))

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        cfg = p.cfg
        m.submodules.fetch = fetch = Fetch(p.fmt("mem"), p.bus_bits, p.outstanding)
        m.submodules.load = load = LoadModule(p)
        m.submodules.compute = compute = ComputeModule(p)
        m.submodules.store = store = StoreModule(p)
        modules = {"load": load, "compute": compute, "store": store}
        for name, mod in modules.items():
            wiring.connect(m, getattr(fetch, name), mod.insn)
        m.d.comb += self.events.eq(Cat(*[Cat(modules[name].issued, modules[name].retired) for name in MODULES]))

        # token queues: (producer, consumer) -> queue
        clear = Signal()
        for (src, dst), q in QUEUE_BETWEEN.items():
            tq = TokenQueue(cfg.TOKEN_QUEUE_DEPTH)
            m.submodules[f"tokens_{q}"] = tq
            wiring.connect(m, getattr(modules[src], f"push_{q}"), tq.push)
            wiring.connect(m, getattr(modules[dst], f"pop_{q}"), tq.pop)
            m.d.comb += tq.clear.eq(clear)
        assert set(QUEUE_BETWEEN.values()) == set(QUEUES)

        # SRAMs
        s = p.srams
        mems = {name: memory.Memory(shape=sram.width, depth=sram.depth, init=[]) for name, sram in s.items()}
        for name, mem in mems.items():
            m.submodules[f"{name}_sram"] = mem
        # every SRAM a simple dual-port memory: one write port, one synchronous read port, not transparent (the
        # loop engine forwards results still on their way into the accumulator itself)
        ports = [(load.inp_wr, "inp", "w"), (load.wgt_wr, "wgt", "w"), (compute.uop_wr, "uop", "w"),
                 (compute.acc_wr, "acc", "w"), (compute.out_wr, "out", "w"),
                 (compute.uop_rd, "uop", "r"), (compute.inp_rd, "inp", "r"), (compute.wgt_rd, "wgt", "r"),
                 (compute.acc_rd, "acc", "r"), (store.out_rd, "out", "r")]
        ports = [(ours, mems[name].write_port() if kind == "w" else mems[name].read_port(transparent_for=()))
                 for ours, name, kind in ports]
        for ours, port in ports:
            m.d.comb += [port.addr.eq(ours.addr), port.en.eq(ours.en)]
            if hasattr(ours, "data") and ours.signature.members["data"].flow == Out:
                m.d.comb += port.data.eq(ours.data)
            else:
                m.d.comb += ours.data.eq(port.data)

        # DRAM: the readers share one arbiter, store (the one writer) has its own; both feed the AXI4 master
        from hardware.dram import Arbiter
        clients = {"store": store.mem, "compute.acc": compute.mem_acc, "compute.acc8": compute.mem_acc8,
                   "compute.uop": compute.mem_uop, "load.inp": load.mem_inp, "load.wgt": load.mem_wgt,
                   "fetch": fetch.mem}
        m.submodules.axi = axi = AxiMaster(p.bus_bits, AXI_ADDR_BITS, coherent=cfg.COHERENT, prot=p.axi_prot)
        for side, names in (("rd", DRAM_READERS), ("wr", DRAM_WRITERS)):
            m.submodules[f"arbiter_{side}"] = arb = Arbiter(tuple(DRAM_CLIENTS.index(n) for n in names), p.bus_bits)
            for i, name in enumerate(names):
                wiring.connect(m, clients[name], getattr(arb, f"client{i}"))
            wiring.connect(m, arb.mem, getattr(axi, side))
        m.d.comb += axi.clear.eq(clear)
        _connect_flat(m, self, "m_axi", axi.axi)

        # registers, behind the AXI4-Lite slaves
        m.submodules.axi_lite = lite = AxiLiteRegs(MMIO_BLOCKS, lite_addr_bits(p), cfg.MMIO_RANGE, p.reg_addr_bits)
        for block in MMIO_BLOCKS:
            _connect_flat(m, self, f"s_axi_{block}", getattr(lite, block))
        reads = self._registers(m, lite.reg, fetch, modules, clear)
        reads[R.register_offset(cfg, "fetch", R.AXI_STATUS)] = axi.status     # the AXI4 master's errors, read-only
        m.d.comb += lite.reg.rdata.eq(read_mux(lite.reg.addr, reads, REG_DATA_BITS))
        return m

    def _registers(self, m: Module, reg, fetch: Fetch, modules: dict, clear: Signal) -> dict[int, object]:
        """The register file's stored registers, control, counters and their effects; returns the read value of
        every register by its offset."""
        cfg = self.p.cfg

        def at(block: str, offset: int) -> int:
            return R.register_offset(cfg, block, offset)

        control = (R.CTRL, R.GIE, R.IER, R.ISR)
        stored = {(block, off): Signal(REG_DATA_BITS, name=f"reg_{block}_{name}")
                  for block, off, name, access, _ in R.REGISTERS
                  if access == "rw" and (off not in control or (off == R.CTRL and block != "fetch"))}
        done = Signal()
        launch = Signal()
        with m.If(reg.we):
            for key, sig in stored.items():
                with m.If(reg.addr == at(*key)):
                    m.d.sync += sig.eq(Cat(*[Mux(reg.strb[b], reg.wdata[8 * b:8 * b + 8], sig[8 * b:8 * b + 8])
                                             for b in range(REG_DATA_BITS // 8)]))
            with m.If((reg.addr == at("fetch", R.CTRL)) & reg.strb[0] & reg.wdata[0] & ~fetch.busy):
                m.d.comb += launch.eq(1)
        insn_addr = stored[("fetch", R.FETCH_INSN_ADDR)]
        insn_addr_hi = stored[("fetch", R.FETCH_INSN_ADDR + 4)]
        m.d.comb += [fetch.launch.eq(launch), clear.eq(launch),
                     fetch.insn_count.eq(stored[("fetch", R.FETCH_INSN_COUNT)]),
                     fetch.insn_addr.eq((insn_addr_hi << REG_DATA_BITS) | insn_addr)]
        with m.If(launch):
            m.d.sync += done.eq(0)
        with m.If(modules["compute"].finished):
            m.d.sync += done.eq(1)
        # every block's ap_ctrl_hs control (hardware/control.py): fetch finishes when it has dispatched the run's
        # last instruction; VTA's HLS modules run once per instruction (auto-restarted), so theirs each time the
        # module finishes one
        was_busy = Signal()
        m.d.sync += was_busy.eq(fetch.busy)
        events = {"fetch": was_busy & ~fetch.busy, **{name: mod.retired for name, mod in modules.items()}}
        reads = {at("fetch", R.FETCH_DISPATCHED): fetch.dispatched,
                 at("compute", R.COMPUTE_DONE_RD): done,
                 at("compute", R.COMPUTE_DONE_VLD): done}
        for block, event in events.items():
            ctl = hls_control(m, reg, at(block, R.CTRL), event, block)
            m.d.comb += getattr(self, f"interrupt_{block}").eq(ctl.interrupt)
            reads.update(ctl.reads)
            if block == "fetch":
                reads[at(block, R.CTRL)] = ctrl_value(fetch.busy, ctl.ap_done, ~fetch.busy, 0)
            else:           # stored (the modules always run), read back with ap_idle and the latched ap_done
                written = stored[(block, R.CTRL)]
                reads[at(block, R.CTRL)] = ctrl_value(written[0], ctl.ap_done, 1, written[7])
        for key, sig in stored.items():
            if key[1] != R.CTRL:
                reads[at(*key)] = sig
        # the performance counters (hardware/counters.py), cleared by a launch
        m.submodules.counters = counters = PerfCounters(cfg)
        m.d.comb += counters.clear.eq(launch)
        for name, mod in modules.items():
            m.d.comb += [getattr(counters, f"{name}_issued").eq(mod.issued),
                         getattr(counters, f"{name}_insn").eq(mod.issued_insn)]
        for name, (block, offset) in R.COUNTER_REGISTERS.items():
            value = getattr(counters, name)
            for word in range(R.COUNTER_BITS // REG_DATA_BITS):
                reads[at(block, offset + 4 * word)] = value.word_select(word, REG_DATA_BITS)
        return reads
