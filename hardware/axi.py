"""The accelerator's bus interfaces, as VTA's block design connects them: one AXI4 master to DRAM and four
AXI4-Lite slaves (fetch, load, compute, store) holding VTA's register map.

- ``AxiMaster`` turns the DRAM arbiter's port (``interfaces.dram_port``: beats in bursts, the first carrying
  the burst's length) into AXI4: an AR per read burst, an AW per write burst with its W beats (WLAST on the
  last), R and B back. INCR bursts of at most 256 beats that never cross 4 KiB (the DMA engines cut them so,
  hardware/dram.py), 32-bit addresses, the DRAM client's number as the ID (fetch, load's two engines, compute's
  three, store: each one's bursts answer in order, different ones' may interleave). Reads and writes come from
  two arbiters and go out independently. Its inputs come from the arbiters' register slices, so the AXI
  outputs are those registers through a gate at most; a beat is offered until each channel it needs has taken
  it, and the slice holds it meanwhile, so AxVALID/WVALID never drop and their payload never changes before
  AxREADY/WREADY. Error responses are kept in a status register (``AxiMaster``).
- ``AxiLiteRegs`` serves the four AXI4-Lite slave ports on the register file's port (``interfaces.reg_bus``):
  a write when a port has both its AW and W (the slave waits for both, as AXI allows), its B the next cycle; a
  read answers two cycles after its AR from one read-data register (one read in flight across the four ports:
  one host drives them). One access a cycle, chosen in one cycle and applied to the register file from a
  register the next; writes before reads, fetch's port before load's, compute's and store's. Responses are
  OKAY; an offset outside the map reads 0 and ignores writes, as VTA's HLS blocks do.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hardware.interfaces import ID_BITS, dram_port, reg_bus
from hardware.params import REG_DATA_BITS, log2
from hardware.registers import (
    OKAY,
    STATUS_BID_SHIFT,
    STATUS_BRESP_SHIFT,
    STATUS_RID_SHIFT,
    STATUS_RRESP_SHIFT,
)

AXI_ADDR_BITS = 32       # the AXI4 master's addresses (Zynq's HP/ACP ports, VTA's HLS masters)
INCR = 0b01              # AxBURST


def axi4(addr_bits: int, data_bits: int, id_bits: int = ID_BITS) -> wiring.Signature:
    """An AXI4 master's signals (no locks, QoS or regions), named as Vivado's interface inference expects after
    a prefix (``m_axi_araddr``). AxUSER is ACP's coherence bit."""
    return wiring.Signature({
        "awid": Out(id_bits), "awaddr": Out(addr_bits), "awlen": Out(8), "awsize": Out(3), "awburst": Out(2), "awcache": Out(4),
        "awprot": Out(3), "awuser": Out(1), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_bits), "wstrb": Out(data_bits // 8), "wlast": Out(1), "wvalid": Out(1), "wready": In(1),
        "bid": In(id_bits), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "arid": Out(id_bits), "araddr": Out(addr_bits), "arlen": Out(8), "arsize": Out(3), "arburst": Out(2), "arcache": Out(4),
        "arprot": Out(3), "aruser": Out(1), "arvalid": Out(1), "arready": In(1),
        "rid": In(id_bits), "rdata": In(data_bits), "rresp": In(2), "rlast": In(1), "rvalid": In(1),
        "rready": Out(1),
    })


def axi4_lite(addr_bits: int) -> wiring.Signature:
    """An AXI4-Lite master's signals (32-bit data), named as Vivado expects after a prefix (``s_axi_fetch_``)."""
    return wiring.Signature({
        "awaddr": Out(addr_bits), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(REG_DATA_BITS), "wstrb": Out(REG_DATA_BITS // 8), "wvalid": Out(1), "wready": In(1),
        "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(addr_bits), "arvalid": Out(1), "arready": In(1),
        "rdata": In(REG_DATA_BITS), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
    })


class AxiMaster(wiring.Component):
    """The DRAM ports (``rd`` from the read arbiter, ``wr`` from the write arbiter; hardware/dram.py) as one AXI4
    master (``axi``). Reads and writes are independent: an AR goes out while W beats do.

    ``cache``/``user``: the AxCACHE and AxUSER every burst carries (0b1111 and 1 for coherent access through the
    Zynq's ACP port, as VTA's block design sets them; 0b0011 and 0 otherwise); ``prot``: AxPROT (VTA's
    ``axi_prot_bits`` for the target, hardware/params.py). BREADY is a register, high once out of reset: every
    write acknowledgement is counted at once. A response other than OKAY on R or B is kept in ``status`` (the
    first one per channel: its code and ID, with a sticky flag; ``clear`` empties it at a launch); the data
    still flows, as AXI has every beat answered."""

    def __init__(self, bus_bits: int, addr_bits: int = AXI_ADDR_BITS, coherent: bool = False, prot: int = 0):
        self.bus_bits, self.addr_bits, self.coherent, self.prot = bus_bits, addr_bits, coherent, prot
        super().__init__({"rd": In(dram_port(bus_bits)), "wr": In(dram_port(bus_bits)),
                          "axi": Out(axi4(addr_bits, bus_bits)), "status": Out(REG_DATA_BITS), "clear": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        rd, wr, axi = self.rd, self.wr, self.axi
        cache, user = (0b1111, 1) if self.coherent else (0b0011, 0)
        # read: a reader offers only its bursts' first beats, each an AR
        m.d.comb += [axi.arid.eq(rd.cmd_id), axi.araddr.eq(rd.cmd_addr[:self.addr_bits]), axi.arlen.eq(rd.cmd_len),
                     axi.arsize.eq(log2(self.bus_bits // 8)), axi.arburst.eq(INCR), axi.arcache.eq(cache),
                     axi.arprot.eq(self.prot), axi.aruser.eq(user), axi.arvalid.eq(rd.cmd_valid & rd.cmd_first),
                     rd.cmd_ready.eq(~rd.cmd_first | axi.arready)]
        # write: the first beat is the AW and a W, the others a W each; a beat waits for both to be taken
        aw_done, w_done = Signal(), Signal()          # taken in an earlier cycle of this beat's offer
        left = Signal(8)                              # W beats of the burst after the last one taken
        m.d.comb += [axi.awid.eq(wr.cmd_id), axi.awaddr.eq(wr.cmd_addr[:self.addr_bits]), axi.awlen.eq(wr.cmd_len),
                     axi.awsize.eq(wr.cmd_size), axi.awburst.eq(INCR), axi.awcache.eq(cache),
                     axi.awprot.eq(self.prot), axi.awuser.eq(user),
                     axi.awvalid.eq(wr.cmd_valid & wr.cmd_first & ~aw_done),
                     axi.wdata.eq(wr.cmd_data), axi.wstrb.eq(wr.cmd_strb),
                     axi.wlast.eq(Mux(wr.cmd_first, wr.cmd_len == 0, left == 1)),
                     axi.wvalid.eq(wr.cmd_valid & ~w_done)]
        aw_ok = ~wr.cmd_first | aw_done | axi.awready
        w_ok = w_done | axi.wready
        m.d.comb += wr.cmd_ready.eq(aw_ok & w_ok)
        with m.If(axi.wvalid & axi.wready):
            m.d.sync += left.eq(Mux(wr.cmd_first, wr.cmd_len, left - 1))
        with m.If(wr.cmd_valid & wr.cmd_ready):
            m.d.sync += [aw_done.eq(0), w_done.eq(0)]
        with m.Elif(wr.cmd_valid):
            m.d.sync += [aw_done.eq(aw_done | (axi.awvalid & axi.awready)),
                         w_done.eq(w_done | (axi.wvalid & axi.wready))]
        # responses
        bready = Signal()
        m.d.sync += bready.eq(1)
        m.d.comb += [rd.rsp_valid.eq(axi.rvalid), rd.rsp_data.eq(axi.rdata), rd.rsp_last.eq(axi.rlast),
                     rd.rsp_id.eq(axi.rid), axi.rready.eq(rd.rsp_ready),
                     axi.bready.eq(bready), wr.wack.eq(axi.bvalid & bready), wr.wack_id.eq(axi.bid)]
        # errors: the first non-OKAY response per channel, until a launch clears them
        status = Signal(REG_DATA_BITS)
        m.d.comb += self.status.eq(status)
        r_bad = axi.rvalid & axi.rready & (axi.rresp != OKAY)
        b_bad = axi.bvalid & bready & (axi.bresp != OKAY)
        with m.If(self.clear):
            m.d.sync += status.eq(0)
        with m.Else():
            with m.If(r_bad & ~status[0]):
                m.d.sync += [status[0].eq(1), status[STATUS_RRESP_SHIFT:STATUS_RRESP_SHIFT + 2].eq(axi.rresp),
                             status[STATUS_RID_SHIFT:STATUS_RID_SHIFT + ID_BITS].eq(axi.rid)]
            with m.If(b_bad & ~status[1]):
                m.d.sync += [status[1].eq(1), status[STATUS_BRESP_SHIFT:STATUS_BRESP_SHIFT + 2].eq(axi.bresp),
                             status[STATUS_BID_SHIFT:STATUS_BID_SHIFT + ID_BITS].eq(axi.bid)]
        return m


class AxiLiteRegs(wiring.Component):
    """AXI4-Lite slave ports, one per register block (``blocks``, in MMIO_BLOCKS order), on the register file's
    port ``reg``: block ``i``'s offset ``a`` is the register at ``i * spacing + a`` (``spacing``: MMIO_RANGE).
    Ports are ``addr_bits`` wide; offsets at or past ``spacing`` are outside the map.

    Two stages, so the choice among the ports and the register file's decode and read mux are never in series
    (issue 38: they were 14-16 LUT levels together): a cycle chooses one access and registers it (``reg``'s
    address, data, strobes and enables all come from flip-flops), the next applies it to the register file and
    registers the read data. AWREADY/WREADY/ARREADY rise in the cycle of the choice, BVALID the cycle after it
    (the write reaches the register file at that cycle's end, before any later access can reach it), RVALID two
    cycles after it."""

    def __init__(self, blocks: tuple[str, ...], addr_bits: int, spacing: int, reg_addr_bits: int):
        self.blocks, self.addr_bits, self.spacing = blocks, addr_bits, spacing
        super().__init__({**{name: In(axi4_lite(addr_bits)) for name in blocks}, "reg": Out(reg_bus(reg_addr_bits))})

    def _inside(self, offset) -> object:
        return offset < self.spacing if self.spacing < (1 << self.addr_bits) else Const(1)

    def elaborate(self, platform) -> Module:
        m = Module()
        ports = [getattr(self, name) for name in self.blocks]
        reg = self.reg
        b_pending = [Signal(name=f"b_pending_{name}") for name in self.blocks]
        r_pending = [Signal(name=f"r_pending_{name}") for name in self.blocks]
        # the access register (stage 2): what the register file sees, all flip-flops
        we, re = Signal(name="access_we"), Signal(name="access_re")
        addr, wdata = Signal.like(reg.addr, name="access_addr"), Signal(REG_DATA_BITS, name="access_wdata")
        strb = Signal(REG_DATA_BITS // 8, name="access_strb")
        read_port = [Signal(name=f"access_read_{name}") for name in self.blocks]   # a read (in the map or not)
        m.d.comb += [reg.we.eq(we), reg.re.eq(re), reg.addr.eq(addr), reg.wdata.eq(wdata), reg.strb.eq(strb)]

        # stage 1: one access a cycle; writes before reads, fetch's port before load's, compute's and store's;
        # no read while one is in the access register or its data waits for RREADY (one host, one read). Each
        # choice is a flat AND of its port's wants and NOR of the earlier ones, and the fields are muxed on the
        # wants alone (a field of a port not chosen is not used), so nothing is a chain over the eight wants.
        reading = Cat(*r_pending, *read_port).any()
        wants_w = [p.awvalid & p.wvalid & ~b for p, b in zip(ports, b_pending, strict=True)]
        wants_r = [p.arvalid & ~reading for p in ports]
        any_w = Cat(*wants_w).any()
        picks_w = [want & ~Cat(*wants_w[:i]).any() for i, want in enumerate(wants_w)]
        picks_r = [want & ~any_w & ~Cat(*wants_r[:i]).any() for i, want in enumerate(wants_r)]

        def first(wanted: list, values: list) -> object:
            """The value of the first port that wants (the last port's when none does)."""
            out = values[-1]
            for want, value in zip(reversed(wanted[:-1]), reversed(values[:-1]), strict=True):
                out = Mux(want, value, out)
            return out

        def word(i: int, offset) -> object:
            return i * self.spacing + Cat(Const(0, 2), offset[2:])

        arvalid = [p.arvalid for p in ports]
        write_addr = first(wants_w, [word(i, p.awaddr) for i, p in enumerate(ports)])
        read_addr = first(arvalid, [word(i, p.araddr) for i, p in enumerate(ports)])
        m.d.sync += [addr.eq(Mux(any_w, write_addr, read_addr)),
                     wdata.eq(first(wants_w, [p.wdata for p in ports])),
                     strb.eq(first(wants_w, [p.wstrb for p in ports])),
                     we.eq(any_w & first(wants_w, [self._inside(p.awaddr) for p in ports])),
                     re.eq(Cat(*picks_r).any() & first(arvalid, [self._inside(p.araddr) for p in ports]))]
        m.d.sync += [rp.eq(pick) for rp, pick in zip(read_port, picks_r, strict=True)]

        # stage 2's read data (0 outside the map), answered from one register on every port
        rdata = Signal(REG_DATA_BITS, name="read_data")
        with m.If(Cat(*read_port).any()):
            m.d.sync += rdata.eq(Mux(re, reg.rdata, 0))
        for i, (p, pick_w, pick_r) in enumerate(zip(ports, picks_w, picks_r, strict=True)):
            m.d.comb += [p.awready.eq(pick_w), p.wready.eq(pick_w), p.arready.eq(pick_r),
                         p.bvalid.eq(b_pending[i]), p.bresp.eq(OKAY),
                         p.rvalid.eq(r_pending[i]), p.rdata.eq(rdata), p.rresp.eq(OKAY)]
            with m.If(p.bvalid & p.bready):
                m.d.sync += b_pending[i].eq(0)
            with m.If(pick_w):
                m.d.sync += b_pending[i].eq(1)
            with m.If(p.rvalid & p.rready):
                m.d.sync += r_pending[i].eq(0)
            with m.If(read_port[i]):
                m.d.sync += r_pending[i].eq(1)
        return m
