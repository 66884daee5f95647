"""``explain``: where each operator of a packed graph runs, why the host runs the ones it runs, and the share of the
network's multiply-adds the accelerator computes (``vta run --explain``, ``vta tune --explain``).

The answer is data (``Explanation``), read from what ``graph_pack`` decided and recorded in the packed graph's
``meta``: its groups and regions, and for each host operator the reason and its kind (``pack.WHY_KINDS``: no
template, a shape or chain the ISA cannot encode, a capability the config's hardware lacks, kept in float by the
quantizer, outside a named region, a layout change at a region's boundary). Nothing is recomputed here, so the
explanation cannot disagree with the plan that was built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from graph_pack.graph import Graph, GraphError
from graph_pack.pack import WHY_KINDS, Group, offload_report


@dataclass(frozen=True)
class OpPlacement:
    """One operator: ``where`` it runs ("accelerator": a group's head or a member fused into it, "host", or "build":
    computed from constants once), its ``region`` (1-based, accelerator only), the group it belongs to, ``why``
    (the reason in words) and, for host operators, ``kind`` (a key of ``pack.WHY_KINDS``)."""

    name: str
    op: str
    where: str
    why: str
    kind: str = ""
    region: int | None = None
    group: str | None = None
    macs: int = 0
    executed_macs: int = 0   # a group head's: what the GEMM core executes (0 elsewhere)


@dataclass
class Explanation:
    """Every operator of a packed graph, the accelerator regions (lists of group heads) and the MAC accounting."""

    ops: list[OpPlacement]
    regions: list[list[str]]
    named_region: bool
    kinds: dict[str, str] = field(default_factory=lambda: dict(WHY_KINDS))

    @property
    def total_macs(self) -> int:
        return sum(p.macs for p in self.ops)

    @property
    def accelerator_macs(self) -> int:
        return sum(p.macs for p in self.ops if p.where == "accelerator")

    @property
    def executed_macs(self) -> int:
        """Multiply-adds the accelerator's GEMM core executes for its groups: the model's, plus the zeros of
        channels padded to whole blocks and of narrow groups run block-diagonally."""
        return sum(p.executed_macs for p in self.ops if p.where == "accelerator")

    @property
    def mac_share(self) -> float:
        """The accelerator's share of the network's multiply-adds (0 when the network has none)."""
        total = self.total_macs
        return self.accelerator_macs / total if total else 0.0

    def host_reasons(self) -> dict[str, int]:
        """How many host operators each kind of reason keeps on the host."""
        counts: dict[str, int] = {}
        for p in self.ops:
            if p.where == "host":
                counts[p.kind] = counts.get(p.kind, 0) + 1
        return counts

    def format(self) -> str:
        """The table --explain prints: one line per operator, then the regions and the MAC share."""
        width = max((len(p.name) for p in self.ops), default=4)
        lines = [f"{'node':{width}}  {'op':20} {'where':16} why"]
        for p in self.ops:
            where = f"accelerator R{p.region}" if p.where == "accelerator" else p.where
            why = f"[{p.kind}] {p.why}" if p.kind else p.why
            lines.append(f"{p.name:{width}}  {p.op:20} {where:16} {why}")
        how = "named by --start/--stop (VTA's graph_pack)" if self.named_region else "found automatically"
        lines.append(f"{len(self.regions)} accelerator region(s), {how}: "
                     + "; ".join(f"R{i} {len(r)} group(s) from {r[0]}" for i, r in enumerate(self.regions, 1)))
        reasons = self.host_reasons()
        if reasons:
            lines.append("host ops by reason: " + ", ".join(f"{k} {n}" for k, n in sorted(reasons.items()))
                         + " (" + "; ".join(f"{k}: {self.kinds[k]}" for k in sorted(reasons)) + ")")
        lines.append(f"MACs on the accelerator: {self.accelerator_macs:,} of {self.total_macs:,} "
                     f"({100 * self.mac_share:.1f} %)")
        if self.executed_macs > self.accelerator_macs:
            lines.append(f"the GEMM core executes {self.executed_macs:,} MACs for them "
                         f"({self.executed_macs / max(self.accelerator_macs, 1):.2f}x: channels padded to whole "
                         f"blocks, groups narrower than a block run block-diagonally; the extra products are zeros)")
        return "\n".join(lines)


def _padding_why(packed: Graph, head: str) -> str:
    """Why a group's head executes more MACs than the model's (its packed node's attributes say)."""
    node = packed[head]
    return "a narrow-group convolution run as block-wide groups, block-diagonal" \
        if any(packed[i].attrs.get("groups", 1) > 1 for i in node.inputs if packed[i].op == "layout_transform") \
        else "channels padded to whole blocks"


def explain(packed: Graph, fallbacks: Mapping[str, str] | None = None) -> Explanation:
    """Where each operator of ``packed`` (graph_pack's result) runs and why, its regions and MAC share.
    ``fallbacks``: a built module's ``mod.fallbacks`` (groups build had to run on the host: their template has no
    valid config for the workload), so the explanation says where they really ran."""
    fallbacks = fallbacks or {}
    if "groups" not in packed.meta:
        raise GraphError("explain takes graph_pack's result (a packed graph); this graph was not packed")
    groups: dict[str, Group] = packed.meta["groups"]
    kinds: dict[str, str] = packed.meta.get("kinds", {})
    macs: dict[str, int] = packed.meta.get("macs", {})
    regions: list[list[str]] = packed.meta.get("regions", [])
    region_of = {head: i for i, heads in enumerate(regions, 1) for head in heads}
    group_of = {m: head for head, g in groups.items() for m in g.members}
    placements = []
    for row in offload_report(packed):
        name, where = row["name"], row["where"]
        head = group_of.get(name)
        if where in ("accelerator", "fused") and head in fallbacks:
            placements.append(OpPlacement(name, row["op"], "host", f"its group {head} fell back to the host at build: "
                                          f"{fallbacks[head].removeprefix('CPU: ')}", "isa", macs=macs.get(name, 0)))
        elif where in ("accelerator", "fused"):
            executed = groups[head].executed_macs if name == head else 0
            why = row["why"]
            if executed > macs.get(name, 0) > 0:
                why += f"; executes {executed / macs[name]:.2f}x its MACs ({_padding_why(packed, name)})"
            placements.append(OpPlacement(name, row["op"], "accelerator", why, "", region_of.get(head), head,
                                          macs.get(name, 0), executed))
        elif where == "build":
            placements.append(OpPlacement(name, row["op"], "build", row["why"]))
        else:
            kind = kinds.get(name, "boundary" if row["op"] == "layout_transform" else "no-template")
            placements.append(OpPlacement(name, row["op"], "host", row["why"], kind, macs=macs.get(name, 0)))
    return Explanation(placements, regions, bool(packed.meta.get("named_region", False)))
