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
from fpga_samples import FAMILIES, NODSP, config
from scipy.optimize import nnls

from hardware.fpga import model
from hardware.fpga.memory import map_memory
from hardware.fpga.resources import Resources, ordered
from hardware.fpga.synth import SynthResult, cached, run_script, synthesize, yosys_version
from hardware.generator import source_hash

ROOT = Path(__file__).resolve().parents[1]
COEFFICIENTS = ROOT / "hardware" / "fpga" / "coefficients.py"
SAMPLES = ROOT / "tests" / "data" / "fpga_yosys_samples.json"
NODSP_SAMPLES = tuple(NODSP)


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


# Features left out of a class's fit: the loop's LUTs per int8 product. Unpacked, Yosys builds the products and
# their adder tree in the DSPs (the fit of 2026-11-25 gave it 0 on xc7), and in the current sample set it is
# confounded with the lanes (one config without the ALU's MUL in training): fitted, it took the lanes' LUTs.
EXCLUDED = {("loop", "lut"): {"macs"}}


def fit_classes(samples: list[tuple[str, object, SynthResult]], family: str) -> dict:
    """Per class, non-negative least squares of LUT and FF on the class's features over all its instances
    (EXCLUDED aside)."""
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
            names = sorted({k for f, _ in d[what] for k in f} - EXCLUDED.get((cls, what), set()))
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


def alu_lane(family: str, previous: dict | None) -> dict:
    """One ALU lane (hardware/alu.py's AluLane(32)) synthesised on its own, with every opcode and with the HLS
    capability sets' (no MUL): its LUTs, FFs and DSPs. ``previous`` (``--keep-committed``): the committed
    figures, kept when the lane's synthesis of the current sources is not cached."""
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
        if not stat.is_file() and previous is not None:
            print(f"  {family}: ALU lane not synthesised from the current sources: its figures are kept",
                  file=sys.stderr)
            return previous
        if not stat.is_file():
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "alu_lane.v").write_text(text)
            run_script(directory, f"read_verilog alu_lane.v\nsynth_xilinx -family {family} -top alu_lane -noiopad "
                                  f"-noclkbuf\ntee -q -o stat.json stat -json\n", say, f"Yosys {family} ALU lane")
        r = total(Resources.from_cells(c) for c in parse_stat(json.loads(stat.read_text())).values())
        out[key] = {"lut": r.lut, "ff": r.ff, "dsp": r.dsp}
    return out


def fit_fallback(family: str, dsp: dict, previous: dict | None) -> dict:
    """LUTs per multiplier built without DSPs: the loop's LUTs with -nodsp minus with DSPs, per product and per
    ALU lane (least squares over the -nodsp samples). With ``--keep-committed`` (``previous``: the committed
    figures) the -nodsp syntheses of the current RTL are used where cached and the committed figures kept
    otherwise, saying so (they are slow: minutes each)."""
    rows = []
    for name in NODSP_SAMPLES:
        cfg = config(name)
        if previous is not None and None in (cached(cfg, family, True, dsp_packing=False),
                                             cached(cfg, family, dsp_packing=False)):
            print(f"  {family}: no -nodsp synthesis of {name} for the current RTL: the DSP fallback's figures are "
                  f"kept from {previous.get('fitted', 'the previous fit')}", file=sys.stderr)
            return {**previous, "fitted": previous.get("fitted", "2026-11-25")}
        with_dsp = load(name, family).rows()["gemm_alu"]
        without = synthesize(cfg, family, progress=say, nodsp=True, dsp_packing=False).rows()["gemm_alu"]
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        rows.append(([lanes * cfg.BLOCK_IN, lanes], without.lut - with_dsp.lut))
    a = np.array([r[0] for r in rows], dtype=float)
    b = np.array([r[1] for r in rows], dtype=float)
    coef, _ = nnls(a, b)
    return {"lut_per_mac": round(float(coef[0]), 1), "lut_per_alu_lane": round(float(coef[1]), 1),
            "fitted": time.strftime("%Y-%m-%d"), "samples": {n: {"products": r[0][0], "lanes": r[0][1], "extra_lut": r[1]}
                        for n, r in zip(NODSP_SAMPLES, rows, strict=True)}}


def fit_packing(family: str) -> dict:
    """LUTs (and FFs) DSP packing adds per packed multiplier: the gemm_alu module packed minus unpacked, per
    pair of products, for each packing sample (bench/fpga_samples.py PACKING); per depth, pooled over them."""
    per_sample = {}
    for name in FAMILIES[family].get("packing", ()):
        cfg = config(name)
        packed = cached(cfg, family, dsp_packing=True)
        plain = cached(cfg, family, dsp_packing=False)
        if packed is None or plain is None:
            raise SystemExit(f"no cached synthesis of {name} for {family} {'with' if packed is None else 'without'} "
                             f"DSP packing: run python bench/fpga_synth.py --family {family} --only {name} first")
        pairs = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT // 2
        a, b = packed.rows()["gemm_alu"], plain.rows()["gemm_alu"]
        per_sample[name] = {"depth": cfg.COMPUTE_LATENCY, "pairs": pairs, "lut_per_pair": round((a.lut - b.lut) / pairs, 2),
                            "ff_per_pair": round((a.ff - b.ff) / pairs, 2), "dsp": [a.dsp, b.dsp]}
    depths = sorted({v["depth"] for v in per_sample.values()})

    def by_depth(key: str) -> dict[str, float]:
        """Pooled over the samples of a depth (their differences over their pairs: a large core weighs more)."""
        out = {}
        for d in depths:
            same = [v for v in per_sample.values() if v["depth"] == d]
            out[str(d)] = round(sum(v[key] * v["pairs"] for v in same) / sum(v["pairs"] for v in same), 2)
        return out
    return {"lut_per_pair": by_depth("lut_per_pair"), "ff_per_pair": by_depth("ff_per_pair"), "samples": per_sample}


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
    return {"name": name, "family": result.family, "split": split, "design": model.DESIGN, "config": cfg.to_dict(),
            "seconds": result.seconds, "rows": {k: r.to_dict() for k, r in ordered(result.rows())},
            "total": result.total().to_dict()}


def per_family(value: str | dict, family: str) -> str:
    """A META entry of one family (older files hold one value for all)."""
    return value[family] if isinstance(value, dict) else value


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
    ap.add_argument("--keep-committed", action="store_true",
                    help="keep the committed -nodsp and ALU-lane figures where their syntheses of the current "
                         "sources are not cached (each is minutes of Yosys)")
    args = ap.parse_args(argv)
    print(header("fpga_fit.py", f"the analytic resource model against Yosys {yosys_version()} "
                                f"(generator sources {source_hash()})"))
    # the families not refitted here keep their coefficients and samples (a LEGACY family: hardware/fpga/model.py)
    from hardware.fpga.coefficients import COEFFICIENTS as COMMITTED
    from hardware.fpga.coefficients import META
    coef: dict = {f: c for f, c in COMMITTED.items() if f not in args.family}
    accuracy: dict = {f: a for f, a in META["accuracy"].items() if f not in args.family}
    old = json.loads(SAMPLES.read_text())["samples"] if SAMPLES.is_file() else []
    records = [r for r in old if r["family"] not in args.family]
    problems: list[str] = []
    fitted = {}
    for family in args.family:
        split_samples = {split: [(n, config(n), load(n, family)) for n in FAMILIES[family][split]]
                         for split in ("train", "held_out")}
        for split, samples in split_samples.items():
            for name, cfg, result in samples:
                problems += check_structure(name, cfg, result) + check_memories(name, cfg, result, family)
                records.append(sample_record(name, split, cfg, result))
        for name in FAMILIES[family].get("packing", ()):
            for packed in (False, True):
                found = cached(config(name), family, dsp_packing=packed)
                if found is not None:
                    records.append({**sample_record(name, "packing", config(name), found), "dsp_packing": packed})
        committed = COMMITTED.get(family, {}) if args.keep_committed else {}
        t0 = time.perf_counter()
        dsp = fit_dsp(split_samples["train"], family)
        coef[family] = {"design": model.DESIGN, "classes": fit_classes(split_samples["train"], family), "dsp": dsp,
                        "alu_lane": alu_lane(family, committed.get("alu_lane")), "fallback": fit_fallback(family, dsp, committed.get("fallback")),
                        "packing": fit_packing(family)}
        print(f"  {family}: fitted in {time.perf_counter() - t0:.1f} s; DSP {dsp}; fallback "
              f"{coef[family]['fallback']['lut_per_mac']} LUT per product, "
              f"{coef[family]['fallback']['lut_per_alu_lane']} per ALU lane; packing "
              f"{coef[family]['packing']['lut_per_pair']} LUT per packed multiplier by depth")
        fitted[family] = split_samples
    for family, split_samples in fitted.items():
        accuracy[family] = {split: report(split, samples, family, coef) for split, samples in split_samples.items()}
    if problems:
        print("structure or memory mismatches:\n  " + "\n  ".join(problems))
    if args.no_write:
        return 1 if problems else 0
    kept = [f for f in coef if f not in args.family]
    meta = {"generator_sources": {**{f: per_family(META["generator_sources"], f) for f in kept},
                                  **dict.fromkeys(args.family, source_hash())},
            "yosys": yosys_version(), "fitted": {**{f: per_family(META["fitted"], f) for f in kept},
                                                 **dict.fromkeys(args.family, time.strftime("%Y-%m-%d"))},
            "samples": {**{f: META["samples"][f] for f in coef if f not in args.family},
                        **{f: {k: FAMILIES[f][k] for k in ("train", "held_out")} for f in args.family}},
            "accuracy": accuracy}
    write_coefficients(coef, meta)
    SAMPLES.write_text(json.dumps({"generator_sources": meta["generator_sources"], "yosys": yosys_version(),
                                   "samples": records}, indent=1) + "\n")
    print(f"wrote {COEFFICIENTS.relative_to(ROOT)} and {SAMPLES.relative_to(ROOT)}")
    return 1 if problems else 0


if __name__ == "__main__":
    run_main(main)
