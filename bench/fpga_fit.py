"""Fits the analytic resource model (hardware/fpga/model.py) to Yosys, and checks it on configs it was not fitted to.

Reads the cached Yosys syntheses of bench/fpga_samples.py's configs (run bench/fpga_synth.py first; a missing one
is named), then per family:

1. checks the model's module list against Yosys's (a module of the RTL the model does not know, or the reverse,
   is reported: the generator changed) and every memory's mapping against Yosys's cells (block RAM exact);
2. fits each module class's LUT and FF coefficients by non-negative least squares on the training configs'
   per-module figures (memories taken out: they are mapped exactly), the DSPs per int8 product and per ALU lane,
   the LUTs per multiplier without DSPs (``synth_xilinx -nodsp`` of two small configs) and one ALU lane's share
   (AluLane(32) synthesised on its own);
3. writes hardware/fpga/coefficients.py and tests/data/fpga_yosys_samples.json (Yosys's per-row figures of every
   sample, which the tests hold the model to), and prints the model's error against Yosys on the training and
   held-out configs, per resource, in total and per row.

    python bench/fpga_fit.py [--family xc7 xcup] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from _host import header, run_main
from fpga_samples import FAMILIES, config
from scipy.optimize import nnls

from hardware.fpga import model
from hardware.fpga.memory import map_memory
from hardware.fpga.resources import Resources, ordered
from hardware.fpga.synth import SynthResult, cached, run_script, synthesize, yosys_version
from hardware.generator import source_hash

ROOT = Path(__file__).resolve().parents[1]
COEFFICIENTS = ROOT / "hardware" / "fpga" / "coefficients.py"
SAMPLES = ROOT / "tests" / "data" / "fpga_yosys_samples.json"
NODSP_SAMPLES = ("b1k4-bus6", "b2k8-bus8")


def say(text: str) -> None:
    print(f"  {text}", file=sys.stderr, flush=True)


def load(name: str, family: str, nodsp: bool = False) -> SynthResult:
    found = cached(config(name), family, nodsp, dsp_packing=False)   # the fit is of the RTL without packing
    if found is None:
        raise SystemExit(f"no cached synthesis of {name} for {family}{' -nodsp' if nodsp else ''}: run "
                         f"python bench/fpga_synth.py --family {family} --only {name} first")
    return found


def logic_of(inst: model.Instance, result: SynthResult, family: str) -> tuple[float, float]:
    """A module's own LUTs and FFs in Yosys's result, its memories' exact share taken out."""
    cells = dict(result.modules[inst.module])
    r = Resources.from_cells({t: n for t, n in cells.items() if not t.startswith(("RAMB", "URAM"))})
    lut, ff = r.lut, r.ff
    for shape in inst.memories:
        m = map_memory(shape, family)
        lut -= m.lut
        ff -= m.ff
    return lut, ff


def check_structure(name: str, cfg, result: SynthResult) -> list[str]:
    ours = {i.module for i in model.instances(cfg)}
    theirs = set(result.modules)
    problems = [f"{name}: Yosys has module {m} the model does not know" for m in sorted(theirs - ours)]
    problems += [f"{name}: the model has module {m} Yosys does not" for m in sorted(ours - theirs)]
    return problems


def check_memories(name: str, cfg, result: SynthResult, family: str) -> list[str]:
    """Every memory's block RAMs and distributed-RAM LUTs against Yosys's."""
    problems = []
    rows = result.rows()
    for inst in model.instances(cfg):
        if inst.module not in result.modules:
            continue
        for shape in inst.memories:
            m = map_memory(shape, family)
            if inst.cls == "top":
                got = rows[f"sram.{shape.name}"]
                if (got.bram36, got.bram18) != (m.bram36, m.bram18):
                    problems.append(f"{name} {family}: SRAM {shape.name} {shape.depth}x{shape.width} r{shape.reads}: "
                                    f"Yosys {got.bram36} RAMB36 + {got.bram18} RAMB18, model {m.bram36} + {m.bram18}")
            else:
                got = Resources.from_cells(result.modules[inst.module])
                if (got.bram36, got.bram18, got.lutram) != (m.bram36, m.bram18, m.lut):
                    problems.append(f"{name} {family}: {inst.module} memory {shape.depth}x{shape.width}: Yosys "
                                    f"{got.bram36}/{got.bram18}/{got.lutram:.0f} LUTRAM, model "
                                    f"{m.bram36}/{m.bram18}/{m.lut}")
    return problems


def fit_classes(samples: list[tuple[str, object, SynthResult]], family: str) -> dict:
    """Per class, non-negative least squares of LUT and FF on the class's features over all its instances."""
    data: dict[str, dict[str, list]] = {}
    for _name, cfg, result in samples:
        for inst in model.instances(cfg):
            if inst.module not in result.modules:
                continue
            lut_f, ff_f = model.features(inst)
            lut, ff = logic_of(inst, result, family)
            d = data.setdefault(inst.cls, {"lut": [], "ff": []})
            d["lut"].append((lut_f, lut))
            d["ff"].append((ff_f, ff))
    out = {}
    for cls, d in sorted(data.items()):
        out[cls] = {}
        for what in ("lut", "ff"):
            names = sorted({k for f, _ in d[what] for k in f})
            a = np.array([[f.get(k, 0.0) for k in names] for f, _ in d[what]])
            b = np.array([y for _, y in d[what]])
            # columns that never vary beside the constant carry no information: drop them rather than split
            coef, _ = nnls(a, b)
            out[cls][what] = {k: round(float(c), 4) for k, c in zip(names, coef, strict=True) if c != 0.0}
    return out


def fit_dsp(samples, family: str) -> dict:
    """DSPs per int8 product and per ALU lane with MUL, by least squares (they come out whole: checked)."""
    rows = []
    for _name, cfg, result in samples:
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        mul = "MUL" in cfg.capabilities.alu_opcodes
        rows.append(([lanes * cfg.BLOCK_IN, lanes * mul], result.rows()["gemm_alu"].dsp))
    a = np.array([r[0] for r in rows], dtype=float)
    b = np.array([r[1] for r in rows], dtype=float)
    coef, *_ = np.linalg.lstsq(a, b, rcond=None)
    per_mac, per_lane = (round(float(c)) for c in coef)
    misses = [(f, y) for f, y in rows if f[0] * per_mac + f[1] * per_lane != y]
    if misses:
        print(f"  {family}: DSP = {per_mac} x products + {per_lane} x MUL lanes misses {misses}", file=sys.stderr)
    return {"per_mac": per_mac, "per_alu_lane": per_lane}


def alu_lane(family: str) -> dict:
    """One ALU lane (hardware/alu.py's AluLane(32)) synthesised on its own, with every opcode and with the HLS
    capability sets' (no MUL): its LUTs, FFs and DSPs."""
    import hashlib

    from amaranth.back import verilog

    from hardware.alu import AluLane
    from hardware.fpga.resources import total
    from hardware.fpga.synth import cache_root, parse_stat
    from hw_config.capabilities import CAPABILITY_SETS

    out = {}
    for key, ops in (("mul", CAPABILITY_SETS["fsim"].alu_opcodes), ("no_mul", CAPABILITY_SETS["vta-hls"].alu_opcodes)):
        text = verilog.convert(AluLane(32, ops), name="alu_lane", emit_src=False)
        digest = hashlib.sha256((text + family + yosys_version()).encode()).hexdigest()[:16]
        directory = cache_root() / "alu_lane" / digest
        stat = directory / "stat.json"
        if not stat.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "alu_lane.v").write_text(text)
            run_script(directory, f"read_verilog alu_lane.v\nsynth_xilinx -family {family} -top alu_lane -noiopad "
                                  f"-noclkbuf\ntee -q -o stat.json stat -json\n", say, f"Yosys {family} ALU lane")
        r = total(Resources.from_cells(c) for c in parse_stat(json.loads(stat.read_text())).values())
        out[key] = {"lut": r.lut, "ff": r.ff, "dsp": r.dsp}
    return out


def fit_fallback(family: str, dsp: dict) -> dict:
    """LUTs per multiplier built without DSPs: the loop's LUTs with -nodsp minus with DSPs, per product and per
    ALU lane (least squares over the -nodsp samples)."""
    rows = []
    for name in NODSP_SAMPLES:
        cfg = config(name)
        with_dsp = load(name, family).rows()["gemm_alu"]
        without = synthesize(cfg, family, progress=say, nodsp=True, dsp_packing=False).rows()["gemm_alu"]
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        rows.append(([lanes * cfg.BLOCK_IN, lanes], without.lut - with_dsp.lut))
    a = np.array([r[0] for r in rows], dtype=float)
    b = np.array([r[1] for r in rows], dtype=float)
    coef, _ = nnls(a, b)
    return {"lut_per_mac": round(float(coef[0]), 1), "lut_per_alu_lane": round(float(coef[1]), 1),
            "samples": {n: {"products": r[0][0], "lanes": r[0][1], "extra_lut": r[1]}
                        for n, r in zip(NODSP_SAMPLES, rows, strict=True)}}


def err(model_value: float, yosys_value: float) -> float:
    return (model_value - yosys_value) / yosys_value if yosys_value else (0.0 if model_value == 0 else float("inf"))


def report(split: str, samples, family: str, coefficients: dict) -> dict:
    worst = {"lut": 0.0, "ff": 0.0, "dsp": 0.0}
    bram_exact = True
    lines = []
    for name, cfg, result in samples:
        est = model.estimate(cfg, family, coefficients, dsp_packing=False)
        m, y = est.total(), result.total()
        e = {k: err(getattr(m, k), getattr(y, k)) for k in worst}
        worst = {k: max(v, abs(e[k])) for k, v in worst.items()}
        same_bram = (m.bram36, m.bram18) == (y.bram36, y.bram18)
        bram_exact &= same_bram
        lines.append(f"  {family:5} {split:8} {name:18} LUT {y.lut:7.0f} {e['lut']:+6.1%}  FF {y.ff:6.0f} "
                     f"{e['ff']:+6.1%}  DSP {y.dsp:5} {e['dsp']:+6.1%}  BRAM36 {y.bram36:3}+{y.bram18:3}/2 "
                     f"{'exact' if same_bram else f'model {m.bram36}+{m.bram18}/2'}")
        rows_y = result.rows()
        for row, r in ordered(est.rows):
            ry = rows_y.get(row, Resources())
            if ry.lut > 200 and abs(err(r.lut, ry.lut)) > 0.15:
                lines.append(f"        row {row:10} LUT yosys {ry.lut:6.0f} model {r.lut:6.0f} ({err(r.lut, ry.lut):+.0%})")
            if ry.ff > 200 and abs(err(r.ff, ry.ff)) > 0.15:
                lines.append(f"        row {row:10} FF  yosys {ry.ff:6.0f} model {r.ff:6.0f} ({err(r.ff, ry.ff):+.0%})")
    print("\n".join(lines))
    print(f"  {family} {split}: worst |error| LUT {worst['lut']:.1%}, FF {worst['ff']:.1%}, DSP {worst['dsp']:.1%}; "
          f"BRAM {'exact on every config' if bram_exact else 'NOT exact'}")
    return {**{k: round(v, 4) for k, v in worst.items()}, "bram_exact": bram_exact, "configs": len(samples)}


def sample_record(name: str, split: str, cfg, result: SynthResult) -> dict:
    return {"name": name, "family": result.family, "split": split, "config": cfg.to_dict(),
            "seconds": result.seconds, "rows": {k: r.to_dict() for k, r in ordered(result.rows())},
            "total": result.total().to_dict()}


def write_coefficients(coef: dict, meta: dict) -> None:
    text = ('"""The analytic resource model\'s coefficients, fitted to Yosys by bench/fpga_fit.py (do not edit by '
            'hand: re-run it).\n\nPer family: per module class, LUT and FF as sums of coefficient x feature '
            '(hardware/fpga/model.py); DSPs per\nint8 product and per ALU lane; LUTs per multiplier built without '
            'DSPs; one ALU lane on its own. META says what\nthey were fitted to and how close the model came on '
            'configs it was not fitted to.\n"""\n\n'
            f"META = {json.dumps(meta, indent=4)}\n\nCOEFFICIENTS = {json.dumps(coef, indent=4)}\n")
    text = text.replace(": true", ": True").replace(": false", ": False").replace(": null", ": None")
    COEFFICIENTS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--no-write", action="store_true", help="report only; write neither coefficients nor samples")
    args = ap.parse_args(argv)
    print(header("fpga_fit.py", f"the analytic resource model against Yosys {yosys_version()} "
                                f"(generator sources {source_hash()})"))
    coef: dict = {}
    accuracy: dict = {}
    records = []
    problems: list[str] = []
    for family in args.family:
        split_samples = {split: [(n, config(n), load(n, family)) for n in FAMILIES[family][split]]
                         for split in ("train", "held_out")}
        for split, samples in split_samples.items():
            for name, cfg, result in samples:
                problems += check_structure(name, cfg, result) + check_memories(name, cfg, result, family)
                records.append(sample_record(name, split, cfg, result))
        t0 = time.perf_counter()
        dsp = fit_dsp(split_samples["train"], family)
        coef[family] = {"classes": fit_classes(split_samples["train"], family), "dsp": dsp,
                        "alu_lane": alu_lane(family), "fallback": fit_fallback(family, dsp)}
        print(f"  {family}: fitted in {time.perf_counter() - t0:.1f} s; DSP {dsp}; fallback "
              f"{coef[family]['fallback']['lut_per_mac']} LUT per product, "
              f"{coef[family]['fallback']['lut_per_alu_lane']} per ALU lane")
        accuracy[family] = {split: report(split, samples, family, coef) for split, samples in split_samples.items()}
    if problems:
        print("structure or memory mismatches:\n  " + "\n  ".join(problems))
    if args.no_write:
        return 1 if problems else 0
    meta = {"generator_sources": source_hash(), "yosys": yosys_version(), "fitted": time.strftime("%Y-%m-%d"),
            "samples": {f: FAMILIES[f] for f in args.family}, "accuracy": accuracy}
    write_coefficients(coef, meta)
    SAMPLES.write_text(json.dumps({"generator_sources": source_hash(), "yosys": yosys_version(),
                                   "samples": records}, indent=1) + "\n")
    print(f"wrote {COEFFICIENTS.relative_to(ROOT)} and {SAMPLES.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    run_main(main)
