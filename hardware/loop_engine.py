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
- C: compute every lane and write acc[d], and its narrowed copy into the output buffer (what STORE reads).

The read port is not transparent (block RAM's): results not yet in the SRAM when a later micro-op reads its row
are forwarded, so back-to-back micro-ops on one accumulator row give the sequential result (VTA's HLS declares
that dependence false and leaves it to the compiler to avoid).
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hardware.alu import alu_lane, shift_amounts
from hardware.decode import field_values
from hardware.dsp_packing import packed_factor, packed_products
from hardware.interfaces import sram_read, sram_write
from hardware.params import RtlParams
from hardware.shallow import sign_counter
from hw_config.layout import INSN_BITS, LOOP_ITER_BITS, OPCODES


def narrow_lanes(row: Value, lanes: int, out_width: int) -> Value:
    """The low ``out_width`` bits of each of the ``lanes`` lanes of an accumulator ``row`` (VTA's out_T cast)."""
    lane_bits = len(row) // lanes
    return Cat(*[row.word_select(i, lane_bits)[:out_width] for i in range(lanes)])


def _signal(m: Module, value: Value, name: str) -> Signal:
    """``value`` as a named signal (an expression used twice is otherwise built twice)."""
    sig = Signal(value.shape(), name=name)
    m.d.comb += sig.eq(value)
    return sig


class LoopEngine(wiring.Component):
    """Executes one GEMM or ALU instruction: ``cmd`` takes it, ``done`` pulses in the cycle of its last write."""

    def __init__(self, p: RtlParams, forward: bool = True):
        self.p = p
        self.forward = forward          # False: no forwarding (wrong on dependent micro-ops; to measure its cost)
        s = p.srams
        super().__init__({
            "cmd": In(stream.Signature(INSN_BITS)), "done": Out(1),
            "uop": Out(sram_read(s["uop"].addr_bits, s["uop"].width)),
            "inp": Out(sram_read(s["inp"].addr_bits, s["inp"].width)),
            "wgt": Out(sram_read(s["wgt"].addr_bits, s["wgt"].width)),
            "acc": Out(sram_read(s["acc"].addr_bits, s["acc"].width)),
            "acc_wr": Out(sram_write(s["acc"].addr_bits, s["acc"].width)),
            "out_wr": Out(sram_write(s["out"].addr_bits, s["out"].width)),
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
        b_valid, b_last = Signal(), Signal()
        m.d.sync += started.eq(0)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [insn.eq(self.cmd.payload), started.eq(1)]

        # stage A: loop counters and micro-op read; an ALU micro-op issues every other cycle (``phase``)
        k = Signal(uop_end.shape().width)
        base = {r: Signal(idx_bits[r], name=f"{r}_base") for r in idx_bits}
        cur = {r: Signal(idx_bits[r], name=f"{r}_cur") for r in idx_bits}
        # each loop's count as a sign counter (hardware/shallow.py: negative on the loop's last pass), and what the
        # inner two restart from and the index factors (GEMM's or ALU's), registered at the start (the loops run
        # from the cycle after), so no step of a loop runs through an equality test, a subtraction or the
        # format's multiplexer
        factors = {"dst": (gemm["dst_factor_out"], gemm["dst_factor_in"]), "src": (src_out, src_in),
                   "wgt": (gemm["wgt_factor_out"], gemm["wgt_factor_in"])}
        factor_out = {r: Signal(idx_bits[r], name=f"{r}_factor_out") for r in idx_bits}
        factor_in = {r: Signal(idx_bits[r], name=f"{r}_factor_in") for r in idx_bits}
        k_rest, j_rest, i_rest = sign_counter("k_rest", len(k) + 1), sign_counter("j_rest", LOOP_ITER_BITS + 1), \
            sign_counter("i_rest", LOOP_ITER_BITS + 1)
        k_reload, j_reload = Signal.like(k_rest, name="k_reload"), Signal.like(j_rest, name="j_reload")
        empty = (iter_out == 0) | (iter_in == 0) | (uop_end <= uop_bgn)
        phase = Signal()
        with m.If(started):
            m.d.sync += [running.eq(~empty), k.eq(uop_bgn), phase.eq(1)]
            m.d.sync += [base[r].eq(0) for r in idx_bits] + [cur[r].eq(0) for r in idx_bits]
            k_count, j_count = uop_end - uop_bgn - 2, iter_in - 2
            m.d.sync += [k_rest.eq(k_count), k_reload.eq(k_count), j_rest.eq(j_count), j_reload.eq(j_count),
                         i_rest.eq(iter_out - 2)]
            m.d.sync += [factor_out[r].eq(factors[r][0]) for r in idx_bits]
            m.d.sync += [factor_in[r].eq(factors[r][1]) for r in idx_bits]
        issue = running & (~is_alu | phase)
        with m.If(running & is_alu):
            m.d.sync += phase.eq(~phase)
        m.d.comb += [self.uop.addr.eq(k), self.uop.en.eq(issue)]
        b_off = {r: Signal(idx_bits[r], name=f"b_{r}_off") for r in idx_bits}
        m.d.sync += [b_valid.eq(issue), b_last.eq(0)]
        with m.If(issue):
            m.d.sync += [b_off[r].eq(cur[r]) for r in idx_bits]
            with m.If(k_rest[-1]):
                m.d.sync += [k.eq(uop_bgn), k_rest.eq(k_reload)]
                with m.If(j_rest[-1]):
                    m.d.sync += j_rest.eq(j_reload)
                    with m.If(i_rest[-1]):
                        m.d.sync += [running.eq(0), b_last.eq(1)]
                    m.d.sync += i_rest.eq(i_rest - 1)
                    for r in idx_bits:
                        m.d.sync += [base[r].eq(base[r] + factor_out[r]), cur[r].eq(base[r] + factor_out[r])]
                with m.Else():
                    m.d.sync += j_rest.eq(j_rest - 1)
                    m.d.sync += [cur[r].eq(cur[r] + factor_in[r]) for r in idx_bits]
            with m.Else():
                m.d.sync += [k.eq(k + 1), k_rest.eq(k_rest - 1)]

        # stage 1: indices (the micro-op's plus the loop offsets) and the input/weight reads; then the indices
        # travel down the pipeline with the micro-op (``valid``, ``last``, dst, acc src), one register a stage
        pl = p.compute
        x = pl.consume
        alu_x = x + 1                                  # ALU: its two reads take one stage more
        n_stages = alu_x + pl.result
        u = {name: self.uop.data[f.offset:f.offset + f.width] for name, f in uop_f.items()}
        src = (u["src_idx"] + b_off["src"])[:idx_bits["src"]]
        w = (u["wgt_idx"] + b_off["wgt"])[:s["wgt"].addr_bits]
        valid = [None, b_valid] + [Signal(name=f"v{n}") for n in range(2, n_stages + 1)]
        last = [None, b_last] + [Signal(name=f"last{n}") for n in range(2, n_stages + 1)]
        dst = [None, (u["dst_idx"] + b_off["dst"])[:acc_bits]] + \
            [Signal(acc_bits, name=f"dst{n}") for n in range(2, n_stages + 1)]
        asrc = [None, src[:acc_bits]] + [Signal(acc_bits, name=f"asrc{n}") for n in range(2, n_stages + 1)]
        for n in range(2, n_stages + 1):
            m.d.sync += [valid[n].eq(valid[n - 1]), last[n].eq(last[n - 1]), dst[n].eq(dst[n - 1]),
                         asrc[n].eq(asrc[n - 1])]
        in_flight = Mux(is_alu, Cat(*valid[1:]).any(), Cat(*valid[1:x + pl.result + 1]).any())
        m.d.comb += [self.inp.addr.eq(src), self.inp.en.eq(b_valid & ~is_alu),
                     self.wgt.addr.eq(w), self.wgt.en.eq(b_valid & ~is_alu)]

        # the accumulator's one read port: GEMM reads acc[dst] at stage ``acc_read``; ALU reads acc[src] there
        # and acc[dst] one stage later (II=2: a micro-op's two reads never meet the next one's)
        r = pl.acc_read
        m.d.comb += [self.acc.addr.eq(Mux(is_alu, Mux(valid[r], asrc[r], dst[r + 1]), dst[r])),
                     self.acc.en.eq(valid[r] | (is_alu & valid[r + 1]))]
        acc_val = Signal(s["acc"].width)               # the row read, registered when ``acc_out``
        src_val = Signal(s["acc"].width)               # ALU: the acc[src] row, read the stage before acc[dst]
        if not pl.acc_out:
            m.d.comb += acc_val.eq(self.acc.data)
            m.d.sync += src_val.eq(acc_val)

        # the dot products: registered SRAM outputs, products (a DSP's M register), a pipelined adder tree
        acc_w = p.acc_width
        inp_d, wgt_d = self.inp.data, self.wgt.data
        if pl.sram:
            inp_d = Signal.like(self.inp.data, name="inp_q")
            m.d.sync += inp_d.eq(self.inp.data)
        weights = self._weights(m, wgt_d)
        cuts = pl.tree_cuts()
        dots = []
        for b in range(p.batch):
            xs = [inp_d.word_select(b * p.block_in + c, p.inp_width).as_signed() for c in range(p.block_in)]
            for o, terms in enumerate(self._products(m, b, xs, weights)):
                for level in range(1, pl.levels + 1):
                    terms = [terms[i] + terms[i + 1] for i in range(0, len(terms), 2)]
                    if level in cuts:
                        regs = [Signal(signed(len(t)), name=f"sum{level}_{b}_{o}_{i}") for i, t in enumerate(terms)]
                        m.d.sync += [q.eq(t) for q, t in zip(regs, terms, strict=True)]
                        terms = regs
                dots.append(terms[0])

        # forwarding: results not yet in the SRAM when a later micro-op read its operands. ``hist[k]`` is the
        # result computed k cycles ago (valid, row, value); an operand takes the newest one for its row, else
        # what it read. Which one is decided a cycle ahead (registered one-hot selects).
        cons_v = Mux(is_alu, valid[alu_x], valid[x])
        cons_dst = Mux(is_alu, dst[alu_x], dst[x])
        result = Signal(s["acc"].width)
        nf = pl.forward
        hist = [None] + [(Signal(name=f"h{k}_valid"), Signal(acc_bits, name=f"h{k}_row"),
                          Signal(s["acc"].width, name=f"h{k}_value")) for k in range(1, nf + 1)]
        m.d.sync += [hist[1][0].eq(cons_v), hist[1][1].eq(cons_dst), hist[1][2].eq(result)]
        for k in range(2, nf + 1):
            m.d.sync += [hist[k][i].eq(hist[k - 1][i]) for i in range(3)]
        # next cycle's entries and operand rows
        nxt = [None, (cons_v, cons_dst)] + [(hist[k - 1][0], hist[k - 1][1]) for k in range(2, nf + 1)]
        next_dst = Mux(is_alu, dst[alu_x - 1], dst[x - 1])
        next_src = asrc[alu_x - 1]

        def forwarded(row: Value, read: Value, depth: int, name: str) -> Value:
            sel = [Signal(name=f"{name}_fwd{k}") for k in range(depth + 1)]   # sel[0]: the SRAM's row
            taken = Const(0)
            for k in range(1, depth + 1):
                hit = nxt[k][0] & (nxt[k][1] == row) if self.forward else Const(0)
                m.d.sync += sel[k].eq(hit & ~taken)
                taken = taken | hit
            m.d.sync += sel[0].eq(~taken)
            value = sel[0].replicate(len(read)) & read
            for k in range(1, depth + 1):
                value = value | (sel[k].replicate(len(read)) & hist[k][2])
            return value

        imm = alu["imm"]
        if pl.acc_out:
            # the row registers take the results kept one cycle earlier on their way in (the newest matching
            # one), so the adding stage chooses only between them and the result of the cycle before (GEMM);
            # an ALU's neighbours one cycle away are bubbles (II=2), and its operand arrives registered
            def pre(row: Value, read: Value, depth: int) -> Value:
                value = read
                for k in range(depth, 0, -1):
                    hit = hist[k][0] & (hist[k][1] == row) if self.forward else Const(0)
                    value = Mux(hit, hist[k][2], value)
                return value

            raw = Signal(s["acc"].width)
            m.d.sync += [raw.eq(self.acc.data), acc_val.eq(pre(next_dst, self.acc.data, pl.forward - 2))]
            near = Signal()
            m.d.sync += near.eq(cons_v & (cons_dst == next_dst) if self.forward else 0)
            a_row = Mux(near, hist[1][2], acc_val)
            s_pre = pre(next_src, raw, pl.forward - 1)
            operand_q = Signal(s["acc"].width)
            amount_bits = len(shift_amounts(imm)[1])
            shifts = []                   # SHR's controls, registered with the operand (alu.shift_amounts)
            for lane in range(p.acc_lanes):
                operand = Mux(alu["use_imm"], imm, s_pre.word_select(lane, acc_w).as_signed())[:acc_w]
                m.d.sync += operand_q.word_select(lane, acc_w).eq(operand)
                regs = (Signal(name=f"shl_{lane}"), Signal(amount_bits, name=f"shr_amount_{lane}"),
                        Signal(amount_bits, name=f"shl_amount_{lane}"))
                m.d.sync += [q.eq(c) for q, c in zip(regs, shift_amounts(operand), strict=True)]
                shifts.append(regs)
            operands = [operand_q.word_select(lane, acc_w) for lane in range(p.acc_lanes)]
        else:
            a_row = forwarded(next_dst, acc_val, pl.forward - 1, "dst")     # read one stage after acc[src]
            s_row = forwarded(next_src, src_val, pl.forward, "src")
            operands = [Mux(alu["use_imm"], imm, s_row.word_select(lane, acc_w).as_signed())
                        for lane in range(p.acc_lanes)]
            shifts = [None] * p.acc_lanes

        # the lanes
        alu_ops = p.cfg.capabilities.alu_opcodes
        hls_out = p.cfg.capabilities.out_buffer == "hls"
        lanes, unreset = [], []
        for lane in range(p.acc_lanes):
            a = a_row.word_select(lane, acc_w)
            gemm_sum = (a.as_signed() + dots[lane])[:acc_w]
            operand = operands[lane]
            alu_value = alu_lane(alu["alu_opcode"], a, operand, acc_w, alu_ops, shifts[lane])
            if hls_out:       # both used twice (the output buffer's pre-reset copy): one signal each, not two trees
                gemm_sum, alu_value = _signal(m, gemm_sum, f"gemm_sum_{lane}"), _signal(m, alu_value, f"alu_{lane}")
                unreset.append(Mux(is_alu, alu_value, gemm_sum)[:p.out_width])   # narrowed lane by lane
            gemm_value = Mux(gemm["reset_reg"], 0, gemm_sum)
            lanes.append(Mux(is_alu, alu_value, gemm_value)[:acc_w])
        m.d.comb += result.eq(Cat(*lanes))

        # the write: from the result register (``result``) or straight from the lanes
        wv = Mux(is_alu, valid[alu_x + pl.result], valid[x + pl.result])
        wdst = Mux(is_alu, dst[alu_x + pl.result], dst[x + pl.result])
        wlast = Mux(is_alu, last[alu_x + pl.result], last[x + pl.result])
        m.d.comb += [self.acc_wr.en.eq(wv), self.acc_wr.addr.eq(wdst),
                     self.acc_wr.data.eq(hist[1][2] if pl.result else result)]
        # and its narrowed copy into the output buffer, as the capability set's hardware writes it
        # (hw_config/capabilities.py, ``out_buffer``): VTA's HLS narrows a reset GEMM's sum before the reset
        # (vta.cc), its Chisel writes nothing on a reset GEMM (TensorGemm), fsim's is the accumulator itself
        mode = p.cfg.capabilities.out_buffer
        out_data = narrow_lanes(hist[1][2] if pl.result else result, p.acc_lanes, p.out_width)
        if hls_out:
            out_data = Cat(*unreset)
            if pl.result:
                registered = Signal(len(out_data), name="out_data")
                m.d.sync += registered.eq(out_data)
                out_data = registered
        out_en = wv & ~(~is_alu & gemm["reset_reg"]) if mode == "chisel" else wv
        m.d.comb += [self.out_wr.en.eq(out_en), self.out_wr.addr.eq(wdst), self.out_wr.data.eq(out_data)]

        # done: with the last write, or ``pad`` cycles later; an empty instruction takes the pipeline's depth
        finish = wv & wlast
        delay = Mux(started & empty, max(0, pl.depth - 2), pl.pad)
        wait = Signal(range(max(pl.depth, pl.pad + 2)))
        now = (finish | (started & empty)) & (delay == 0)
        with m.If((finish | (started & empty)) & (delay != 0)):
            m.d.sync += wait.eq(delay)
        with m.Elif(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        m.d.comb += self.done.eq(now | (wait == 1))
        m.d.comb += self.cmd.ready.eq(~running & ~started & ~in_flight & (wait == 0))
        return m

    def _weights(self, m: Module, wgt: Value) -> list[list[Value]]:
        """The multipliers' weight factors, ``[o][c]`` (registered when the pipeline registers the SRAMs' outputs):
        each weight; with DSP packing, per pair of outputs (2k, 2k + 1) the packed factor of their two weights,
        formed before the register so the path from it into the DSP has no adder (hardware/dsp_packing.py)."""
        p = self.p
        w = [[wgt.word_select(o * p.block_in + c, p.wgt_width).as_signed() for c in range(p.block_in)]
             for o in range(p.block_out)]
        if p.dsp_packing:
            w = [[packed_factor(p.packing, w[2 * k + 1][c], w[2 * k][c]) for c in range(p.block_in)]
                 for k in range(p.block_out // 2)]
        if not p.compute.sram:
            return w
        regs = [[Signal(signed(len(f)), name=f"wgt_q_{o}_{c}") for c, f in enumerate(row)] for o, row in enumerate(w)]
        m.d.sync += [q.eq(f) for row_q, row in zip(regs, w, strict=True) for q, f in zip(row_q, row, strict=True)]
        return regs

    def _products(self, m: Module, b: int, xs: list[Value], weights: list[list[Value]]) -> list[list[Value]]:
        """Batch row ``b``'s products, ``[o][c]`` = x[c] * w[o][c], each registered when the pipeline has its
        ``product`` register (a DSP's M register); with DSP packing, one multiplier per pair of outputs."""
        p = self.p
        registered = bool(p.compute.product)
        if p.dsp_packing:
            out = []
            for k, row in enumerate(weights):
                pairs = [packed_products(m, p.packing, f, xs[c], registered, f"pprod_{b}_{k}_{c}")
                         for c, f in enumerate(row)]
                out += [[low for _, low in pairs], [high for high, _ in pairs]]    # outputs 2k, 2k + 1
            return out
        out = []
        for o, row in enumerate(weights):
            terms = []
            for c, w in enumerate(row):
                prod = xs[c] * w
                if registered:
                    q = Signal(signed(p.inp_width + p.wgt_width), name=f"prod_{b}_{o}_{c}")
                    m.d.sync += q.eq(prod)
                    prod = q
                terms.append(prod)
            out.append(terms)
        return out
