"""The auto-scheduler's search (Ansor, OSDI'20): schedules of a host ComputeDag sampled from its sketches, evolved
under a learned cost model, measured on this CPU in batches, the model retrained after each batch.

    dag = host.ops.conv2d((1, 64, 56, 56), (64, 64, 3, 3), padding=(1, 1, 1, 1), consumers=[("relu",)])
    result = tuning.auto_schedule.auto_schedule(dag, n_trial=64)
    kernel = host.compile_schedule(dag, result.best)

One round: a population of random schedules (from every sketch) plus the best measured ones evolves for a few
generations (mutation of tile sizes, unroll, parallel granularity, vectorisation, cache write, loop order;
crossover of stage schedules between parents of one sketch), ranked by the cost model (XGBoost regression of
-log2(seconds) on ``host.features``; random scores until its first fit); the best-predicted unmeasured schedules
and a few random ones (epsilon-greedy, every sketch in turn) are measured. The untuned default schedule is measured first, in the same
way, and ``best`` is it whenever nothing measured beat it. The kernel build runs without a record (host.jit's,
numpy's: ``graph_pack.untuned``) is timed the same way and logged: ``AutoResult.applied`` says whether ``best`` beat
it, which is when build would run ``best``. Every measured kernel's output is compared with the
default schedule's: bit-equal in exact mode (the default), to float tolerance when rfactor may reassociate.

Measurement runs in this process (a compiled kernel cannot hang: every loop is counted, every load in bounds).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import host
from host.features import features
from host.loop_ir import ComputeDag
from host.schedule import Schedule, default_schedule
from host.sketch import crossover, generate_sketches, mutate, sample
from tuning import auto_records


@dataclass
class Trial:
    schedule: Schedule
    seconds: float | None          # None: failed (``error`` says why)
    error: str | None = None
    predicted: float | None = None
    source: str = ""               # "default", "model", "random"


@dataclass
class AutoResult:
    dag: ComputeDag
    best: Schedule
    best_seconds: float
    default_seconds: float
    trials: list[Trial] = field(default_factory=list)
    untuned_seconds: float | None = None   # the kernel build runs without a record (None: the DAG has no graph op)

    @property
    def speedup(self) -> float:
        return self.default_seconds / self.best_seconds

    @property
    def applied(self) -> bool:
        """Whether build runs ``best`` (it beat the untuned kernel in this search's measurements) rather than the
        untuned kernel."""
        return self.untuned_seconds is None or self.best_seconds < self.untuned_seconds


def random_inputs(dag: ComputeDag, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(t.shape).astype(np.float32) for t in dag.inputs]


def time_kernel(fn: Callable[[], object], repeat: int = 3, min_repeat_s: float = 0.002) -> float:
    """Seconds per call: the least over ``repeat`` rounds of the mean of enough calls to fill ``min_repeat_s``
    (the least is what a loaded shared machine spoils least)."""
    fn()
    t = time.perf_counter()
    fn()
    number = max(1, int(min_repeat_s / max(time.perf_counter() - t, 1e-7)))
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
    return best


class CostModel:
    """XGBoost regression of -log2(seconds) on schedule features, retrained from all measurements so far."""

    def __init__(self, seed: int = 0, num_boost_round: int = 60, max_depth: int = 5):
        try:
            import xgboost
        except ImportError:
            raise ImportError("the auto-scheduler's cost model needs xgboost: pip install 'vta-stack[tuning]' "
                              "(or pip install xgboost-cpu)") from None
        self._xgb = xgboost
        self.seed, self.num_boost_round, self.max_depth = seed, num_boost_round, max_depth
        self.model = None
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []

    def add(self, x: np.ndarray, seconds: float | None) -> None:
        self.xs.append(x)
        self.ys.append(-math.log2(seconds) if seconds else math.nan)

    def fit(self) -> None:
        ys = np.array(self.ys, np.float32)
        ok = ~np.isnan(ys)
        if ok.sum() < 4:
            return
        ys[~ok] = ys[ok].min() - 1.0   # failures: a bit below the slowest
        params = {"max_depth": self.max_depth, "eta": 0.2, "min_child_weight": 1, "subsample": 1.0,
                  "objective": "reg:squarederror", "nthread": 1, "seed": self.seed, "verbosity": 0}
        data = self._xgb.DMatrix(np.stack(self.xs), label=ys, nthread=1)
        self.model = self._xgb.train(params, data, num_boost_round=self.num_boost_round)

    def predict(self, xs: np.ndarray, rng: random.Random) -> np.ndarray:
        """Scores (higher = faster); random before the first fit."""
        if self.model is None:
            return np.array([rng.random() for _ in range(len(xs))], np.float32)
        return self.model.predict(self._xgb.DMatrix(xs, nthread=1))


@dataclass
class SearchPolicy:
    """Ansor's evolutionary search knobs (its defaults scaled to small budgets)."""

    population: int = 48
    generations: int = 3
    mutation_prob: float = 0.85
    elites: int = 4
    epsilon: float = 0.1         # share of each batch measured at random
    batch: int = 8


def evolve(dag: ComputeDag, sketches: list, model: CostModel, seeds: list[Schedule], policy: SearchPolicy,
           rng: random.Random) -> list[tuple[float, Schedule]]:
    """Every schedule the evolution saw with its predicted score, best first."""
    pop = list(seeds) + [sample(dag, rng.choice(sketches), rng) for _ in range(policy.population - len(seeds))]
    seen: dict[str, tuple[float, Schedule]] = {}
    for _ in range(policy.generations + 1):
        xs = np.stack([features(dag, s) for s in pop])
        scores = model.predict(xs, rng)
        for s, sc in zip(pop, scores, strict=True):
            seen[s.to_json()] = (float(sc), s)
        order = np.argsort(scores)[::-1]
        nxt = [pop[i] for i in order[:policy.elites]]
        weights = np.exp(scores - scores.max()) + 1e-9
        while len(nxt) < policy.population:
            if rng.random() < policy.mutation_prob:
                child = mutate(dag, rng.choices(pop, weights)[0], rng)
            else:
                a, b = rng.choices(pop, weights, k=2)
                child = crossover(dag, a, b, rng)
            if child is not None:
                nxt.append(child)
            elif rng.random() < 0.2:   # keep the population moving when draws keep failing
                nxt.append(sample(dag, rng.choice(sketches), rng))
        pop = nxt
    return sorted(seen.values(), key=lambda p: -p[0])


class Proposer:
    """The next batch of schedules to measure: the best-predicted ones the evolution found that were not measured,
    and a share drawn at random (epsilon-greedy; all of them until the cost model has its first fit), every sketch
    in turn. Its two random streams are seeded apart, so the random picks do not depend on what evolution drew."""

    def __init__(self, dag: ComputeDag, policy: SearchPolicy, seed: int = 0, exact: bool = True):
        self.dag, self.policy = dag, policy
        self.rng, self.sample_rng, self.n_sampled = random.Random(seed), random.Random(seed + 1), 0
        self.sketches = generate_sketches(dag, exact=exact)

    def batch(self, model: CostModel, elites: list[Schedule], measured: set[str], want: int
              ) -> list[tuple[str, float | None, Schedule]]:
        """Up to ``want`` (source, predicted score, schedule) never in ``measured`` (which they are added to)."""
        out: list[tuple[str, float | None, Schedule]] = []
        n_random = max(0, round(want * self.policy.epsilon)) if model.model is not None else want
        if n_random < want:
            for score, s in evolve(self.dag, self.sketches, model, elites, self.policy, self.rng):
                if len(out) >= want - n_random:
                    break
                if s.to_json() not in measured:
                    measured.add(s.to_json())
                    out.append(("model", score, s))
        tries = 0
        while len(out) < want and tries < 50:
            tries += 1
            s = sample(self.dag, self.sketches[self.n_sampled % len(self.sketches)], self.sample_rng)
            self.n_sampled += 1
            if s.to_json() not in measured:
                measured.add(s.to_json())
                out.append(("random", None, s))
        return out


def auto_schedule(dag: ComputeDag, n_trial: int = 64, *, exact: bool = True, threads: int = 1, seed: int = 0,
                  policy: SearchPolicy | None = None, repeat: int = 3,
                  progress: Callable[[int, int, float], None] | None = None,
                  log: str | os.PathLike | None = None) -> AutoResult:
    """Search ``n_trial`` measured schedules of ``dag`` (the default schedule counts as the first). With ``log``
    every trial is appended to that tuning log as it is measured, and the trials already there for this DAG, CPU
    and version of the rules count toward ``n_trial`` and train the cost model (a search resumes)."""
    if n_trial < 1:
        raise ValueError(f"n_trial must be >= 1, got {n_trial}")
    policy = policy or SearchPolicy()
    proposer = Proposer(dag, policy, seed, exact)
    inputs = random_inputs(dag, seed)
    model = CostModel(seed)
    trials: list[Trial] = []
    measured: set[str] = set()
    reference: np.ndarray | None = None

    def measure(s: Schedule, source: str, predicted: float | None = None) -> None:
        nonlocal reference
        measured.add(s.to_json())
        t0 = time.perf_counter()
        try:
            kernel = host.compile_schedule(dag, s)
            out = kernel(*inputs, threads=threads)
            if reference is None:
                reference = out.copy()
            elif exact and not np.array_equal(out, reference, equal_nan=True):
                raise ArithmeticError("output differs from the default schedule's")
            elif not exact and not np.allclose(out, reference, rtol=1e-4, atol=1e-5, equal_nan=True):
                raise ArithmeticError("output differs from the default schedule's beyond float tolerance")
            secs = time_kernel(lambda: kernel(*inputs, threads=threads), repeat)
            trials.append(Trial(s, secs, None, predicted, source))
        except (ValueError, ArithmeticError, RuntimeError) as e:
            trials.append(Trial(s, None, f"{type(e).__name__}: {e}", predicted, source))
        model.add(features(dag, s), trials[-1].seconds)
        if log is not None:
            auto_records.append(log, [auto_records.make_record(dag, s, trials[-1].seconds, trials[-1].error,
                                                                time.perf_counter() - t0)])
        if progress:
            progress(len(trials), n_trial, min((t.seconds for t in trials if t.seconds), default=math.nan))

    default = default_schedule(dag)
    for s, seconds, error in auto_records.load_trials(log, dag) if log is not None else ():
        if s.to_json() in measured or len(trials) >= n_trial:
            continue
        measured.add(s.to_json())
        trials.append(Trial(s, seconds, error, None, "default" if s == default else "log"))
        model.add(features(dag, s), seconds)
    logged_default = next((t for t in trials if t.source == "default" and t.seconds), None)
    if logged_default is None:
        measure(default, "default")
        trials.insert(0, trials.pop())   # the default first, before what the log held
    else:
        reference = host.compile_schedule(dag, default)(*inputs, threads=threads)
        trials.remove(logged_default)
        trials.insert(0, logged_default)
    if trials[0].seconds is None:
        raise RuntimeError(f"{dag.name}: the default schedule failed: {trials[0].error}")
    untuned_seconds = auto_records.load_untuned(log, dag) if log is not None else None
    if untuned_seconds is None:
        untuned_seconds = _time_untuned(dag, inputs, reference, repeat, log)
    model.fit()
    while len(trials) < n_trial:
        best = sorted((t for t in trials if t.seconds and t.schedule.sketch != "default"),
                      key=lambda t: t.seconds)[:policy.elites]
        batch = proposer.batch(model, [t.schedule for t in best], measured, min(policy.batch, n_trial - len(trials)))
        if not batch:
            break   # nothing new to measure: every draw repeated a measured schedule
        for source, score, s in batch:
            measure(s, source, score)
        model.fit()
    ok = [t for t in trials if t.seconds is not None]
    best = min(ok, key=lambda t: (t.seconds, t.source != "default"))
    return AutoResult(dag, best.schedule, best.seconds, trials[0].seconds, trials, untuned_seconds)


def _time_untuned(dag: ComputeDag, inputs: list[np.ndarray], reference: np.ndarray, repeat: int,
                  log: str | os.PathLike | None) -> float | None:
    """The time of the kernel build runs for ``dag`` without a record (timed as the trials are, after checking it
    computes the default schedule's output to float tolerance), logged; None where no graph op computes ``dag``."""
    from graph_pack.untuned import untuned_dag_kernel
    t0 = time.perf_counter()
    try:
        kernel = untuned_dag_kernel(dag)
    except ValueError:
        return None
    if not np.allclose(kernel(*inputs), reference, rtol=1e-5, atol=1e-6, equal_nan=True):
        raise RuntimeError(f"{dag.name}: the untuned kernel's output differs from the default schedule's")
    seconds = time_kernel(lambda: kernel(*inputs), repeat)
    if log is not None:
        auto_records.append(log, [auto_records.make_untuned_record(dag, seconds, None, time.perf_counter() - t0)])
    return seconds
