"""Run in TVM's venv (.ci/tvm-venv.sh): ask a tracker for a TVM RPC server of KEY through TVM's own client,
open a session on it and use it; print one JSON line saying what happened.

    python request_session.py HOST PORT KEY
"""

import json
import sys

import numpy as np
import tvm
from tvm import rpc


def main() -> int:
    host, port, key = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    tracker = rpc.connect_tracker(host, port)
    summary = tracker.summary()
    sess = tracker.request(key, priority=1, session_timeout=60)
    dev = sess.cpu(0)
    a = np.arange(16, dtype="float32")
    arr = tvm.runtime.tensor(a, dev) if hasattr(tvm.runtime, "tensor") else tvm.nd.array(a, dev)
    back = arr.numpy()
    print(json.dumps({"ok": bool(dev.exist) and bool((back == a).all()), "summary": summary,
                      "tvm": tvm.__version__}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
