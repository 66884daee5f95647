"""``vta board``: serve a simulated PYNQ board, ask a board for its status, bitstreams, replay on a board.

Imported by ``vta.cli`` (which registers every ``@command``); pynq and grpc are imported only inside the
commands that need them, so the rest of the command line works without the ``[pynq]`` extra.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from simulator.image import load_image, save_result
from simulator.stats import format_stats
from vta.board.bitstream import (
    availability,
    bitstream_path,
    cache_root,
    config_options,
    find_bitstream,
    make_placeholder,
    nearest_config_options,
    read_bit_header,
)
from vta.cli import (
    EXPECT_ARG,
    GROUP_HELP,
    _key_value,
    _load,
    arg,
    command,
    float_in,
    int_in,
    load_expected,
    report_expected,
)

GROUP_HELP["board"] = "FPGA boards: serve a simulated PYNQ board, bitstreams, run images on a board"

MiB = 1 << 20


# seconds and scales: any positive finite number
_positive_float = float_in(0.0, sys.float_info.max, "the allowed range", "(0, inf): positive and finite", above=True)


CONFIG_ARGS = [
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
]


@command("board", "serve", "serve a simulated PYNQ board over pynq's remote protocol", args=[
    arg("--simulated", action="store_true",
        help="back the board with the C simulator (required: a real board runs PYNQ's own remote server)"),
    *CONFIG_ARGS,
    arg("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; anything else exposes the "
                                             "board, unauthenticated, to the network)"),
    arg("--port", type=int_in(0, 65535), default=7967,
        help="port (default 7967, the one pynq's PYNQ_REMOTE_DEVICES mode uses; 0 picks a free one)"),
    arg("--time-scale", type=_positive_float, default=1.0, metavar="X",
        help="board time = simulated cycles / CLOCK_MHZ * X (default 1: runs take as long as the modelled "
             "hardware would)"),
    arg("--mem-mb", type=int_in(1, 1 << 20), default=None, metavar="MB",
        help="total bytes of buffers the board hands out (default: the config's BOARD_MEM_MB, 512 on pynq)"),
    arg("--max-buffers", type=int_in(1, 1 << 24), default=65536, metavar="N", help="most buffers at once "
                                                                                  "(default 65536)"),
    arg("--max-message-mb", type=int_in(1, 1024), default=4, metavar="MB",
        help="largest gRPC message in either direction (default 4; pynq sends 2 MiB chunks)"),
    arg("--max-file-mb", type=int_in(1, 4096), default=64, metavar="MB",
        help="largest uploaded bitstream/firmware file (default 64; the board keeps no firmware bytes, only whether "
             "each client's files are bitstreams)"),
    arg("--lease-s", type=_positive_float, default=600.0, metavar="S",
        help="when an allocation does not fit, buffers of clients idle for longer than S seconds are reclaimed "
             "first (default 600)"),
    arg("--max-cycles", type=int_in(1, (1 << 64) - 1), default=None, metavar="N",
        help="a program running past N simulated cycles hangs the board (default: the simulator's)"),
    arg("--max-work", type=int_in(1, (1 << 64) - 1), default=None, metavar="N",
        help="a program doing more than N units of simulator work hangs the board (default: the simulator's)"),
    arg("--workers", type=int_in(1, 256), default=16, metavar="N", help="RPC worker threads (default 16)"),
    arg("--max-concurrent-rpcs", type=int_in(1, 65536), default=64, metavar="N",
        help="RPCs in flight before new ones are refused (default 64)"),
    arg("--max-upload-mb", type=int_in(1, 1 << 16), default=None, metavar="MB",
        help="memory all uploads in progress (firmware files, bitstreams) may hold together; the stream that "
             "would go past it is refused (default: twice --max-file-mb, 128)"),
    arg("--client-timeout-s", type=_positive_float, default=10.0, metavar="S",
        help="cancel an RPC that waits S seconds on its client: for a request message, or for the client to "
             "read a response (default 10)"),
    arg("--max-peer-rpcs", type=int_in(1, 1024), default=4, metavar="N",
        help="RPCs one client connection may have in flight; more are refused (default 4)"),
    arg("--max-waiting", type=int_in(1, 256), default=None, metavar="N",
        help="RPCs that may wait on their clients at once (each holds a worker); a new one cancels the one "
             "waiting longest (default: half of --workers, 8)"),
    arg("--conn-idle-s", type=_positive_float, default=600.0, metavar="S",
        help="close a client connection without an RPC for S seconds (default 600; its buffers stay, under "
             "--lease-s, but a reconnecting client is a new client)"),
    arg("--keepalive-s", type=_positive_float, default=60.0, metavar="S",
        help="ping a connection silent for S seconds; one that does not answer within --client-timeout-s is "
             "closed (default 60)"),
    arg("--log-level", default="info", choices=["debug", "info", "warning", "error"],
        help="server log on stderr (default info: one line per run with its simulated latency)"),
])
def board_serve(args: argparse.Namespace) -> int:
    """Serve a simulated PYNQ board until SIGINT/SIGTERM.

    Speaks the gRPC protocol of pynq's remote mode, so the unmodified pynq package drives it:
    PYNQ_REMOTE_DEVICES=127.0.0.1 (port 7967) or PynqDevice(board="127.0.0.1:PORT"). Board DRAM is the
    simulator's; VTA's four register blocks sit at the config's addresses and run programs on the simulator
    when fetch is started; the latency it shows comes from the timing model (simulated, and logged so).
    Its accounting (buffers per client, runs, faults) is in /proc/vta-sim/status: see `vta board status`.
    """
    if not args.simulated:
        raise ValueError("only --simulated is available: on a real board, run PYNQ's remote server on the board "
                         "(pynq >= 3.1) or use the board directly (PynqDevice on the board)")
    from vta.board.server import ServerLimits, SimulatedBoard, serve

    cfg = _load(args.config or "pynq", args.sets)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s vta-board %(levelname)s %(message)s")
    log = logging.getLogger("vta.board")
    limits = ServerLimits(mem_bytes=(args.mem_mb or cfg.BOARD_MEM_MB) * MiB, max_buffers=args.max_buffers,
                          max_message_bytes=args.max_message_mb * MiB, max_file_bytes=args.max_file_mb * MiB,
                          lease_s=args.lease_s,
                          workers=args.workers, max_concurrent_rpcs=args.max_concurrent_rpcs,
                          max_upload_bytes=(args.max_upload_mb or 2 * args.max_file_mb) * MiB,
                          client_timeout_s=args.client_timeout_s, max_peer_rpcs=args.max_peer_rpcs,
                          max_waiting=args.max_waiting or max(1, args.workers // 2), conn_idle_s=args.conn_idle_s,
                          keepalive_s=args.keepalive_s)
    board = SimulatedBoard(cfg, limits, time_scale=args.time_scale, max_cycles=args.max_cycles,
                           max_work=args.max_work, log=log)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("listening on %s: the board has no authentication; anyone who reaches it can use it", args.host)

    def ready(port: int) -> None:
        print(f"vta board: simulated {cfg.model} board listening on {args.host}:{port} (pynq remote protocol; "
              f"accepts {cfg.bitstream}.bit; {limits.mem_bytes // MiB} MiB for buffers)", flush=True)

    return serve(board, args.host, args.port, on_ready=ready)


@command("board", "status", "show a simulated board's accounting and accelerator state", args=[
    arg("--host", default="127.0.0.1", help="the board's address (default 127.0.0.1)"),
    arg("--port", type=int_in(1, 65535), default=7967, help="its port (default 7967)"),
    arg("--timeout", type=_positive_float, default=5.0, metavar="S", help="give up after S seconds (default 5)"),
    arg("--json", action="store_true", help="print the status as JSON"),
])
def board_status(args: argparse.Namespace) -> int:
    """Read /proc/vta-sim/status from a simulated board (through pynq's remote protocol) and print it."""
    from vta.board.local import read_status

    target = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"
    status = read_status(args.host, args.port, args.timeout)
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    mem, acc = status["memory"], status["accelerator"]
    print(f"{status['board']} ({status['config']}) at {target}: up {status['uptime_s']:.0f} s, accepts "
          f"{status['accepts_bitstream']}, programmed: {acc['programmed'] or 'no'}")
    print(f"  memory: {mem['used_bytes']:,} of {mem['limit_bytes']:,} bytes in {mem['buffers']} buffer(s); "
          f"allocated {mem['allocated_total']}, freed {mem['freed_total']}, reclaimed {mem['reclaimed_total']} "
          f"({mem['reclaimed_bytes']:,} bytes)")
    for peer, use in mem["by_client"].items():
        print(f"    {peer}: {use['buffers']} buffer(s), {use['bytes']:,} bytes, idle {use['idle_s']:.1f} s")
    others = mem.get("other_clients") or {}
    if others.get("clients"):
        print(f"    {others['clients']} other client(s): {others['buffers']} buffer(s), {others['bytes']:,} bytes "
              f"(shown to each client only)")
    print(f"  accelerator: {acc['state']}, done={acc['done']}, {acc['runs']} run(s), {acc['faults']} fault(s)")
    if acc["last_run"]:
        r = acc["last_run"]
        print(f"  last run: {r['instructions']} instructions, {r['cycles']:,} cycles = "
              f"{r['simulated_seconds'] * 1e6:.1f} us simulated at {r['clock_mhz']:g} MHz, "
              f"{r.get('board_seconds', 0.0) * 1e6:.1f} us on the board (calibrated model)")
    if acc["last_fault"]:
        print(f"  last fault: {acc['last_fault']}")
    return 0


@command("board", "bitstream", "show where a config's bitstream is looked for; make a simulated one", args=[
    *CONFIG_ARGS,
    arg("--cache-dir", default=None, metavar="DIR", help="bitstream cache (default $VTA_CACHE_PATH or "
                                                          "~/.vta_cache)"),
    arg("--bitstream", default=None, metavar="PATH", help="check this .bit instead of the cache's"),
    arg("--make-simulated", action="store_true",
        help="write a placeholder .bit for the simulated board into the cache (never for hardware)"),
])
def board_bitstream(args: argparse.Namespace) -> int:
    """Print the config's bitstream name and cache path, and the file found there (an error if none).

    With --make-simulated, write a placeholder bitstream for `vta board serve --simulated` there first;
    PynqDevice refuses to download a placeholder to a real board.
    """
    cfg = _load(args.config or "pynq", args.sets)
    if args.make_simulated:
        path = make_placeholder(cfg, args.bitstream, args.cache_dir)
        print(f"wrote a simulated-board placeholder bitstream to {path}", file=sys.stderr)
    print(f"{cfg.model}: bitstream {cfg.bitstream}.bit, cache {cache_root(args.cache_dir)}")
    print(f"  available: {availability(cfg)}")
    print(f"  looked for: {args.bitstream or bitstream_path(cfg, args.cache_dir)}")
    path = find_bitstream(cfg, args.bitstream, args.cache_dir, cli=config_options(args.config, args.sets))
    header = read_bit_header(path)
    print(f"  found: {path} (design {header.get('design', '?')}, part {header.get('part', '?')}, "
          f"{header.get('length', 0):,} bytes of configuration data)")
    return 0


@command("board", "replay", "run a program image on a board through the Pynq device", args=[
    arg("image", metavar="IMAGE", help="a program image (.npz)"),
    arg("--board", default=None, metavar="HOST[:PORT]",
        help="the board (default: $VTA_PYNQ_BOARD, else pynq's choice: local board or PYNQ_REMOTE_DEVICES)"),
    arg("--bitstream", default=None, metavar="PATH", help="the .bit to download (default: the cache's)"),
    arg("--cache-dir", default=None, metavar="DIR", help="bitstream cache (default $VTA_CACHE_PATH or "
                                                          "~/.vta_cache)"),
    arg("--timeout", type=_positive_float, default=10.0, metavar="S",
        help="a run not done after S seconds is an error (default 10)"),
    arg("--out", metavar="RESULT", help="write the final segments and stats to this .npz"),
    EXPECT_ARG,
])
def board_replay(args: argparse.Namespace) -> int:
    """Replay a program image on a board: its segments go into board buffers, its LOAD/STOREs are relocated.

    The result has the image's own addresses, so it compares with `vta sim replay IMAGE --out ...`.
    """
    from vta.board.images import replay_on_device
    from vta.device_pynq import PynqDevice

    image = load_image(args.image)
    expected = load_expected(args)
    with PynqDevice(image.config, bitstream=args.bitstream, cache_dir=args.cache_dir, timeout_s=args.timeout,
                    board=args.board, cli=nearest_config_options(image.config)) as dev:
        result, stats = replay_on_device(dev, image)
        print(f"# {args.image}: {len(image.insns)} instructions on {dev.board} ({image.config.model})")
        measured = "measured by the host (launch to done)" if stats.launched else None   # else the model's
        print(format_stats(stats, image.config, board=measured))
        print(f"  (counters and cycles: {stats.cycles_from})")
    if args.out:
        save_result(args.out, result)
        print(f"wrote result to {args.out}", file=sys.stderr)
    return report_expected(args, result, expected)
