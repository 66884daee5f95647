"""The one import point for the optional ``pynq`` extra (pynq, and the grpc/protobuf it pins).

The core install and ``vta run`` never import this module's targets; board code calls these functions
where it needs them, so a machine without the extra gets one clear message instead of a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

PYNQ_EXTRA = "pip install 'vta-stack[pynq]'"


def _missing(what: str, exc: ImportError) -> ImportError:
    return ImportError(f"{what} needs the optional pynq package, which is not installed or does not import "
                       f"({exc}); install it with: {PYNQ_EXTRA} (pynq 4.0.0: numpy<2, grpcio 1.64)")


def import_pynq(what: str = "the Pynq device") -> ModuleType:
    """``import pynq``, or an ImportError naming the extra to install."""
    try:
        return importlib.import_module("pynq")
    except ImportError as exc:
        raise _missing(what, exc) from exc


def import_remote(what: str = "the simulated PYNQ board") -> tuple[ModuleType, dict[str, ModuleType]]:
    """``grpc`` and pynq's remote-device protocol modules: {"remote_device"|"mmio"|"buffer": (pb2, pb2_grpc)}."""
    try:
        grpc = importlib.import_module("grpc")
        mods = {}
        for name in ("remote_device", "mmio", "buffer"):
            mods[name] = importlib.import_module(f"pynq.remote.{name}_pb2")
            mods[name + "_grpc"] = importlib.import_module(f"pynq.remote.{name}_pb2_grpc")
    except ImportError as exc:
        raise _missing(what, exc) from exc
    return grpc, mods


def with_session(device, token: str, header: str):
    """A copy of pynq's ``RemoteDevice`` whose every call carries ``token`` as gRPC metadata ``header`` (pynq's
    client sends no metadata of its own): its own stubs over the device's channel, intercepted. The device itself
    (maybe ``pynq.Device.active_device``, shared by the process) is left as it is."""
    import copy

    grpc, _ = import_remote()
    from pynq.remote import buffer_pb2_grpc, gpio_pb2_grpc, mmio_pb2_grpc, remote_device_pb2_grpc

    metadata = ((header, token),)

    class Details(grpc.ClientCallDetails):
        def __init__(self, details):
            self.method, self.timeout = details.method, details.timeout
            self.metadata = tuple(details.metadata or ()) + metadata
            self.credentials = details.credentials
            self.wait_for_ready = getattr(details, "wait_for_ready", None)
            self.compression = getattr(details, "compression", None)

    class Session(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                  grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
        def intercept_unary_unary(self, continuation, details, request):
            return continuation(Details(details), request)

        def intercept_unary_stream(self, continuation, details, request):
            return continuation(Details(details), request)

        def intercept_stream_unary(self, continuation, details, requests):
            return continuation(Details(details), requests)

        def intercept_stream_stream(self, continuation, details, requests):
            return continuation(Details(details), requests)

    channel = grpc.intercept_channel(device.client.channel, Session())
    mine = copy.copy(device)
    mine._stub = {"device": remote_device_pb2_grpc.RemoteDeviceStub(channel),
                  "mmio": mmio_pb2_grpc.MmioStub(channel),
                  "buffer": buffer_pb2_grpc.RemoteBufferStub(channel),
                  "gpio": gpio_pb2_grpc.GpioStub(channel)}
    return mine
