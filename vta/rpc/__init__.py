"""RPC: a tracker speaking TVM's tracker protocol, board servers, and boards on the network as devices.

    vta rpc tracker                                   # TVM's `python -m tvm.exec.rpc_tracker`, port 9190
    vta rpc server --tracker 127.0.0.1:9190 --key pynq --device sim
    vta rpc query --tracker 127.0.0.1:9190            # TVM's `python -m tvm.exec.query_rpc_tracker`

    from vta.rpc import connect_device
    with connect_device("127.0.0.1:9190", "pynq", env.cfg) as board:
        mod = graph_pack.build(packed, env, params, device=board)

See docs/rpc.md for the protocols and the security model.
"""

from vta.rpc.base import (
    AuthError,
    BoardBusy,
    BoardFailure,
    BoardLost,
    MatchMismatch,
    ProtocolError,
    RemoteError,
    RPCError,
    TrackerCode,
    load_secret,
    parse_addr,
)
from vta.rpc.client import RemoteDevice, connect_device, request_board
from vta.rpc.local import LocalCluster
from vta.rpc.server import BoardServer, SessionLimits
from vta.rpc.tracker import TrackerClient, TrackerServer, format_summary, servers_by_key

__all__ = ["AuthError", "BoardBusy", "BoardFailure", "BoardLost", "BoardServer", "LocalCluster", "MatchMismatch", "ProtocolError", "RPCError",
           "RemoteDevice", "RemoteError", "SessionLimits", "TrackerClient", "TrackerCode", "TrackerServer",
           "connect_device", "format_summary", "load_secret", "parse_addr", "request_board", "servers_by_key"]
