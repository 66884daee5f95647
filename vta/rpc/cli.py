"""``vta rpc tracker|server|query|keygen``: the commands of TVM's ``tvm.exec.rpc_tracker``,
``tvm.exec.rpc_server`` and ``tvm.exec.query_rpc_tracker``, for this stack's boards."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path

from vta.cli import _key_value, _load, arg, command, float_in, int_in
from vta.rpc.base import DEFAULT_SERVER_PORT, DEFAULT_TRACKER_PORT, check_key, load_secret, parse_addr
from vta.rpc.tracker import TrackerClient, TrackerServer

PORT = int_in(0, 65535)


_seconds = float_in(0.0, 7 * 24 * 3600, "a time in seconds", above=True)


def _address(text: str) -> str:
    try:
        parse_addr(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _logging(quiet: bool) -> None:
    """The servers' log on stderr, one line per event: what the command prints itself (its ready line) is left out."""
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_announced)


def _not_announced(record: logging.LogRecord) -> bool:
    return not getattr(record, "announced", False)


def _until_interrupted(serve: Callable[[], None], stop: Callable[[], None]) -> int:
    """Serve until Ctrl-C (or the service ends), then stop it; the command's exit status."""
    try:
        serve()
    except KeyboardInterrupt:
        pass
    finally:
        stop()
    return 0


@command("rpc", "tracker", "run an RPC tracker (TVM's tracker protocol)", args=[
    arg("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0 for the network)"),
    arg("--port", type=PORT, default=DEFAULT_TRACKER_PORT, help=f"port (default {DEFAULT_TRACKER_PORT}; 0: any)"),
    arg("--max-connections", type=int_in(1, 65536), default=1024, help="connections at once (default 1024)"),
    arg("--max-connections-per-peer", type=int_in(1, 65536), default=64, metavar="N",
        help="connections at once from one address (default 64)"),
    arg("--frame-timeout", type=_seconds, default=10.0, metavar="S",
        help="drop a connection that stalls in the middle of a message for S seconds (default 10)"),
    arg("--idle-timeout", type=float_in(0.0, 7 * 24 * 3600, "a time in seconds"), default=60.0, metavar="S",
        help="drop a connection that holds nothing (no board, no waiting request) and sends nothing for S seconds "
             "(default 60; 0: never)"),
    arg("--max-priority", type=float_in(0.0, 1e9, "a priority bound"), default=100.0, metavar="P",
        help="clamp request priorities to [-P, P] (default 100)"),
    arg("--unused-penalty", type=_seconds, default=30.0, metavar="S",
        help="a peer that took a board and never used it is served after all others by that board for S "
             "seconds, doubling with each unused match of it up to 20 times S (default 30)"),
    arg("--quiet", action="store_true", help="log warnings only"),
])
def rpc_tracker(args: argparse.Namespace) -> int:
    """Run a tracker: boards register under a device key, clients request a free board of a key (highest
    priority first), and `vta rpc query` or TVM's `python -m tvm.exec.query_rpc_tracker` show the queues.
    Speaks TVM's tracker protocol, so TVM's servers and clients can use it too. Stops on Ctrl-C."""
    _logging(args.quiet)
    tracker = TrackerServer(args.host, args.port, max_connections=args.max_connections,
                            max_connections_per_peer=args.max_connections_per_peer, frame_timeout=args.frame_timeout,
                            idle_timeout=args.idle_timeout or None, max_priority=args.max_priority,
                            penalty=args.unused_penalty, max_penalty=20 * args.unused_penalty)
    tracker.start()
    print(f"tracker listening on {tracker.host}:{tracker.port}", flush=True)
    return _until_interrupted(tracker.wait, tracker.stop)


@command("rpc", "query", "show a tracker's boards and queues", args=[
    arg("--tracker", type=_address, default=f"127.0.0.1:{DEFAULT_TRACKER_PORT}", metavar="HOST:PORT",
        help=f"the tracker (default 127.0.0.1:{DEFAULT_TRACKER_PORT})"),
    arg("--json", action="store_true", help="print the tracker's summary as JSON"),
])
def rpc_query(args: argparse.Namespace) -> int:
    """Print the boards registered at a tracker and, per device key, how many there are, how many are free
    and how many requests wait (as TVM's query_rpc_tracker prints them)."""
    with TrackerClient(args.tracker) as client:
        summary = client.summary()
        if args.json:
            print(json.dumps(summary, indent=2))
            return 0
        print(f"Tracker address {client.host}:{client.port}\n")
        print(client.text_summary())
    return 0


def device_factory(kind: str, cfg, bitstream: str | None = None, cli: str | None = None):
    """``--device``: a fresh simulator per session, or the one Pynq board of this machine (``cpu``: a simulator too,
    for the accelerator requests; the server measures host-template configs on this machine's CPU). ``bitstream``
    and ``cli`` go to the board's PynqDevice (the ``.bit`` to download; the command's config options, for its
    messages)."""
    if bitstream is not None and kind != "pynq":
        raise ValueError(f"--bitstream applies to --device pynq, not --device {kind}")
    if kind == "cpu":
        from vta.rpc.server import CPU_MEASURERS
        if not CPU_MEASURERS:
            raise ImportError("--device cpu needs the tuning layer (tuning.cpu) and llvmlite: reinstall the package")
    if kind in ("sim", "cpu"):
        from vta.device import SimDevice
        return lambda: SimDevice(cfg)
    try:
        from vta.device_pynq import PynqDevice
    except ImportError as e:
        raise ImportError(f"--device pynq needs the Pynq device (vta.device_pynq) and the pynq package "
                          f"(pip install 'vta-stack[pynq]'): {e}") from None
    board = PynqDevice(cfg, bitstream=bitstream, cli=cli)
    return lambda: board


@command("rpc", "server", "serve a board (Pynq or simulated) to RPC clients", args=[
    arg("--tracker", type=_address, default=None, metavar="HOST:PORT",
        help="register with this tracker (ours or TVM's); without it, take direct connections"),
    arg("--key", default="pynq", help="device key to register under (default pynq)"),
    arg("--device", choices=("pynq", "sim", "cpu"), default="pynq",
        help="the Pynq board of this machine (default), the simulator (boards-free work), or this machine's CPU "
             "(cpu: vta tune --target cpu --rpc measures the host templates here, compiled for this CPU)"),
    arg("--config", default=None, metavar="NAME|PATH", help="hardware preset or JSON file (default: pynq)"),
    arg("--set", dest="sets", action="append", type=_key_value, metavar="KEY=VALUE",
        help="override a config key (repeatable)"),
    arg("--bitstream", default=None, metavar="FILE.bit",
        help="--device pynq: the bitstream to download (default: the bitstream cache's for --config)"),
    arg("--host", default="127.0.0.1",
        help="address to bind (default 127.0.0.1; other addresses need --key-file)"),
    arg("--port", type=PORT, default=DEFAULT_SERVER_PORT,
        help=f"port (default {DEFAULT_SERVER_PORT}, or the next free one up to 9198; 0: any)"),
    arg("--key-file", default=None, metavar="FILE",
        help="shared key clients must prove they hold (HMAC); without it the server binds 127.0.0.1 only"),
    arg("--name", default=None, help="board name in records and logs (default KEY@HOSTNAME:PORT)"),
    arg("--custom-addr", default=None, metavar="HOST",
        help="address the tracker gives clients (default: the address the tracker sees)"),
    arg("--session-timeout", type=_seconds, default=600.0, metavar="S",
        help="end a session idle for S seconds (default 600)"),
    arg("--read-timeout", type=_seconds, default=30.0, metavar="S",
        help="drop a client that stalls in the middle of a message for S seconds (default 30)"),
    arg("--max-session-mb", type=int_in(1, 1 << 20), default=512, metavar="MIB",
        help="buffers one session may hold (default 512)"),
    arg("--quiet", action="store_true", help="log warnings only"),
])
def rpc_server(args: argparse.Namespace) -> int:
    """Serve one device to RPC clients, one session at a time: sessions allocate buffers, copy data, and run
    programs (each checked against the session's buffers before it runs); everything is freed when the
    session ends or the client vanishes. Registers with --tracker under --key, and again whenever the
    tracker connection comes back. Stops on Ctrl-C."""
    from vta.rpc.server import BoardServer, SessionLimits

    _logging(args.quiet)
    check_key(args.key)
    cfg = _load(args.config, args.sets)
    secret = load_secret(args.key_file) if args.key_file else None
    limits = SessionLimits(max_session_bytes=args.max_session_mb << 20)
    from vta.board.bitstream import config_options

    device = device_factory(args.device, cfg, args.bitstream, config_options(args.config, args.sets))
    server = BoardServer(device, key=args.key, tracker=args.tracker, host=args.host,
                         port=args.port, secret=secret, name=args.name, custom_addr=args.custom_addr,
                         device_kind=args.device, limits=limits, session_timeout=args.session_timeout,
                         read_timeout=args.read_timeout)
    if server.notice:
        print(f"vta rpc server: {server.notice}", file=sys.stderr, flush=True)
    server.start()
    # (registering happens in the background, and again whenever the tracker comes back: the log says each time)
    where = f"registering with {args.tracker} as {args.key!r}" if args.tracker else "taking direct connections"
    cpu = server.board_info().get("cpu")
    what = f"cpu: {cpu['cpu']} ({cpu['triple']}, {cpu['vector_bits']}-bit vectors)" if cpu else f"{args.device}, {cfg.model}"
    print(f"board {server.name} ({what}) listening on {server.host}:{server.port}, {where}", flush=True)
    return _until_interrupted(server.serve_forever, server.stop)


@command("rpc", "keygen", "write a new shared key file for boards and clients", args=[
    arg("path", metavar="FILE", help="the key file to create (refused if it exists)"),
])
def rpc_keygen(args: argparse.Namespace) -> int:
    """Write 32 random bytes (hex) to a new file readable by its owner only. Give the same file to
    `vta rpc server --key-file` on the boards and to the clients (--key-file or VTA_RPC_KEY_FILE)."""
    path = Path(args.path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ValueError(f"{path} exists: give a new file name (an existing key is never overwritten)") from None
    with contextlib.closing(os.fdopen(fd, "w")) as f:
        f.write(secrets.token_hex(32) + "\n")
    load_secret(path)
    print(f"wrote a new key to {path} (mode 600)")
    return 0
