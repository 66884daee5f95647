"""``graph_pack``: offload to the accelerator every operator it can run, or, as VTA's graph_pack, the region
between a named start and stop op.

Without names the candidates are every operator; with them, every operator after the start node up to the one
before the stop node (start and stop run on the CPU). Among the candidates, each int8 convolution / dense whose int32 result flows through element-wise integer
ops into an int8 cast becomes one accelerator group: the head runs on the GEMM core and the chain
(bias, shifts, clip, relu, a residual add ...) is fused as ALU epilogue ops; an element-wise chain with no
convolution (add / multiply ... -> int8) becomes an ALU-only group. Group members switch to VTA's packed
layouts (activations NCHW{b}n{c}c, weights OIHW{c}o{c}i, per-channel constants NCHW1n{c}c); channels are
zero-padded to whole blocks, at the region entry too, so any channel count offloads. ``layout_transform``
nodes are inserted wherever a packed value meets an unpacked consumer. Everything else runs on the CPU;
``graph.meta["groups"]`` holds the plan and ``graph.meta["notes"]`` says why each node runs where it runs.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graph_pack.graph import Graph, GraphBuilder, GraphError, Node, find_nodes
from graph_pack.macs import graph_macs
from hw_config import HwConfig
from vta.environment import config_of
from vta.runtime import ScheduleError
from vta.templates import TEMPLATES, Template
from vta.templates.base import GraphHead
from vta.templates.conv import block_groups
from vta.templates.epilogue import ALU_OPCODE, GRAPH_OPS, OPERAND_OPS, clip_bounds, missing_alu

Selector = str | Callable[[Node], bool]
HEADS = ("nn.conv2d", "nn.conv2d_transpose", "nn.dense")   # heads whose weights graph_pack packs
ELEMENTWISE_INT = ("add", "subtract", "multiply", "maximum", "minimum", "right_shift", "left_shift", "nn.relu",
                   "clip", "cast", "nn.bias_add")


@dataclass
class Group:
    """An accelerator group: a template's head and the element-wise chain fused after it, with everything build
    needs decided here, once: the template's operator and blocked workload, which graph value feeds each
    template input, the scalar constants build reads, and the tuning task it belongs to."""

    head: str
    kind: str                                   # the template's unit: "conv" (GEMM core) or "alu"
    members: list[str] = field(default_factory=list)   # head first, the int8 cast last
    epilogue: list[tuple] = field(default_factory=list)
    # the fused chain: ("bias", const) ("residual", node) ("add"|"mul"|"max"|"min"|"shr"|"shl", const)
    # ("clip", lo, hi) ("relu",)
    op: str = ""                                # the operator compile_op takes ("conv2d", "add", ...)
    workload: dict = field(default_factory=dict)    # its compile_op workload, shapes in whole blocks
    operands: dict[str, str] = field(default_factory=dict)
    # template input -> value: after graph_pack a tensor names the packed graph's value, a constant the param
    scalars: dict[str, str] = field(default_factory=dict)   # workload argument -> scalar constant
    task: dict = field(default_factory=dict)    # the tuning task workload (key of schedules and records)
    executed_macs: int = 0   # multiply-adds the GEMM core executes (channels padded, narrow groups block-diagonal)

    @property
    def output(self) -> str:
        return self.members[-1]

    @property
    def template(self) -> type[Template]:
        return TEMPLATES[self.op]


# ---- region selection ---------------------------------------------------------------------------------------

def _select(graph: Graph, selector: Selector, idx: int | None, what: str, after: int = -1) -> int:
    """Position (in graph.ops()) of the node chosen by ``selector`` (and ``idx``, VTA's operator index)."""
    if not (isinstance(selector, str) and selector or callable(selector)):
        raise TypeError(f"{what}={selector!r}: an op name, a node name, or a predicate taking a node")
    ops = graph.ops()
    position = {n.name: i for i, n in enumerate(ops)}
    matches = [position[n.name] for n in find_nodes(graph, selector) if position[n.name] > after]
    label = selector if isinstance(selector, str) else getattr(selector, "__name__", "predicate")
    if idx is not None:
        if idx not in matches:
            found = ", ".join(f"{ops[i].name}@{i}" for i in matches) or "none"
            raise GraphError(f"{what}={label!r} with {what}_idx={idx}: operator {idx} is "
                             f"{ops[idx].op if 0 <= idx < len(ops) else 'out of range'}; matches: {found}")
        return idx
    if not matches:
        names = [n.name for n in ops[after + 1:]]
        # (0.75: op names share their "nn." / "qnn." prefixes, so 0.6 offered nn.dense for qnn.quantise)
        near = difflib.get_close_matches(label, [*dict.fromkeys(n.op for n in ops[after + 1:]), *names], n=3,
                                         cutoff=0.75) if isinstance(selector, str) else []
        raise RegionError(what, label, after >= 0, sorted({n.op for n in ops}), near)
    return matches[0]


class RegionError(GraphError):
    """No operator matches a region's start or stop: ``what`` ("start_name" or "stop_name", the argument), ``label``
    (what was given), the graph's op names (``kinds``) and the op or node names closest to ``label`` (``near``). The
    message names the argument; ``say(flag)`` is the same for a command line, which names its flag instead."""

    def __init__(self, what: str, label: str, after_start: bool, kinds: list[str], near: list[str]):
        self.what, self.label, self.after_start, self.kinds, self.near = what, label, after_start, kinds, near
        super().__init__(f"no operator matches {what}={label!r}" + (" after the start" if after_start else "")
                         + self._did_you_mean() + f"; give an op name ({', '.join(kinds)}), a node name, or a predicate")

    def __reduce__(self):   # (rebuilt from its fields where a worker process sends it back)
        return RegionError, (self.what, self.label, self.after_start, self.kinds, self.near)

    def _did_you_mean(self) -> str:
        if not self.near:
            return ""
        quoted = [repr(n) for n in self.near]
        return f" (did you mean {', '.join(quoted[:-1]) + ' or ' if len(quoted) > 1 else ''}{quoted[-1]}?)"

    def say(self, flag: str, default: bool = False) -> str:
        """The message for a command line's ``flag`` (``--start``); ``default``: the flag was not given, and
        ``label`` is the model's default."""
        given = f"{flag} {self.label}" + (" (the default)" if default else "")
        return (f"{given}: no operator {'after the start ' if self.after_start else ''}matches it"
                + self._did_you_mean() + f"; give {flag} an op name ({', '.join(self.kinds)}) or a node name")


def select_region(graph: Graph, start_name: Selector, stop_name: Selector, start_name_idx: int | None = None,
                  stop_name_idx: int | None = None) -> list[str]:
    """Names of the operators strictly between the start and the stop node."""
    ops = graph.ops()
    start = _select(graph, start_name, start_name_idx, "start_name")
    stop = _select(graph, stop_name, stop_name_idx, "stop_name", after=start)
    if stop <= start:
        raise GraphError(f"stop node {ops[stop].name!r} comes before the start node {ops[start].name!r}")
    return [n.name for n in ops[start + 1:stop]]


# ---- what the templates accept ------------------------------------------------------------------------------

def _templates_for(op: str) -> list[type[Template]]:
    """The registered templates that can head a group with graph op ``op``, in registration order."""
    return [t for t in dict.fromkeys(TEMPLATES.values()) if op in t.graph_ops]


def input_kinds(graph: Graph, node: Node) -> list[str]:
    """What each input of ``node`` is to a template: "scalar", "per_channel", "const" or "tensor"."""
    kinds = []
    for name in node.inputs:
        if is_scalar_const(graph, name):
            kinds.append("scalar")
        elif _per_channel(graph, name, node):
            kinds.append("per_channel")
        else:
            kinds.append("const" if graph[name].op == "const" else "tensor")
    return kinds


def graph_head(graph: Graph, node: Node, cfg: HwConfig) -> tuple[type[Template], GraphHead] | str | None:
    """The template that heads a group at ``node`` and how; why none can (a refusal), or None (no template's)."""
    reasons = []
    templates = _templates_for(node.op)
    if not templates:
        return None
    inputs, kinds = [graph[i] for i in node.inputs], input_kinds(graph, node)
    for template in templates:
        head = template.from_graph(node, inputs, kinds, cfg)
        if isinstance(head, GraphHead):
            return template, head
        if head:
            reasons.append(head)
    return "; ".join(reasons) or None


def is_scalar_const(graph: Graph, name: str) -> bool:
    """A constant holding one value (an ALU immediate)."""
    n = graph[name]
    return n.op == "const" and int(np.prod(n.shape)) == 1


def _per_channel(graph: Graph, name: str, like: Node) -> bool:
    """A constant holding one value per channel of ``like`` (shape (C,), (C, 1, 1) or (1, C, 1, 1))."""
    n = graph[name]
    if n.op != "const" or len(like.shape) < 2:
        return False
    c = like.shape[1]
    rank = len(like.shape)
    shapes = {(c,) + (1,) * (rank - 2), (1, c) + (1,) * (rank - 2)}
    return n.shape in shapes


def _same_tensor(graph: Graph, name: str, like: Node) -> bool:
    n = graph[name]
    return n.op != "const" and n.shape == like.shape and n.dtype == "int32"


def _chain_step(graph: Graph, cur: str, user: Node, group: Group) -> tuple | None:
    """The epilogue entry for ``user`` continuing the chain from ``cur`` (None: the chain cannot absorb it)."""
    op, ins = user.op, user.inputs
    if op in ("nn.relu",):
        return ("relu",)
    if op == "clip":
        return clip_bounds(user.attrs["a_min"], user.attrs["a_max"])
    fusable = group.template.fusable_operands
    can_bias = "bias" in fusable and not any(e[0] == "bias" for e in group.epilogue)
    if op == "nn.bias_add" and ins[0] == cur:
        return ("bias", ins[1]) if can_bias else None
    if len(ins) != 2 or op not in GRAPH_OPS:
        return None
    commutative = op in ("add", "multiply", "maximum", "minimum")
    if ins[0] == cur:
        other = ins[1]
    elif commutative and ins[1] == cur:
        other = ins[0]
    else:
        return None
    if is_scalar_const(graph, other):
        return (GRAPH_OPS[op], other)
    if op == "add" and _per_channel(graph, other, user) and can_bias:
        return ("bias", other)
    if op == "right_shift" and ins[0] == cur and _per_channel(graph, other, user) and "channel_shr" in fusable \
            and not any(e[0] == "channel_shr" for e in group.epilogue):   # per-channel scales brought to one
        return ("channel_shr", other)
    if op == "add" and "residual" in fusable and _same_tensor(graph, other, user) \
            and not any(e[0] == "residual" for e in group.epilogue):
        return ("residual", other)
    return None


def _grow(graph: Graph, users: dict, group: Group, region: set[str]) -> str | None:
    """Extend ``group`` along single-consumer element-wise ops until a cast to int8; None when complete,
    else why the chain cannot end in an int8 store."""
    cur = group.head
    while True:
        readers = users[cur]
        if len(readers) != 1 or readers[0] == "<output>":
            return (f"its int32 result {cur!r} is read by {len(readers)} consumer(s) "
                    f"({', '.join(readers)}); VTA stores int8 results only")
        user = graph[readers[0]]
        if user.name not in region:
            return f"its int32 result {cur!r} leaves the region; VTA stores int8 results only"
        if user.op == "cast" and user.dtype == "int8":
            group.members.append(user.name)
            return None
        entry = _chain_step(graph, cur, user, group)
        if entry is None:
            return f"{user.op} {user.name!r} after it cannot be fused (no ALU form) and VTA stores int8 only"
        group.members.append(user.name)
        group.epilogue.append(entry)
        cur = user.name


# Why an operator runs on the host, in the four kinds --explain names (``graph.meta["kinds"]``):
WHY_KINDS = {
    "no-template": "no accelerator template computes this op",
    "isa": "a shape, type or chain the ISA cannot encode (VTA stores int8, templates take what the hardware addresses)",
    "capability": "a capability this config's hardware lacks (its capability set)",
    "float": "kept in float by the quantizer (the accelerator computes integers)",
    "region": "outside the offload region named by start_name / stop_name",
    "boundary": "a quantize / dequantize, layout change or cast at a region's boundary",
}


def refusal_kind(reason: str) -> str:
    """The kind (a key of WHY_KINDS) of a template's or a chain's refusal text."""
    if "capability set" in reason:
        return "capability"
    if "quantize first" in reason:
        return "float"
    return "isa"


def plan_groups(graph: Graph, region: list[str], cfg: HwConfig) -> tuple[dict[str, Group], dict[str, str],
                                                                         dict[str, str]]:
    """Accelerator groups in ``region`` and, for the nodes left to the CPU, why (the text, and its kind: a key of
    ``WHY_KINDS``)."""
    users = graph.consumers()
    inside = set(region)
    groups: dict[str, Group] = {}
    notes: dict[str, str] = {}
    kinds: dict[str, str] = {}
    taken: set[str] = set()
    for name in region:
        node = graph[name]
        if name in taken:
            continue
        found = graph_head(graph, node, cfg)
        if found is None:
            continue
        if isinstance(found, str):
            kinds[name] = refusal_kind(found)
            if kinds[name] == "float" and node.dtype.startswith("float"):
                found = "kept in float by the quantizer (a skipped layer: skip_conv_layers / vta run --skip-conv, " \
                        "skip_dense_layer)"
            notes[name] = f"CPU: {found}"
            continue
        template, head = found
        group = Group(name, template.kind, [name], [], head.op, dict(head.workload), dict(head.operands),
                      dict(head.scalars))
        reason = _grow(graph, users, group, inside) or _decide(group, cfg)
        if reason:
            notes[name], kinds[name] = f"CPU: {reason}", refusal_kind(reason)
            continue
        groups[name] = group
        taken.update(group.members)
    for name in region:
        node = graph[name]
        if name not in taken and name not in notes:
            reason, kinds[name] = _cpu_reason(node)
            notes[name] = f"CPU: {reason}"
    return groups, notes, kinds


def _decide(group: Group, cfg: HwConfig) -> str | None:
    """Complete a grown group: the chain's tensor operands, and the template parsed once (its task key); why the
    template refuses the workload, or None."""
    lacking = missing_alu(cfg, {ALU_OPCODE[e[0]] for e in group.epilogue if e[0] in ALU_OPCODE})
    if lacking:
        return f"its fused chain needs {lacking}"
    for entry in group.epilogue:
        if entry[0] in OPERAND_OPS:
            group.operands[entry[0]] = entry[1]
    operand_ops = tuple((e[0],) for e in group.epilogue if e[0] in OPERAND_OPS)
    placeholders = dict.fromkeys(group.scalars, 0)   # scalar constants are read at build
    try:
        parsed = group.template.parse(group.op, cfg, operand_ops, {**group.workload, **placeholders})
    except (ValueError, ScheduleError) as e:
        return str(e)
    group.task = parsed.task_workload()
    group.executed_macs = parsed.macs if group.kind == "conv" else 0
    return None


def group_workload(graph: Graph, group: Group, cfg: HwConfig) -> dict:
    """The tuning task workload of an accelerator group (decided when graph_pack planned it)."""
    return group.task


def _cpu_reason(node: Node) -> tuple[str, str]:
    """Why ``node`` (no group's head or member) runs on the CPU, and the kind of reason (WHY_KINDS)."""
    if node.op in ("qnn.quantize", "qnn.dequantize"):
        return "float computation (the accelerator computes integers)", "boundary"
    if node.dtype.startswith("float"):
        return "float computation (the accelerator computes integers)", "float"
    if node.op == "cast":
        return "host cast feeding an accelerator operand", "boundary"
    if node.op in ELEMENTWISE_INT:
        return "element-wise op outside any int8-producing chain", "isa"
    return f"no accelerator template for {node.op}", "no-template"


# ---- the rewrite ------------------------------------------------------------------------------------------

class _Packer:
    def __init__(self, graph: Graph, cfg: HwConfig, groups: dict[str, Group]):
        self.g, self.cfg = graph, cfg
        self.b = GraphBuilder(Graph(), {})
        self.packed: dict[str, bool] = {}
        self.memo: dict[tuple, str] = {}
        self.groups = groups
        self.members = {m: grp for grp in groups.values() for m in grp.members}
        self.users = graph.consumers()
        self.act = f"NCHW{cfg.BATCH}n{cfg.BLOCK_IN}c"
        self.act2d = f"NC{cfg.BATCH}n{cfg.BLOCK_IN}c"
        self.wgt = f"OIHW{cfg.BLOCK_OUT}o{cfg.BLOCK_IN}i"
        self.wgt2d = f"OI{cfg.BLOCK_OUT}o{cfg.BLOCK_IN}i"
        self.matrices = f"BNC{cfg.BATCH}n{cfg.BLOCK_IN}c"     # a batch_matmul's data and output
        self.wgt_matrices = f"BOI{cfg.BLOCK_OUT}o{cfg.BLOCK_IN}i"   # its weight-tile operand
        self.batched: set[str] = set()   # packed values in the batch_matmul layout (self.matrices)

    def emit(self, op: str, inputs: list[str], name: str, **attrs) -> str:
        return self.b.op(op, inputs, name=self.b.unique(name), **attrs)

    def copy_leaf(self, node: Node) -> None:
        self.b.graph.nodes[node.name] = Node(node.name, node.op, [], {}, node.type)
        self.packed[node.name] = False

    def packed_value(self, name: str) -> str:
        if self.packed[name] and name not in self.batched:
            return name
        key = ("pack", name)
        if key not in self.memo:
            rank = len(self.g[name].shape)
            layout = self.act if rank == 4 else self.act2d
            self.memo[key] = self.emit("layout_transform", [self.unpacked_value(name)], f"{name}.pack",
                                       src_layout="NCHW" if rank == 4 else "NC", dst_layout=layout)
        return self.memo[key]

    def batched_value(self, name: str, role: str) -> str:
        """``name`` as a batch_matmul reads it: its data (``role`` "data", (..., M, K) in the BNC layout) or its
        weight-tile operand ("kernel", (..., K, N) transposed into the BOI layout); a batch_matmul group's output
        is read as data where it lies."""
        key = ("batched", name, role)
        if key not in self.memo:
            if role == "data" and name in self.batched:
                self.memo[key] = name
            else:
                src, dst = ("BNC", self.matrices) if role == "data" else ("BKN", self.wgt_matrices)
                self.memo[key] = self.emit("layout_transform", [self.unpacked_value(name)], f"{name}.pack_{role}",
                                           src_layout=src, dst_layout=dst)
        return self.memo[key]

    def unpacked_value(self, name: str) -> str:
        if not self.packed[name]:
            return name
        key = ("unpack", name)
        if key not in self.memo and name in self.batched:
            orig = self.g[name]
            self.memo[key] = self.emit("layout_transform", [name], f"{name}.unpack", src_layout=self.matrices,
                                       dst_layout="BNC", batch=orig.shape[-2], channels=orig.shape[-1],
                                       lead=orig.shape[:-2])
        if key not in self.memo:
            orig = self.g[name]
            rank = len(orig.shape)
            self.memo[key] = self.emit("layout_transform", [name], f"{name}.unpack",
                                       src_layout=self.act if rank == 4 else self.act2d,
                                       dst_layout="NCHW" if rank == 4 else "NC", batch=orig.shape[0],
                                       channels=orig.shape[1])
        return self.memo[key]

    def packed_const(self, name: str, like: Node, per_channel: bool = False) -> str:
        """A scalar stays (unless ``per_channel``: a bias of one channel is still a bias); a per-channel
        constant becomes (1, C/c, 1, 1, 1, c) (or (1, C/c, 1, c) for dense)."""
        if is_scalar_const(self.g, name) and not per_channel:
            return name
        key = ("const", name, len(like.shape))
        if key not in self.memo:
            c = like.shape[1]
            rank = len(like.shape)
            flat = self.emit("reshape", [name], f"{name}.nchw", newshape=(1, c) + (1,) * (rank - 2))
            block = self.cfg.BLOCK_OUT
            layout = f"NCHW1n{block}c" if rank == 4 else f"NC1n{block}c"
            self.memo[key] = self.emit("layout_transform", [flat], f"{name}.packed",
                                       src_layout="NCHW" if rank == 4 else "NC", dst_layout=layout)
        return self.memo[key]

    def run(self) -> Graph:
        for node in self.g:
            if node.op in ("input", "const"):
                self.copy_leaf(node)
            elif node.name in self.members:
                self.emit_packed(node)
            elif node.op == "cast" and self.packed[node.inputs[0]]:  # element-wise: the host casts packed data
                self.emit("cast", node.inputs, node.name, **node.attrs)
                self.packed[node.name] = True
                if node.inputs[0] in self.batched:
                    self.batched.add(node.name)
            elif self.cast_after_pack(node):   # pack the narrower input, then cast the packed data
                self.emit("cast", [self.packed_value(node.inputs[0])], node.name, **node.attrs)
                self.packed[node.name] = True
            else:
                ins = [self.unpacked_value(i) for i in node.inputs]
                self.emit(node.op, ins, node.name, **node.attrs)
                self.packed[node.name] = False
        outputs = [self.unpacked_value(o) for o in self.g.outputs]
        graph, _ = self.b.finish(outputs)
        for group in self.groups.values():   # tensor operands: the packed values the members read
            if group.op == "batch_matmul":
                group.operands = {k: self.memo[("batched", v, k)] for k, v in group.operands.items()}
                continue
            group.operands = {k: v if self.g[v].op == "const" else self.packed_name(v) for k, v in group.operands.items()}
        return graph

    def wide_groups(self, node: Node) -> int:
        """The groups of a packed head: its own, or BLOCK-wide ones where its groups are narrower than a channel
        block (the template runs those with a block-diagonal kernel; channels padded to whole blocks)."""
        groups = node.attrs.get("groups", 1)
        if node.op != "nn.conv2d" or groups == 1:
            return groups
        cin_g, cout_g = self.g[node.inputs[1]].shape[1], self.g[node.inputs[1]].shape[0] // groups
        ci = -(-self.g[node.inputs[0]].shape[1] // self.cfg.BLOCK_IN) * self.cfg.BLOCK_IN
        return block_groups("nn.conv2d", self.cfg, ci, ci // cin_g * cout_g, ci // cin_g)

    def cast_after_pack(self, node: Node) -> bool:
        """Whether a cast is an integer widening that only accelerator groups read (a residual input in int32):
        packing its input and casting the packed data gives the same values (padding stays 0) and packs the
        narrower type. Packing its input costs nothing extra where a group reads that input packed as well."""
        if node.op != "cast" or len(self.g[node.name].shape) not in (2, 4):
            return False
        src, dst = np.dtype(self.g[node.inputs[0]].dtype), np.dtype(node.dtype)
        if src.kind not in "iu" or dst.kind not in "iu" or dst.itemsize < src.itemsize:
            return False
        users = self.users[node.name]
        return bool(users) and all(u in self.members for u in users)

    def packed_name(self, name: str) -> str:
        """The packed graph's value for ``name`` (already emitted: nothing is added after ``finish``)."""
        return name if self.packed[name] else self.memo[("pack", name)]

    def emit_packed(self, node: Node) -> None:
        g = self.g
        if self.members[node.name].op == "batch_matmul":
            self.emit_batched(node)
            return
        if node.op in HEADS:
            data, weight = node.inputs
            dense = node.op == "nn.dense"
            src = {"nn.conv2d": "OIHW", "nn.conv2d_transpose": "IOHW", "nn.dense": "OI"}[node.op]
            wl = self.wgt2d if dense else self.wgt
            attrs = {**node.attrs, "data_layout": self.act2d if dense else self.act, "kernel_layout": wl}
            wide = self.wide_groups(node)
            extra = {}
            if wide != node.attrs.get("groups", 1):   # narrow groups: BLOCK-wide groups, block-diagonal kernel
                attrs["groups"], extra = wide, {"groups": node.attrs["groups"]}
            w = self.emit("layout_transform", [weight], f"{weight}.packed", src_layout=src, dst_layout=wl, **extra)
            self.emit(node.op, [self.packed_value(data), w], node.name, **attrs)
        elif node.op == "nn.bias_add":
            self.emit("add", [self.packed_value(node.inputs[0]), self.packed_const(node.inputs[1], node, True)],
                      node.name)
        else:
            ins = []
            for i in node.inputs:
                if g[i].op == "const":
                    ins.append(self.packed_const(i, node))
                else:
                    ins.append(self.packed_value(i))
            self.emit(node.op, ins, node.name, **node.attrs)
        self.packed[node.name] = True

    def emit_batched(self, node: Node) -> None:
        """A member of a batch_matmul group: the head reads its operands in the batch_matmul layouts, the fused
        chain (scalar constants only) follows in the head's output layout."""
        if node.op == "nn.batch_matmul":
            data, other = node.inputs
            ins = [self.batched_value(data, "data"), self.batched_value(other, "kernel")]
            self.emit(node.op, ins, node.name, **{**node.attrs, "data_layout": self.matrices,
                                                  "kernel_layout": self.wgt_matrices})
        else:
            self.emit(node.op, [i if i in self.batched or self.g[i].op == "const" else self.batched_value(i, "data")
                                for i in node.inputs], node.name, **node.attrs)
        self.packed[node.name] = True
        self.batched.add(node.name)


OLD_DEFAULT_REGION = ("nn.max_pool2d", "nn.global_avg_pool2d")   # VTA's ResNet start / stop


def graph_pack(graph: Graph, env, start_name: Selector | None = None, stop_name: Selector | None = None,
               start_name_idx: int | None = None, stop_name_idx: int | None = None) -> Graph:
    """Offload to the accelerator what it can run; returns the packed graph (its constants keep their names, so
    ``build`` takes the same params as the quantized graph).

    Without ``start_name`` / ``stop_name`` every operator is a candidate: each one that a template can run (with
    its fused chain) becomes an accelerator group, and the groups the host must interrupt form separate regions
    (``graph.meta["regions"]``), each entered and left through its own layout change (the quantizer's
    quantize / dequantize where the host op is float). With them, as VTA's graph_pack: only the operators after
    ``start_name`` up to before ``stop_name`` (op name, node name or predicate; ``*_idx`` pin VTA's operator
    index among ``graph.ops()``); when only one is given, the other is VTA's ResNet default
    (``nn.max_pool2d`` / ``nn.global_avg_pool2d``)."""
    cfg = config_of(env)
    if cfg.BLOCK_IN != cfg.BLOCK_OUT:
        raise GraphError(f"graph_pack needs BLOCK_IN == BLOCK_OUT (one channel block for activations and "
                         f"weights), this config has {cfg.BLOCK_IN} and {cfg.BLOCK_OUT}")
    named = not (start_name is None and stop_name is None and start_name_idx is None and stop_name_idx is None)
    if named:
        region = select_region(graph, OLD_DEFAULT_REGION[0] if start_name is None else start_name,
                               OLD_DEFAULT_REGION[1] if stop_name is None else stop_name,
                               start_name_idx, stop_name_idx)
    else:
        region = [n.name for n in graph.ops()]
    groups, notes, kinds = plan_groups(graph, region, cfg)
    packed = _Packer(graph, cfg, groups).run()
    inside = set(region)
    for node in graph.ops():
        if node.name not in inside:
            notes[node.name], kinds[node.name] = "CPU: outside the offload region", "region"
    packed.meta = {"groups": groups, "notes": notes, "kinds": kinds, "region": region, "config": cfg.fingerprint,
                   "regions": connected_regions(graph, groups), "named_region": named, "macs": graph_macs(graph)}
    return packed


def connected_regions(graph: Graph, groups: dict[str, Group]) -> list[list[str]]:
    """The accelerator regions: groups joined where one group's int8 output is read by another directly (it stays
    in device DRAM, packed); a host op between two groups splits them. Each region lists its group heads in
    graph order."""
    owner = {m: head for head, grp in groups.items() for m in grp.members}
    parent = {head: head for head in groups}

    def root(head: str) -> str:
        while parent[head] != head:
            parent[head] = parent[parent[head]]
            head = parent[head]
        return head

    for head, grp in groups.items():
        for member in grp.members:
            for i in graph[member].inputs:
                if i not in owner and graph[i].op == "cast" and graph[i].inputs[0] in owner:   # a widened residual
                    i = graph[i].inputs[0]
                source = owner.get(i)
                if source is not None and source != head and i == groups[source].output:
                    parent[root(head)] = root(source)
    regions: dict[str, list[str]] = {}
    for head in groups:   # groups are in graph order (plan_groups walks the graph)
        regions.setdefault(root(head), []).append(head)
    return list(regions.values())


def offload_report(packed: Graph) -> list[dict[str, str]]:
    """Every operator of a packed graph: where it runs ("accelerator", "fused", "CPU") and why."""
    groups: dict[str, Group] = packed.meta.get("groups", {})
    notes: dict[str, str] = packed.meta.get("notes", {})
    fused = {m: g.head for g in groups.values() for m in g.members[1:]}
    constant = {n.name for n in packed if n.op == "const"}
    rows = []
    for node in packed.ops():
        if all(i in constant for i in node.inputs):
            constant.add(node.name)
            rows.append({"name": node.name, "op": node.op, "where": "build",
                         "why": "computed from constants once, at build (weight / per-channel packing)"})
            continue
        if node.name in groups:
            g = groups[node.name]
            where, why = "accelerator", (f"{'GEMM' if g.kind == 'conv' else 'ALU'} template, "
                                         f"{len(g.members) - 1} op(s) fused")
        elif node.name in fused:
            where, why = "fused", f"into {fused[node.name]}"
        elif node.op == "layout_transform":
            where, why = "CPU", "layout change at the offload boundary"
        else:
            note = notes.get(node.name, "CPU")
            where, _, why = note.partition(": ")
        rows.append({"name": node.name, "op": node.op, "where": where, "why": why})
    return rows


def format_offload_report(packed: Graph) -> str:
    rows = offload_report(packed)
    width = max((len(r["name"]) for r in rows), default=4)
    lines = [f"{'node':{width}}  {'op':20} {'where':12} why"]
    lines += [f"{r['name']:{width}}  {r['op']:20} {r['where']:12} {r['why']}" for r in rows]
    counts = {w: sum(r["where"] == w for r in rows) for w in ("accelerator", "fused", "CPU", "build")}
    lines.append(f"{counts['accelerator']} accelerator group(s), {counts['fused']} fused op(s), "
                 f"{counts['CPU']} CPU op(s), {counts['build']} constant(s) prepared at build")
    return "\n".join(lines)
