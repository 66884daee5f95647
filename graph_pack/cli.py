"""``vta run MODEL``: import (zoo name or ONNX file), quantize, pack, build and run one inference on the
simulated accelerator; print the top-5, the timing and the per-layer table."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from graph_pack import zoo
from graph_pack.build import CPU_BACKENDS, build
from graph_pack.calibration import load_calibration, quantization_report
from graph_pack.explain import explain
from graph_pack.frontend_onnx import DEFAULT_MAX_MODEL_BYTES, DEFAULT_MAX_TENSOR_BYTES, from_onnx
from graph_pack.graph import Graph
from graph_pack.host_auto import read_auto_schedules
from graph_pack.host_run import run_cpu
from graph_pack.labels import IMAGENET_CLASSES, imagenet_class_names
from graph_pack.macs import matrix_share
from graph_pack.pack import RegionError, format_offload_report, graph_pack
from graph_pack.quantize import DEFAULT_MODE, MODES, PER_CHANNEL, default_skip_conv, quantize
from graph_pack.quantize_model import carries_scales, model_scales_note
from graph_pack.reference import run_reference
from graph_pack.report import write_report
from graph_pack.schedule_log import read_schedules, refuse_unused
from graph_pack.svg import check_html_path
from host import jit
from host.templates import host
from hw_config.writing import write_atomic
from simulator.files import check_output_path
from vta.cli import SEED, Interrupted, _key_value, _load, arg, command, float_in, int_in, threads_arg
from vta.device import SimDevice
from vta.environment import Environment

MAX_BATCH = 4096
IMAGE_SIZES = (8, 4096)
GLOBAL_SCALES = (2.0 ** -16, 2.0 ** 16)   # beyond these the int8 step leaves float32's comfortable range
# The largest tensor of a zoo model, per image and per pixel of an S x S image (float32 activations), and
# its largest weight per pixel: VGG's first block has 64 channels at full resolution, ResNet's and MobileNet's
# widest layers 16 values per input pixel (64 channels at S/2, 256 at S/4), dcgan's last hidden layer 32
# (128 channels at S/2); VGG's fc6 and dcgan's first transposed conv weigh 8192 bytes per pixel.

# the offload region's flags, as vta run, vta tune and vta dse take them (graph_pack's start_name / stop_name)
START_HELP = ("offload only after this op (op name or node name; VTA's graph_pack region). Default: every region "
              "the accelerator can run, found automatically; with only --stop, the model's own start")
STOP_HELP = ("offload only up to before this op (op name or node name). Default: regions found automatically; with "
             "only --start, the model's own stop")
EXPLAIN_HELP = ("print, for every op, where it ran (accelerator region or host) and, for host ops, why (no template, "
                "a shape the ISA cannot encode, a capability the config lacks, kept in float), and the share of "
                "MACs on the accelerator")


def region_names(start: str | None, stop: str | None, defaults: tuple[str, str]) -> tuple[str | None, str | None]:
    """graph_pack's (start_name, stop_name) for --start / --stop: (None, None), regions found automatically, when
    neither is given; else VTA's named region, the model's ``defaults`` standing in for the flag not given."""
    if start is None and stop is None:
        return None, None
    return start or defaults[0], stop or defaults[1]


DENSE_DEFAULT_SHARE = 0.5   # --dense's default is on where matrix products carry at least this share of the MACs
DENSE_HELP = ("matrix products on the accelerator: dense layers through the dense template and products of two "
              "activations (attention's MatMul) through batch_matmul (on), or kept in float on the host (off, VTA's "
              "skip_dense_layer). Default, with regions found automatically: on where matrix products are at least half "
              "of the model's MACs (transformers, MLPs), off where they are a classifier head (CNNs, as VTA); off "
              "with --start / --stop (VTA's graph_pack)")


def quantize_dense(dense: str | None, start: str | None, stop: str | None, graph: Graph) -> bool:
    """Whether --dense (``dense``: "on", "off" or None, not given) quantizes ``graph``'s matrix products for the
    accelerator. Not given: off in a region named by --start / --stop, as VTA's graph_pack with its
    ``skip_dense_layer=True``; with regions found automatically, on where matrix products carry at least
    ``DENSE_DEFAULT_SHARE`` of the MACs (a transformer: nearly all its MACs; offloading them is the point), off where
    they are a CNN's classifier head (a few percent of its MACs: VTA kept it float, and the CNN's numbers stay
    VTA's)."""
    if dense is not None:
        return dense == "on"
    if start is not None or stop is not None:
        return False
    return matrix_share(graph) >= DENSE_DEFAULT_SHARE


def _input_arg(text: str) -> tuple[str | None, str]:
    """--input: FILE.npy (the model's first input) or NAME=FILE.npy (the input NAME)."""
    name, sep, path = text.partition("=")
    if sep and name and not Path(text).exists():
        return name, path
    return None, text


def model_inputs(graph: Graph, given: list[tuple[str | None, str]] | None, rng: np.random.Generator
                 ) -> dict[str, np.ndarray]:
    """Every input of ``graph``: the --input files given (``(name or None for the first input, path)``), the others
    drawn: float inputs standard normal (cast to the input's dtype); an integer input that a ``take`` indexes (token
    ids) uniform over the indexed table's rows; any other integer or boolean input (an attention mask) ones, so
    nothing is masked."""
    files: dict[str, str] = {}
    for name, path in given or []:
        name = graph.inputs[0] if name is None else name
        if name not in graph.inputs:
            raise ValueError(f"--input {name}={path}: the model has no input {name!r}; its inputs: "
                             f"{', '.join(graph.inputs)}")
        if name in files:
            raise ValueError(f"--input gives input {name!r} twice")
        files[name] = path
    rows = {node.inputs[1]: graph[node.inputs[0]].shape[node.attrs["axis"]] for node in graph.ops()
            if node.op == "take" and node.inputs[1] in graph.inputs}
    feeds = {}
    for name in graph.inputs:
        node = graph[name]
        dtype = np.dtype(node.dtype)
        if name in files:
            feeds[name] = _load_input(files[name], graph, name)
        elif dtype.kind == "f":
            feeds[name] = rng.standard_normal(node.shape).astype(dtype)
        elif dtype.kind in "iu" and name in rows:
            feeds[name] = rng.integers(0, rows[name], node.shape).astype(dtype)
        else:
            feeds[name] = np.ones(node.shape, dtype)
    return feeds


def _calibrate_arg(text: str) -> str:
    """--calibrate: a mode, or a .npz file of calibration inputs."""
    if text in MODES or text.endswith(".npz") or Path(text).is_file():
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is neither a mode ({', '.join(MODES)}) nor a .npz file of the "
                                     "model's inputs")


def calibration(mode_or_file: str | None, global_scale: float | None, graph: Graph,
                x: np.ndarray | dict[str, np.ndarray], carries_scales: bool = False
                ) -> tuple[str, list[dict[str, np.ndarray]]]:
    """(quantize's calibrate_mode, the calibration batches) for --calibrate (None: not given) and --global-scale:
    a FILE.npz's batches (percentile ranges), or the run's own inputs (also what --quant-report compares on):
    ``x``, the first input's array or every input by name. Not given: "model" where the model carries its own
    scales (``carries_scales``: a QDQ model), else percentile."""
    if global_scale is not None:
        if mode_or_file not in (None, "global_scale"):
            raise ValueError(f"--global-scale sets VTA's global_scale quantization; --calibrate {mode_or_file} "
                             "calibrates the ranges instead: give one")
        mode_or_file = "global_scale"
    if mode_or_file == "model" and not carries_scales:
        raise ValueError("--calibrate model: the model carries no scales of its own (no QuantizeLinear / "
                         "DequantizeLinear pairs); allowed here: percentile, max, global_scale or a .npz file")
    mode_or_file = mode_or_file or ("model" if carries_scales else DEFAULT_MODE)
    if mode_or_file in MODES:
        return mode_or_file, [dict(x) if isinstance(x, dict) else {graph.inputs[0]: x}]
    return DEFAULT_MODE, load_calibration(mode_or_file, graph)


@contextlib.contextmanager
def region_flags(start: str | None, stop: str | None) -> Iterator[None]:
    """graph_pack's "no operator matches start_name=..." as the command line says it: naming ``--start`` / ``--stop``
    (given as ``start`` / ``stop``; None: the model's default was used, and said so), with the closest op and node
    names."""
    try:
        yield
    except RegionError as e:
        flag, given = ("--start", start) if e.what == "start_name" else ("--stop", stop)
        raise ValueError(e.say(flag, default=given is None)) from None


def load_model(model: str, batch: int, image_size: int | None, seed: int,
               shapes: dict[str, tuple[int, ...]] | None = None, max_tensor_bytes: int | None = None,
               max_model_bytes: int | None = None) -> tuple[Graph, dict, tuple[str, str]]:
    """(graph, params, default (start, stop)) for a zoo name or an ONNX file. ``shapes`` (ONNX only) are
    input shapes; ``max_tensor_bytes`` / ``max_model_bytes`` bound the import (from_onnx's defaults when
    None); a zoo model's size is estimated and checked before it is built. Every network command starts here, so a bad
    ``VTA_HOST_ISA`` is refused here, before the work (``jit.check_host_isa``)."""
    jit.check_host_isa()
    max_tensor_bytes = max_tensor_bytes or DEFAULT_MAX_TENSOR_BYTES
    max_model_bytes = max_model_bytes or DEFAULT_MAX_MODEL_BYTES
    path = Path(model)
    if path.suffix == ".onnx" or path.exists():
        if not path.exists():
            raise FileNotFoundError(f"no such ONNX file: {model}")
        if image_size is not None:
            raise ValueError("--image-size applies to zoo models; give an ONNX model's input shape with "
                             "--shape NAME=N,C,H,W")
        graph, params = from_onnx(path, shape=shapes, batch=batch, max_tensor_bytes=max_tensor_bytes,
                                  max_model_bytes=max_model_bytes)
        return graph, params, ("nn.max_pool2d", "nn.global_avg_pool2d")
    try:
        start_stop = zoo.pack_points(model)
    except (ValueError, KeyError):
        near = difflib.get_close_matches(model.lower(), zoo.list_models(), n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"{model!r} is neither an ONNX file nor a zoo model{hint}; zoo models: "
                         f"{', '.join(zoo.list_models())}") from None
    if shapes:
        raise ValueError("--shape applies to ONNX files; a zoo model takes --batch and --image-size")
    shape = None if image_size is None else (3, image_size, image_size)
    try:
        graph, params = zoo.get_model(model, batch_size=batch, image_shape=shape, seed=seed,
                                      max_tensor_bytes=max_tensor_bytes)
    except zoo.TooLarge as e:
        raise ValueError(f"--image-size {image_size or 224} with --batch {batch}: {e}; use a smaller --image-size "
                         "or --batch, or raise --max-tensor-mb") from None
    return graph, params, start_stop


def _mib(text: str) -> int:
    """--max-*-mb: a positive number of MiB, as bytes."""
    value = float_in(1.0, float(2 ** 40), "a size in MiB", "1..2^40")(text)
    return int(value * 2 ** 20)


def _shape_arg(text: str) -> tuple[str, tuple[int, ...]]:
    """--shape NAME=D0,D1,...: an ONNX input's whole shape (positive dimensions)."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME=D0,D1,... (e.g. input=1,3,224,224)")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the dimensions must be integers, e.g. {name}=1,3,224,224") \
            from None
    if min(shape) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every dimension must be >= 1")
    return name, shape


def _shapes(values: list[tuple[str, tuple[int, ...]]] | None) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, shape in values or []:
        if name in shapes:
            raise ValueError(f"--shape gives input {name!r} twice")
        shapes[name] = shape
    return shapes


def _load_input(path: str, graph: Graph, name: str) -> np.ndarray:
    """--input: the .npy file, its shape checked against the model's input before its data is read."""
    try:
        x = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise ValueError(f"--input {path}: no such file (give a .npy array file, as numpy.save writes)") from None
    except IsADirectoryError:
        raise ValueError(f"--input {path}: a directory, not a .npy array file") from None
    except EOFError:
        raise ValueError(f"--input {path}: the file is empty or truncated, not a .npy array") from None
    except ValueError:   # numpy's text offers to unpickle the file: never what --input wants
        raise ValueError(f"--input {path}: not a .npy array file (an array as numpy.save writes it)") from None
    if getattr(x, "shape", None) is None:   # an .npz archive
        raise ValueError(f"--input {path}: an .npz archive, not a .npy array file (save the one input array "
                         f"with numpy.save)")
    node = graph[name]
    if x.shape != node.shape:
        raise ValueError(f"--input {path}: shape {x.shape} {x.dtype}, but the model's input {name!r} is "
                         f"{node.shape} {node.dtype}")
    return np.array(x)


def _top5(y: np.ndarray, random_weights: bool) -> str:
    """The top-5 classes of each of the first four images: ImageNet's class names where the output has its 1000
    classes, indices otherwise; said to be no prediction where the weights are the zoo's random ones."""
    if y.ndim != 2:
        return f"output shape {y.shape}, mean {y.mean():.4f}, std {y.std():.4f}"
    names = imagenet_class_names() if y.shape[1] == IMAGENET_CLASSES else None
    lines = []
    for n, row in enumerate(y[:4]):
        order = np.argsort(-row, kind="stable")[:5]
        lines.append(f"  image {n}: " + ", ".join(
            f"{names[i]} #{int(i)} ({row[i]:.4f})" if names else f"{int(i)} ({row[i]:.4f})" for i in order))
    note = " (random weights: the zoo's models are untrained, so these are not predictions)" if random_weights else ""
    return f"top-5 classes (score){note}:\n" + "\n".join(lines)


def _skip_conv(text: str) -> int | None:
    """--skip-conv's value: a conv layer index, or 'none' (no conv stays on the CPU)."""
    if text.strip().lower() == "none":
        return None
    try:
        index = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a conv layer index (0, 1, ...) or 'none'") from None
    if index < 0:
        raise argparse.ArgumentTypeError(f"{index} is negative: give a conv layer index (0, 1, ...) or 'none'")
    return index


def skip_conv_layers(values: list[int | None] | None, named_region: bool = True) -> list[int]:
    """The layers --skip-conv keeps on the CPU: when not given, ``quantize.default_skip_conv`` (the stem with
    --start/--stop, VTA's convention; none with regions found automatically); none for 'none'."""
    if values is None:
        return default_skip_conv(named_region)
    if None in values and len(values) > 1:
        raise ValueError("--skip-conv none cannot be combined with layer indices")
    return [v for v in values if v is not None]


def skip_conv_note(values: list[int | None] | None, named_region: bool) -> str:
    """What --explain says of the convolutions the quantizer kept in float (--skip-conv and its default)."""
    if values is not None:
        kept = skip_conv_layers(values)
        return f"--skip-conv: convolution(s) {', '.join(map(str, kept))} kept in float on the host" if kept else \
            "--skip-conv none: every convolution quantized, the first (the stem) too"
    if named_region:
        return ("--skip-conv default with --start/--stop: the first convolution (the stem) kept in float on the host, "
                "VTA's convention (--skip-conv none offloads it)")
    return ("--skip-conv default with regions found automatically: every convolution quantized, the stem too (its "
            "input channels padded to a block; --skip-conv 0 keeps it in float on the host, VTA's convention)")


@command(None, "run", "run a network (zoo name or ONNX file) on the simulated accelerator", args=[
    arg("model", help=f"a zoo model ({', '.join(zoo.list_models())}) or an .onnx file"),
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--batch", type=int_in(1, MAX_BATCH, "the batch size"), default=None, metavar="N",
        help=f"batch size, 1..{MAX_BATCH} (default: the config's BATCH); an ONNX model's dynamic first dimension"),
    arg("--image-size", type=int_in(*IMAGE_SIZES, "the image size"), default=None, metavar="S",
        help=f"input height = width for zoo models, {IMAGE_SIZES[0]}..{IMAGE_SIZES[1]} (default 224)"),
    arg("--shape", dest="shapes", type=_shape_arg, action="append", default=None, metavar="NAME=D0,D1,...",
        help="an ONNX input's whole shape, e.g. input=1,3,224,224 (repeatable; needed for dynamic dimensions "
             "other than the batch)"),
    arg("--max-tensor-mb", type=_mib, default=None, metavar="MIB",
        help=f"largest tensor an ONNX or zoo model may have (default {DEFAULT_MAX_TENSOR_BYTES >> 20})"),
    arg("--max-model-mb", type=_mib, default=None, metavar="MIB",
        help=f"largest total of an ONNX model's file and constants (default {DEFAULT_MAX_MODEL_BYTES >> 20})"),
    arg("--start", default=None, help=START_HELP),
    arg("--stop", default=None, help=STOP_HELP),
    arg("--global-scale", type=float_in(*GLOBAL_SCALES, "the activation range", "2^-16..2^16 (1.5e-05..65536)"),
        default=None, help="VTA's global_scale quantization with this activation range (2^-16..2^16; "
                           "--calibrate global_scale alone: 8)"),
    arg("--calibrate", type=_calibrate_arg, default=None, metavar="MODE|FILE.npz",
        help="activation ranges: model (the default for a model that carries its own quantization, a QDQ model: "
             "each QuantizeLinear's scale rounded to the power of two that keeps the model's range; its weights as "
             "its own integers where its scales are powers of two, else rounded from its float weights), "
             f"{DEFAULT_MODE} (the default otherwise: the 99.99th percentile of |x| on the calibration "
             "inputs), max, or global_scale (VTA's: every activation in +-GLOBAL_SCALE); or a .npz of calibration "
             "inputs by input name (one batch, or K batches stacked), percentile ranges; without a file the "
             "calibration input is the run's own"),
    arg("--per-channel", choices=PER_CHANNEL, default="auto",
        help="per-output-channel power-of-two weight scales: auto (default: depthwise convs), "
             "all (every conv / dense; their per-channel requantization runs on the host) or none (VTA's per-tensor)"),
    arg("--quant-report", action="store_true",
        help="compare the quantized network with the float one on the calibration inputs (numpy): cosine "
             "similarity, top-1 / top-5 agreement"),
    arg("--explain", action="store_true", help=EXPLAIN_HELP),
    arg("--skip-conv", type=_skip_conv, action="append", default=None, metavar="INDEX|none",
        help="conv layer kept in float on the CPU (repeatable; 'none' offloads every conv; default: none with "
             "regions found automatically, 0 (the stem, VTA's convention) with --start/--stop)"),
    arg("--dense", choices=("on", "off"), default=None, help=DENSE_HELP),
    arg("--fallback", choices=("warn", "error"), default="warn",
        help="a group the templates refuse: run it on the host and say so (warn, default) or stop (error)"),
    arg("--cpu", choices=CPU_BACKENDS, default="auto", help="host kernels (default auto: JIT if llvmlite)"),
    arg("--log", metavar="FILE", help="a tuning log (vta tune --log): build each accelerator task with its best "
                                      "record for this config; tasks without one keep the template's default; "
                                      "the host's float conv2d / dense with their best records for this CPU "
                                      "(vta tune --target cpu)"),
    arg("--target", choices=("vta", "cpu"), default="vta",
        help="vta: quantize and offload to the accelerator (default); cpu: every layer of the float network on this "
             "CPU (tuned kernels from --log), timed over several runs (mean and std)"),
    threads_arg(),
    arg("--device", choices=("sim", "pynq", "rtl"), default="sim",
        help="where the accelerator groups run: the simulator (default), a Pynq board with a VTA bitstream "
             "(the [pynq] extra; on the board, or remote through PYNQ_REMOTE_DEVICES or --board), or the "
             "accelerator's RTL simulated cycle by cycle (the [hw] extra; docs/hardware.md)"),
    arg("--board", metavar="HOST[:PORT]", help="--device pynq: a remote PYNQ board (or `vta board serve "
                                               "--simulated`) instead of pynq's own choice"),
    arg("--bitstream", metavar="PATH", help="--device pynq: the .bit to program (default: the bitstream cache, "
                                            "<cache>/<TARGET>/<HW_VER>/<bitstream>.bit)"),
    arg("--rpc", default=None, metavar="HOST:PORT",
        help="run the accelerator groups on a free board of --key from this RPC tracker (docs/rpc.md)"),
    arg("--key", default="pynq", help="with --rpc: the boards' device key (default pynq)"),
    arg("--key-file", default=None, metavar="FILE", help="with --rpc: the boards' shared key (default "
                                                         "$VTA_RPC_KEY_FILE)"),
    arg("--seed", type=SEED, default=0, help="seed of the random weights and input"),
    arg("--input", dest="inputs", type=_input_arg, action="append", default=None, metavar="[NAME=]NPY",
        help="an input array (.npy) instead of a random one: the model's first input, or with NAME= the input "
             "NAME (repeatable; inputs not given are drawn: float normal, token ids over their table, masks ones)"),
    arg("--out", metavar="NPZ", help="save the outputs (output_0, ...: logits, DCGAN's images) and the input "
                                     "(input) to this .npz, written whole or not at all"),
    arg("--check", action="store_true", help="also run the numpy reference (and, on a board, the simulator) and "
                                             "compare bit-exactly"),
    arg("--report", nargs="?", const=True, default=None, metavar="FILE.html",
        help="print where every node runs and why; with FILE.html, write that and the run's pictures instead "
             "(roofline, cycles per module, host ops, module timeline) to one self-contained page"),
    arg("--no-layers", dest="layers", action="store_false", help="omit the per-layer table"),
])
def run_cmd(args: argparse.Namespace) -> int:
    """Quantize a network, offload its middle region to the accelerator and run one inference.

    Prints the top-5 classes, compile and run times, simulated cycles and latency at the config's clock,
    and the per-layer table (simulated cycles, GOPS and DRAM traffic for accelerator layers; host time
    for CPU layers). Exit status 1 when --check finds a difference from the numpy reference.
    """
    try:
        return _run(args)
    except KeyboardInterrupt:
        raise Interrupted("nothing was written (--out is written whole, after the run); run the command "
                          "again") from None


def _run(args: argparse.Namespace) -> int:
    if args.out is not None:
        check_output_path(args.out, "--out")   # before any work
    page = args.report if isinstance(args.report, str) else None
    if page is not None:
        if args.target == "cpu":
            raise ValueError("--report FILE.html draws the accelerator's run; --target cpu runs none (leave out the "
                             "file name)")
        check_html_path(page, "--report")
    cfg = _load(args.config, args.sets)
    env = Environment(cfg)
    if args.target == "cpu":
        return run_cpu(args, env, _float_model)
    schedules = read_schedules(args.log, cfg) if args.log else None   # a missing log fails before the work
    # the host's tuned kernels from the same log (a board without llvmlite runs graph_pack's numpy kernels)
    host_schedules = read_schedules(args.log, host()) if args.log and jit.available() else None
    # --scheduler auto's (their kernels keep the run bit-exact against the numpy reference: --check)
    auto = read_auto_schedules(args.log, host()) if args.log and jit.available() else None
    if schedules is not None:   # a log with no record for this config (or this CPU) at all: said before the work
        refuse_unused(args.model, schedules, host_schedules, auto=auto.logged if auto else None)
    if args.device != "pynq" and (args.board or args.bitstream):
        raise ValueError("--board and --bitstream apply to --device pynq")
    if args.rpc and args.device != "sim":
        raise ValueError(f"--rpc and --device {args.device}: give one (a board through a tracker, or this "
                         f"machine's {'board' if args.device == 'pynq' else 'RTL'})")
    # before any work, so a missing board fails fast
    board = _board(cfg, args) if args.device == "pynq" else _rtl(cfg) if args.device == "rtl" else \
        _remote(cfg, args) if args.rpc else None
    batch = args.batch or cfg.BATCH
    t0 = time.perf_counter()
    graph, params, (start, stop) = load_model(args.model, batch, args.image_size, args.seed, _shapes(args.shapes),
                                              args.max_tensor_mb, args.max_model_mb)
    times = {"import": time.perf_counter() - t0}
    rng = np.random.default_rng(args.seed)
    data = graph.inputs[0]
    feeds = model_inputs(graph, args.inputs, rng)
    x = feeds[data]
    t0 = time.perf_counter()
    mode, dataset = calibration(args.calibrate, args.global_scale, graph, feeds, carries_scales(graph, params))
    qgraph, qparams = quantize(graph, params, global_scale=args.global_scale or 8.0, calibrate_mode=mode,
                               dataset=dataset,
                               skip_conv_layers=skip_conv_layers(args.skip_conv, named_region=bool(args.start or args.stop)),
                               skip_dense_layer=not quantize_dense(args.dense, args.start, args.stop, graph),
                               per_channel=args.per_channel)
    times["quantize"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    start, stop = region_names(args.start, args.stop, (start, stop))
    with region_flags(args.start, args.stop):
        packed = graph_pack(qgraph, env, start_name=start, stop_name=stop)
    times["graph_pack"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mod = build(packed, env, qparams, schedules, cpu=args.cpu, fallback="error" if args.fallback == "error" else "allow",
                device=board if board is not None else _simulator(cfg, args.threads), host_schedules=host_schedules,
                auto_schedules=auto)
    times["build"] = time.perf_counter() - t0
    if schedules is not None:   # records for this config, but none for a task of this network
        refuse_unused(args.model, schedules, host_schedules, built=True, auto=auto.logged if auto else None)
    t0 = time.perf_counter()
    mod.run(**feeds)
    run_s = time.perf_counter() - t0
    y = mod.get_output(0)
    if args.out is not None:
        outputs = {f"output_{i}": mod.get_output(i) for i in range(len(graph.outputs))}
        others = {f"input_{name}": feeds[name] for name in graph.inputs[1:]}   # a model's other inputs
        write_atomic(args.out, lambda f: np.savez(f, input=x, **others, **outputs))
        print(f"saved the input and {len(outputs)} output(s) to {args.out}")
    sim = getattr(mod.device, "sim", None)
    where = "the RTL, simulated cycle by cycle by Verilator" if args.device == "rtl" else \
        f"the board {getattr(board, 'board', board)}" if board is not None else \
        f"the simulator: {sim.kernel_path} kernels, {sim.threads} GEMM thread(s)"
    if jit.host_isa() is not None:
        where += f"; host kernels for {jit.host_isa()} ({jit.HOST_ISA_ENV})"
    print(f"{args.model} on {cfg.name} ({cfg.CLOCK_MHZ:g} MHz, {where}), batch {batch}, input {graph[data].shape}")
    if cfg.board_model_note() and board is None:
        print(cfg.board_model_note())
    if schedules is not None:
        print(schedules.summary())
    if host_schedules is not None and (host_schedules.applied or host_schedules.kept_untuned):
        print(host_schedules.summary())
    if auto is not None and (auto.applied or auto.logged.kept_untuned):
        print(auto.summary())
    if args.report is True:
        print(format_offload_report(packed))
    if args.explain:
        print(explain(packed, mod.fallbacks).format())
        print(skip_conv_note(args.skip_conv, named_region=bool(args.start or args.stop)))
    if mode == "model":
        print(model_scales_note(qgraph))
    if args.quant_report:
        print(quantization_report(graph, params, qgraph, qparams, dataset, mode).format())
    for head, reason in mod.fallbacks.items():
        print(f"host fallback: accelerator group {head!r} runs on the CPU ({reason.removeprefix('CPU: ')})")
    print(_top5(y, random_weights=not Path(args.model).is_file()))
    compile_s = times["quantize"] + times["graph_pack"] + times["build"]
    print(f"import {times['import']:.2f} s; compile {compile_s:.2f} s (" +
          ", ".join(f"{k} {v:.2f} s" for k, v in times.items() if k != "import") + ")")
    s = mod.stats
    last = f"; RTL simulated in {board.wall_seconds:.1f} s" if args.device == "rtl" else \
        f"; board {s.latency_s * 1e3:.2f} ms {mod.board_figure}" if mod.board_figure else ""
    simulated = "simulated by Verilator" if args.device == "rtl" else "simulated"
    print(f"inference: {run_s * 1e3:.1f} ms wall on this machine (host layers {mod.host_seconds * 1e3:.1f} ms); "
          f"accelerator {s.cycles:,} cycles = {s.seconds * 1e3:.2f} ms at {cfg.CLOCK_MHZ:g} MHz ({simulated})" + last)
    if args.layers:
        print(mod.format_profile())
    if page is not None:
        write_report(page, mod, args.model, device=where, wall_s=run_s, times=times)
        print(f"report: {page} (open it in a browser; nothing in it is fetched)")
    if args.check:   # every output (a detector has several)
        ours = [mod.get_output(i) for i in range(len(graph.outputs))]
        numpy_outs = run_reference(qgraph, qparams, feeds)
        references = {"the numpy reference": list(numpy_outs) if isinstance(numpy_outs, tuple) else [numpy_outs]}
        if board is not None:   # the board (or the RTL) against the simulator, bit for bit
            sim_mod = build(packed, env, qparams, schedules, cpu=args.cpu, fallback="allow",
                            device=_simulator(cfg, args.threads))
            sim_mod.run(**feeds)
            references["the simulator"] = [sim_mod.get_output(i) for i in range(len(graph.outputs))]
        differs = False
        for name, refs in references.items():
            diffs = [np.abs(r.astype(np.float64) - o).max() for r, o in zip(refs, ours, strict=True)
                     if not np.array_equal(r, o)]
            differs |= bool(diffs)
            one = len(ours) == 1
            what = "output" if one else f"all {len(ours)} outputs"
            verb = ("DIFFERS from" if one else "DIFFER from") if diffs else ("matches" if one else "match")
            print(f"check: {what} {verb} {name}" + (f" (max |diff| {max(diffs)})" if diffs else " bit-exactly"))
        if differs:
            return 1
    return 0


def _float_model(args: argparse.Namespace):
    """(graph, params, input, top-5 formatter) of the float network, for --target cpu."""
    graph, params, _ = load_model(args.model, args.batch or 1, args.image_size, args.seed, _shapes(args.shapes),
                                  args.max_tensor_mb, args.max_model_mb)
    data = graph.inputs[0]
    x = model_inputs(graph, args.inputs, np.random.default_rng(args.seed))[data]
    return graph, params, x, lambda y: _top5(y, random_weights=not Path(args.model).is_file())


def _remote(cfg, args: argparse.Namespace):
    """A free board of --key through the --rpc tracker."""
    from vta.rpc import connect_device
    return connect_device(args.rpc, args.key, cfg, key_file=args.key_file)


def _simulator(cfg, threads: int | None) -> SimDevice:
    """The simulated accelerator, with --threads GEMM threads (default: simulator.core.default_threads())."""
    from simulator.core import Simulator

    return SimDevice(cfg, Simulator(cfg, threads=threads))


def _rtl(cfg):
    """The RTL device for --device rtl (the [hw] extra is imported only here; the first use of a config builds
    its model, about a minute, and says so on stderr)."""
    from hardware import RtlDevice
    return RtlDevice(cfg, progress=lambda text: print(text, file=sys.stderr, flush=True))


def _board(cfg, args: argparse.Namespace):
    """The Pynq device for --device pynq (the [pynq] extra is imported only here)."""
    from vta.board.bitstream import config_options
    from vta.device_pynq import PynqDevice
    return PynqDevice(cfg, bitstream=args.bitstream, board=args.board, cli=config_options(args.config, args.sets))

