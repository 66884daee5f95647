"""GEMM and ALU: the micro-op loop and the BATCH x BLOCK_IN x BLOCK_OUT core.

For i < iter_out, j < iter_in, k in [uop_bgn, uop_end): with u = uop[k], d = u.dst_idx + i*dst_factor_out +
j*dst_factor_in (src and wgt alike), GEMM does acc[d] += inp[s] . wgt[w]^T (acc[d] = 0 with reset_reg) and ALU
acc[d] = op(acc[d], imm or acc[s]) lane-wise.

VTA's HLS pipeline (hardware/xilinx/src/vta.cc): the GEMM micro-op loop at II=1, the ALU's at II=2, because an
ALU micro-op reads two accumulator rows (acc[s], then acc[d]) through the register file's one read port. Here
likewise: the accumulator SRAM has one read port for compute, and the stages are

- A: read micro-op k (every cycle for GEMM, every other cycle for ALU);
- B: add the loop offsets (running sums) to its indices; GEMM reads inp[s], wgt[w] and acc[d]; ALU reads acc[s];
- B2 (ALU only): read acc[d], hold acc[s];
- C: compute every lane and write acc[d].

The read port is transparent to the write port, so a micro-op reads what the one before it wrote in the same
cycle: back-to-back micro-ops on one accumulator row give the sequential result (VTA's HLS declares that
dependence false and leaves it to the compiler to avoid).
"""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.alu import alu_lane, dot_lane
from hardware.decode import field_values
from hardware.interfaces import sram_read, sram_write
from hardware.params import RtlParams
from hw_config.layout import INSN_BITS, LOOP_ITER_BITS, OPCODES


class LoopEngine(wiring.Component):
    """Executes one GEMM or ALU instruction: ``cmd`` takes it, ``done`` pulses in the cycle of its last write."""

    def __init__(self, p: RtlParams):
        self.p = p
        s = p.srams
        super().__init__({
            "cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
            "uop": Out(sram_read(s["uop"].addr_bits, s["uop"].width)),
            "inp": Out(sram_read(s["inp"].addr_bits, s["inp"].width)),
            "wgt": Out(sram_read(s["wgt"].addr_bits, s["wgt"].width)),
            "acc": Out(sram_read(s["acc"].addr_bits, s["acc"].width)),
            "acc_wr": Out(sram_write(s["acc"].addr_bits, s["acc"].width)),
        })

    def elaborate(self, platform) -> Module:
        m = Module()
        p = self.p
        s = p.srams
        insn = Signal(INSN_BITS)
        gemm, alu = field_values(p.fmt("gemm"), insn), field_values(p.fmt("alu"), insn)
        is_alu = insn[:p.fmt("gemm").field("opcode").width] == OPCODES["ALU"]
        # loop_head fields sit at the same place in both formats; the src factors differ in width
        src_out = Mux(is_alu, alu["src_factor_out"], gemm["src_factor_out"])
        src_in = Mux(is_alu, alu["src_factor_in"], gemm["src_factor_in"])
        uop_bgn, uop_end = gemm["uop_bgn"], gemm["uop_end"]
        iter_out, iter_in = gemm["iter_out"], gemm["iter_in"]
        uop_f = {f.name: f for f in p.fmt("uop").fields}
        acc_bits = s["acc"].addr_bits
        idx_bits = {"dst": acc_bits, "src": uop_f["src_idx"].width, "wgt": s["wgt"].addr_bits}

        running, started = Signal(), Signal()
        b_valid, b2_valid, c_valid = Signal(), Signal(), Signal()
        m.d.comb += self.cmd.ready.eq(~running & ~started & ~b_valid & ~b2_valid & ~c_valid)
        m.d.sync += started.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [insn.eq(self.cmd.payload), started.eq(1)]

        # stage A: loop counters and micro-op read; an ALU micro-op issues every other cycle (``phase``)
        k = Signal(uop_end.shape().width)
        i, j = Signal(LOOP_ITER_BITS), Signal(LOOP_ITER_BITS)
        base = {r: Signal(idx_bits[r], name=f"{r}_base") for r in idx_bits}
        cur = {r: Signal(idx_bits[r], name=f"{r}_cur") for r in idx_bits}
        factor_out = {"dst": gemm["dst_factor_out"], "src": src_out, "wgt": gemm["wgt_factor_out"]}
        factor_in = {"dst": gemm["dst_factor_in"], "src": src_in, "wgt": gemm["wgt_factor_in"]}
        empty = (iter_out == 0) | (iter_in == 0) | (uop_end <= uop_bgn)
        phase = Signal()
        with m.If(started):
            m.d.sync += [running.eq(~empty), k.eq(uop_bgn), i.eq(0), j.eq(0), phase.eq(1)]
            m.d.sync += [base[r].eq(0) for r in idx_bits] + [cur[r].eq(0) for r in idx_bits]
        issue = running & (~is_alu | phase)
        with m.If(running & is_alu):
            m.d.sync += phase.eq(~phase)
        m.d.comb += [self.uop.addr.eq(k), self.uop.en.eq(issue)]
        b_off = {r: Signal(idx_bits[r], name=f"b_{r}_off") for r in idx_bits}
        m.d.sync += b_valid.eq(issue)
        with m.If(issue):
            m.d.sync += [b_off[r].eq(cur[r]) for r in idx_bits]
            with m.If(k == uop_end - 1):
                m.d.sync += k.eq(uop_bgn)
                with m.If(j == iter_in - 1):
                    m.d.sync += j.eq(0)
                    with m.If(i == iter_out - 1):
                        m.d.sync += running.eq(0)
                    m.d.sync += i.eq(i + 1)
                    for r in idx_bits:
                        m.d.sync += [base[r].eq(base[r] + factor_out[r]), cur[r].eq(base[r] + factor_out[r])]
                with m.Else():
                    m.d.sync += j.eq(j + 1)
                    m.d.sync += [cur[r].eq(cur[r] + factor_in[r]) for r in idx_bits]
            with m.Else():
                m.d.sync += k.eq(k + 1)

        # stage B: indices and SRAM reads; stage B2 (ALU): the destination row through the same port
        u = {name: self.uop.data[f.offset:f.offset + f.width] for name, f in uop_f.items()}
        d = (u["dst_idx"] + b_off["dst"])[:acc_bits]
        src = (u["src_idx"] + b_off["src"])[:idx_bits["src"]]
        w = (u["wgt_idx"] + b_off["wgt"])[:s["wgt"].addr_bits]
        b2_dst, c_dst = Signal(acc_bits), Signal(acc_bits)
        src_row = Signal(s["acc"].width)
        m.d.sync += [b2_valid.eq(b_valid & is_alu), b2_dst.eq(d),
                     c_valid.eq((b_valid & ~is_alu) | b2_valid), c_dst.eq(Mux(b2_valid, b2_dst, d))]
        with m.If(b2_valid):
            m.d.sync += src_row.eq(self.acc.data)
        m.d.comb += [self.inp.addr.eq(src), self.inp.en.eq(b_valid & ~is_alu),
                     self.wgt.addr.eq(w), self.wgt.en.eq(b_valid & ~is_alu),
                     self.acc.addr.eq(Mux(b2_valid, b2_dst, Mux(is_alu, src[:acc_bits], d))),
                     self.acc.en.eq(b_valid | b2_valid)]

        # stage C: the lanes
        acc_w = p.acc_width
        imm = alu["imm"]
        alu_ops = p.cfg.capabilities.alu_opcodes
        lanes = []
        for b in range(p.batch):
            x = [self.inp.data.word_select(b * p.block_in + c, p.inp_width) for c in range(p.block_in)]
            for o in range(p.block_out):
                lane = b * p.block_out + o
                a = self.acc.data.word_select(lane, acc_w)
                wt = [self.wgt.data.word_select(o * p.block_in + c, p.wgt_width) for c in range(p.block_in)]
                gemm_value = Mux(gemm["reset_reg"], 0, (a.as_signed() + dot_lane(x, wt))[:acc_w])
                operand = Mux(alu["use_imm"], imm, src_row.word_select(lane, acc_w).as_signed())
                alu_value = alu_lane(alu["alu_opcode"], a, operand, acc_w, alu_ops)
                lanes.append(Mux(is_alu, alu_value, gemm_value)[:acc_w])
        m.d.comb += [self.acc_wr.en.eq(c_valid), self.acc_wr.addr.eq(c_dst), self.acc_wr.data.eq(Cat(*lanes))]
        m.d.comb += self.done.eq((c_valid & ~b2_valid & ~b_valid & ~running) | (started & empty))
        return m
