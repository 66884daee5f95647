"""The accelerator's top level: fetch, the three modules, the four token queues, the SRAMs, the DRAM arbiter
and the control registers.

```
 host regs --> [registers] --launch--> [fetch] --insn--> load / compute / store command queues
                                         |
   DRAM <== [arbiter] <== fetch, load.inp, load.wgt, compute.uop, compute.acc, compute.acc8, store
                 load --l2g--> compute --g2s--> store ;  compute --g2l--> load ; store --s2g--> compute
   SRAMs: inp, wgt (load writes, compute reads); uop (compute); acc (compute reads/writes, store reads)
```
"""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from hardware import registers as R
from hardware.fetch import Fetch
from hardware.interfaces import dram_port, reg_bus
from hardware.modules import ComputeModule, LoadModule, StoreModule
from hardware.params import REG_DATA_BITS, RtlParams
from hardware.token_queue import TokenQueue
from hw_config import HwConfig
from hw_config.isa_rules import MODULES, QUEUE_BETWEEN, QUEUES

# The DRAM clients, in the arbiter's round-robin order.
DRAM_CLIENTS = ("store", "compute.acc", "compute.acc8", "compute.uop", "load.inp", "load.wgt", "fetch")


# The ``events`` port's bits, two per module in MODULES order: it started an instruction (its tokens popped),
# it finished one (its tokens pushed). For traces; nothing in the design reads them.
EVENT_BITS = 2 * len(MODULES)


def core_signature(p: RtlParams) -> wiring.Signature:
    """The top level's ports: a DRAM master port, the host's register bus and the trace events."""
    return wiring.Signature({"mem": Out(dram_port(p.bus_bits)), "reg": In(reg_bus(p.reg_addr_bits)),
                             "events": Out(EVENT_BITS)})


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
                 (compute.acc_rd, mems["acc"].read_port(transparent_for=(acc_w,))),
                 (store.acc_rd, mems["acc"].read_port())]
        for ours, port in ports:
            m.d.comb += [port.addr.eq(ours.addr), port.en.eq(ours.en)]
            if hasattr(ours, "data") and ours.signature.members["data"].flow == Out:
                m.d.comb += port.data.eq(ours.data)
            else:
                m.d.comb += ours.data.eq(port.data)

        # DRAM arbiter
        from hardware.dram import Arbiter
        clients = {"store": store.mem, "compute.acc": compute.mem_acc, "compute.acc8": compute.mem_acc8,
                   "compute.uop": compute.mem_uop, "load.inp": load.mem_inp, "load.wgt": load.mem_wgt,
                   "fetch": fetch.mem}
        m.submodules.arbiter = arb = Arbiter(len(DRAM_CLIENTS), p.bus_bits, 2 * p.outstanding)
        for i, name in enumerate(DRAM_CLIENTS):
            wiring.connect(m, clients[name], getattr(arb, f"client{i}"))
        wiring.connect(m, arb.mem, wiring.flipped(self.mem))

        # registers
        self._registers(m, fetch, compute, clear)
        return m

    def _registers(self, m: Module, fetch: Fetch, compute: ComputeModule, clear: Signal) -> None:
        cfg = self.p.cfg
        reg = self.reg
        stored = {(block, off): Signal(REG_DATA_BITS, name=f"reg_{block}_{name}")
                  for block, off, name, access, _ in R.REGISTERS if access == "rw" and not (block == "fetch" and off == R.CTRL)}
        done = Signal()
        launch = Signal()
        addr = {key: R.register_offset(cfg, *key) for key in stored}
        with m.If(reg.we):
            for key, sig in stored.items():
                with m.If(reg.addr == addr[key]):
                    m.d.sync += sig.eq(reg.wdata)
            with m.If((reg.addr == R.register_offset(cfg, "fetch", R.CTRL)) & reg.wdata[0] & ~fetch.busy):
                m.d.comb += launch.eq(1)
        insn_addr = stored[("fetch", R.FETCH_INSN_ADDR)]
        insn_addr_hi = stored[("fetch", R.FETCH_INSN_ADDR + 4)]
        m.d.comb += [fetch.launch.eq(launch), clear.eq(launch),
                     fetch.insn_count.eq(stored[("fetch", R.FETCH_INSN_COUNT)]),
                     fetch.insn_addr.eq((insn_addr_hi << REG_DATA_BITS) | insn_addr)]
        with m.If(launch):
            m.d.sync += done.eq(0)
        with m.If(compute.finished):
            m.d.sync += done.eq(1)
        fetch_status = (fetch.busy * R.AP_START) | (done * R.AP_DONE) | (~fetch.busy * R.AP_IDLE)
        reads = {R.register_offset(cfg, "fetch", R.CTRL): fetch_status,
                 R.register_offset(cfg, "fetch", R.FETCH_DISPATCHED): fetch.dispatched,
                 R.register_offset(cfg, "compute", R.COMPUTE_DONE_RD): done,
                 R.register_offset(cfg, "compute", R.COMPUTE_DONE_VLD): done}
        for key, sig in stored.items():
            reads[addr[key]] = sig | (R.AP_IDLE if key[1] == R.CTRL else 0)
        with m.Switch(reg.addr):
            for offset, value in reads.items():
                with m.Case(offset):
                    m.d.comb += reg.rdata.eq(value)
