"""The pictures (issue 26, item 8): ``vta run --report FILE.html`` and ``vta tune --plot FILE.html``.

The pages are checked against figures computed here independently: the per-layer cycles and DRAM bytes the run
prints in its table, MACs from the ONNX model's layer shapes, the roofline's ceilings from the config, the
simulator's per-module busy counters against the trace the timeline is drawn from, and the tuning log's lines
read as plain JSON. A page must be well-formed HTML that fetches nothing.
"""

from __future__ import annotations

import html
import itertools
import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from graph_pack import build, graph_pack, quantize
from graph_pack.cli import load_model
from graph_pack.graph import GraphError
from graph_pack.report import mac_cycles, roofs, write_report
from hw_config import load_config
from simulator.stats import MODULES

ROOT = Path(__file__).resolve().parents[1]
DIGITS = ROOT / "examples" / "digits_cnn.onnx"
RUN = [sys.executable, "-m", "vta", "run", str(DIGITS), "--start", "qnn.quantize", "--stop", "nn.batch_flatten",
       "--skip-conv", "none"]
VOID = {"meta", "br", "hr", "img", "input", "link", "col", "area", "base", "wbr", "source"}
SVG_EMPTY_OK = {"rect", "line", "circle", "polyline", "polygon", "path"}


class _Checker(HTMLParser):
    """Every element closed in order; nothing that would fetch (src, href, <link>, url(), @import)."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.titles: list[str] = []
        self._in_title = False
        self.circles: dict[str, int] = {}

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href", "xlink:href") or (value and re.search(r"url\(|@import", value)):
                self.problems.append(f"<{tag} {name}={value!r}>")
        if tag in ("link", "iframe", "img", "object", "embed"):
            self.problems.append(f"<{tag}>")
        if tag == "script" and dict(attrs).get("type") != "application/json":
            self.problems.append("an executable <script>")
        if tag == "circle":
            css = dict(attrs).get("class", "")
            self.circles[css] = self.circles.get(css, 0) + 1
        if tag not in VOID:
            self.stack.append(tag)
        self._in_title = tag == "title"

    def handle_startendtag(self, tag, attrs):
        if tag not in VOID and tag not in SVG_EMPTY_OK:
            self.problems.append(f"<{tag}/>")
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.titles.append(data)
        if re.search(r"@import|url\(", data):
            self.problems.append(f"fetch in text: {data[:80]!r}")


def check_page(path: Path) -> tuple[dict, _Checker]:
    """The page's embedded figures, after checking it is well-formed and self-contained."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert not checker.problems, checker.problems[:5]
    assert not checker.stack, f"unclosed: {checker.stack}"
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", text)
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.DOTALL)
    assert m, "no embedded figures"
    return json.loads(m.group(1).replace("<\\/", "</")), checker


def independent_macs(cfg) -> dict[str, int]:
    """MACs of each conv of the digits model, from its ONNX shapes, input channels padded to whole blocks as the
    hardware runs them."""
    graph, _, _ = load_model(str(DIGITS), cfg.BATCH, None, 0)
    macs = {}
    for node in graph:
        if node.op == "nn.conv2d":
            n, o, oh, ow = node.shape
            _, c, kh, kw = graph[node.inputs[1]].shape
            c_blocks = math.ceil(c / cfg.BLOCK_IN) * cfg.BLOCK_IN
            macs[node.name] = n * o * oh * ow * c_blocks * kh * kw
    return macs


def printed_layers(out: str) -> dict[str, tuple[int, float]]:
    """(cycles, DRAM KB) of each VTA row of the per-layer table ``vta run`` prints."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+) +\S+ +VTA +\d+ +([\d,]+) +[\d.]+ +[\d.]+ +([\d.]+) ", line)
        if m:
            rows[m.group(1)] = (int(m.group(2).replace(",", "")), float(m.group(3)))
    return rows


@pytest.fixture(scope="module")
def cli_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "digits.html"
    proc = subprocess.run([*RUN, "--report", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_run_report_matches_the_run_it_describes(cli_report):
    path, stdout = cli_report
    assert f"report: {path}" in stdout
    assert not re.search(r"^node +op +where +why", stdout, re.MULTILINE)   # the table went to the page
    data, checker = check_page(path)
    cfg = load_config("pynq")
    # the roofline's ceilings are the config's
    roof = data["roofline"]
    assert roof["peak_macs_per_s"] == cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT * cfg.CLOCK_MHZ * 1e6
    assert roof["bus_bytes_per_s"] == cfg.BUS_BYTES * cfg.CLOCK_MHZ * 1e6
    # each group: the cycles and DRAM traffic the run printed, the MACs of the layer's shapes
    printed, macs = printed_layers(stdout), independent_macs(cfg)
    layers = {row["name"]: row for row in data["layers"]}
    assert set(layers) == set(printed) == set(macs) and len(layers) == 3
    for name, row in layers.items():
        cycles, kb = printed[name]
        assert row["cycles"] == cycles
        assert abs(row["dram_bytes"] / 1024 - kb) <= 0.05
        assert row["macs"] == macs[name]
        assert row["intensity"] == pytest.approx(macs[name] / row["dram_bytes"], rel=1e-12)
        assert row["gops"] == pytest.approx(2 * macs[name] / (cycles / (cfg.CLOCK_MHZ * 1e6)) / 1e9, rel=1e-12)
        for m in MODULES:
            fig = row["modules"][m]
            assert fig["busy"] + fig["stall"] + fig["idle"] == cycles
        # issue 39, item 4: compute "busy" ~100 % beside a roofline at ~55 % of peak. Busy splits into the MACs at
        # the core's peak (pynq: 256 per cycle, GEMM_II 1), which are exactly the attained GOPS over the 51.2 GOPS
        # peak, and the compute module's other work
        compute = row["modules"]["compute"]
        assert compute["mac"] == macs[name] / 256 <= compute["busy"]
        assert row["peak_share"] == pytest.approx(row["gops"] / 51.2, rel=1e-12) == compute["mac"] / cycles
    total = int(re.search(r"accelerator ([\d,]+) cycles", stdout).group(1).replace(",", ""))
    assert data["summary"]["cycles"] == total == sum(r["cycles"] for r in data["layers"])
    busy = sum(r["modules"]["compute"]["busy"] for r in layers.values())
    mac = sum(macs.values()) / 256
    page = html.unescape(path.read_text())
    assert (f"Over the 3 group(s) with MACs: compute busy {100 * busy / total:.1f}% of {total:,} cycles = MAC cycles "
            f"{100 * mac / total:.1f}% (attained {51.2 * mac / total:.1f} GOPS of 51.2, simulated) + other compute "
            f"work {100 * (busy - mac) / total:.1f}%.") in page
    assert "Busy counts every cycle a module is executing an instruction, whatever it does in it." in page
    # every group is a point of the roofline, named in its tooltip
    assert checker.circles.get("layer") == 3
    for name in layers:
        assert any(t.endswith(f"{name} (conv2d): {layers[name]['intensity']:.3g} MACs/byte, "
                              f"{layers[name]['gops']:.3g} GOPS, {layers[name]['cycles']:,} cycles")
                   for t in checker.titles), name
    # host ops: the CPU rows the offload report names, and no fallback
    assert {r["name"] for r in data["host"]} >= {"logits_dense", "logits"}
    assert data["summary"]["fallbacks"] == {} and "No accelerator group fell back" in path.read_text()


def test_timeline_is_the_trace_of_the_run(cli_report):
    """The timeline's trace, laid end to end, covers exactly the run's cycles, and each module's busy cycles in
    it equal the simulator's busy counters of the run."""
    data, _ = check_page(cli_report[0])
    t = data["timeline"]
    assert t["cycles"] == data["summary"]["cycles"]
    assert [g[2] - g[1] for g in t["groups"]] == [r["cycles"] for r in data["layers"]]
    width = t["cycles"] / t["bins"]
    for m in MODULES:
        busy = sum(r["modules"][m]["busy"] for r in data["layers"])
        assert all(0.0 <= f <= 1.0 for f in t["busy"][m])
        assert sum(t["busy"][m]) * width == pytest.approx(busy, abs=t["bins"] * width * 5e-5 + 1)
    longest = max(data["layers"], key=lambda r: r["cycles"])
    detail = t["detail"]
    assert detail["name"] == longest["name"] and detail["cycles"] == longest["cycles"]
    assert detail["instructions"] == sum(longest["modules"][m]["insns"] for m in MODULES)
    for m in MODULES:
        bars = detail["bars"][m]
        assert sum(b[2] for b in bars) == longest["modules"][m]["insns"]
        assert all(0 <= s < e <= detail["cycles"] for s, e, _ in bars)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(bars))
    assert "instructions traced" in t["note"]


def test_host_fallbacks_are_named_with_their_reason(tmp_path):
    """A group graph_pack planned but the template refused runs on the host: the page names it, with the reason
    the run prints, and marks its ops among the host ops."""
    from test_networks import _tiny_onnx  # a conv with too few output positions for VTA's pipeline

    _tiny_onnx(tmp_path / "tiny.onnx")
    page = tmp_path / "tiny.html"
    proc = subprocess.run([sys.executable, "-m", "vta", "run", str(tmp_path / "tiny.onnx"), "--start", "qnn.quantize",
                           "--stop", "nn.global_avg_pool2d", "--skip-conv", "none", "--report", str(page)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    data, _ = check_page(page)
    printed = re.findall(r"^host fallback: accelerator group '(\S+)' runs on the CPU \((.*)\)$", proc.stdout, re.MULTILINE)
    why = data["summary"]["fallbacks"]["c0"]
    assert printed == [("c0", why.removeprefix("CPU: "))] and "no config of this template fits" in why
    assert [r["name"] for r in data["layers"]] == ["c1"]
    members = {r["name"] for r in data["host"] if r["fallback_of"] == "c0"}
    assert "c0" in members and len(members) > 1
    text = page.read_text()
    assert f"host fallback: accelerator group c0 runs on the CPU: {html.escape(printed[0][1])}" in text
    assert "2 planned by graph_pack: 1 ran on the accelerator, 1 fell back to the host" in text


def _digits_module():
    cfg = load_config("pynq")
    graph, params, _ = load_model(str(DIGITS), cfg.BATCH, None, 0)
    qgraph, qparams = quantize(graph, params, skip_conv_layers=[])
    packed = graph_pack(qgraph, cfg, start_name="qnn.quantize", stop_name="nn.batch_flatten")
    x = np.random.default_rng(0).standard_normal(graph[graph.inputs[0]].shape).astype(np.float32)
    return build(packed, cfg, qparams), {graph.inputs[0]: x}


def test_python_api_twice_leaves_the_run_intact(tmp_path):
    """write_report twice in one process: the same figures; the timeline's timing-only re-run leaves the device's
    data as the run left it (every group still matches its numpy reference) and a later run unchanged."""
    figures = []
    for i in range(2):
        mod, inputs = _digits_module()
        with pytest.raises(GraphError, match="no run to report"):
            write_report(tmp_path / "never.html", mod)
        mod.run(**inputs)
        y = mod.get_output(0).copy()
        path = tmp_path / f"r{i}.html"
        data = write_report(path, mod, "digits")
        assert check_page(path)[0] == json.loads(json.dumps(data, sort_keys=True))
        assert all(v is None for v in mod.check_steps().values())
        mod.run(**inputs)
        assert np.array_equal(mod.get_output(0), y)
        assert [r["cycles"] for r in data["layers"]] == [r["cycles"] for r in mod.profile() if "cycles" in r]
        figures.append({k: v for k, v in data.items() if k != "summary"})
    assert not (tmp_path / "never.html").exists()
    assert figures[0]["layers"] == figures[1]["layers"] and figures[0]["timeline"] == figures[1]["timeline"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r0.html", "r1.html"]   # no temporary files left


def test_a_failed_write_leaves_the_old_page(tmp_path, monkeypatch):
    """The page is written whole or not at all: a write that fails at the end (here fsync) leaves the earlier
    page as it was and no temporary file."""
    import simulator.files

    mod, inputs = _digits_module()
    mod.run(**inputs)
    path = tmp_path / "r.html"
    path.write_text("the earlier page")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(simulator.files.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_report(path, mod, "digits")
    assert path.read_text() == "the earlier page" and [p.name for p in tmp_path.iterdir()] == ["r.html"]


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32", "ultra96"])
def test_roofline_ceilings_are_the_configs(preset):
    cfg = load_config(preset)
    clock = cfg.CLOCK_MHZ * 1e6
    r = roofs(cfg)
    assert r["peak_macs_per_s"] == cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT * clock
    assert r["bus_bytes_per_s"] == (1 << cfg.LOG_BUS_WIDTH) // 8 * clock
    assert r["burst_bytes_per_s"] <= r["bus_bytes_per_s"]


@pytest.mark.parametrize("target, why", [
    ("missing-dir/r.html", "the directory missing-dir does not exist"),
    ("r.html --target cpu", "draws the accelerator's run; --target cpu runs none"),
    ("r.txt", "the page is HTML; give a file name ending in .html"),
    (".", "give a file name ending in .html"),
])
def test_bad_report_path_is_refused_before_the_run(tmp_path, target, why):
    proc = subprocess.run([*RUN, "--report", *target.split()], capture_output=True, text=True, cwd=tmp_path,
                          check=False)
    assert proc.returncode == 2
    assert proc.stdout == ""    # refused before anything ran
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vta: error: --report ") and why in lines[0]
    assert list(tmp_path.iterdir()) == []


def _log_curves(log: Path, clock_mhz: float) -> dict[str, list[float | None]]:
    """Each workload's trial times in log order, from the log's lines as plain JSON."""
    curves: dict[str, list[float | None]] = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        res = rec["result"]
        ok = res["error"] is None and res["cycles"] > 0
        secs = (res["latency_s"] or res["cycles"] / (clock_mhz * 1e6)) if ok else None
        curves.setdefault(rec["workload"], []).append(secs)
    return curves


def test_tune_plot_draws_the_log_and_redraws_a_finished_one(tmp_path):
    log, plot = tmp_path / "r18.jsonl", tmp_path / "r18.html"
    cmd = [sys.executable, "-m", "vta", "tune", "resnet-18", "--n-trial", "2", "--image-size", "32", "--timing-only",
           "--log", str(log), "--plot", str(plot)]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert first.returncode == 0, first.stderr
    assert f"plot: {plot}" in first.stdout
    data, checker = check_page(plot)
    cfg = load_config("pynq")
    curves = _log_curves(log, cfg.CLOCK_MHZ)
    n_tasks = int(re.search(r"(\d+) task\(s\) on", first.stdout).group(1))
    assert len(data["tasks"]) == len(curves) == n_tasks
    weights = {}
    for task in data["tasks"]:
        key = task["key"]
        assert task["seconds"] == curves[key]
        assert task["best"] == list(np.minimum.accumulate([s if s is not None else math.inf for s in curves[key]]))
        weights[key] = task["weight"]
        m = re.search(rf"^ *\d+ {re.escape(task['name'])} +(\d+) ", first.stdout, re.MULTILINE)
        assert m and int(m.group(1)) == task["weight"]
    assert data["records"] == sum(len(c) for c in curves.values())
    last = data["network"][-1]
    assert last[0] == data["records"]
    assert last[1] == pytest.approx(sum(weights[k] * min(s for s in c if s is not None) for k, c in curves.items()))
    assert checker.circles.get("trial") == sum(s is not None for c in curves.values() for s in c)
    # the same command on the finished log: nothing measured, the same picture
    lines = log.read_text()
    plot.unlink()
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert again.returncode == 0, again.stderr
    assert "nothing left to measure" in again.stdout and log.read_text() == lines
    assert check_page(plot)[0] == data


@pytest.mark.parametrize("extra, why", [
    (["--plot", "p.png"], "--plot p.png: the page is HTML; give a file name ending in .html"),
])
def test_bad_plot_is_refused_before_tuning(tmp_path, extra, why):
    proc = subprocess.run([sys.executable, "-m", "vta", "tune", "resnet-18", "--log", "x.jsonl", *extra],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"vta: error: {why}") and len(proc.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_mac_cycles_are_the_macs_at_the_cores_peak():
    """BATCH x BLOCK_IN x BLOCK_OUT MACs every GEMM_II cycles: 4,096 MACs on a 1x16x16 core are 16 cycles, 32 at
    GEMM_II 2, 4 on a 4x16x16 core (by hand)."""
    assert mac_cycles(load_config("pynq"), 4096) == 16
    assert mac_cycles(load_config("pynq", GEMM_II=2), 4096) == 32
    assert mac_cycles(load_config("pynq", LOG_BATCH=2), 4096) == 4
