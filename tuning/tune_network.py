"""Tune a network end to end: extract its tasks, tune them, build with the best schedules and compare the
simulated latency with the untuned build (VTA's tune_relay_vta on the simulator).

    python -m tuning.tune_network resnet-18 [--config pynq] [--tuner xgb] [--n-trial 64] [--log FILE]

Same options as ``vta tune``.
"""

from __future__ import annotations

import sys

from vta.cli import main as vta_main

if __name__ == "__main__":
    raise SystemExit(vta_main(["tune", *sys.argv[1:]]))
