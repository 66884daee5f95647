"""What a config costs on a part: the estimate per module against the part's capacity, whether it fits, and the
text and JSON ``vta hw estimate`` prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from hardware.fpga import model
from hardware.fpga.parts import Part, get_part, part_for_target
from hardware.fpga.resources import ROW_LABELS, Resources, ordered
from hw_config import HwConfig

LABEL = ("Yosys estimates: vendor tools (Vivado) give different figures, and no published utilisation of VTA's "
         "own bitstreams was found to compare with")


@dataclass(frozen=True)
class Report:
    """An estimate of ``cfg`` on ``part``: per-row resources, the total, and whether each resource fits."""

    cfg: HwConfig
    part: Part
    tier: str                                   # "analytic" or "yosys"
    rows: list[tuple[str, Resources]]
    split: dict[str, Resources] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0                        # Yosys's synthesis time (0 for the analytic model)
    cached: bool = False
    dsp_packing: bool = False                   # two int8 products per DSP (hardware/dsp_packing.py)

    @property
    def total(self) -> Resources:
        out = Resources()
        for _, r in self.rows:
            out = out + r
        return out

    def usage(self) -> dict[str, tuple[float, int]]:
        """resource -> (used, available) on the part (block RAM in BRAM36 sites, RAMB18 counted as halves)."""
        t = self.total
        out = {"lut": (t.lut, self.part.lut), "ff": (t.ff, self.part.ff), "bram36": (t.bram, self.part.bram36),
               "dsp": (t.dsp, self.part.dsp)}
        if self.part.uram:
            out["uram"] = (t.uram, self.part.uram)
        return out

    @property
    def bus_fits(self) -> bool:
        """Whether the config's AXI master is no wider than the DRAM port it is connected to on this part
        (``Part.bus_bits``: the Zynq-7000's ACP is 64 bits, UltraScale+'s HPC0 port 128)."""
        return self.cfg.BUS_WIDTH <= self.part.bus_bits

    def over(self) -> list[str]:
        """What the design needs more of than the part has, in words (empty when it fits)."""
        out = [f"BRAM36 {u:,.1f} of {a:,}" if k == "bram36" else f"{k.upper()} {u:,.0f} of {a:,}"
               for k, (u, a) in self.usage().items() if u > a]
        if not self.bus_fits:
            out.append(f"a {self.cfg.BUS_WIDTH}-bit bus, wider than the {self.part.bus_bits}-bit port "
                       f"{self.part.bus_port.split(' ')[0]} it connects to")
        return out

    @property
    def fits(self) -> bool:
        """Every resource within the part's capacity, and the bus within its DRAM port's width."""
        return self.bus_fits and all(used <= have for used, have in self.usage().values())

    def to_dict(self) -> dict:
        def rounded(r: Resources) -> dict:
            return {k: round(v, 1) for k, v in r.to_dict().items()}

        return {"config": self.cfg.model, "fingerprint": self.cfg.fingerprint, "part": self.part.name,
                "family": self.part.family, "tier": self.tier, "label": LABEL,
                "rows": {key: rounded(r) for key, r in self.rows},
                "split": {key: rounded(r) for key, r in self.split.items()},
                "total": rounded(self.total),
                "usage": {k: {"used": round(u, 1), "available": a} for k, (u, a) in self.usage().items()},
                "bus": {"bits": self.cfg.BUS_WIDTH, "available": self.part.bus_bits, "port": self.part.bus_port},
                "fits": self.fits, "notes": self.notes, "yosys_seconds": self.seconds,
                "dsp_packing": self.dsp_packing}


def _dsp_fallback_note(total_dsp: int, part: Part, coef: dict, products_per_dsp: int = 1) -> str:
    over = total_dsp - part.dsp
    each = f" ({products_per_dsp} int8 products each: packed)" if products_per_dsp > 1 else ""
    return (f"DSP: Yosys put every multiplier in a DSP slice ({total_dsp}), more than {part.name}'s {part.dsp}: a "
            f"vendor flow limited to the part (Vivado -max_dsp {part.dsp}) builds the {over} over{each} from LUTs, "
            f"about {coef['fallback']['lut_per_mac']:.0f} LUT per int8 product (synth_xilinx -nodsp); the totals "
            f"above count them so")


def build(cfg: HwConfig, part: str | Part | None = None, synth: bool = False,
          progress: Callable[[str], None] | None = None, dsp_packing: bool | None = None) -> Report:
    """The estimate of ``cfg`` on ``part`` (default: the part of the config's board, xc7z020 otherwise): the
    analytic model, or with ``synth`` Yosys's synthesis (cached; minutes the first time), of the RTL built with
    the generator's ``dsp_packing`` (None: the config's default, on for Xilinx boards)."""
    from hardware.dsp_packing import resolve_packing
    p = part_for_target(cfg.TARGET) if part is None else get_part(part)
    packed = resolve_packing(cfg, dsp_packing)
    est = model.estimate(cfg, p.family, dsp_packing=packed)
    fitted = model.fit_part(est, cfg, p)
    if not synth:
        return Report(cfg, p, "analytic", ordered(fitted.rows), fitted.split, fitted.notes, dsp_packing=packed)
    from hardware.fpga.synth import synthesize
    result = synthesize(cfg, p.family, progress=progress, dsp_packing=packed)
    rows = result.rows()
    notes = []
    if result.total().dsp > p.dsp:
        # the same LUT fallback as the model's, applied to Yosys's figures
        coef = model._coefficients()[p.family]
        moved = model.fit_part(model.Estimate(p.family, rows, [], [], est.split, est.products_per_dsp), cfg, p)
        rows = moved.rows
        notes.append(_dsp_fallback_note(result.total().dsp, p, coef, est.products_per_dsp))
    return Report(cfg, p, "yosys", ordered(rows), {}, notes, result.seconds, result.cached, packed)


def _n(x: float) -> str:
    return f"{x:,.0f}"


def render(report: Report) -> str:
    """The table ``vta hw estimate`` prints."""
    p, cfg = report.part, report.cfg
    how = ("analytic model (fitted to Yosys synth_xilinx; milliseconds)" if report.tier == "analytic" else
           f"Yosys synth_xilinx -family {p.family} "
           f"({'cached' if report.cached else 'synthesised'}, {report.seconds:.0f} s)")
    show_uram = p.uram > 0
    head = f"{'module':40} {'LUT':>9} {'(LUTRAM)':>9} {'FF':>9} {'BRAM36':>7} {'BRAM18':>7} {'DSP':>6}"
    head += f" {'URAM':>5}" if show_uram else ""
    lines = [f"# {cfg.model} on {p.name}, {p.device}", f"# {how}", f"# {LABEL}", "", head]

    def line(label: str, r: Resources) -> str:
        text = (f"{label:40} {_n(r.lut):>9} {_n(r.lutram):>9} {_n(r.ff):>9} {r.bram36:>7} {r.bram18:>7} "
                f"{r.dsp:>6}")
        return text + (f" {r.uram:>5}" if show_uram else "")

    for key, r in report.rows:
        lines.append(line(ROW_LABELS.get(key, key), r))
        if key == "gemm_alu" and report.split:
            lanes = cfg.BATCH * cfg.BLOCK_OUT
            mul = "with" if "MUL" in cfg.capabilities.alu_opcodes else "no"
            packed = ", 2 per DSP" if report.dsp_packing else ""
            lines.append(line(f"  GEMM core: {cfg.MACS_PER_CYCLE} int8 MACs{packed}", report.split["gemm"]))
            lines.append(line(f"  {lanes} lanes: ALU ({mul} MUL), accumulate", report.split["lanes"]))
            lines.append(line("  micro-op loop, control", report.split["control"]))
    t = report.total
    lines += ["-" * len(head), line("total", t)]
    usage = report.usage()
    cap = (f"{'':40} {_n(p.lut):>9} {'':>9} {_n(p.ff):>9} {p.bram36:>7} {p.bram18:>7} {p.dsp:>6}"
           + (f" {p.uram:>5}" if show_uram else ""))
    lines.append(f"{p.name + ' has':40}" + cap[40:])
    pct = {k: (100.0 * u / a if a else 0.0) for k, (u, a) in usage.items()}
    lines.append(f"{'used':40} {pct['lut']:>8.1f}% {'':>9} {pct['ff']:>8.1f}% {pct['bram36']:>6.1f}% {'':>7} "
                 f"{pct['dsp']:>5.1f}%" + (f" {pct['uram']:>4.1f}%" if show_uram else ""))
    lines.append("")
    lines.append(f"bus: {cfg.BUS_WIDTH} bits; {p.name}'s DRAM port takes at most {p.bus_bits}: {p.bus_port}")
    if report.fits:
        lines.append(f"fits {p.name}: yes")
    else:
        lines.append(f"fits {p.name}: NO ({'; '.join(report.over())})")
    lines.append(f"block RAM: {t.bram36} RAMB36 + {t.bram18} RAMB18 = {t.bram:g} BRAM36 sites")
    lines.append("DSP packing: " + ("on, two int8 products per DSP multiplier (--no-dsp-packing: one each)"
                                    if report.dsp_packing else "off, one int8 product per DSP"))
    if report.split and report.tier == "analytic":
        lines.append("the GEMM/ALU row's three parts are the model's terms (Yosys synthesises them as one module)")
    lines += report.notes
    if show_uram:
        lines.append("URAM: synth_xilinx maps no memory to UltraRAM unless asked (-uram); these figures use none")
    return "\n".join(lines)


def run(cfg: HwConfig, part: str | None, synth: bool, as_json: bool,
        progress: Callable[[str], None] | None = None, timing: str | None = None,
        dsp_packing: bool | None = None) -> str:
    """``vta hw estimate``: the resources, and with ``timing`` (xilinx, ecp5 or all: hardware/fpga/timing.py) the
    measured timing after them, said against the config's CLOCK_MHZ; of the RTL built with the generator's
    ``dsp_packing`` (None: the config's default; ECP5 is always timed without)."""
    report = build(cfg, part, synth, progress, dsp_packing)
    if timing is None:
        return json.dumps(report.to_dict(), indent=2) if as_json else render(report)
    from hardware.fpga import timing as tm
    x, e = tm.measure(cfg, report.part.family, timing, progress, report.dsp_packing)
    note = tm.timing_family(report.part.family)[1]
    if as_json:
        return json.dumps({**report.to_dict(), "timing": tm.timing_dict(cfg, x, e, note)}, indent=2)
    lines = [render(report), ""]
    if x is not None:
        lines += tm.xilinx_lines(cfg, x, note)
    if e is not None:
        lines += tm.ecp5_lines(cfg, e)
    return "\n".join(lines)
