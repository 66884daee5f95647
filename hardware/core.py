"""The accelerator's top level: fetch, the three modules, the four token queues, the SRAMs, the DRAM arbiter
and its AXI4 master, the control registers and their AXI4-Lite slaves.

```
 host --AXI4-Lite x4--> [axi_lite] --> [registers] --launch--> [fetch] --insn--> load / compute / store queues
                                                                  |
   DRAM <==AXI4== [axi] <== [arbiter_rd] <== fetch, load.inp, load.wgt, compute.uop, compute.acc, compute.acc8
                        <== [arbiter_wr] <== store
                 load --l2g--> compute --g2s--> store ;  compute --g2l--> load ; store --s2g--> compute
   SRAMs: inp, wgt (load writes, compute reads); uop (compute); acc (compute reads/writes, store reads)
```

The ports are flat and named as Vivado's interface inference expects: ``m_axi_*`` (AXI4 master),
``s_axi_fetch_*``, ``s_axi_load_*``, ``s_axi_compute_*``, ``s_axi_store_*`` (AXI4-Lite slaves, one per
register block, VTA's offsets within each), ``clk``, ``rst`` (synchronous, active high) and ``events``
(trace pulses, for simulation; leave it unconnected).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import Out

from hardware import registers as R
from hardware.axi import AXI_ADDR_BITS, AxiLiteRegs, AxiMaster, axi4, axi4_lite
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
    """The top level's ports, flat: the AXI4 master, the four AXI4-Lite slaves, the trace events."""
    members = {}
    for prefix, (_, _, sig) in bus_ports(p).items():
        for name, member in sig.members.items():
            members[f"{prefix}_{name}"] = member
    members["events"] = Out(EVENT_BITS)
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

    def __init__(self, cfg: HwConfig):
        self.p = RtlParams(cfg)
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
        uop_w = mems["uop"].write_port()
        inp_w, wgt_w, acc_w = mems["inp"].write_port(), mems["wgt"].write_port(), mems["acc"].write_port()
        ports = [(load.inp_wr, inp_w), (load.wgt_wr, wgt_w), (compute.uop_wr, uop_w), (compute.acc_wr, acc_w),
                 (compute.uop_rd, mems["uop"].read_port()), (compute.inp_rd, mems["inp"].read_port()),
                 (compute.wgt_rd, mems["wgt"].read_port()),
                 (compute.acc_rd, mems["acc"].read_port(transparent_for=(acc_w,))),   # (the loop engine
                 # forwards what it needs; the transparency stays while hardware/fpga's model counts it)
                 (store.acc_rd, mems["acc"].read_port())]
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
        self._registers(m, lite.reg, fetch, modules, clear)
        self._axi_status(m, lite.reg, axi)
        return m

    def _axi_status(self, m: Module, reg, axi: AxiMaster) -> None:
        """The AXI4 master's error status (hardware/registers.py AXI_STATUS), read-only."""
        with m.If(reg.addr == R.register_offset(self.p.cfg, "fetch", R.AXI_STATUS)):
            m.d.comb += reg.rdata.eq(axi.status)

    def _registers(self, m: Module, reg, fetch: Fetch, modules: dict, clear: Signal) -> None:
        cfg = self.p.cfg
        stored = {(block, off): Signal(REG_DATA_BITS, name=f"reg_{block}_{name}")
                  for block, off, name, access, _ in R.REGISTERS if access == "rw" and not (block == "fetch" and off == R.CTRL)}
        done = Signal()
        launch = Signal()
        addr = {key: R.register_offset(cfg, *key) for key in stored}
        with m.If(reg.we):
            for key, sig in stored.items():
                with m.If(reg.addr == addr[key]):
                    m.d.sync += sig.eq(Cat(*[Mux(reg.strb[b], reg.wdata[8 * b:8 * b + 8], sig[8 * b:8 * b + 8])
                                             for b in range(REG_DATA_BITS // 8)]))
            with m.If((reg.addr == R.register_offset(cfg, "fetch", R.CTRL)) & reg.strb[0] & reg.wdata[0] &
                      ~fetch.busy):
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
        # ap_done of the three modules' blocks: raised each time the module finishes an instruction (VTA's HLS
        # modules run once per instruction, auto-restarted), cleared when the host reads the block's CTRL
        ap_done = {}
        for name, mod in modules.items():
            ctrl = R.register_offset(cfg, name, R.CTRL)
            ap_done[name] = flag = Signal(name=f"ap_done_{name}")
            with m.If(reg.re & (reg.addr == ctrl)):
                m.d.sync += flag.eq(0)
            with m.If(mod.retired):
                m.d.sync += flag.eq(1)
        fetch_status = (fetch.busy * R.AP_START) | (done * R.AP_DONE) | (~fetch.busy * R.AP_IDLE)
        reads = {R.register_offset(cfg, "fetch", R.CTRL): fetch_status,
                 R.register_offset(cfg, "fetch", R.FETCH_DISPATCHED): fetch.dispatched,
                 R.register_offset(cfg, "compute", R.COMPUTE_DONE_RD): done,
                 R.register_offset(cfg, "compute", R.COMPUTE_DONE_VLD): done}
        for key, sig in stored.items():
            if key[1] == R.CTRL:
                reads[addr[key]] = (sig & ~R.AP_DONE) | R.AP_IDLE | (ap_done[key[0]] * R.AP_DONE)
            else:
                reads[addr[key]] = sig
        with m.Switch(reg.addr):
            for offset, value in reads.items():
                with m.Case(offset):
                    m.d.comb += reg.rdata.eq(value)
