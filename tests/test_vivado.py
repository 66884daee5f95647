"""``vta hw vivado``'s scripts, checked without Vivado: each runs through ``tclsh`` with stub Vivado commands
(tests/vivado_stub.tcl) that record what it creates and connects; the record is read back into a design and
checked against the config and against facts this file states on its own (VTA's block design and the board
files), so a wrong table in the generator does not check itself. Planted wiring bugs must fail the check.

No Vivado runs here: whether Vivado accepts every property, meets timing or fits is not tested.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from extras import need, needs

from hw_config import load_config
from hw_config.config import MMIO_BLOCKS

need("amaranth")   # the manifest's ports come from the core's signature
pytestmark = needs("tclsh")
STUB = Path(__file__).with_name("vivado_stub.tcl")

from hardware.generator import manifest as make_manifest
from hardware.vivado import choose_board, write_scripts
from hardware.vivado.boards import BOARDS

# What the design must be, stated here from the sources (not read from the generator's tables):
# VTA's hardware/xilinx/scripts/vivado.tcl (apache/tvm-vta d4a15f6): the PS ports per family
PS = {"zynq-7000": {"ip": "xilinx.com:ip:processing_system7", "dram": "S_AXI_ACP", "regs": "M_AXI_GP0",
                    "clocks": {"M_AXI_GP0_ACLK", "S_AXI_ACP_ACLK"}, "fclk": "FCLK_CLK0", "resetn": "FCLK_RESET0_N",
                    "ddr": "S_AXI_ACP/ACP_DDR_LOWOCM", "prot": 0, "external": {"DDR", "FIXED_IO"}},
      "zynq-ultrascale+": {"ip": "xilinx.com:ip:zynq_ultra_ps_e", "dram": "S_AXI_HPC0_FPD", "regs": "M_AXI_HPM0_FPD",
                           "clocks": {"maxihpm0_fpd_aclk", "saxihpc0_fpd_aclk"}, "fclk": "pl_clk0",
                           "resetn": "pl_resetn0", "ddr": "SAXIGP0/HPC0_DDR_LOW", "prot": 2, "external": set()}}
# the board files (Xilinx/XilinxBoardStore: TUL/pynq-z2/A.0, Avnet/ultra96v2/1.2, Avnet/ultra96v1/1.2,
# Xilinx/zcu104/1.1; the Pynq-Z1's part from Xilinx/PYNQ boards/Pynq-Z1/base/base.tcl): part and board part id
BOARD_FILES = {"pynq-z1": ("xc7z020clg400-1", "www.digilentinc.com:pynq-z1:part0:1.0"),
               "pynq-z2": ("xc7z020clg400-1", "tul.com.tw:pynq-z2:part0:1.0"),
               "ultra96": ("xczu3eg-sbva484-1-i", "avnet.com:ultra96v2:part0:1.2"),
               "ultra96v1": ("xczu3eg-sbva484-1-e", "avnet.com:ultra96v1:part0:1.2"),
               "zcu104": ("xczu7ev-ffvc1156-2-e", "xilinx.com:zcu104:part0:1.1")}
FAMILY_OF_BOARD = {"pynq-z1": "zynq-7000", "pynq-z2": "zynq-7000", "ultra96": "zynq-ultrascale+",
                   "ultra96v1": "zynq-ultrascale+", "zcu104": "zynq-ultrascale+"}
INTERCONNECTS = ("xilinx.com:ip:smartconnect", "xilinx.com:ip:axi_interconnect")

CASES = {  # name -> (config, overrides, board)
    "pynq": ("pynq", {}, None),
    "pynq-z2": ("pynq", {}, "pynq-z2"),
    "ultra96": ("ultra96", {}, None),
    "zcu104": ("zcu104", {}, None),
    "pynq-bus32": ("pynq", {"LOG_BUS_WIDTH": 5}, None),           # a DSE-style variant
    "zcu104-dse": ("zcu104", {"LOG_BLOCK": 5, "LOG_WGT_BUFF_SIZE": 19, "CLOCK_MHZ": 250}, None),
}


class DesignError(AssertionError):
    """The recorded design breaks a rule; the message says which."""


@dataclass
class Design:
    """What the stub recorded, as the objects it describes."""

    part: str = ""
    board_part: str = ""
    busifs: dict[str, dict] = field(default_factory=lambda: defaultdict(lambda: {"ports": {}, "params": {}}))
    registers: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    block_range: dict[str, int] = field(default_factory=dict)
    cells: dict[str, str] = field(default_factory=dict)
    config: dict[str, dict[str, str]] = field(default_factory=lambda: defaultdict(dict))
    intf_nets: list[list[str]] = field(default_factory=list)
    nets: list[list[str]] = field(default_factory=list)
    ports: dict[str, str] = field(default_factory=dict)
    addresses: list[tuple[str, int, int, str]] = field(default_factory=list)
    runs: list[tuple[str, str]] = field(default_factory=list)
    ip_vlnv: str = ""
    done: bool = False


def read_record(path: Path) -> Design:
    d = Design()
    pending: dict[str, str] = {}         # handle -> last name set (for registers' offsets)
    vendor_lib = ("", "")
    for line in path.read_text().splitlines():
        cmd, *a = line.split("\t")
        if cmd == "create_project" and a[0] == "vta_project":
            d.part = a[1]
        elif cmd == "ipx::package_project":
            vendor_lib = (a[0], a[1])
        elif cmd == "ipx::add_port_map":
            d.busifs[a[0].split(":", 1)[1]]["ports"][a[1]] = None
        elif cmd == "ipx::add_register":
            d.registers[a[0].split(":", 1)[1]][a[1]] = -1
        elif cmd == "set_property":
            key, value, *objs = a
            obj = objs[0] if objs else ""
            kind, _, rest = obj.partition(":")
            if obj == "project:current" and key == "board_part":
                d.board_part = value
            elif kind == "busif":
                d.busifs[rest][key] = value
            elif kind == "portmap":
                busif, logical = rest.rsplit(":", 1)
                d.busifs[busif.split(":", 1)[1]]["ports"][logical] = value
            elif kind == "param":
                busif, name = rest.rsplit(":", 1)
                d.busifs[busif.split(":", 1)[1]]["params"][name] = value
            elif kind == "reg" and key == "address_offset":
                ab, name = rest.rsplit(":", 1)
                d.registers[ab.split(":", 1)[1]][name] = int(value, 16)
            elif kind == "ab" and key == "range":
                d.block_range[rest] = int(value)
            elif kind == "core" and key in ("name", "version"):
                pending[key] = value
            elif kind == "cell":
                d.config[rest][key] = value
        elif cmd == "create_bd_cell":
            d.cells[a[0]] = a[1]
        elif cmd == "create_bd_intf_port":
            d.ports[a[0]] = a[1]
        elif cmd == "connect_bd_intf_net":
            d.intf_nets.append(a)
        elif cmd == "connect_bd_net":
            d.nets.append(a)
        elif cmd == "assign_bd_address":
            d.addresses.append((a[0], int(a[1], 16), int(a[2], 16), a[3]))
        elif cmd == "launch_runs":
            d.runs.append((a[0], a[1]))
        elif cmd == "done":
            d.done = True
    d.ip_vlnv = f"{vendor_lib[0]}:{vendor_lib[1]}:{pending.get('name')}:{pending.get('version')}"
    return d


def run_stub(script: Path, board_parts: list[str] = ()) -> Design:
    log = script.parent / (script.stem + ".record")
    env = {"VTA_STUB_LOG": str(log), "VTA_STUB_BOARD_PARTS": " ".join(board_parts), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([need("tclsh"), str(STUB), str(script)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    if proc.returncode:
        raise DesignError(f"tclsh {script.name} failed: {proc.stderr.strip()[-2000:]}")
    design = read_record(log)
    if not design.done:
        raise DesignError(f"{script.name} stopped before its end")
    return design


def _cell(endpoint: str) -> str:
    return endpoint.split(":", 1)[1].split("/")[0]


def _pin(endpoint: str) -> str:
    return endpoint.split(":", 1)[1]


def check_ip(d: Design, manifest: dict, wrapper_text: str) -> None:
    """The packaged IP: every port of the core in exactly one interface, the right modes, the register map."""
    core_ports = {p["name"] for p in manifest["ports"]}
    for prefix, entry in manifest["axi"].items():
        bi = d.busifs.get(prefix)
        if bi is None:
            raise DesignError(f"IP: no bus interface {prefix}")
        if bi.get("interface_mode") != entry["mode"]:
            raise DesignError(f"IP: {prefix} is {bi.get('interface_mode')}, not {entry['mode']}")
        if bi.get("abstraction_type_vlnv") != "xilinx.com:interface:aximm_rtl:1.0":
            raise DesignError(f"IP: {prefix} is not declared as AXI memory-mapped")
        want = {p[len(prefix) + 1:].upper(): p for p in entry["ports"]}
        if bi["ports"] != want:
            missing = set(want.items()) ^ set(bi["ports"].items())
            raise DesignError(f"IP: {prefix}'s port map differs from the core's ports: {sorted(missing)}")
    mapped = [phys for bi in d.busifs.values() for phys in bi["ports"].values()]
    if len(mapped) != len(set(mapped)):
        raise DesignError("IP: a port is mapped into two interfaces")
    expected = core_ports - {"clk", "rst", "events"} | {"ap_clk", "ap_rst_n"}
    if set(mapped) != expected:
        raise DesignError(f"IP: ports outside every interface or unknown: {sorted(set(mapped) ^ expected)}")
    if d.busifs["ap_rst_n"]["params"].get("POLARITY") != "ACTIVE_LOW":
        raise DesignError("IP: the reset interface does not say ACTIVE_LOW")
    assoc = set(d.busifs["ap_clk"]["params"].get("ASSOCIATED_BUSIF", "").split(":"))
    if assoc != set(manifest["axi"]):
        raise DesignError(f"IP: the clock is associated with {sorted(assoc)}, not every AXI interface")
    for reg in manifest["registers"]:
        got = d.registers.get(f"mm:s_axi_{reg['block']}:reg", {}).get(reg["name"])
        if got != reg["offset"]:
            raise DesignError(f"IP: register {reg['block']}.{reg['name']} at {got}, VTA's offset is {reg['offset']:#x}")
    # the wrapper instantiates the core with every port connected (events left open on purpose)
    inst = re.search(rf"{manifest['top']} core \((.*?)\);", wrapper_text, re.DOTALL)
    connected = set(re.findall(r"\.(\w+)\(", inst.group(1))) if inst else set()
    if connected != core_ports:
        raise DesignError(f"wrapper: core ports not in the instance: {sorted(core_ports ^ connected)}")


def check_block_design(d: Design, cfg, board: str) -> None:
    """The system: the PS ports VTA uses, the interconnects, clock, resets, addresses, part; nothing dangling."""
    fam = FAMILY_OF_BOARD[board]
    ps_facts = PS[fam]
    part, _board_part = BOARD_FILES[board]
    if d.part != part:
        raise DesignError(f"part {d.part}, the {board} board file says {part}")
    ps = [c for c, v in d.cells.items() if v.rsplit(":", 1)[0] == ps_facts["ip"]]
    if len(ps) != 1:
        raise DesignError(f"{len(ps)} cells of {ps_facts['ip']} (the {fam} processing system); want one")
    ps = ps[0]
    ours = [c for c, v in d.cells.items() if v == d.ip_vlnv]
    if len(ours) != 1:
        raise DesignError(f"{len(ours)} instances of the packaged IP {d.ip_vlnv}; want one")
    vta = ours[0]

    # no endpoint twice, no net of one endpoint, every endpoint on a cell or port that exists
    seen: set[str] = set()
    for net in d.intf_nets + d.nets:
        if len(net) < 2:
            raise DesignError(f"dangling net: {net}")
        for e in net:
            if e in seen:
                raise DesignError(f"{_pin(e)} is connected twice")
            seen.add(e)
            if e.startswith("port:"):
                if _pin(e) not in d.ports:
                    raise DesignError(f"net to port {_pin(e)}, never created")
            elif _cell(e) not in d.cells:
                raise DesignError(f"net to {_pin(e)}: no such cell")
    for name in d.cells:
        if not any(_cell(e) == name for net in d.intf_nets + d.nets for e in net if not e.startswith("port:")):
            raise DesignError(f"cell {name} is connected to nothing")
    for port in d.ports:
        if f"port:{port}" not in seen:
            raise DesignError(f"port {port} is connected to nothing")
    if set(d.ports) != ps_facts["external"]:
        raise DesignError(f"external ports {sorted(d.ports)}; the {fam} PS needs {sorted(ps_facts['external'])}")
    for p in d.ports:
        if f"intf:{ps}/{p}" not in seen:
            raise DesignError(f"{ps}/{p} is not made external")

    peer = {}
    for a, b in d.intf_nets:
        peer[_pin(a)], peer[_pin(b)] = _pin(b), _pin(a)

    def through_interconnect(start: str) -> tuple[str, list[str]]:
        """The interconnect cell behind ``start`` and the pins on its far side."""
        other = peer.get(start)
        if other is None:
            raise DesignError(f"{start} is not connected")
        cell = other.split("/")[0]
        if d.cells.get(cell, "").rsplit(":", 1)[0] not in INTERCONNECTS:
            raise DesignError(f"{start} goes to {other}, not through an AXI interconnect")
        side = "M" if other.split("/")[1].startswith("S") else "S"
        far = [peer[p] for p in peer if p.startswith(cell + "/") and p.split("/")[1].startswith(side)]
        n = int(d.config[cell].get(f"CONFIG.NUM_{side}I", 1))
        used = sorted(p.split("/")[1] for p in peer if p.startswith(cell + "/") and p.split("/")[1].startswith(side))
        if used != [f"{side}{i:02d}_AXI" for i in range(n)]:
            raise DesignError(f"{cell}: NUM_{side}I {n}, connected {used}")
        return cell, far

    _, far = through_interconnect(f"{vta}/m_axi")
    if far != [f"{ps}/{ps_facts['dram']}"]:
        raise DesignError(f"{vta}/m_axi reaches {far}, not {ps}/{ps_facts['dram']} (VTA's DRAM port on a {fam})")
    _reg_ic, far = through_interconnect(f"{ps}/{ps_facts['regs']}")
    if sorted(far) != sorted(f"{vta}/s_axi_{b}" for b in MMIO_BLOCKS):
        raise DesignError(f"{ps}/{ps_facts['regs']} reaches {sorted(far)}, not the four register blocks")

    # clock: the wizard at CLOCK_MHZ from the PS's PL clock drives every clocked pin
    def net_of(pin: str) -> list[str]:
        for net in d.nets:
            if f"pin:{pin}" in net:
                return [_pin(e) for e in net]
        raise DesignError(f"{pin} is not connected")

    clk = net_of(f"{vta}/ap_clk")
    wiz = [p.split("/")[0] for p in clk if p.endswith("/clk_out1")]
    if len(wiz) != 1 or not d.cells[wiz[0]].startswith("xilinx.com:ip:clk_wiz"):
        raise DesignError(f"{vta}/ap_clk is not driven by a clocking wizard: {clk}")
    mhz = float(d.config[wiz[0]].get("CONFIG.CLKOUT1_REQUESTED_OUT_FREQ", "nan"))
    if mhz != cfg.CLOCK_MHZ:
        raise DesignError(f"clock {mhz} MHz, the config's CLOCK_MHZ is {cfg.CLOCK_MHZ}")
    if f"{ps}/{ps_facts['fclk']}" not in net_of(f"{wiz[0]}/clk_in1"):
        raise DesignError(f"the clocking wizard's input is not {ps}/{ps_facts['fclk']}")
    need = {f"{ps}/{c}" for c in ps_facts["clocks"]} | {f"{c}/aclk" for c, v in d.cells.items()
                                                         if v.rsplit(":", 1)[0] in INTERCONNECTS}
    need |= {f"{c}/slowest_sync_clk" for c, v in d.cells.items() if "proc_sys_reset" in v}
    if need - set(clk):
        raise DesignError(f"not on the accelerator's clock: {sorted(need - set(clk))}")
    # resets: the accelerator's active-low reset from the reset block; every interconnect's too
    rst = net_of(f"{vta}/ap_rst_n")
    if not any(p.endswith("/peripheral_aresetn") for p in rst):
        raise DesignError(f"{vta}/ap_rst_n is not a reset block's peripheral_aresetn: {rst}")
    for c, v in d.cells.items():
        if v.rsplit(":", 1)[0] in INTERCONNECTS and not any(p.endswith("aresetn") and p.split("/")[0] != c
                                                            for p in net_of(f"{c}/aresetn")):
            raise DesignError(f"{c}/aresetn has no reset source")
    if f"{ps}/{ps_facts['resetn']}" not in [p for net in d.nets for p in map(_pin, net)]:
        raise DesignError(f"the PS's reset {ps_facts['resetn']} drives nothing")

    # addresses: the four blocks at hw_config's, the DDR window the config's DMA window
    regs = {seg: (space, off, rng) for space, off, rng, seg in d.addresses}
    for block in MMIO_BLOCKS:
        got = regs.get(f"seg:{vta}/s_axi_{block}/reg")
        want = (f"space:{ps}/Data", cfg.mmio_address(block), cfg.MMIO_RANGE)
        if got != want:
            raise DesignError(f"{block} registers at {got}, hw_config says {want}")
    ddr = regs.get(f"seg:{ps}/{ps_facts['ddr']}")
    if ddr != (f"space:{vta}/m_axi", 0, cfg.dma_window):
        raise DesignError(f"DDR for the accelerator: {ddr}, want 0 .. {cfg.dma_window:#x} of {ps_facts['ddr']}")
    # AxPROT / AxCACHE as VTA's pkg_config.py gives them (axi_prot_bits 000 / 010, axi_cache_bits 1111)
    conf = d.config[vta]
    if (int(conf.get("CONFIG.C_M_AXI_PROT_VALUE", -1)), int(conf.get("CONFIG.C_M_AXI_CACHE_VALUE", -1))) \
            != (ps_facts["prot"], 0b1111):
        raise DesignError(f"AxPROT/AxCACHE {conf}, VTA uses {ps_facts['prot']:03b}/1111 on a {fam}")
    if fam == "zynq-ultrascale+" and int(d.config[ps].get("CONFIG.PSU__SAXIGP0__DATA_WIDTH", 0)) != cfg.BUS_WIDTH:
        raise DesignError(f"HPC0 is {d.config[ps].get('CONFIG.PSU__SAXIGP0__DATA_WIDTH')} bits, the bus "
                          f"{cfg.BUS_WIDTH}")


def generate(tmp_path: Path, case: str):
    name, sets, board = CASES[case]
    cfg = load_config(name, **sets)
    b, part = choose_board(cfg, board, None)
    manifest = make_manifest(cfg)
    write_scripts(cfg, manifest, tmp_path, b, part)
    return cfg, b, manifest


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("installed", [False, True], ids=["no-board-files", "board-files"])
def test_scripts_describe_the_design(tmp_path, case, installed):
    cfg, board, manifest = generate(tmp_path, case)
    parts = [BOARD_FILES[board.name][1]] if installed else []
    d = run_stub(tmp_path / "build.tcl", parts)
    check_ip(d, manifest, (tmp_path / "rtl" / "vta_ip.v").read_text())
    check_block_design(d, cfg, board.name)
    wrapper_text = (tmp_path / "rtl" / "vta_ip.v").read_text()
    for key in d.config["vta_0"]:    # every property the block design sets on our IP is a parameter of it
        assert re.search(rf"parameter integer {key.removeprefix('CONFIG.')} =", wrapper_text), key
    assert d.board_part == (BOARD_FILES[board.name][1] if installed else "")
    assert d.runs == [("synth_1", ""), ("impl_1", "write_bitstream")]
    dest = tmp_path / "bitstreams" / cfg.TARGET / cfg.HW_VER.replace(".", "_")
    assert sorted(p.name for p in dest.iterdir()) == sorted(f"{cfg.bitstream}{s}" for s in (".bit", ".hwh", ".json"))
    assert json.loads((dest / f"{cfg.bitstream}.json").read_text())["config"] == cfg.to_dict()


# Planted bugs: each edit of a generated script is a generator that wired something wrong; the check must say so.
MUTANTS = {
    "registers swapped": (r"(M01_AXI\] \[get_bd_intf_pins vta_0/s_axi_)load", r"\1compute", "s_axi_compute"),
    "DRAM to the wrong PS port": (r"(get_bd_intf_pins ps/)S_AXI_ACP\]", r"\1S_AXI_HP0]", "not ps/S_AXI_ACP"),
    "reset left open": (r"connect_bd_net \[get_bd_pins rst/peripheral_aresetn\] \[get_bd_pins vta_0/ap_rst_n\]\n",
                        "", "ap_rst_n is not connected"),
    "clock frequency": (r"CLKOUT1_REQUESTED_OUT_FREQ \{100\}", "CLKOUT1_REQUESTED_OUT_FREQ {142}", "clock 142"),
    "address off": (r"-offset 0x43C01000", "-offset 0x43C02000", "load registers"),
    "ACP clock missing": (r" \[get_bd_pins ps/S_AXI_ACP_ACLK\]", "", "S_AXI_ACP_ACLK"),
    "register port dropped": (r"connect_bd_intf_net \[get_bd_intf_pins regs_smc/M03_AXI\][^\n]*\n", "", "NUM_MI 4, connected"),
    "AxPROT": (r"C_M_AXI_PROT_VALUE \{0\}", "C_M_AXI_PROT_VALUE {2}", "AxPROT"),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_planted_wiring_bug_fails_the_check(tmp_path, mutant):
    cfg, board, manifest = generate(tmp_path, "pynq")
    pattern, repl, message = MUTANTS[mutant]
    path = tmp_path / "block_design.tcl"
    text, n = re.subn(pattern, repl, path.read_text())
    assert n == 1, f"the mutant {mutant!r} no longer applies to the generated script"
    path.write_text(text)
    d = run_stub(tmp_path / "build.tcl")
    check_ip(d, manifest, (tmp_path / "rtl" / "vta_ip.v").read_text())
    with pytest.raises(DesignError, match=re.escape(message)):
        check_block_design(d, cfg, board.name)


@pytest.mark.parametrize("change, message", [
    ({"slave": "S_AXI_HP0", "slave_clk": "S_AXI_HP0_ACLK"}, "not ps/S_AXI_ACP"),
    ({"axprot": 0b010}, "AxPROT"),
    ({"ddr_range": 2 << 30}, "DDR for the accelerator"),
])
def test_a_generator_bug_fails_the_check(tmp_path, monkeypatch, change, message):
    """The generator's own table broken (the Pynq's DRAM port, AxPROT, DDR window) fails the check, which
    states those facts on its own."""
    board = BOARDS["pynq-z1"]
    monkeypatch.setitem(BOARDS, "pynq-z1", replace(board, family=replace(board.family, **change)))
    cfg, board, _manifest = generate(tmp_path, "pynq")
    d = run_stub(tmp_path / "build.tcl")
    with pytest.raises(DesignError, match=re.escape(message)):
        check_block_design(d, cfg, board.name)


def test_ip_port_map_bug_fails_the_check(tmp_path):
    _cfg, _board, manifest = generate(tmp_path, "zcu104")
    path = tmp_path / "package_ip.tcl"
    path.write_text(path.read_text().replace(" WREADY m_axi_wready", "", 1))
    d = run_stub(tmp_path / "build.tcl")
    with pytest.raises(DesignError, match="m_axi's port map"):
        check_ip(d, manifest, (tmp_path / "rtl" / "vta_ip.v").read_text())


@pytest.mark.parametrize("config, sets, board, part, message", [
    ("pynq", {}, "zcu104", None, "runs configs of TARGET zcu104"),
    ("ultra96", {}, None, "xc7z020clg400-1", "not a zynq-ultrascale+ part"),
    ("sim", {}, None, None, "has no Zynq board"),
    ("pynq", {"MMIO_BASE": "0xA0000000"}, None, None, "outside M_AXI_GP0's window"),
    ("pynq", {}, None, "xcvu9p-flga2104-2-e", "not a Zynq part"),
])
def test_boards_that_cannot_run_the_config_are_refused(config, sets, board, part, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        choose_board(load_config(config, **sets), board, part)


def test_the_command_writes_the_project(tmp_path, monkeypatch):
    """``vta hw vivado`` end to end (generates the pynq Verilog once: cached in VTA_RTL_CACHE)."""
    from vta.cli import main
    out = tmp_path / "proj"
    assert main(["hw", "vivado", "--config", "pynq", "--set", "LOG_BUS_WIDTH=5", "--out", str(out)]) == 0
    for name in ("rtl/vta_core.v", "rtl/vta_ip.v", "rtl/manifest.json", "package_ip.tcl", "block_design.tcl",
                 "build.tcl", "vta_config.json", "README.md"):
        assert (out / name).is_file(), name
    text = (out / "rtl" / "vta_core.v").read_text()
    assert "module vta_core" in text
    assert "vivado -mode batch -source build.tcl" in (out / "README.md").read_text()
    assert "No Vivado ran" in (out / "README.md").read_text()
    # the wrapper is Verilog that elaborates around the generated core, ports and widths matching (Verilator lint)
    need("verilator")
    from hardware.toolchain import verilator_command
    cmd, env = verilator_command()
    lint = subprocess.run(cmd + ["--lint-only", "-Wno-fatal", "-Wno-style", "-Werror-PINMISSING",
                                 "--top-module", "vta_ip",
                                 str(out / "rtl" / "vta_ip.v"), str(out / "rtl" / "vta_core.v")],
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert lint.returncode == 0, lint.stderr[-3000:]
    ours = [line for line in lint.stderr.splitlines() if "vta_ip.v" in line and line.startswith("%")]
    assert not ours, "\n".join(ours)     # the core's own warnings (Amaranth's Verilog) are not the wrapper's
    d = run_stub(out / "build.tcl")
    cfg = load_config("pynq", LOG_BUS_WIDTH=5)
    check_ip(d, json.loads((out / "rtl" / "manifest.json").read_text()), (out / "rtl" / "vta_ip.v").read_text())
    check_block_design(d, cfg, "pynq-z1")


# ------------------------------------------------------------------------------------------------------------
# item 3: a user-built bitstream carries its config (<bitstream>.json beside it); the board side refuses another


def built_bitstream(tmp_path: Path, case: str) -> Path:
    """The flow's output for ``case`` after the stub build, its .bit made a well-formed one (the stub's is text)."""
    from vta.board.bitstream import placeholder_bytes
    cfg, _, _ = generate(tmp_path, case)
    run_stub(tmp_path / "build.tcl")
    bit = tmp_path / "bitstreams" / cfg.TARGET / cfg.HW_VER.replace(".", "_") / f"{cfg.bitstream}.bit"
    bit.write_bytes(placeholder_bytes(cfg))
    return bit


def test_a_bitstream_of_another_config_is_refused_naming_both(tmp_path, capsys):
    from vta.board.bitstream import BitstreamError, find_bitstream
    from vta.cli import main
    from vta.device_pynq import PynqDevice
    bit = built_bitstream(tmp_path, "pynq-bus32")        # built for a 32-bit bus, named like the Pynq's bitstream
    built, wanted = load_config("pynq", LOG_BUS_WIDTH=5), load_config("pynq")
    assert bit.name == f"{wanted.bitstream}.bit"         # so the name alone cannot tell them apart
    assert find_bitstream(built, bit) == bit
    for attempt in (lambda: find_bitstream(wanted, bit), lambda: PynqDevice(wanted, bitstream=bit),
                    lambda: find_bitstream(wanted, cache_dir=tmp_path / "bitstreams")):
        with pytest.raises(BitstreamError) as info:
            attempt()
        text = str(info.value)
        assert built.name in text and wanted.name in text and "LOG_BUS_WIDTH 5 vs 6" in text, text
    assert main(["board", "bitstream", "--config", "pynq", "--bitstream", str(bit)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and built.name in err[0] and "--set LOG_BUS_WIDTH=5" in err[0], err


def test_keys_that_change_no_bitstream_do_not_refuse_it(tmp_path):
    from vta.board.bitstream import find_bitstream
    bit = built_bitstream(tmp_path, "pynq")
    calibrated = load_config("pynq", LAUNCH_US=50.0, DESCRIPTION="my board, recalibrated", BOARD_MEM_MB=256)
    assert find_bitstream(calibrated, bit) == bit
    (bit.with_suffix(".json")).write_text("{not json")
    from vta.board.bitstream import BitstreamError
    with pytest.raises(BitstreamError, match="not the config JSON"):
        find_bitstream(calibrated, bit)


@pytest.mark.parametrize("argv, message", [
    (["--config", "pynq", "--board", "zcu104"], "--board zcu104 runs configs of TARGET zcu104, not 'pynq'"),
    (["--config", "sim"], "TARGET 'sim' has no Zynq board; give --board"),
    (["--config", "zcu104", "--part", "xc7z020clg400-1"], "--part xc7z020clg400-1 is not a zynq-ultrascale+ part"),
    (["--config", "pynq", "--set", "MMIO_BASE=0xA0000000"], "outside M_AXI_GP0's window"),
    (["--out", "{tmp}/no/such"], "--out {tmp}/no/such: the directory {tmp}/no does not exist"),
    (["--out", "{tmp}/clash"], "{tmp}/clash/rtl is a file, where a directory"),
])
def test_the_command_refuses_before_any_work(argv, message, tmp_path, capsys):
    """One line, exit 2, nothing generated or written."""
    from vta.cli import main
    (tmp_path / "clash").mkdir()
    (tmp_path / "clash" / "rtl").write_text("")
    args = [a.format(tmp=tmp_path) for a in argv]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    before = sorted(tmp_path.rglob("*"))
    assert main(["hw", "vivado", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vta: error: ") and message.format(tmp=tmp_path) in err and err.count("\n") == 1, err
    assert sorted(tmp_path.rglob("*")) == before
