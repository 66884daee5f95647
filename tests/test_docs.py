"""The documentation, run as a user runs it (issues #9, #26): every command in the fenced ``console`` / ``bash`` /
``sh`` blocks of README.md and docs/*.md runs as a real subprocess, every ``python`` block runs twice in one
interpreter (as a notebook user pastes it twice), and the error paths a user meets exit with a one-line
message instead of a traceback. When a doc and the code drift apart, a test here fails.

How the commands run:
- in a fresh working directory laid out like the part of a clone the docs use: a copy of ``examples/`` (the
  programs, model, measurements and config the docs read) and ``bench/`` (a link to the scripts); nothing beside
  it (no ``../shared``), so a doc that points outside the repository fails;
- in the order they appear (README.md, then docs/*.md by name), so a command that writes a file
  (``--out c2.npz``, ``--log r18.jsonl``) runs before the ones reading it; a test run alone first runs the
  earlier command that writes the file it reads (``ensure_inputs``);
- exactly as written, except for the entries of ``SUBSTITUTIONS``: smaller sizes of runs that take minutes at
  full size (tuning ResNet-18), each with its reason; the flow, flags and files stay.

Commands that are not run (installing the package, the test suite itself) are listed in ``NOT_RUN`` with a
reason; a command that is neither run nor listed fails ``test_every_documented_command_is_run_or_listed``.
Python blocks run exactly as written, in the same kind of fresh directory: a block that uses a name it does not
define, or a placeholder such as ``[...]``, fails. Only ``PY_SIZES`` may shrink a block that takes minutes at full
size (again with its reason); ``PY_CHECKS`` run after a block, in its namespace, to check what it promises.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from extras import need
from golden_files import GOLDEN_DIR

from hw_config import load_config, presets

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# docs tested by a file of their own: deploy.md needs a board (tests/test_deploy_doc.py runs its commands and code
# against a simulated one), pytorch.md needs torch for its export (tests/test_pytorch_doc.py runs it in a venv)
OWN_TEST_DOCS = {"deploy.md", "pytorch.md"}
DOC_FILES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TEST_DOCS)]
DIGITS_ONNX = ROOT / "tests" / "data" / "digits_cnn.onnx"
TOY = ROOT / "tests" / "toy_template.py"   # docs/architecture.md's example of a template
# what a clone holds that the docs use: copied (examples) or linked (scripts) into each fresh working directory
CLONE_COPIES = ("examples",)
CLONE_LINKS = ("bench",)
TIMEOUT = 300  # seconds per subprocess: a hang fails the test instead of the suite

SHELL_LANGS = {"console", "bash", "sh", "shell"}
PYTHON_LANGS = {"python", "py"}
SAMPLE_LANGS = {"", "text"}  # output samples and pictures: nothing to run


def _vta_command() -> list[str]:
    """The ``vta`` console script of this interpreter (as ``pip install`` put it beside python), else the one
    on PATH, else ``python -m vta`` (the same entry point)."""
    beside = Path(sys.executable).with_name("vta")
    if beside.is_file():
        return [str(beside)]
    on_path = shutil.which("vta")
    return [on_path] if on_path else [sys.executable, "-m", "vta"]


VTA = _vta_command()


# ------------------------------------------------------------------------------------------------------------
# reading the docs

@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository
    line: int  # 1-based line of the opening fence
    lang: str
    text: str


def fenced_blocks(path: Path) -> list[Block]:
    blocks, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        fence, start, body = m.group(2), i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"{path.name}:{start + 1}: fenced block never closed"
        blocks.append(Block(str(path.relative_to(ROOT)), start + 1, m.group(3).lower(), "\n".join(body)))
        i += 1
    return blocks


ALL_BLOCKS = [b for path in DOC_FILES for b in fenced_blocks(path)]


@dataclass(frozen=True)
class DocCommand:
    doc: str
    line: int  # 1-based line in the doc
    text: str  # the command as a shell sees it (continuations joined, comment removed)
    comment: str  # the trailing ``# comment``: what the doc promises
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:{' '.join(self.argv[:3])}"


def split_comment(text: str) -> tuple[str, str]:
    """(code, comment): a ``#`` starts a comment at the start of a word, outside quotes (as in bash)."""
    quote, prev = None, " "
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev.isspace():
            return text[:i], text[i + 1:].strip()
        prev = ch
    return text, ""


def shell_commands(block: Block) -> list[DocCommand]:
    """The commands of a console/bash block: ``$ `` prompts (console), backslash-newline continuations,
    quotes spanning lines, comments, and ``a && b`` chains split into their commands."""
    commands: list[DocCommand] = []
    pending: str | None = None
    start = 0
    for n, raw in enumerate(block.text.splitlines()):
        if pending is None:
            if block.lang == "console":
                if not raw.startswith("$ "):
                    continue  # output shown under a command
                raw = raw[2:]
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            pending, start = raw, n
        else:
            pending += raw
        if pending.endswith("\\"):  # bash drops the backslash and the newline
            pending = pending[:-1]
            continue
        code, comment = split_comment(pending)
        try:
            words = shlex.split(code)
        except ValueError:  # a quote still open: the newline is part of the word
            pending += "\n"
            continue
        pending = None
        chain: list[list[str]] = [[]]
        for w in words:
            if w == "&&":
                chain.append([])
            else:
                assert w not in ("|", ";", "||"), f"{block.doc}: shell syntax {w!r} not handled by this test"
                chain[-1].append(w)
        for argv in chain:
            if argv:
                commands.append(DocCommand(block.doc, block.line + 1 + start, code.strip(), comment, tuple(argv)))
    assert pending is None, f"{block.doc}:{block.line}: unfinished command {pending!r}"
    return commands


ALL_COMMANDS = [c for b in ALL_BLOCKS if b.lang in SHELL_LANGS for c in shell_commands(b)]


# ------------------------------------------------------------------------------------------------------------
# what runs, and what runs differently

def _argv(text: str) -> tuple[str, ...]:
    return tuple(shlex.split(text))


SMALL_TUNE = ("--n-trial", "2", "--image-size", "32")
SMALL_TUNE_WHY = ("tunes the 14 ResNet-18 tasks at 224x224 with {n} trials each (minutes); the same flow with 2 "
                  "trials per task on 32x32 inputs")

# documented command -> (command run instead, why). Only sizes change; the flow, flags and files stay.
SUBSTITUTIONS: dict[tuple[str, ...], tuple[tuple[str, ...], str]] = {
    _argv("vta tune resnet-18 --n-trial 32 --log r18.jsonl"):
        (_argv("vta tune resnet-18 --n-trial 2 --log r18.jsonl --image-size 32"), SMALL_TUNE_WHY.format(n=32)),
    _argv("vta tune resnet-18"):
        (_argv("vta tune resnet-18") + SMALL_TUNE, SMALL_TUNE_WHY.format(n="64 (the default)")),
    _argv("vta tune resnet-18 --tuner random --n-trial 32 --timing-only --parallel 2"):
        (_argv("vta tune resnet-18 --tuner random --n-trial 2 --timing-only --parallel 2 --image-size 32"),
         SMALL_TUNE_WHY.format(n=32)),
    _argv("vta tune resnet-18 --log r18.jsonl"):
        (_argv("vta tune resnet-18 --log r18.jsonl") + SMALL_TUNE,
         SMALL_TUNE_WHY.format(n="64 (the default)") + "; the same sizes as README's run that wrote r18.jsonl, so "
         "this rerun must resume from the log"),
    _argv("vta run resnet-18 --log r18.jsonl"):
        (_argv("vta run resnet-18 --log r18.jsonl --image-size 32"),
         "r18.jsonl was tuned on 32x32 inputs (above): the run takes the same size, whose tasks the log holds"),
    _argv("vta tune resnet-18 --log r18.jsonl --plot r18-tuning.html"):
        (_argv("vta tune resnet-18 --log r18.jsonl --plot r18-tuning.html") + SMALL_TUNE,
         SMALL_TUNE_WHY.format(n="64 (the default)") + "; the sizes r18.jsonl was tuned with, so it is only drawn"),
    _argv("vta tune resnet-18 --log r18.jsonl --fresh"):
        (_argv("vta tune resnet-18 --log r18.jsonl --fresh") + SMALL_TUNE, SMALL_TUNE_WHY.format(n="64 (the default)")),
    _argv("vta dse resnet-18 --part xc7z020 --space examples/dse_space.json --out dse"):
        (_argv("vta dse resnet-18 --part xc7z020 --space examples/dse_space.json --out dse --image-size 32 "
               "--trials 1"), ("tunes 14 ResNet-18 tasks at 224x224 on each of 5 configs (minutes); the same search "
                               "on 32x32 inputs, one ranked schedule per task beside the default")),
    _argv("python -m tuning.tune_conv2d --layers C2,C5 --n-trial 100"):
        (_argv("python -m tuning.tune_conv2d --layers C2,C5 --n-trial 2"), "100 trials on each of two layers"),
    _argv("python -m tuning.tune_alu --config sim --ops add,multiply"):
        (_argv("python -m tuning.tune_alu --config sim --ops add,multiply --n-trial 2"),
         "8 ALU tasks x 50 trials (the default)"),
    _argv("python -m tuning.tune_network resnet-18"):
        (_argv("python -m tuning.tune_network resnet-18") + SMALL_TUNE, SMALL_TUNE_WHY.format(n="64 (the default)")),
}

# documented command -> why the test does not run it
NOT_RUN: dict[tuple[str, ...], str] = {
    _argv("python3 -m pip install -e ."): "installs the package: the tests run against the installed package",
    _argv('python3 -m pip install -e ".[test]"'): "installs the package and test extras (done before testing)",
    _argv('pip install -e ".[onnx,tuning]"'): "installs two extras, which the test extras include",
    _argv("python3 -m pytest -q -n auto --dist loadfile"): "the test suite itself, which includes this file",
}

# a fragment of a documented command -> why it fails today (strict: the test reports when it starts passing)
KNOWN_FAILURES: dict[str, str] = {}


def runnable(argv: tuple[str, ...]) -> list[str] | None:
    """The argv to run for a documented command, or None if it is not one this test runs."""
    if argv[0] == "vta":
        return [*VTA, *argv[1:]]
    if argv[0] in ("python", "python3") and len(argv) > 1:
        if argv[1] == "-m" and len(argv) > 2 and argv[2].startswith("tuning."):
            return [sys.executable, *argv[1:]]
        if argv[1].startswith("bench/"):
            return [sys.executable, *argv[1:]]
    return None


def as_run(cmd: DocCommand) -> tuple[str, ...]:
    """The command as the test runs it: a substitution if listed, else exactly as written."""
    return SUBSTITUTIONS[cmd.argv][0] if cmd.argv in SUBSTITUTIONS else cmd.argv


RUN_COMMANDS = [c for c in ALL_COMMANDS if runnable(c.argv) is not None]


def output_files(argv: tuple[str, ...]) -> list[str]:
    written = ("--out", "--trace") if argv[:2] == ("vta", "run") else ("--out", "--log", "--trace")   # run reads a log
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in written]


# ------------------------------------------------------------------------------------------------------------
# the working directory

def fresh_clone(root: Path) -> Path:
    """``<root>/repo``: the part of a fresh clone the docs use (``CLONE_COPIES`` copied, ``CLONE_LINKS`` linked),
    and nothing beside it: no ``../shared``."""
    work = root / "repo"
    work.mkdir(parents=True)
    for name in CLONE_COPIES:
        shutil.copytree(ROOT / name, work / name)
    for name in CLONE_LINKS:
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    assert sorted(p.name for p in root.iterdir()) == ["repo"]
    return work


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """One fresh clone for all the documented commands (they run in order, as a user runs them)."""
    return fresh_clone(tmp_path_factory.mktemp("docs"))


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)


def ensure_inputs(cmd: DocCommand, work: Path) -> None:
    """Run the earlier documented command that writes a file ``cmd`` reads, if the file is not there yet
    (only when this test runs without the ones before it)."""
    reads = [a for a in cmd.argv if a not in output_files(cmd.argv)]
    if "resume" in cmd.comment:
        reads += options(cmd.argv, "--log")
    for earlier in RUN_COMMANDS[:RUN_COMMANDS.index(cmd)]:
        for name in output_files(as_run(earlier)):
            inside = any(r.startswith(name + "/") for r in reads)   # a file in a directory it writes (--out DIR)
            if (name in reads or inside) and not (work / name).exists():
                proc = run(runnable(as_run(earlier)), work)
                assert proc.returncode == 0, f"{earlier.text} (needed by {cmd.text}):\n{proc.stderr}"


def _failure(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


# ------------------------------------------------------------------------------------------------------------
# what each command promises

def option(argv: tuple[str, ...], name: str, default: str | None = None) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else default


def options(argv: tuple[str, ...], name: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]


def positionals(argv: tuple[str, ...]) -> list[str]:
    """Arguments that are neither options nor option values (every option here takes one value, except the
    flags listed)."""
    flags = {"--check", "--report", "--timing-only", "--json", "--no-layers", "--help", "--no-check", "--fresh"}
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a.startswith("-"):
            skip = a not in flags
        else:
            out.append(a)
    return out


def check_trace(path: Path) -> None:
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    modules = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"load", "compute", "store"} <= modules, modules
    assert any(e.get("ph") == "X" and e.get("dur", 0) > 0 for e in events), "no instruction spans in the trace"


def check_config_list(cmd: DocCommand, out: str, work: Path) -> None:
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert names == presets()
    for name in names:
        assert load_config(name).model in out
    if "presets:" in cmd.comment:  # the doc's list of presets is the real one
        assert sorted(re.findall(r"[\w-]+", cmd.comment.split("presets:")[1])) == sorted(names)


def check_config_show(cmd: DocCommand, out: str, work: Path) -> None:
    argv = cmd.argv
    name = positionals(argv[3:])[0] if positionals(argv[3:]) else "pynq"
    sets = {k: json.loads(v) for k, v in (s.split("=", 1) for s in options(argv, "--set"))}
    cfg = load_config(str(work / name) if name.endswith(".json") else name, **sets)
    if "--json" in argv:   # the documented promise: saved to a file, it loads back as the same config
        saved = work / "shown.json"
        saved.write_text(out)
        loaded = load_config(saved)   # the same config; its description says what --set changed
        assert loaded.replace(DESCRIPTION=cfg.DESCRIPTION) == cfg and json.loads(out)["derived"]["bitstream"] == \
            cfg.bitstream
        assert all(f"{k}={v}" in loaded.DESCRIPTION for k, v in sets.items()), loaded.DESCRIPTION
        return
    config_part, derived_part = out.split("\nderived:\n")
    assert out.splitlines()[0].startswith(cfg.model), out.splitlines()[0]
    for key, value in {**(json.loads((work / name).read_text()) if name.endswith(".json") else {}),
                       **sets}.items():
        shown = rf"^  {key} +{re.escape(str(value))}$"
        assert re.search(shown, config_part, re.MULTILINE), f"{key}={value} not shown"
    for derived in ("ACC_BUFF_DEPTH", "bitstream", "peak_gops"):  # "depths, bitstream, peak GOPS"
        assert re.search(rf"^  {derived} ", derived_part, re.MULTILINE), derived


def check_demo(cmd: DocCommand, out: str, work: Path) -> None:
    cfg = load_config(option(cmd.argv, "--config", "pynq"))
    lines = out.splitlines()
    assert lines[0].startswith(f"VTA simulator demo on {cfg.model} "), lines[0]
    assert f"A {option(cmd.argv, '-m', '64')}x256 int8" in out
    assert "bit-exact against numpy: yes" in out and re.search(r"^  cycles [\d,]+ ", out, re.MULTILINE)


def check_compile(cmd: DocCommand, out: str, work: Path) -> None:
    from simulator.image import load_image

    assert f"{cmd.argv[2]} on " in out and "bit-exact against numpy: yes" in out
    schedule = option(cmd.argv, "--schedule")
    if schedule:
        shown = re.search(r"^  schedule (\{.*\}) \(space of", out, re.MULTILINE)
        assert shown and json.loads(shown.group(1)) == json.loads(schedule), out
    image = load_image(work / option(cmd.argv, "--out"))
    assert len(image.insns) > 0 and image.segments and image.config.model in out


def check_disasm(cmd: DocCommand, out: str, work: Path) -> None:
    path = cmd.argv[3]
    lines = out.splitlines()
    n = len(np.load(work / path)["insns"])
    assert lines[0].startswith(f"# {path}: {n} instructions"), lines[0]
    assert len(lines) == n + 1 and lines[-1].split()[-1] == "FINISH", lines[-3:]


def expect_file(work: Path, image: str) -> Path | None:
    """What a VTA-compiled example must leave in DRAM (``examples/NAME.expect.npz`` beside ``NAME.npz``)."""
    path = work / image
    expect = path.with_name(f"{path.stem}.expect.npz")
    return expect if expect.is_file() else None


def check_replay(cmd: DocCommand, out: str, work: Path) -> None:
    image = cmd.argv[3]
    n = len(np.load(work / image)["insns"])
    assert out.splitlines()[0].startswith(f"# {image}: {n} instructions on "), out.splitlines()[0]
    assert re.search(r"^  cycles [\d,]+ ", out, re.MULTILINE) and "counters:" in out
    if "--timing-only" in cmd.argv:  # "counters and cycles without the data work": the same as a full run
        full = run([*VTA, "sim", "replay", image], work)
        assert full.returncode == 0 and full.stdout == out
    if option(cmd.argv, "--out"):
        with np.load(work / option(cmd.argv, "--out"), allow_pickle=False) as result:
            stats = json.loads(str(result["stats"]))
            assert stats["cycles"] > 0 and stats["finish_cycle"] > 0
            segs = {int(a): result[f"seg_{i}"] for i, a in enumerate(result["seg_addr"])}
            expect = expect_file(work, image)
            if expect is not None:  # the bytes VTA's own stack left in DRAM, and its counters
                with np.load(expect, allow_pickle=False) as want:
                    for i, addr in enumerate(want["seg_addr"]):
                        assert np.array_equal(segs[int(addr)], want[f"seg_{i}"]), f"segment at 0x{addr:x}"
                    for key, value in json.loads(str(want["stats"])).items():
                        assert stats[key] == value, key
    if option(cmd.argv, "--trace"):
        check_trace(work / option(cmd.argv, "--trace"))


def config_in(work: Path, name: str):
    """A documented --config: a preset, or a file in the working directory (one an earlier command wrote)."""
    return load_config(str(work / name) if (work / name).exists() else name)


def check_dse(cmd: DocCommand, out: str, work: Path) -> None:
    """The search's summary, and its directory: a record per config counted, the front's config files, the page."""
    directory = work / option(cmd.argv, "--out", "dse")
    n = int(re.search(r"^(\d+) configs: (\d+) tuned and timed", out, re.MULTILINE).group(1))
    assert len((directory / "records.jsonl").read_text().splitlines()) == n
    front = json.loads((directory / "front.json").read_text())["front"]
    files = sorted((directory / "front").glob("*.json"))
    assert front and len(files) == len(front) and "Pareto front (latency against the mean share of" in out
    assert [load_config(str(f)).fingerprint for f in files] == \
        [load_config(option(cmd.argv, "--config", "pynq"), **r["point"]).fingerprint for r in front]
    page = (directory / "report.html").read_text()
    assert "<h2>The front</h2>" in page and not re.search(r"""(src|href)=["']?https?:""", page)


def check_hw_estimate(cmd: DocCommand, out: str, work: Path) -> None:
    cfg = config_in(work, option(cmd.argv, "--config", "pynq"))
    from hardware.fpga import estimate
    report = estimate(cfg, part=option(cmd.argv, "--part"))
    assert f"fits {report.part.name}: {'yes' if report.fits else 'no'}" in out


def check_run(cmd: DocCommand, out: str, work: Path) -> None:
    argv = cmd.argv
    if "--help" in argv:
        assert out.startswith("usage: vta run") and "--skip-conv" in out
        return
    cfg = config_in(work, option(argv, "--config", "pynq"))
    model = argv[2]
    first = out.splitlines()[0]
    if option(argv, "--target") == "cpu":   # the float network on this CPU, timed over runs
        assert first.startswith(f"{model} on the CPU ("), first
        assert "top-5 classes (score" in out and re.search(r"^inference: mean [\d.]+ ms, std [\d.]+ ms", out, re.MULTILINE)
        assert "--check" not in argv or "check: output matches the numpy reference (np.allclose" in out
        check_schedules(argv, out)
        return
    assert first.startswith(f"{model} on {cfg.name} "), first
    size = option(argv, "--image-size")
    if size:
        assert f"input ({cfg.BATCH}, 3, {size}, {size})" in first, first
    assert "top-5 classes (score" in out and re.search(r"accelerator [\d,]+ cycles", out)
    if "--no-layers" not in argv:  # the per-layer table, with accelerator layers in it
        assert re.search(r"^layer +op +where", out, re.MULTILINE)
        assert re.search(r"^\S+ +\S+ +VTA +\d+ +[\d,]+ ", out, re.MULTILINE)
    if "--check" in argv:
        assert "check: output matches the numpy reference bit-exactly" in out
    page = next((a for a in options(argv, "--report") if a.endswith(".html")), None)
    if page:  # the run's pictures, on one page that fetches nothing
        text = (work / page).read_text()
        assert f"report: {page} " in out and "<h2>Roofline</h2>" in text and "<h2>Module timeline</h2>" in text
        assert not re.search(r"""(src|href)=["']?https?:""", text)
    elif "--report" in argv:  # where every node runs, and why
        assert re.search(r"^node +op +where +why", out, re.MULTILINE) and " accelerator " in out
    check_schedules(argv, out)


def check_schedules(argv: tuple[str, ...], out: str) -> None:
    auto = re.search(rf"^auto-scheduled: (\d+) host op\(s\) from {re.escape(option(argv, '--log') or '')} ", out,
                     re.MULTILINE)
    kept = re.search(r"; (\d+) (?:task\(s\) )?keep the untuned kernel, faster than every", out)
    kept = int(kept.group(1)) if kept else 0   # tasks whose untuned kernel beat every logged config (docs/tune.md)
    if auto:  # an auto-scheduler log (vta tune --scheduler auto): some op runs a logged schedule or keeps its kernel
        assert int(auto.group(1)) + kept >= 1, out[:1000]
    elif "--log" in argv:  # every task tuned above has its best record applied, or keeps the faster untuned kernel
        m = re.search(rf"^schedules: (\d+) of (\d+) task\(s\) from {re.escape(option(argv, '--log'))} ", out, re.MULTILINE)
        assert m and int(m.group(1)) + kept == int(m.group(2)) > 1, out[:1000]


def log_of(out: str) -> str:
    m = re.search(r"^records: (\S+) ", out, re.MULTILINE)
    assert m, "no 'records: LOG' line"
    return m.group(1)


def check_tune(cmd: DocCommand, out: str, work: Path) -> None:
    assert re.search(r"^ +# task +weight +default ms +(untuned ms +)?best ms +speedup +trials$", out, re.MULTILINE), \
        "no task table"
    log = option(cmd.argv, "--log")
    if "resume" in cmd.comment:   # what the log holds is said
        assert re.search(rf"^resuming from \d+ records in {re.escape(log)}: ", out, re.MULTILINE), out[:1000]
    if "--fresh" in cmd.argv:   # "the old log is moved aside, not deleted"
        aside = sorted(work.glob(f"{Path(log).stem}.old-*{Path(log).suffix}"))
        assert "resuming from" not in out
        assert not aside or f"moved the earlier log {log} aside to {aside[-1].name}" in out, out[:1000]
    if option(cmd.argv, "--target") == "cpu":   # the float network on this CPU: untuned and tuned, timed
        assert re.search(r"end-to-end on this CPU .* untuned .* ms .* tuned [\d.]+ ms .* outputs agree", out), out[-500:]
    else:
        assert re.search(r"end-to-end, the accelerator's part: untuned [\d,]+ cycles .* outputs identical", out), out[-500:]
    records = [json.loads(line) for line in (work / log_of(out)).read_text().splitlines()]
    assert records
    plot = option(cmd.argv, "--plot")
    if plot:  # the log's tuning curves
        assert f"plot: {plot} " in out and "<h2>Tasks</h2>" in (work / plot).read_text()


def check_tune_script(cmd: DocCommand, out: str, work: Path) -> None:
    rows = re.findall(r"^ +\d+ (\S+) ", out, re.MULTILINE)
    if cmd.argv[2] == "tuning.tune_conv2d":
        assert len(rows) == len(option(cmd.argv, "--layers").split(",")), rows
        log = option(cmd.argv, "--log", "conv2d.tune.jsonl")
    else:
        assert {r.split("_")[0] for r in rows} == set(option(cmd.argv, "--ops").split(",")), rows
        log = option(cmd.argv, "--log", "alu.tune.jsonl")
    assert "end-to-end (tuned layers, weighted)" in out
    records = [json.loads(line) for line in (work / log).read_text().splitlines()]
    assert records and f"records: {log} ({len(records)} in all; " in out.splitlines()[-1]


def check_calibrate(cmd: DocCommand, out: str, work: Path) -> None:
    measurements = cmd.argv[2]
    m = re.search(r"^calibrating the board model of (\S+) on (\d+) of (\d+) record\(s\) from (\S+)$", out, re.MULTILINE)
    assert m and m.group(4) == measurements, out[:500]
    used, total = int(m.group(2)), int(m.group(3))
    assert total == len((work / measurements).read_text().splitlines()) and used >= 2
    comment = re.search(r"(\d+) of (\d+) records fit", cmd.comment)
    if comment:   # what the doc says the example gives
        assert (used, total) == (int(comment.group(1)), int(comment.group(2))), (used, total)
    written = option(cmd.argv, "--out")
    if written:
        fitted = load_config(str(work / written))
        assert f"wrote {written} (fingerprint {fitted.fingerprint}" in out


def checker(argv: tuple[str, ...]):
    if argv[0] == "vta":
        table = {("config", "list"): check_config_list, ("config", "show"): check_config_show,
                 ("sim", "disasm"): check_disasm, ("sim", "replay"): check_replay, ("hw", "estimate"): check_hw_estimate}
        top = {"demo": check_demo, "compile": check_compile, "run": check_run, "tune": check_tune,
               "calibrate": check_calibrate, "dse": check_dse}
        return table.get(argv[1:3]) or top[argv[1]]
    if argv[1:3] == ("-m", "tuning.tune_network"):
        return check_tune
    if argv[1:3] in (("-m", "tuning.tune_conv2d"), ("-m", "tuning.tune_alu")):
        return check_tune_script
    raise AssertionError(f"no check written for {shlex.join(argv)}: add one to checker()")


# ------------------------------------------------------------------------------------------------------------
# 1. the documented commands

def _params():
    seen = set()
    for cmd in RUN_COMMANDS:
        if cmd.argv in seen and "resume" not in cmd.comment:
            continue  # the same command in two docs (vta run resnet-18 ...): run once
        seen.add(cmd.argv)
        reasons = [why for frag, why in KNOWN_FAILURES.items() if frag in cmd.text]
        marks = [pytest.mark.xfail(strict=True, reason=r) for r in reasons]
        if cmd.argv[:2] == ("vta", "tune") or "tuning." in cmd.text:
            marks.append(pytest.mark.slow)  # several seconds each, even at the substituted sizes
        yield pytest.param(cmd, marks=marks, id=cmd.id)


@pytest.mark.parametrize("cmd", list(_params()))
def test_documented_command(cmd: DocCommand, workspace: Path):
    ensure_inputs(cmd, workspace)
    argv = as_run(cmd)
    resumes = "resume" in cmd.comment  # "killed? rerun the same command: it resumes from the log"
    if resumes:
        log = workspace / option(argv, "--log")
        assert log.exists(), f"{cmd.text}: the doc says it resumes, but no earlier command wrote {log.name}"
        before = log.read_text()
    proc = run(runnable(argv), workspace)
    assert proc.returncode == 0, f"{cmd.doc}:{cmd.line}: {shlex.join(argv)}\n{_failure(proc)}"
    assert "Traceback" not in proc.stderr and proc.stdout.strip(), _failure(proc)
    checker(cmd.argv)(replace(cmd, argv=argv), proc.stdout, workspace)
    if resumes:  # every config was already measured: nothing is measured (or logged) twice
        assert log.read_text() == before


def test_every_documented_command_is_run_or_listed():
    unhandled = [c for c in ALL_COMMANDS if runnable(c.argv) is None and c.argv not in NOT_RUN]
    assert not unhandled, "documented commands neither run nor listed in NOT_RUN: " + \
        "; ".join(f"{c.doc}:{c.line}: {c.text}" for c in unhandled)
    assert len(RUN_COMMANDS) >= 25  # the parser found the commands (README alone shows twelve)
    assert sum(map(len, PY_BLOCKS.values())) >= 7  # and the Python blocks (every one runs)


def test_tables_match_the_docs():
    """No stale entries: every substitution, exclusion and Python fixup names something the docs still show."""
    documented = {c.argv for c in ALL_COMMANDS}
    assert not set(SUBSTITUTIONS) - documented, set(SUBSTITUTIONS) - documented
    assert not set(NOT_RUN) - documented, set(NOT_RUN) - documented
    for doc, index in {*PY_SIZES, *PY_CHECKS}:
        assert index < len(PY_BLOCKS.get(doc, [])), f"{doc} has no python block {index}"
    for (doc, index), (texts, why) in PY_SIZES.items():
        assert why and all(text in PY_BLOCKS[doc][index].text for text, _ in texts), (doc, index, why)
    for documented_argv, (argv, why) in SUBSTITUTIONS.items():  # only sizes change
        assert argv[:2] == documented_argv[:2] and why
        assert {a for a in documented_argv if a.startswith("--")} <= set(argv)


def test_no_fenced_block_is_ignored():
    langs = {b.lang for b in ALL_BLOCKS}
    assert langs <= SHELL_LANGS | PYTHON_LANGS | SAMPLE_LANGS, langs
    for b in ALL_BLOCKS:  # an unlabelled block is an output sample, never a command to run
        if b.lang in SAMPLE_LANGS:
            assert not re.search(r"^\$ ", b.text, re.MULTILINE), f"{b.doc}:{b.line}: commands in an unlabelled block"


# ------------------------------------------------------------------------------------------------------------
# 2. the Python blocks, each pasted twice into one interpreter

PY_BLOCKS: dict[str, list[Block]] = {}
for _b in ALL_BLOCKS:
    if _b.lang in PYTHON_LANGS:
        PY_BLOCKS.setdefault(_b.doc, []).append(_b)

# (doc, index of its python block) -> ((text, smaller text), ...), why: only sizes of runs that take minutes
PY_SIZES: dict[tuple[str, int], tuple[tuple[tuple[str, str], ...], str]] = {
    ("docs/tune.md", 0): (
        (('graph_pack.zoo.get_model("resnet-18")', 'graph_pack.zoo.get_model("resnet-18", image_shape=(3, 32, 32))'),
         ("n_trial=64", "n_trial=2")),
        ("14 tasks x 64 trials at 224x224 take minutes: 2 trials on 32x32 inputs; the second paste resumes "
         "from r18.jsonl, so both pastes see the same records")),
}

Y_DIGEST = 'import hashlib\nprint("@@", y.shape, hashlib.sha256(y.tobytes()).hexdigest(), mod.stats.cycles)\n'

# (doc, index) -> code run after the block in its namespace: what the doc promises. Lines it prints starting
# "@@ " must be the same in both pastes.
PY_CHECKS: dict[tuple[str, int], str] = {
    ("README.md", 0): 'c = stats.vta_counters()\n'
                      'assert c["gemm_counter"] == 1 and c["out_store_nbytes"] == cfg.BATCH * cfg.BLOCK_OUT, c\n'
                      'assert y.any() and stats.cycles > 0\nprint("@@", stats.cycles, c)\n',
    ("README.md", 1): Y_DIGEST,
    ("docs/networks.md", 0): Y_DIGEST,
    ("docs/operators.md", 0): 'assert out.shape == (1, 64, 56, 56) and out.dtype == np.int8\n'
                              'print("@@", op.cycles, op.config)\n',
    ("docs/simulate.md", 0): 'import json\nevents = json.load(open("run.trace.json"))["traceEvents"]\n'
                             'assert any(e.get("ph") == "X" for e in events)\nprint("@@", stats.cycles)\n',
    ("docs/simulate.md", 1): 'print("@@", sim.cfg.model)\nassert sim.cfg.BATCH == 4\n',
    ("docs/tune.md", 0): 'import json\nrecords = [json.loads(line) for line in open("r18.jsonl")]\n'
                         'assert len(records) >= len(tasks)\nprint("@@", len(records))\n',
}

RUNNER = r'''
import json
import sys

if __name__ == "__main__":  # guarded: worker processes may import this module
    spec = json.load(open(sys.argv[1]))
    for paste in (1, 2):
        ns = {"__name__": "__main__"}
        exec(compile(spec["code"], spec["name"], "exec"), ns)
        exec(compile(spec["check"], "<check>", "exec"), ns)
        print(f"@@ paste {paste} done", flush=True)
'''


def as_pasted(block: Block, index: int) -> str:
    """The block's code as the test runs it: exactly as written, or with its ``PY_SIZES`` entry applied."""
    code = block.text
    for text, smaller in PY_SIZES.get((block.doc, index), ((), ""))[0]:
        assert code.count(text) == 1, f"{block.doc}:{block.line}: {text!r} ({PY_SIZES[block.doc, index][1]})"
        code = code.replace(text, smaller)
    return code


def paste_twice(name: str, code: str, check: str, root: Path, work: Path | None = None,
                python: str = sys.executable) -> subprocess.CompletedProcess:
    """Run ``code`` then ``check`` twice in one interpreter (``python``), in ``work`` (default: a fresh clone
    under ``root``)."""
    work = fresh_clone(root) if work is None else work
    spec = root / "spec.json"
    spec.write_text(json.dumps({"name": name, "code": code, "check": check}))
    (root / "runner.py").write_text(RUNNER)
    return run([python, str(root / "runner.py"), str(spec)], work)


def _py_params():
    for doc, blocks in PY_BLOCKS.items():
        for index, block in enumerate(blocks):
            marks = [pytest.mark.slow] if "tune_tasks(" in block.text else []  # tunes, even when made small
            yield pytest.param(block, index, marks=marks, id=f"{doc}:{block.line}")


@pytest.mark.parametrize("block, index", list(_py_params()))
def test_python_block_twice(block: Block, index: int, tmp_path: Path):
    name = f"{block.doc} (block at line {block.line})"
    proc = paste_twice(name, as_pasted(block, index), PY_CHECKS.get((block.doc, index), ""), tmp_path)
    assert proc.returncode == 0, f"{name}\n{_failure(proc)}"
    assert "Traceback" not in proc.stderr
    marks = [line for line in proc.stdout.splitlines() if line.startswith("@@ ")]
    assert marks[-1] == "@@ paste 2 done" and "@@ paste 1 done" in marks
    first, second = (marks[:marks.index("@@ paste 1 done")], marks[marks.index("@@ paste 1 done") + 1:-1])
    assert first == second, f"the second paste differs from the first: {first} != {second}"


def test_a_placeholder_fails_the_block_test(tmp_path: Path):
    """What the suite does when a doc holds a placeholder again (README's first block once had
    ``[...instructions..., FinishInsn()]``): the block fails as written, nothing patches it."""
    block = PY_BLOCKS["README.md"][0]
    program = block.text[block.text.index("program = ["):block.text.index("]\nstats = ")]
    broken = block.text.replace(program, "program = [...instructions..., FinishInsn()")
    proc = paste_twice("README.md with a placeholder", broken, PY_CHECKS["README.md", 0], tmp_path)
    assert proc.returncode != 0 and "instructions" in proc.stderr, _failure(proc)


def test_the_examples_are_what_examples_readme_says():
    """Every file in examples/ is described in its README; the digits model is the one tests/data trains."""
    readme = (EXAMPLES / "README.md").read_text()
    for path in sorted(EXAMPLES.iterdir()):
        stem = path.name.split(".")[0]
        if path.name != "README.md":
            assert f"`{path.name}`" in readme or f"`{stem}`" in readme, f"examples/README.md does not say what " \
                f"{path.name} is"
    assert (EXAMPLES / "digits_cnn.onnx").read_bytes() == DIGITS_ONNX.read_bytes()


def test_the_example_programs_and_measurements_are_exact_copies():
    """The VTA-compiled programs and the Pynq measurements are the ground truth (shared/golden, shared/calibration
    beside the repository), copied unchanged."""
    need("golden")
    programs = sorted(EXAMPLES.glob("*.npz"))
    assert len(programs) >= 4
    for path in programs:
        assert path.read_bytes() == (GOLDEN_DIR / path.name).read_bytes(), path.name
    measured = GOLDEN_DIR.parent / "calibration" / "pynq_conv2d_measured.jsonl"
    assert (EXAMPLES / measured.name).read_bytes() == measured.read_bytes()


OUTSIDE_REFERENCES_ALLOWED = {
    # a doc -> why it may name a path outside the repository
    "docs/benchmarks.md": "cites ../shared/reference/vta-notes.md as the source of quoted figures (not a file a "
                          "command reads); owned by the benchmark work, to be reworded there",
}


def test_docs_never_point_outside_the_repository():
    """No ``../`` path in README.md or docs/*.md (prose included): a clone has nothing beside it."""
    outside = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), EXAMPLES / "README.md"]:
        doc = str(path.relative_to(ROOT))
        if doc in OUTSIDE_REFERENCES_ALLOWED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(^|[\s`(\"'])\.\./", line):
                outside.append(f"{doc}:{n}: {line.strip()[:100]}")
    assert not outside, "docs pointing outside the repository:\n" + "\n".join(outside)


# ------------------------------------------------------------------------------------------------------------
# 3. error paths: non-zero exit, one line naming the problem, no traceback, nothing left behind

SMALL_CONV = ("--data-shape", "1,16,8,8", "--kernel-shape", "16,16,3,3")

# (argv after vta, fragments the error line must contain, xfail reason or None)
ERRORS = [
    (("sim", "replay", "missing.npz"), ["missing.npz"], None),
    (("run", "missing.onnx"), ["missing.onnx"], None),
    (("sim", "disasm", "missing.npz"), ["missing.npz"], None),
    (("run", "digits_cnn.onnx", "--start", "qnn.quantize", "--stop", "nn.batch_flatten", "--input", "x.npy"),
     ["input", "(1, 1, 8, 8)", "(1, 3, 5, 5)"], None),
    (("run", "digits_cnn.onnx", "--start", "qnn.quantize", "--stop", "nn.batch_flatten", "--input", "none.npy"),
     ["none.npy"], None),
    (("sim", "replay", "gemm_1.npz", "--out", "nodir/result.npz"), ["nodir/result.npz"], None),
    (("sim", "replay", "gemm_1.npz", "--out", "adir"), ["adir", "directory"], None),
    (("sim", "replay", "gemm_1.npz", "--trace", "nodir/gemm_1.trace.json"), ["nodir/gemm_1.trace.json"], None),
    (("compile", "conv2d", *SMALL_CONV, "--out", "nodir/c.npz"), ["nodir/c.npz"], None),
    (("compile", "conv2d", *SMALL_CONV, "--out", "adir"), ["adir", "directory"], None),
    (("demo", "--trace", "nodir/demo.trace.json"), ["nodir/demo.trace.json"], None),
    (("config", "show", "nosuchpreset"), ["nosuchpreset"], None),
    (("compile", "conv2d", "--data-shape", "1,64,56", "--kernel-shape", "64,64,3,3"), ["data_shape", "(1, 64, 56)"],
     None),
    (("compile", "conv2d", "--data-shape", "1,a,56,56", "--kernel-shape", "64,64,3,3"), ["--data-shape", "1,a,56,56"],
     None),
    (("compile", "conv2d", "--data-shape", "1,64,56,56", "--kernel-shape", "64,32,3,3"), ["kernel_shape", "64, 32"],
     None),
    (("compile", "dense", "--data-shape", "1,64"), ["--kernel-shape"], None),
]


def _error_params():
    for argv, fragments, xfail in ERRORS:
        marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
        yield pytest.param(argv, fragments, marks=marks, id=" ".join(argv))


@pytest.mark.parametrize("argv, fragments", list(_error_params()))
def test_error_path(argv: tuple[str, ...], fragments: list[str], tmp_path: Path):
    shutil.copy(EXAMPLES / "digits_cnn.onnx", tmp_path / "digits_cnn.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 5, 5), np.float32))
    (tmp_path / "adir").mkdir()
    if "gemm_1.npz" in argv:
        shutil.copy(EXAMPLES / "gemm_1.npz", tmp_path / "gemm_1.npz")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    proc = run([*VTA, *argv], tmp_path)
    assert proc.returncode != 0, _failure(proc)
    assert "Traceback" not in proc.stderr, _failure(proc)
    lines = proc.stderr.strip().splitlines()
    errors = [line for line in lines if re.match(r"vta( [\w-]+)*: error: ", line)]
    assert len(errors) == 1 and lines[-1] == errors[0], _failure(proc)
    assert len(lines) == 1 or lines[0].startswith("usage: vta"), _failure(proc)  # argparse shows the usage
    for fragment in fragments:
        assert fragment in errors[0], f"{fragment!r} not in {errors[0]!r}"
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before, "files left behind"


def test_documented_config_error(tmp_path: Path):
    """docs/simulate.md quotes the error for a bad value: the command prints exactly that."""
    text = (ROOT / "docs" / "simulate.md").read_text()
    quoted = re.search(r"e\.g\.\s*`(hardware config: [^`]+)`", text)
    assert quoted, "docs/simulate.md no longer quotes a config error"
    message = " ".join(quoted.group(1).split())
    key, value = re.match(r"hardware config: (\w+)=(\S+) ", message).groups()
    proc = run([*VTA, "config", "show", "pynq", "--set", f"{key}={value}"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == f"vta: error: {message}", _failure(proc)


# ------------------------------------------------------------------------------------------------------------
# 4. figures the prose quotes (issue 39): every figure a doc states as what a command prints, or as a fact of the
# code, configs or example files, is checked here against what the command prints today. Measured wall times are
# not checked: the docs say they are measurements, with the script in bench/ and the figures, machine and date in
# docs/benchmarks.md (tests/test_docs.py::test_measured_figures_name_their_source).

def _python(code: str) -> tuple[str, ...]:
    return ("python", "-c", code)


@dataclass(frozen=True)
class Figure:
    doc: str
    quoted: str   # the figure as the doc says it (whitespace-normalised)
    commands: tuple[tuple[str, ...], ...]   # run in order in one fresh clone; the last one's stdout has the figure
    derive: object = None   # None: `quoted` is in that stdout as it stands; else a function stdout -> the doc's text

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.quoted[:40]}"


def _fidelity(out: str) -> dict[str, list[float]]:
    """bench/board_fidelity.py's summary table: prediction -> (median |log|, largest, Spearman)."""
    rows = re.findall(r"^\| \**([^|]+?)\** (?:\([^|]*\))? *\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", out, re.MULTILINE)
    return {name.strip(): [float(v) for v in values] for name, *values in rows}


def _simulator_only_range(out: str) -> str:
    """The bare simulator's prediction over the measured time, smallest and largest, from the per-layer table."""
    rows = re.findall(r"^\| \d+ \| conv2d [^|]+ \| ([\d.]+) \| ([\d.]+) \|", out, re.MULTILINE)
    ratios = [float(sim) / float(measured) for measured, sim in rows]
    assert len(ratios) >= 19
    return f"between {min(ratios):.2f}x and {max(ratios):.2f}x of the real time"


def _fidelity_prose(out: str) -> str:
    f = _fidelity(out)
    fit, held, sim = f["fit: the `pynq` config"], f["held out"], f["simulator only"]
    return (f"median |log(pred/meas)| {fit[0]:.3f} fitted and {held[0]:.3f} held out (targets: 0.22, within 25%), "
            f"Spearman {fit[2]:.3f} and {held[2]:.3f} (target 0.9), the worst held-out record {held[1]:.2f} "
            f"({round((np.exp(held[1]) - 1) * 100)}%). The simulator alone: {sim[0]:.2f} and {sim[2]:.2f}.")


def _simulator_alone(out: str) -> str:
    sim = _fidelity(out)["simulator only"]
    return f"(median |log(pred/meas)| {sim[0]:.2f}) and ranks layers poorly (Spearman {sim[2]:.2f})"


# the tasks of ResNet-18 on pynq as vta tune extracts them (the default quantization and region)
_R18_TASKS = (_python("import graph_pack\nfrom vta import Environment\nfrom tuning.task import extract_tasks\n"
                      "env = Environment('pynq')\ngraph, params = graph_pack.zoo.get_model('resnet-18')\n"
                      "qgraph, qparams = graph_pack.quantize(graph, params, skip_conv_layers=())\n"
                      "n = len(extract_tasks(graph_pack.graph_pack(qgraph, env), env))\n"
                      "print(f'schedules: {n} of {n} task(s) from r18.jsonl')"),)


def _r18_tasks(out: str) -> int:
    return int(re.search(r"schedules: (\d+) of", out).group(1))


_PYNQ = "from hw_config import load_config\nc = load_config('pynq')\n"
# the bounds of docs/limits.md's table as it writes them: powers of two, sizes in MiB / GiB
_LIMITS = """
from graph_pack import frontend_onnx as onnx
from simulator import errors, image, trace

def power(n): return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else f"{n:,}"
def size(n): return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"

for what, default in (
        ("simulated cycles of one run", power(errors.DEFAULT_MAX_CYCLES)),
        ("host work of one run (GEMM MACs, ALU lanes, DMA bytes)", power(errors.DEFAULT_MAX_WORK) + " units"),
        ("instructions in an image file", power(image.DEFAULT_MAX_INSNS)),
        ("DRAM bytes of an image file (all segments)", size(image.DEFAULT_MAX_DRAM_BYTES)),
        ("segments of an image file", power(image.DEFAULT_MAX_SEGMENTS)),
        ("config/stats text in an image file", power(image.DEFAULT_MAX_TEXT_CHARS) + " characters"),
        ("trace events of a traced replay", power(trace.DEFAULT_MAX_TRACE_EVENTS)),
        ("one tensor of an imported or zoo model", size(onnx.DEFAULT_MAX_TENSOR_BYTES)),
        ("an ONNX file plus all its constants", size(onnx.DEFAULT_MAX_MODEL_BYTES))):
    print(f"| {what} | {default}")
"""
# constants of the code, printed as the pages state them
_CONSTANTS = """
from simulator import core, errors, image, trace

def power(n): return f"{n:,} (2^{n.bit_length() - 1}"
for n, what in ((image.DEFAULT_MAX_INSNS, "| instructions in `insns` | {p}: {m} MiB of stream) |"),
                (image.DEFAULT_MAX_SEGMENTS, "| number of `seg_<i>` | {p}) |"),
                (image.DEFAULT_MAX_TEXT_CHARS, "| characters of the `config` / `stats` JSON | {p}) |"),
                (trace.DEFAULT_MAX_TRACE_EVENTS, "| trace events, one per instruction (`--trace`) | {p}:")):
    print(what.format(p=power(n), m=n * 16 >> 20))
n = image.DEFAULT_MAX_DRAM_BYTES
print(f"| bytes of all `seg_<i>` together | {n >> 30} GiB (2^{n.bit_length() - 1}) |")
print(f"(at most {image.MAX_NPY_HEADER_BYTES:,} bytes decompressed per member)")
print(f"a deflated one at most {image._MAX_DEFLATE_RATIO} times its compressed size")
print(f"`Simulator(cfg, threads=N)` (1 to {core.MAX_THREADS};")
print(f"at most `simulator.core.DEFAULT_MAX_THREADS` = {core.DEFAULT_MAX_THREADS};")
print(f"else the CPUs the process may use, at most {core.DEFAULT_MAX_THREADS};")
print(f"`simulator.core.PARALLEL_MIN_MACS` (2^{core.PARALLEL_MIN_MACS.bit_length() - 1}) multiply-accumulates")
for key, n, unit in (("max_cycles", errors.DEFAULT_MAX_CYCLES, "."), ("max_work", errors.DEFAULT_MAX_WORK, " units.")):
    print(f"`{key}`, default 2^{n.bit_length() - 1} = {n:,}{unit}")
"""
_R18_REPORT = (("vta", "run", "resnet-18", "--report", "r18.html"),
               _python("import os, re\nprint(f\"ResNet-18's is about {round(os.path.getsize('r18.html') / 1e4) * 10} "
                       "KB\")\nprint(re.search(r'compute busy [^<]*', open('r18.html').read()).group(0))"))


def _compute_shares(out: str) -> tuple[str, ...]:
    """The report page's busy, MAC and other shares of compute and its attained and peak GOPS, as it writes them."""
    m = re.search(r"compute busy ([\d.]+)% of [\d,]+ cycles = MAC cycles ([\d.]+)% \(attained ([\d.]+) GOPS of "
                  r"([\d.]+), simulated\) \+ other compute work ([\d.]+)%", out)
    assert m, out[-2000:]
    return m.groups()


def _tuning_cli():
    import tuning.cli
    return tuning.cli


def _r18_row(out: str, layer: str) -> list[str]:
    return re.search(rf"^{re.escape(layer)} .*$", out, re.MULTILINE).group(0).split()
# the pynq preset's board model terms as calibrate.md's table writes them
_PYNQ_TERMS = _PYNQ + """
for key, unit in (("LAUNCH_US", " us per stream"), ("HOST_INSN_NS", " ns"), ("HOST_UOP_NS", " ns"),
                  ("CACHE_NS_PER_BYTE", " ns/byte"), ("DMA_EFFICIENCY", ""), ("DMA_ROW_CYCLES", " cycles per row"),
                  ("COMPUTE_LOOP_CYCLES", " cycles per iteration")):
    print(f"| `{key}` | {getattr(c, key)}{unit} |")
"""
_FIDELITY = (("python", "bench/board_fidelity.py"),)

FIGURES = [
    # examples/README.md: the example files
    Figure("examples/README.md", "about 100 KB in all", (_python(
        "import os; n = sum(os.path.getsize('examples/' + f) for f in os.listdir('examples') if f != 'README.md')\n"
        "print(f'about {round(n / 1e4) * 10} KB in all')"),)),
    Figure("examples/README.md", "21 conv2d layers measured on a Pynq-Z1", (_python(
        "print(len(open('examples/pynq_conv2d_measured.jsonl').read().splitlines()), 'conv2d layers measured on a "
        "Pynq-Z1')"),)),
    Figure("examples/README.md", "(its 11 keys) plus one timing key", (_python(
        "import json; keys = json.load(open('examples/my_accel.json'))\n"
        "print(f'(its {len(keys) - 1} keys) plus one timing key' if 'CLOCK_MHZ' in keys else keys)"),)),
    Figure("examples/README.md", "Records above the 51.2 GOPS peak", (_python(
        _PYNQ + "print(f'Records above the {c.peak_gops} GOPS peak')"),)),
    # docs/simulate.md
    Figure("docs/simulate.md", "(`seg_0` .. `seg_3` for `gemm_0`, the output being `seg_2`), an expect file only the "
           "stored ranges (`seg_0`)", (("vta", "sim", "replay", "examples/gemm_0.npz", "--out", "r0.npz"), _python(
               "import numpy as np\nr, e = np.load('r0.npz'), np.load('examples/gemm_0.expect.npz')\n"
               "out = list(r['seg_addr']).index(e['seg_addr'][0])\n"
               "print(f\"(`seg_0` .. `seg_{len(r['seg_addr']) - 1}` for `gemm_0`, the output being `seg_{out}`), an "
               "expect file only the stored ranges (`seg_{len(e['seg_addr']) - 1}`)\")"))),
    Figure("docs/simulate.md", "default 2^30 (1,073,741,824)", (_python(
        "from simulator.core import DEFAULT_MAX_CYCLES as n\nprint(f'default 2^{n.bit_length() - 1} ({n:,})')"),)),
    Figure("docs/simulate.md", "default 2^35 (34,359,738,368,", (_python(
        "from simulator.core import DEFAULT_MAX_WORK as n\nprint(f'default 2^{n.bit_length() - 1} ({n:,},')"),)),
    # docs/networks.md
    Figure("docs/networks.md", "ResNet-18's is about 210 KB", _R18_REPORT),
    Figure("docs/networks.md", "`military uniform #652 (0.0413)`", _R18_REPORT,
           lambda out: "`" + re.search(r"image 0: (.+? #\d+ \([\d.]+\)),", out).group(1) + "`"),
    Figure("docs/networks.md", "compute is busy ~97 % of ResNet-18's cycles on pynq while its points sit at ~73 % of "
           "the peak", _R18_REPORT, lambda out: (
               f"compute is busy ~{round(float(_compute_shares(out)[0]))} % of ResNet-18's cycles on pynq while its "
               f"points sit at ~{round(float(_compute_shares(out)[1]))} % of the peak")),
    Figure("docs/simulate.md", "keeps compute busy 96.8 % of its accelerator cycles, of which 72.9 % are MAC cycles "
           "(37.3 of 51.2 GOPS, simulated) and 23.8 % other compute work", _R18_REPORT, lambda out: (
               "keeps compute busy {} % of its accelerator cycles, of which {} % are MAC cycles ({} of {} GOPS, "
               "simulated) and {} % other compute work".format(*_compute_shares(out)))),
    Figure("docs/simulate.md", "`layer1.0.conv1` on pynq is 638,187 simulated cycles = 6.382 ms, 36.2 GOPS **simulated** "
           "in `vta run`'s table, and 23.352 ms **board model** beside it", _R18_REPORT, lambda out: (
               "`layer1.0.conv1` on pynq is {4} simulated cycles = {5} ms, {6} GOPS **simulated** in `vta run`'s table, "
               "and {8} ms **board model** beside it".format(*_r18_row(out, "layer1.0.conv1")))),
    Figure("docs/networks.md", "in 500 bins of the whole run", (_python(
        "from graph_pack.report import TIMELINE_BINS\nprint(f'in {TIMELINE_BINS} bins of the whole run')"),)),
    # docs/tune.md
    Figure("docs/tune.md", "schedules: 15 of 15 task(s) from r18.jsonl", _R18_TASKS),
    Figure("docs/tune.md", "(`--strategy gradient` shares them: 15 tasks x 64)", _R18_TASKS,
           lambda out: f"(`--strategy gradient` shares them: {_r18_tasks(out)} tasks x 64)"),
    Figure("docs/tune.md", "[Task  1/15]", _R18_TASKS, lambda out: f"[Task  1/{_r18_tasks(out)}]"),
    Figure("docs/tune.md", "at 224 x 224 the 12 tasks take", (_python(
        "import graph_pack, tuning\ngraph, params = graph_pack.zoo.get_model('resnet-18')\n"
        "print(f\"at 224 x 224 the {len(tuning.extract_tasks(graph, target='cpu'))} tasks take\")"),)),
    # tune.md's example lines of what a run says (their numbers are examples), from the functions that say them
    Figure("docs/tune.md", "`vta: error: --log r18.jsonl: another process (pid 4242) is writing it; a tuning run into "
           "it is still going (the same command twice?); wait for it to finish (the next run resumes from its records), "
           "or give another --log`", (), lambda _: (
               f"`vta: error: --log r18.jsonl: another process (pid 4242) is writing it; {_tuning_cli().BUSY_HINT}`")),
    Figure("docs/tune.md", "`vta: interrupted: 624 record(s) saved in r18.jsonl (624 by this run); run the same command "
           "again to resume from them (nothing is measured twice)`", (), lambda _: (
               f"`vta: interrupted: {_tuning_cli().interrupted_line('r18.jsonl', 0, 624)}`")),
    Figure("docs/tune.md", "A fresh worker replaces it every 256 configs", (_python(
        "from tuning.cpu import MEASUREMENTS_PER_WORKER as n\nprint(f'A fresh worker replaces it every {n} configs')"),)),
    # docs/calibrate.md: the pynq preset's board model, and what bench/board_fidelity.py prints about it
    *[Figure("docs/calibrate.md", f"| `{key}` | {text} |", (_python(_PYNQ_TERMS),)) for key, text in (
        ("LAUNCH_US", "41.81 us per stream"), ("HOST_INSN_NS", "376.1 ns"), ("HOST_UOP_NS", "7.963 ns"),
        ("CACHE_NS_PER_BYTE", "0.3438 ns/byte"), ("DMA_EFFICIENCY", "0.7095"), ("DMA_ROW_CYCLES", "44.85 cycles per row"),
        ("COMPUTE_LOOP_CYCLES", "18.97 cycles per iteration"))],
    Figure("docs/calibrate.md", "each output vector pays about 4 x 19 cycles", (_python(
        _PYNQ + "print(f'each output vector pays about 4 x {round(c.COMPUTE_LOOP_CYCLES)} cycles')"),)),
    Figure("docs/calibrate.md", "The DMA sustains about 71% of the 64-bit port's peak and each row costs about 45 "
           "cycles (450 ns)", (_python(_PYNQ + "print(f'The DMA sustains about {round(c.DMA_EFFICIENCY * 100)}% of the "
                                              "{2 ** c.LOG_BUS_WIDTH}-bit port\\'s peak and each row costs about "
                                              "{round(c.DMA_ROW_CYCLES)} cycles ({round(c.DMA_ROW_CYCLES) * 1000 // "
                                              "c.CLOCK_MHZ} ns)')"),)),
    # docs/limits.md: the defaults of the bounds, from the constants the code applies
    *[Figure("docs/limits.md", f"| {what} | {default}", (_python(_LIMITS),)) for what, default in (
        ("simulated cycles of one run", "2^30"), ("host work of one run (GEMM MACs, ALU lanes, DMA bytes)", "2^35 units"),
        ("instructions in an image file", "2^20"), ("DRAM bytes of an image file (all segments)", "1 GiB"),
        ("segments of an image file", "2^16"), ("config/stats text in an image file", "2^20 characters"),
        ("trace events of a traced replay", "2^18"), ("one tensor of an imported or zoo model", "512 MiB"),
        ("an ONNX file plus all its constants", "2 GiB"))],
    # the code's constants, as other pages state them
    *[Figure(doc, quoted, (_python(_CONSTANTS),)) for doc, quoted in (
        ("docs/image-format.md", "| instructions in `insns` | 1,048,576 (2^20: 16 MiB of stream) |"),
        ("docs/image-format.md", "| bytes of all `seg_<i>` together | 1 GiB (2^30) |"),
        ("docs/image-format.md", "| number of `seg_<i>` | 65,536 (2^16) |"),
        ("docs/image-format.md", "| characters of the `config` / `stats` JSON | 1,048,576 (2^20) |"),
        ("docs/image-format.md", "| trace events, one per instruction (`--trace`) | 262,144 (2^18:"),
        ("docs/image-format.md", "(at most 10,000 bytes decompressed per member)"),
        ("docs/image-format.md", "a deflated one at most 1032 times its compressed size"),
        ("docs/simulator.md", "`Simulator(cfg, threads=N)` (1 to 64;"),
        ("docs/simulator.md", "at most `simulator.core.DEFAULT_MAX_THREADS` = 8;"),
        ("docs/networks.md", "else the CPUs the process may use, at most 8;"),
        ("docs/simulator.md", "`simulator.core.PARALLEL_MIN_MACS` (2^18) multiply-accumulates"),
        ("docs/simulator.md", "`max_cycles`, default 2^30 = 1,073,741,824."),
        ("docs/simulator.md", "`max_work`, default 2^35 = 34,359,738,368 units."))],
    Figure("docs/architecture.md", "(`subtract` of a scalar constant, about 150 lines)", (), lambda _: (
        f"(`subtract` of a scalar constant, about {round(len(TOY.read_text().splitlines()), -1)} lines)")),
    Figure("docs/calibrate.md", "between 0.14x and 0.77x of the real time", _FIDELITY, _simulator_only_range),
    Figure("docs/calibrate.md", "(median |log(pred/meas)| 1.03) and ranks layers poorly (Spearman 0.85)", _FIDELITY,
           _simulator_alone),
    Figure("docs/calibrate.md", "median |log(pred/meas)| 0.026 fitted and 0.042 held out (targets: 0.22, within 25%), "
           "Spearman 1.000 and 0.998 (target 0.9), the worst held-out record 0.12 (13%). The simulator alone: 1.03 and "
           "0.85.", _FIDELITY, _fidelity_prose),
]


def _normalised(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def figure_output(tmp_path_factory):
    """The stdout of a figure's commands (all of them, one after another), each sequence run once in one fresh
    clone."""
    work, seen = fresh_clone(tmp_path_factory.mktemp("figures")), {}

    def output(commands: tuple[tuple[str, ...], ...]) -> str:
        if commands not in seen:
            outs = []
            for argv in commands:
                full = [sys.executable, *argv[1:]] if argv[0] == "python" else runnable(argv)
                proc = run(full, work)
                assert proc.returncode == 0, f"{shlex.join(argv)}\n{_failure(proc)}"
                outs.append(proc.stdout)
            seen[commands] = "\n".join(outs)
        return seen[commands]
    return output


@pytest.mark.parametrize("figure", FIGURES, ids=[f.id for f in FIGURES])
def test_quoted_figure(figure: Figure, figure_output):
    doc = _normalised((ROOT / figure.doc).read_text())
    assert _normalised(figure.quoted) in doc, f"{figure.doc} no longer says {figure.quoted!r}: update FIGURES"
    out = figure_output(figure.commands)
    if figure.derive is None:
        assert _normalised(figure.quoted) in _normalised(out), \
            f"{figure.doc} says {figure.quoted!r}; {shlex.join(figure.commands[-1])} prints:\n{out[-3000:]}"
    else:
        assert _normalised(figure.quoted) == _normalised(figure.derive(out)), \
            f"{figure.doc} says {figure.quoted!r}; what the command prints says {figure.derive(out)!r}"


# (doc, a measured figure as the doc says it, the bench/ script that measures it): wall times are not checked, so
# the paragraph stating one names its script, and docs/benchmarks.md has a section of that script's figures
MEASURED = [
    ("README.md", ("ResNet-18 compiles in about a second and one simulated inference (data and cycles) takes a "
                   "fraction of a second"), "bench/network.py"),
    ("docs/simulator.md", "every GEMM of ResNet-18 takes the unsigned kernel: 1.2-1.6x the pair kernel's speed",
     "bench/sim_speed.py"),
    ("docs/calibrate.md", "so every tuning trial can afford the board model", "bench/sim_speed.py"),
]


def test_measured_figures_name_their_source():
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    for doc, quoted, script in MEASURED:
        paragraphs = [_normalised(p) for p in (ROOT / doc).read_text().split("\n\n")]
        where = [p for p in paragraphs if _normalised(quoted) in p]
        assert where, f"{doc} no longer says {quoted!r}: update MEASURED"
        assert f"`{script}`" in where[0] or f"`python {script}" in where[0], f"{doc}: {quoted!r} does not name {script}"
        assert (ROOT / script).is_file() and re.search(rf"^## .*`{re.escape(script)}", benchmarks, re.MULTILINE), \
            f"docs/benchmarks.md has no section of {script}'s figures"


# ------------------------------------------------------------------------------------------------------------
# 5. output samples: docs/tune.md shows what `vta tune resnet-18 --log r18.jsonl` prints with its defaults (a run of
# a minute or more, so this test is slow), what `vta run` says of that log on another config, and the line a
# resumed run starts with. Tuning, cycles and the board model are deterministic: only wall times are masked.

def _sample_after(text: str, anchor: str) -> str:
    """The body of the first fenced block after ``anchor``."""
    rest = text[text.index(anchor):]
    return next(b for b in fenced_blocks_of(rest)).strip("\n")


def fenced_blocks_of(text: str):
    for m in re.finditer(r"^```[\w-]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        yield m.group(1)


def _wall(text: str) -> str:
    return re.sub(r"\| +[\d.]+ s \|", "| (wall time) s |", text)


@pytest.mark.slow
def test_tuning_samples_are_what_the_commands_print(tmp_path: Path):
    import signal
    doc = (ROOT / "docs" / "tune.md").read_text()
    work = fresh_clone(tmp_path)
    sample = _sample_after(doc, "Output follows AutoTVM's")
    tune = run([*VTA, "tune", "resnet-18", "--log", "r18.jsonl"], work)
    assert tune.returncode == 0, _failure(tune)
    printed = set(_wall(tune.stdout).splitlines())
    stale = [line for line in _wall(sample).splitlines() if line != "..." and line not in printed]
    assert not stale, "docs/tune.md's sample of vta tune resnet-18 --log r18.jsonl has lines it no longer prints:\n" + \
        "\n".join(stale) + f"\n--- it prints\n{tune.stdout}"

    speedups = [float(x) for x in re.findall(r"^ +\d+ \S+ +\d+ +[\d.]+ +[\d.]+ +([\d.]+)x ", tune.stdout, re.MULTILINE)]
    assert len(speedups) == 15 and f"(up to {max(speedups):.2f}x on a layer)" in _normalised(doc), speedups

    # task 1 is the stem (offloaded with regions found automatically); task 2 is layer1.0.conv1, which simulate.md quotes
    best = re.search(r"^\[Task  2/\d+\] .*/ +([\d.]+) GOPS \(board model\) .* best ([\d.]+) ms \(board model\)",
                     tune.stdout, re.MULTILINE)
    simulate = _normalised((ROOT / "docs" / "simulate.md").read_text())
    assert f"prints the same task at {best.group(1)} GOPS **(board model)**, {best.group(2)} ms" in simulate, best.group(0)

    error = _sample_after(doc, "saying so, then why")
    other = run([*VTA, "run", "resnet-18", "--log", "r18.jsonl", "--config", "batch4"], work)
    assert other.returncode == 2 and other.stderr.strip() == error.strip(), _failure(other)

    quoted = _normalised(re.search(r"e\.g\. `(resuming from [^`]+)`", doc).group(1))
    proc = subprocess.Popen([*VTA, "tune", "resnet-18", "--log", "r18.jsonl", "--tuner", "random", "--n-trial", "32"],
                            cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = [proc.stdout.readline() for _ in range(2)]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=TIMEOUT)
    assert first[1].strip() == quoted, f"docs/tune.md quotes {quoted!r}; the run says {first[1]!r}"
