"""FPGA boards: bitstreams, the simulated PYNQ board and the ``vta board`` commands.

- ``vta.board.pynq_support``: the one place that imports the optional ``pynq`` package (and grpc with it);
  a missing extra is an ``ImportError`` naming ``pip install 'vta-stack[pynq]'``.
- ``vta.board.bitstream``: VTA's bitstream cache layout, name checks, placeholder bitstreams for the
  simulated board.
- ``vta.board.registers``: VTA's four HLS register blocks (fetch, load, compute, store) over the C
  simulator, with the hardware's control bits and its level-triggered ``done``.
- ``vta.board.server``: a gRPC server speaking pynq's remote-device protocol, backed by that model
  (``vta board serve --simulated``).
- ``vta.board.images``: program images relocated into board buffers (replaying VTA's golden programs).
- ``vta.board.local``: a simulated board in a child process (``LocalBoard``), and ``read_status``.
- ``vta.board.cli``: the ``vta board`` command group.

The device that drives a board is ``vta.device_pynq.PynqDevice``. Nothing here imports pynq at import time:
the core install never needs it.
"""
