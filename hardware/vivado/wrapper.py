"""The packaged IP's top level, ``vta_ip``: the generated ``vta_core`` with what a block design needs around it.

Why a wrapper and not ``vta_core`` itself: the core's reset is synchronous and active high (``rst``), Xilinx's
reset IP hands out an active-low one (``peripheral_aresetn``), so the wrapper inverts it (the reset polarity glue);
and VTA sets AxPROT and AxCACHE per target in its block design (``C_M_AXI_*_PROT_VALUE``/``CACHE_VALUE`` of its HLS
IPs), so the wrapper drives them (and AxUSER) from parameters the block design sets, ignoring the core's own. The
trace port ``events`` is left open (simulation only). Every other port passes through under its own name.
"""

from __future__ import annotations

from typing import Any

TOP = "vta_ip"
CLOCK, RESET_N = "ap_clk", "ap_rst_n"
# core outputs the wrapper replaces by parameters: port suffix -> parameter
DRIVEN = {"awprot": "PROT", "arprot": "PROT", "awcache": "CACHE", "arcache": "CACHE", "awuser": "USER",
          "aruser": "USER"}
UNUSED = ("events",)


def bus_ports(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The core's ports that become the IP's bus-interface ports (all but clock, reset and ``events``)."""
    return [p for p in manifest["ports"] if p["name"] not in (manifest["clock"]["port"], manifest["reset"]["port"])
            and p["name"] not in UNUSED]


def _decl(p: dict[str, Any]) -> str:
    rng = f"[{p['width'] - 1}:0] " if p["width"] > 1 else ""
    return f"  {'output' if p['dir'] == 'out' else 'input'} wire {rng}{p['name']}"


def verilog(manifest: dict[str, Any], prot: int, cache: int, user: int) -> str:
    """The wrapper's Verilog for a manifest (hardware.generator.manifest), with the parameters' defaults."""
    ports = bus_ports(manifest)
    core = manifest["top"]
    lines = [f"// {TOP}: {core} for a Vivado block design (written by `vta hw vivado`; see hardware/vivado/wrapper.py)",
             f"module {TOP} #(",
             f"  parameter integer C_M_AXI_PROT_VALUE = {prot},",
             f"  parameter integer C_M_AXI_CACHE_VALUE = {cache},",
             f"  parameter integer C_M_AXI_USER_VALUE = {user}",
             ") (",
             f"  input wire {CLOCK},",
             f"  input wire {RESET_N},"]
    lines.append(",\n".join(_decl(p) for p in ports))
    lines.append(");")
    # integers in the IP's interface (Vivado makes them "long" user parameters, set as CONFIG.<name> {2}),
    # narrowed here to the signals' widths
    lines += ["  localparam [2:0] PROT = C_M_AXI_PROT_VALUE[2:0];",
              "  localparam [3:0] CACHE = C_M_AXI_CACHE_VALUE[3:0];",
              "  localparam [0:0] USER = C_M_AXI_USER_VALUE[0:0];"]
    for p in manifest["ports"]:
        if p["name"] in UNUSED:
            lines.append(f"  wire [{p['width'] - 1}:0] {p['name']}_open;")
    conns = [f"    .{manifest['clock']['port']}({CLOCK})", f"    .{manifest['reset']['port']}(~{RESET_N})"]
    for p in manifest["ports"]:
        name = p["name"]
        if name in (manifest["clock"]["port"], manifest["reset"]["port"]):
            continue
        if name in UNUSED:
            conns.append(f"    .{name}({name}_open)")
        elif name.startswith("m_axi_") and name[len("m_axi_"):] in DRIVEN:
            conns.append(f"    .{name}()")
            lines.append(f"  assign {name} = {DRIVEN[name[len('m_axi_'):]]};")
        else:
            conns.append(f"    .{name}({name})")
    lines.append(f"  {core} core (\n" + ",\n".join(conns) + "\n  );")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"
