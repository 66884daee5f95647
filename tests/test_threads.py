"""GEMM threads (docs/simulator.md, "Threads"): results, counters, cycles and DRAM do not depend on the count.

A large GEMM instruction is split over ``Simulator(threads=N)`` host threads, each owning disjoint accumulator
entries. Here every GEMM is split (``_set_threads(n, min_macs=0)``), so that the golden programs, a sample of the
differential fuzz and random GEMMs with aliasing micro-ops all take the threaded path, and are compared bit for
bit with one thread; the knob and ``VTA_SIM_THREADS`` are validated.

Then Python threads sharing one object: a simulator, a compiled op, a graph module, an RTL device, the tuning
runners (their calls take turns, or, for a graph module, are refused), and forks made while another thread
JIT-compiles. Each is stressed with the interpreter switching threads every microsecond and checked against
its own sequential result; crash-prone ones run in a child process.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest
from golden_files import requires_golden

from hw_config import load_config
from simulator.core import DEFAULT_MAX_THREADS, MAX_THREADS, PARALLEL_MIN_MACS, Simulator, default_threads
from simulator.errors import SimulatorError

COUNTS = (2, 3, 7)  # 7: more threads than some instructions have accumulator entries
FUZZ_STREAMS = 60  # per fuzz config


def _sim(cfg, threads: int, min_macs: int = 0) -> Simulator:
    sim = Simulator(cfg, threads=threads)
    sim._set_threads(threads, min_macs)
    return sim


@requires_golden
@pytest.mark.parametrize("threads", COUNTS)
def test_golden_programs_identical(threads: int) -> None:
    from test_golden import NAMES, assert_matches, image_path

    from simulator.image import load_image

    for name in NAMES:
        image = load_image(image_path(name))
        one = _sim(image.config, 1).replay(image)
        many = _sim(image.config, threads).replay(image)
        assert_matches(name, many.segments, many.stats)
        assert many.stats == one.stats, name
        assert len(many.segments) == len(one.segments)
        for (a1, d1), (a2, d2) in zip(one.segments, many.segments):
            assert a1 == a2 and np.array_equal(d1, d2), name


@pytest.mark.parametrize("threads", COUNTS)
def test_fuzz_streams_identical(threads: int) -> None:
    from test_fuzz import CONFIGS, _prepared, outcome, random_stream

    for ci, (name, cfg) in enumerate(CONFIGS.items()):
        for seed in range(FUZZ_STREAMS):
            stream = random_stream(cfg, np.random.default_rng([seed, ci, 16]))
            compute = seed % 7 != 0
            one = outcome(_prepared(lambda c: _sim(c, 1), cfg, seed), stream, compute)
            many = outcome(_prepared(lambda c, t=threads: _sim(c, t), cfg, seed), stream, compute)
            assert many == one, f"fuzz {name} seed {seed}: {threads} threads differ from one"


def _random_gemm_state(sim: Simulator, rng: np.random.Generator) -> None:
    cfg = sim.cfg
    sim.write_sram("inp", 0, rng.integers(-128, 128, (64, cfg.BATCH, cfg.BLOCK_IN)))
    sim.write_sram("wgt", 0, rng.integers(-128, 128, (64, cfg.BLOCK_OUT, cfg.BLOCK_IN)))
    sim.write_sram("acc", 0, rng.integers(-2**31, 2**31, (64, cfg.BATCH, cfg.BLOCK_OUT)))


@pytest.mark.parametrize("preset", ["pynq", "batch4", "block32"])
def test_random_gemms_identical(preset: str) -> None:
    """GEMMs whose micro-ops and loop factors alias accumulator entries (the same entry updated from several
    iterations, zero factors), with wrapping sums: every thread count leaves the same accumulators and stats."""
    from test_semantics import finish, gemm, uops

    cfg = load_config(preset)
    for seed in range(12):
        rng = np.random.default_rng([seed, 15])
        n = int(rng.integers(1, 9))
        triples = [tuple(int(v) for v in rng.integers(0, 8, 3)) for _ in range(n)]
        iters = tuple(int(v) for v in rng.integers(1, 5, 2))
        dst, src, wgt = (tuple(int(v) for v in rng.integers(0, 4, 2)) for _ in range(3))
        program = gemm(cfg, 0, n, iters=iters, dst=dst, src=src, wgt=wgt) + finish(cfg)
        results = []
        for threads in (1, *COUNTS):
            sim = _sim(cfg, threads)
            _random_gemm_state(sim, np.random.default_rng(seed))
            sim.write_sram("uop", 0, uops(cfg, *triples))
            stats = sim.run(program, trace=True)
            results.append((sim.read_sram("acc", 0, 64), stats.to_dict(), stats.trace))
        for threads, (acc, st, trace) in zip(COUNTS, results[1:]):
            np.testing.assert_array_equal(acc, results[0][0], err_msg=f"{preset} seed {seed}, {threads} threads")
            assert (st, trace) == results[0][1:], f"{preset} seed {seed}, {threads} threads"


def _threads_left_running(run):
    """(what ``run()`` returns, how many more OS threads this process has after it than before): Linux's
    /proc/self/task. No garbage collection in between, so no other simulator's workers end meanwhile."""
    gc.collect()
    gc.disable()
    try:
        before = len(os.listdir("/proc/self/task"))
        kept = run()
        return kept, len(os.listdir("/proc/self/task")) - before
    finally:
        gc.enable()


def test_threshold_splits_only_large_gemms() -> None:
    """docs/simulator.md, "Threads": GEMMs of fewer than 2^18 multiply-accumulates stay on the calling thread, and a
    simulator starts its N - 1 workers at its first split GEMM. So with the default threshold a small GEMM starts no
    thread, nor does one of 2^18 - 256 MACs, while one of exactly 2^18 starts one (two threads), as does the small one
    with the threshold at 0; results match either way."""
    from test_semantics import finish, gemm, uops

    if not os.path.isdir("/proc/self/task"):
        pytest.skip("counts the process's threads in Linux's /proc/self/task")
    cfg = load_config("pynq")   # 1 x 16 x 16: 256 multiply-accumulates per micro-op iteration
    small = gemm(cfg, 0, 2, iters=(3, 4), dst=(2, 0), src=(1, 1), wgt=(1, 2)) + finish(cfg)   # 24 x 256 = 6144 MACs
    at_threshold = gemm(cfg, 0, 1, iters=(32, 32), dst=(32, 1)) + finish(cfg)              # 1024 x 256 = 2^18
    below = gemm(cfg, 0, 1, iters=(31, 33), dst=(33, 1)) + finish(cfg)                     # 1023 x 256

    def run(program: bytes, min_macs: int | None = None):
        def go() -> Simulator:
            sim = Simulator(cfg, threads=2) if min_macs is None else _sim(cfg, 2, min_macs)
            _random_gemm_state(sim, np.random.default_rng(3))
            sim.write_sram("uop", 0, uops(cfg, (0, 0, 0), (1, 1, 1)))
            sim.run(program)
            return sim
        return _threads_left_running(go)

    (default_sim, started), (split_sim, started_split) = run(small), run(small, 0)
    assert (started, started_split) == (0, 1)
    np.testing.assert_array_equal(default_sim.read_sram("acc", 0, 64), split_sim.read_sram("acc", 0, 64))
    assert run(at_threshold)[1] == 1 and run(below)[1] == 0
    assert PARALLEL_MIN_MACS == 1 << 18   # the constant the docs name


@pytest.mark.parametrize("bad", [0, -1, MAX_THREADS + 1, 10**9, 2.0, "2", True])
def test_threads_knob_is_validated(bad) -> None:
    with pytest.raises(SimulatorError, match="thread count must be an integer from 1 to 64"):
        Simulator("pynq", threads=bad)


@pytest.mark.parametrize("value", ["0", "-3", "65", "many", "1.5"])
def test_env_knob_is_validated(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("VTA_SIM_THREADS", value)
    with pytest.raises(SimulatorError, match="VTA_SIM_THREADS"):
        Simulator("pynq")


def test_env_and_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VTA_SIM_THREADS", "3")
    assert default_threads() == 3 and Simulator("pynq").threads == 3
    assert Simulator("pynq", threads=1).threads == 1  # the argument wins
    monkeypatch.delenv("VTA_SIM_THREADS")
    cpus = len(os.sched_getaffinity(0))   # the CPUs this process may use, capped
    assert default_threads() == min(cpus, DEFAULT_MAX_THREADS) == Simulator("pynq").threads
    assert Simulator("pynq", threads=MAX_THREADS).threads == MAX_THREADS


def _split_gemm(sim: Simulator, seed: int) -> np.ndarray:
    from test_semantics import finish, gemm, uops

    cfg = sim.cfg
    _random_gemm_state(sim, np.random.default_rng(seed))
    sim.write_sram("uop", 0, uops(cfg, *[(d, d + 1, 2) for d in range(8)]))
    sim.run(gemm(cfg, 0, 8, iters=(3, 4), dst=(8, 0), src=(1, 1), wgt=(1, 2)) + finish(cfg))
    return sim.read_sram("acc", 0, 64)


def _child_split_gemm(sim: Simulator, queue) -> None:
    queue.put(_split_gemm(sim, 5))


def _child_drops_threads(sim: Simulator, queue) -> None:
    """A forked child changing an inherited simulator's threads and dropping it (its threads are the parent's)."""
    sim._set_threads(3, 0)
    out = _split_gemm(sim, 6)
    sim._set_threads(1)
    del sim
    gc.collect()
    queue.put(out)


def test_forked_child_runs_split_gemms() -> None:
    """A simulator whose GEMM threads started in the parent still computes in a forked child (the threads did
    not follow it: it starts its own), the same bits as one thread."""
    sim = _sim(load_config("pynq"), 2)
    first = _split_gemm(sim, 4)                      # starts the parent's threads
    got = _in_forked_child(_child_split_gemm, sim)
    np.testing.assert_array_equal(got, _split_gemm(_sim(load_config("pynq"), 1), 5))
    np.testing.assert_array_equal(first, _split_gemm(_sim(load_config("pynq"), 1), 4))
    np.testing.assert_array_equal(_split_gemm(sim, 5), got)   # the parent's threads still serve it
    got = _in_forked_child(_child_drops_threads, sim)
    np.testing.assert_array_equal(got, _split_gemm(_sim(load_config("pynq"), 1), 6))


def _in_forked_child(target, sim: Simulator) -> np.ndarray:
    """What ``target(sim, queue)`` puts on the queue in a forked child, which must exit cleanly within a minute."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(sim, queue))
    child.start()
    try:
        got = queue.get(timeout=60)
        child.join(60)
    finally:
        child.kill()   # only if it hung
    assert child.exitcode == 0
    return got


def test_tuning_workers_share_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """LocalRunner's worker processes split the CPUs among them (a user's VTA_SIM_THREADS wins)."""
    from tuning.measure import LocalRunner

    monkeypatch.delenv("VTA_SIM_THREADS", raising=False)
    cpus = len(os.sched_getaffinity(0))
    for n_parallel in (1, 2, 4):
        with LocalRunner(n_parallel=n_parallel)._workers(1) as pool:
            assert pool.submit(default_threads).result(60) == max(1, cpus // n_parallel)
    monkeypatch.setenv("VTA_SIM_THREADS", "3")
    with LocalRunner(n_parallel=4)._workers(1) as pool:
        assert pool.submit(default_threads).result(60) == 3


# Several Python threads share one simulator, each running its own conv2d program (own DRAM buffers) again and
# again and checking its output; prints how many outputs were wrong. Run in a child process: before Simulator's
# lock, two runs at once in one simulator hung for good in its GEMM thread pool (threads=2), or, on one GEMM
# thread, read each other's SRAM contents (24-229 wrong outputs of 1,200 in five runs).
_SHARED_SIM_SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import vta
    from simulator import Simulator
    from vta.device import SimDevice
    from vta.templates.base import random_inputs

    sys.setswitchinterval(1e-6)
    gemm_threads, n, rounds = (int(v) for v in sys.argv[1:])
    sim = Simulator("pynq", threads=gemm_threads)
    sim._set_threads(gemm_threads, 0)
    dev = SimDevice(sim.cfg, sim)
    ops = [vta.compile_op("conv2d", sim.cfg, device=dev, data_shape=(1, 64, 14, 14), kernel_shape=(64, 64, 3, 3),
                          padding=(1, 1), epilogue=[("shr", 6), ("clip", -127, 127)]) for _ in range(n)]
    want = [op.run(**random_inputs(op, seed=i)) for i, op in enumerate(ops)]
    wrong = [0] * n
    start = threading.Barrier(n)

    def work(i):
        op = ops[i]
        start.wait()
        for _ in range(rounds):
            op.program.run()
            wrong[i] += not np.array_equal(op.template.unpack_output(dev.copy_out(op.buffers.out)), want[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("wrong", sum(wrong))
""")


@pytest.mark.parametrize("gemm_threads", [1, 2])
def test_one_simulator_shared_by_threads(gemm_threads: int) -> None:
    """docs/simulator.md, "Sharing a simulator between threads": calls into one simulator from several threads are
    serialised, so programs that each load, compute and store their own buffers give their own results."""
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        res = subprocess.run([sys.executable, "-c", _SHARED_SIM_SCRIPT, str(gemm_threads), "4", "300"], cwd=root,
                             env=env, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("threads sharing one simulator hung")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["wrong", "0"]


def _stress(n: int, work) -> None:
    """``work(i)`` on ``n`` threads started together, with the interpreter switching threads every microsecond."""
    import threading

    start = threading.Barrier(n)
    errors: list[BaseException] = []

    def go(i: int) -> None:
        start.wait()
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]


def test_packed_weights_are_each_threads_own_when_threads_share_a_kernel() -> None:
    """Tuned host kernels are shared per process: threads running one with different weights must each get their
    own packed copy (a race returned another thread's: 1-2 in 40,000 calls, before PackedWeights kept one tuple)."""
    from host.templates.base import PackedWeights
    packed = PackedWeights(lambda w: w + 1)
    arrays = [np.full(64, i, np.int64) for i in range(4)]

    def calls(i: int) -> None:
        for _ in range(25_000):
            assert packed.get(arrays[i])[0] == i + 1, "another thread's packed weights"

    _stress(4, calls)


def test_one_compiled_op_shared_by_threads() -> None:
    """A CompiledOp run from several threads, each with its own inputs: every run returns its own inputs' output
    (before its lock, another thread's inputs could be staged between a thread's staging and its run: 200-262
    wrong outputs of 400 in five runs)."""
    import vta
    from vta.templates.base import random_inputs

    op = vta.compile_op("conv2d", "pynq", data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1),
                        epilogue=[("shr", 6), ("clip", -127, 127)])
    inputs = [random_inputs(op, seed=i) for i in range(4)]
    want = [op.reference(**x) for x in inputs]
    wrong = [0] * 4

    def work(i: int) -> None:
        for _ in range(100):
            wrong[i] += not np.array_equal(op.run(**inputs[i]), want[i])

    _stress(4, work)
    assert wrong == [0] * 4


def _small_module():
    """A built ResNet block (accelerator groups and host steps) with its quantized graph and params."""
    from test_graph_pipeline import SIM, resnet_block

    from graph_pack import build, graph_pack, quantize

    _, g, p = resnet_block()
    qg, qp = quantize(g, p, skip_conv_layers=[])
    return build(graph_pack(qg, SIM, start_name="start", stop_name="stop"), SIM, qp), qg, qp


def test_a_graph_module_in_use_refuses_other_threads() -> None:
    """docs/networks.md, "Threads": while one thread is in run, another thread's run, set_input, get_output,
    check_steps or close raises GraphError saying so; afterwards the module works as before."""
    import threading

    from graph_pack import GraphError, run_reference

    mod, qg, qp = _small_module()
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    inside, release = threading.Event(), threading.Event()
    first = mod.steps[0]
    step_run = first.run

    def held(m, compute):   # in the runner's run, the first step waits until the calls below are refused
        if threading.current_thread() is runner:
            inside.set()
            assert release.wait(30)
        return step_run(m, compute)

    first.run = held
    runner = threading.Thread(target=mod.run, kwargs={"data": x})
    runner.start()
    try:
        assert inside.wait(30)
        for call in (lambda: mod.run(data=x), lambda: mod.set_input(data=x), lambda: mod.get_output(0),
                     mod.check_steps, mod.close):
            with pytest.raises(GraphError, match="in use in another thread.*give each thread its own"):
                call()
    finally:
        release.set()
        runner.join(30)
    del first.run
    assert np.array_equal(mod.get_output(0), run_reference(qg, qp, {"data": x}))
    assert not mod.closed


def test_one_graph_module_shared_by_threads() -> None:
    """Threads sharing one module, each running its own input and reading the output: every output read is its
    own input's, or the call is refused (before the refusal, a thread read another's output in 11 of 30 runs,
    or a run failed with a KeyError from another's values)."""
    from graph_pack import GraphError

    mod, _, _ = _small_module()
    xs = [np.random.default_rng(i).standard_normal((1, 16, 8, 8)).astype(np.float32) for i in range(3)]
    want = []
    for x in xs:
        mod.run(data=x)
        want.append(mod.get_output(0).copy())
    wrong = [0] * 3

    def work(i: int) -> None:
        for _ in range(20):
            try:
                mod.run(data=xs[i])
                wrong[i] += not np.array_equal(mod.get_output(0), want[i])
            except GraphError as e:
                assert "in use in another thread" in str(e)

    _stress(3, work)
    assert wrong == [0] * 3


_SHARED_RTL_SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import vta
    from hardware import RtlDevice
    from vta.templates.base import random_inputs

    sys.setswitchinterval(1e-6)
    dev = RtlDevice("pynq")
    ops = [vta.compile_op("conv2d", dev.cfg, device=dev, data_shape=(1, 16, 4, 4), kernel_shape=(16, 16, 3, 3),
                          padding=(1, 1), epilogue=[("shr", 6), ("clip", -127, 127)]) for _ in range(3)]
    inputs = [random_inputs(op, seed=i) for i, op in enumerate(ops)]
    want = [op.reference(**x) for op, x in zip(ops, inputs)]
    wrong = [0] * 3
    start = threading.Barrier(3)

    def work(i):
        start.wait()
        for _ in range(10):
            wrong[i] += not np.array_equal(ops[i].run(**inputs[i]), want[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("wrong", sum(wrong))
""")


@pytest.mark.slow
def test_one_rtl_device_shared_by_threads() -> None:
    """An RtlDevice shared by threads, each running its own op: calls take turns on the device, every output is
    right. Before its lock, two threads in the Verilator model at once ended the process (a segmentation fault or
    glibc's "double free or corruption") in 7 of 7 runs. In a child process; the model is built on first use."""
    from extras import need

    need("amaranth")
    need("verilator")
    from hardware.build import ensure_built

    ensure_built(load_config("pynq"))   # outside the child's time limit (about a minute, once: cached)
    root = Path(__file__).resolve().parent.parent
    res = subprocess.run([sys.executable, "-c", _SHARED_RTL_SCRIPT], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, f"exit status {res.returncode}: {res.stderr[-3000:]}"
    assert res.stdout.split() == ["wrong", "0"]


def test_one_cpu_runner_shared_by_threads() -> None:
    """A CpuRunner (its measuring worker process) shared by threads measuring their own tasks: every result is of
    the config asked for, measured and checked. Before its lock the threads' requests and replies crossed on the
    worker's pipe: results of another thread's config, "the measuring process died", or an UnpicklingError."""
    from tuning.cpu import CpuRunner, cpu_task, host_conv_op

    tasks = [cpu_task(host_conv_op(), data_shape=(1, 16, 6 + i, 6 + i), kernel_shape=(16, 16, 3, 3),
                      padding=(1, 1, 1, 1)) for i in range(3)]
    configs = [[t.template.space()[k * 7] for k in range(4)] for t in tasks]
    got: list[list] = [[] for _ in tasks]
    with CpuRunner(number=1, repeat=1, timeout=60) as runner:
        def work(i: int) -> None:
            for _ in range(2):
                got[i].extend(runner.measure(tasks[i], configs[i]))

        _stress(3, work)
    for i, results in enumerate(got):
        assert [r.config for r in results] == configs[i] * 2
        assert all(r.ok and r.checked for r in results), [r.error for r in results if not r.ok]


def test_measuring_workers_forked_while_another_thread_compiles() -> None:
    """A CpuRunner forks its measuring process while another thread JIT-compiles host kernels (a notebook building
    a network while a tuner runs): the fork waits for the compilation under way, and the child compiles and
    measures. Before, the child got host.jit's locks held by a thread it does not have and hung at its first
    compile: every config timed out (8 of 8)."""
    import threading
    import time

    from host import jit
    from tuning.cpu import CpuRunner, cpu_task, host_conv_op

    stop = threading.Event()
    attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}

    def compile_shapes() -> None:   # a new shape each time: always compiling, never from the cache
        k = 0
        while not stop.is_set():
            k += 1
            jit.get_kernel("nn.conv2d", attrs, [(1, 8, 5 + k % 40, 100 + k), (8, 8, 3, 3)], ["float32", "float32"])

    task = cpu_task(host_conv_op(), data_shape=(1, 16, 8, 8), kernel_shape=(16, 16, 3, 3), padding=(1, 1, 1, 1))
    compiler = threading.Thread(target=compile_shapes, daemon=True)
    compiler.start()
    try:
        time.sleep(0.2)
        results = []
        for k in range(3):
            with CpuRunner(number=1, repeat=1, timeout=5) as runner:   # a fresh worker, forked now
                results += runner.measure(task, [task.template.space()[k]])
    finally:
        stop.set()
        compiler.join(30)
    assert all(r.ok for r in results), [r.error for r in results]


def test_a_ctrl_c_inside_the_fork_hook_leaves_no_jit_lock_held(monkeypatch) -> None:
    """CPython reports an exception raised in an at-fork hook and forks anyway. A Ctrl-C that lands while
    host.jit's hook takes its locks (here: on the third cache's lock) must leave none of them held, in the
    hook's own process; before, the locks taken so far were never released and every later compile hung."""
    from host import jit

    class Interrupted:
        def acquire(self, *args) -> bool:
            raise KeyboardInterrupt

        def release(self) -> None:
            raise AssertionError("released a lock the hook never took")

    caches = [jit.KernelCache(limit=4) for _ in range(3)]
    monkeypatch.setattr(caches[2], "_lock", Interrupted())
    monkeypatch.setattr(jit, "_CACHES", [weakref.ref(c) for c in caches])
    with pytest.raises(KeyboardInterrupt):
        jit._before_fork()
    jit._after_fork()   # what the fork then calls in the parent: nothing left to release
    assert jit._HELD == []
    for lock in (caches[0]._lock, caches[1]._lock, jit._LOCK):
        assert lock.acquire(blocking=False), "a lock the interrupted hook took is still held"
        lock.release()
    assert caches[0].get(("k",), lambda: 1) == 1   # a compile goes through


def test_one_local_runner_shared_by_threads() -> None:
    """Threads sharing a LocalRunner(n_parallel=2) take turns on its one worker pool, every result measured and
    checked. Before its lock, threads whose first batches started together each made a pool, and all but one
    were never shut down (2 extra pools in 10 tries; here the pool's start is slowed so that it happens always)."""
    import time

    from tuning.measure import LocalRunner
    from tuning.task import conv_task

    cfg = load_config("pynq")
    tasks = [conv_task(cfg, (1, 32, 8 + 2 * i, 8 + 2 * i), (32, 32, 3, 3), 1, 1) for i in range(3)]
    configs = [[c for c in (t.space[k] for k in range(len(t.space))) if t.check(c) is None][:3] for t in tasks]
    got: list[list] = [[] for _ in tasks]
    pools = []
    with LocalRunner(n_parallel=2) as runner:
        make = runner._workers

        def slow_start(n: int):
            time.sleep(0.2)
            pools.append(make(n))
            return pools[-1]

        runner._workers = slow_start

        def work(i: int) -> None:
            got[i].extend(runner.measure(tasks[i], configs[i]))

        try:
            _stress(3, work)
        finally:
            for pool in pools[1:]:
                pool.shutdown(cancel_futures=True)
    assert len(pools) == 1
    for i, results in enumerate(got):
        assert [r.config for r in results] == configs[i]
        assert all(r.ok and r.checked for r in results), [r.error for r in results if not r.ok]
