"""Mistakes a notebook user makes with the Python API: each refused with an error naming the argument and what is
allowed, or handled as the user meant; never a silent reinterpretation (the API audit of 2026-11-26)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tuning
from graph_pack import build, graph_pack, zoo
from graph_pack.quantize import quantize
from hw_config import load_config
from simulator.core import Simulator

PYNQ = load_config("pynq")


def test_numpy_numbers_are_the_numbers_they_equal_in_a_config():
    """A sweep over np.arange gives numpy integers: the same config (and fingerprint) as Python's, not a refusal
    saying "LOG_BLOCK=5 is not allowed: an integer"."""
    swept = load_config("pynq", CLOCK_MHZ=np.int64(100), LOG_BLOCK=np.int64(4), LOG_WGT_BUFF_SIZE=np.int32(18))
    plain = load_config("pynq", CLOCK_MHZ=100, LOG_BLOCK=4, LOG_WGT_BUFF_SIZE=18)
    assert swept == plain and swept.fingerprint == plain.fingerprint and type(swept.LOG_BLOCK) is int
    assert load_config("pynq", CLOCK_MHZ=np.float32(150.5)).CLOCK_MHZ == 150.5
    for bad in (np.bool_(True), 4.0, "4"):
        with pytest.raises(ValueError, match=r"LOG_BLOCK=.* is not allowed: an integer in \[1, 6\]"):
            load_config("pynq", LOG_BLOCK=bad)


@pytest.mark.parametrize("data", [[1, 2, 3], "hello", 300, None, np.array(["x"]), np.array([{}], dtype=object)])
def test_simulator_write_refuses_what_is_not_bytes_or_an_array_of_numbers(data):
    """numpy turned [1, 2, 3] into 24 bytes of int64 and "hello" into 20 bytes of UCS-4: written without a word."""
    sim = Simulator(PYNQ)
    addr = sim.alloc(64)
    with pytest.raises(TypeError, match="data: bytes, bytearray, memoryview or a numpy array of numbers, not "):
        sim.write(addr, data)
    assert not sim.read(addr, 64).any()   # nothing written
    sim.write(addr, np.arange(4, dtype=np.int8))
    sim.write(addr + 4, b"\x05")
    assert list(sim.read(addr, 6)) == [0, 1, 2, 3, 5, 0]


@pytest.fixture(scope="module")
def small():
    graph, params = zoo.get_model("resnet-18", image_shape=(3, 32, 32))
    qgraph, qparams = quantize(graph, params)
    return graph, qgraph, qparams


def test_tasks_of_a_graph_not_yet_packed_are_refused_not_an_empty_list(small):
    """extract_tasks of the quantized graph (graph_pack forgotten) returned [] and tune_tasks([]) tuned nothing."""
    _graph, qgraph, _qparams = small
    with pytest.raises(ValueError, match=r"this graph is not packed: graph_pack\(graph, env"):
        tuning.extract_tasks(qgraph, PYNQ)
    with pytest.raises(TypeError, match="extract_tasks takes a graph_pack.Graph"):
        tuning.extract_tasks(None, PYNQ)
    start, stop = zoo.pack_points("resnet-18")
    assert tuning.extract_tasks(graph_pack(qgraph, PYNQ, start_name=start, stop_name=stop), PYNQ)


def test_an_output_changed_by_the_caller_is_not_the_modules(small):
    """get_output returned the module's own array: a softmax in place changed every later read."""
    graph, qgraph, qparams = small
    start, stop = zoo.pack_points("resnet-18")
    x = np.random.default_rng(0).standard_normal(graph["data"].shape).astype(np.float32)
    with build(graph_pack(qgraph, PYNQ, start_name=start, stop_name=stop), PYNQ, qparams) as mod:
        mod.run(data=x)
        first = mod.get_output(0)
        want = first.copy()
        first[...] = 12345.0
        np.testing.assert_array_equal(mod.get_output(0), want)


def test_pack_points_and_epilogues_of_the_wrong_kind_say_what_is_taken(small):
    """start_name=0 (None now finds the regions) said "no operator matches start_name='predicate'"; the command line's epilogue text was read
    one character at a time ("epilogue op 'b': expected a tuple")."""
    from vta.templates import compile_op

    _graph, qgraph, _qparams = small
    with pytest.raises(TypeError, match=r"start_name=0: an op name, a node name, or a predicate"):
        graph_pack(qgraph, PYNQ, start_name=0, stop_name="nn.global_avg_pool2d")
    with pytest.raises(TypeError, match=r"epilogue='shr 8': a sequence of op tuples, e\.g\. \[\('shr', 8\)"):
        compile_op("conv2d", PYNQ, data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1),
                   epilogue="shr 8")


def test_replay_on_a_simulator_already_in_use_says_to_use_a_fresh_one():
    from simulator.errors import MemoryAccessError
    from simulator.image import load_image

    image = load_image(Path(__file__).resolve().parents[1] / "examples" / "gemm_1.npz")
    sim = Simulator(image.config)
    sim.alloc(64)
    with pytest.raises(MemoryAccessError, match=r"overlaps region .*replay on a fresh Simulator, or "
                                                r"simulator\.replay\(image\)"):
        sim.replay(image)
    assert Simulator(image.config).replay(image).stats["cycles"] > 0
