"""Search strategies over a task's knob space, with AutoTVM's interface (next_batch, update, tune).

Every tuner proposes only configs the task accepts (``task.check`` is None): invalid configs are marked
visited without being measured (VTA's AutoTVM tuners spent trials on configs that could not run), and no
config is proposed twice. ``tune`` resumes from a record log: the configs measured before a kill count as
trials and are never measured again. Records name the tuner that proposed them: records of another tuner in the
log are results this one knows (never measured again, and its best may be among them) but not its own trials,
so a tuner resuming another's log still measures its own budget (``earlier`` counts them). All tuners are
deterministic for a seed.

- ``RandomTuner``: uniform without replacement.
- ``GridSearchTuner``: the space in index order.
- ``GATuner``: a genetic algorithm on knob-index genes (elitism, fitness-proportional parents, uniform
  crossover, per-knob mutation).
- ``XGBTuner``: an XGBoost cost model on ``tuning.features`` (knob values + the program's loop and
  traffic structure) that corrects an analytical cycle estimate, retrained after every batch; it scores
  every unvisited valid config of a small space (or a random pool plus neighbours of the best in a large
  one) and measures the top ones, with a little epsilon-greedy exploration. ``load_history`` pre-trains
  it on records of other tasks.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuning import features as feats
from tuning.measure import MeasureResult, cost_cycles
from tuning.records import Record, RecordLog, RecordWarning, load_records, make_record
from tuning.task import Task, task_of
from vta.space import KnobError

ENUMERATE_LIMIT = 100_000   # spaces up to this size get their validity computed once, up front
_EST = feats.feature_names().index("log_est_cycles")
RESULT_FIELDS = ("cycles", "latency_s", "error", "checked", "wall_s", "device", "std_s")

Callback = Callable[["Tuner", list[dict], list[MeasureResult]], Any]


@dataclass
class TuneResult:
    """What ``Tuner.tune`` found: the best config by the objective (board time; ``cost_cycles``), its
    accelerator cycles, and the template's default config's, for the speedup."""

    task: Task
    best_config: dict | None
    best_cycles: int | None
    trials: int
    default_cycles: int | None
    seconds: float
    best_cost: float | None = None
    default_cost: float | None = None

    @property
    def speedup(self) -> float | None:
        """Default / best by the objective (None when either is unknown)."""
        if not self.best_cost or not self.default_cost:
            return None
        return self.default_cost / self.best_cost


class Tuner:
    """Base class: bookkeeping of visited configs, trials and the best, validity filtering, ``tune``.

    Subclasses implement ``_propose(n)`` (space indices, best first; the base filters and marks them) and
    may override ``_observe`` to learn from results.
    """

    name = ""   # the name make_tuner knows it by (written into the records it makes)

    def __init__(self, task: Task, seed: int = 0):
        self.task = task
        self.seed = seed
        self.space = task.space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()     # measured, or refused by task.check
        self.trials = 0                    # configs measured (including failures and resumed ones)
        self.earlier = 0                   # of those, fed from records another tuner made (not this one's trials)
        self.best_config: dict | None = None
        self.best_cycles: int | None = None      # the accelerator cycles of the best config
        self.best_cost: float | None = None      # its objective (cost_cycles: board time in clock cycles)
        self.best_trial = 0                # the trial count when the best was found (early stopping)
        self.history: list[tuple[dict, MeasureResult]] = []
        self._pending: set[int] = set()    # proposed, not yet updated
        self._enumerable = len(self.space) <= ENUMERATE_LIMIT
        self._open: np.ndarray | None = None   # valid, not visited, not pending (enumerable spaces)
        self._valid_cache: dict[int, bool] = {}

    # ---- validity and bookkeeping ----
    def _open_mask(self) -> np.ndarray:
        """Valid and not yet visited or proposed (computed on first use: one ``task.check`` per config)."""
        if self._open is None:
            mask = np.fromiter((self.task.check(self.space[i]) is None for i in range(len(self.space))),
                               dtype=bool, count=len(self.space))
            self._n_valid = int(mask.sum())
            for i in self.visited | self._pending:
                mask[i] = False
            self._open = mask
        return self._open

    @property
    def n_valid(self) -> int | None:
        """Valid configs in the space (None for a space too large to enumerate)."""
        if not self._enumerable:
            return None
        self._open_mask()
        return self._n_valid

    def _is_valid(self, index: int) -> bool:
        if index not in self._valid_cache:
            self._valid_cache[index] = self.task.check(self.space[index]) is None
        return self._valid_cache[index]

    def _close(self, index: int) -> None:
        if self._open is not None:
            self._open[index] = False

    def _available(self, index: int) -> bool:
        """Whether ``index`` can be proposed; an invalid config is marked visited on the way."""
        if index in self.visited or index in self._pending:
            return False
        if self._enumerable:
            if not self._open_mask()[index]:
                self.visited.add(index)  # invalid: refused without measuring
                return False
            return True
        if not self._is_valid(index):
            self.visited.add(index)
            return False
        return True

    def open_indices(self) -> np.ndarray:
        """Space indices that are valid and neither visited nor proposed (enumerable spaces only)."""
        if not self._enumerable:
            raise ValueError(f"a space of {len(self.space)} configs is not enumerated "
                             f"(limit {ENUMERATE_LIMIT})")
        return np.flatnonzero(self._open_mask())

    def has_next(self) -> bool:
        """Whether unvisited valid configs remain (for a huge space: unvisited configs)."""
        if self._enumerable:
            return bool(self._open_mask().any())
        return len(self.visited) + len(self._pending) < len(self.space)

    def _random_open(self, n: int, exclude: Iterable[int] = ()) -> list[int]:
        """Up to ``n`` distinct valid open indices, uniformly (rejection sampling in a huge space)."""
        exclude = set(exclude)
        if self._enumerable:
            cand = self.open_indices()
            if exclude:
                cand = cand[~np.isin(cand, list(exclude))]
            return [int(i) for i in self.rng.choice(cand, size=min(n, len(cand)), replace=False)]
        out: dict[int, None] = {}   # insertion-ordered set
        for _ in range(4 * n + 64):   # a huge space is mostly unvisited: few draws miss
            if len(out) >= n:
                break
            i = int(self.rng.integers(len(self.space)))
            if i not in exclude and i not in out and self._available(i):
                out[i] = None
        return list(out)

    # ---- the interface ----
    def next_batch(self, n: int) -> list[dict]:
        """Up to ``n`` configs never visited nor proposed, all accepted by ``task.check``."""
        if n <= 0:
            return []
        picked: list[int] = []
        for i in self._propose(n):
            i = int(i)
            if self._available(i):
                picked.append(i)
                self._pending.add(i)  # at once: a proposer that repeats itself cannot pick it twice
                self._close(i)
                if len(picked) == n:
                    break
        return [self.space[i] for i in picked]

    def _propose(self, n: int) -> Iterable[int]:
        raise NotImplementedError

    def update(self, configs: Sequence[dict], results: Sequence[MeasureResult]) -> None:
        """Record measured configs: trials, best, visited (a config measured twice counts once)."""
        if len(configs) != len(results):
            raise ValueError(f"update: {len(configs)} configs but {len(results)} results")
        new = []
        for config, result in zip(configs, results):
            index = self.space.index_of(config)
            self._pending.discard(index)
            self._close(index)
            if index in self.visited:
                continue
            self.visited.add(index)
            self.trials += 1
            canonical = self.space[index]
            self.history.append((canonical, result))
            new.append((index, result))
            cost = self.cost(result)
            if cost > 0 and (self.best_cost is None or cost < self.best_cost):
                self.best_config, self.best_cycles, self.best_cost = canonical, int(result.cycles), cost
                self.best_trial = self.trials
        if new:
            self._observe([i for i, _ in new], [r for _, r in new])

    def _observe(self, indices: list[int], results: list[MeasureResult]) -> None:
        """Hook for learning tuners (called with the newly measured configs)."""

    def load_history(self, records: Iterable[Record]) -> None:
        """Prior records: this task's (same workload and hardware) count as measured; others are ignored
        here (the cost-model tuner learns from them)."""
        mine = [r for r in records if r.workload == self.task.key and r.hw == self.task.cfg.fingerprint]
        self.feed_records(mine)

    @property
    def budget_used(self) -> int:
        """Trials that count toward this tuner's budget: its own, and those of records that name no tuner (a
        log written before records named one)."""
        return self.trials - self.earlier

    def feed_records(self, records: Sequence[Record]) -> int:
        """Feed this task's records to ``update``; records whose config is not a valid point of the space
        (unknown knobs, values not allowed, refused by the template) are skipped with a RecordWarning. Records
        another tuner made count in ``earlier``."""
        configs, results, bad = [], [], []
        seen: set[int] = set()
        others: set[int] = set()   # configs first seen in another tuner's record
        for rec in records:
            try:
                config = self.space[self.space.index_of(rec.config)]
                reason = self.task.check(config)
                if reason:
                    raise KnobError(f"refused by the template: {reason}")
                result = _result_of(config, rec.result)
            except (KnobError, TypeError, ValueError) as e:
                bad.append(str(e))
                continue
            index = self.space.index_of(config)
            if index not in seen and rec.tuner and rec.tuner != self.name:
                others.add(index)
            seen.add(index)
            configs.append(config)
            results.append(result)
        if bad:
            warnings.warn(f"{self.task.name}: skipped {len(bad)} record(s) whose config is not in this "
                          f"task's space: {'; '.join(bad[:2])}" + (" ..." if len(bad) > 2 else ""),
                          RecordWarning, stacklevel=3)
        before, visited = self.trials, set(self.visited)
        if configs:
            self.update(configs, results)
        self.earlier += len(others - visited)
        return self.trials - before

    def tune(self, n_trial: int, runner, *, batch_size: int = 16, early_stopping: int | None = None,
             log: str | os.PathLike | None = None, callbacks: Sequence[Callback] = (),
             resume: bool = True, measure_default: bool = True) -> TuneResult:
        """Measure until ``n_trial`` trials (``budget_used``: resumed ones included, except another tuner's),
        the space is exhausted, or
        ``early_stopping`` trials without improvement. With ``log``, this task's records there are
        loaded first (a killed run resumes without measuring anything twice) and every batch is
        appended (fsync'ed). The default config is measured first (a trial, logged) for ``default_cycles``,
        unless it already was or ``measure_default`` is False."""
        if n_trial < 0 or batch_size < 1:
            raise ValueError(f"n_trial must be >= 0 and batch_size >= 1, got {n_trial}, {batch_size}")
        if early_stopping is not None and early_stopping < 1:
            raise ValueError(f"early_stopping must be >= 1 or None, got {early_stopping}")
        t0 = time.perf_counter()
        if log is not None and resume:
            self.feed_records(load_records(log, task=self.task))

        default = self.space[self.space.index_of(self.task.default_config)]
        if measure_default and self.budget_used < n_trial:
            self.measure_default(runner, log)
        default_result = self.result_of(default)
        default_cost = self.cost(default_result) if default_result is not None else 0.0
        default_cycles = int(default_result.cycles) if default_cost else None
        while self.budget_used < n_trial and self.has_next():
            if early_stopping is not None and self.trials - self.best_trial >= early_stopping:
                break
            configs = self.next_batch(min(batch_size, n_trial - self.budget_used))
            if not configs:
                break
            self.measure(runner, configs, log, callbacks)
        return TuneResult(self.task, self.best_config, self.best_cycles, self.trials, default_cycles,
                          time.perf_counter() - t0, self.best_cost, default_cost or None)

    def measure(self, runner, configs: list[dict], log: str | os.PathLike | None = None,
                callbacks: Sequence[Callback] = ()) -> list[MeasureResult]:
        """Measure ``configs`` with ``runner``, learn from them, append their records to ``log`` (fsync'ed)."""
        results = list(runner.measure(self.task, configs))
        self.update(configs, results)
        if log is not None:
            RecordLog(log).append([make_record(self.task, r, self.name) for r in results])
        for cb in callbacks:
            cb(self, configs, results)
        return results

    def measure_default(self, runner, log: str | os.PathLike | None = None) -> MeasureResult | None:
        """The result of the template's default config (the untuned baseline), measured as a logged trial
        unless it already was; None when it was not measured."""
        default = self.space[self.space.index_of(self.task.default_config)]
        index = self.space.index_of(default)
        if index not in self.visited | self._pending:
            self._pending.add(index)
            self._close(index)
            self.measure(runner, [default], log)
        return self.result_of(default)

    def cost(self, result: MeasureResult) -> float:
        """The objective of a result (``tuning.measure.cost_cycles`` at this task's clock; 0: failed)."""
        return cost_cycles(result, self.task.cfg.CLOCK_MHZ)

    def result_of(self, config: dict) -> MeasureResult | None:
        """The measured result of ``config`` (None when it was not measured)."""
        return next((r for c, r in self.history if c == config), None)


    def __repr__(self) -> str:
        best = f", best {self.best_cycles} cycles" if self.best_cycles else ""
        return f"{type(self).__name__}({self.task.name}, seed={self.seed}, {self.trials} trials{best})"


def _result_of(config: dict, result: dict) -> MeasureResult:
    """A MeasureResult from a record's result dict (TypeError / ValueError when malformed)."""
    if not isinstance(result, dict):
        raise TypeError("the record's result is not an object")
    fields = {k: result[k] for k in RESULT_FIELDS if k in result}
    cycles = int(fields.get("cycles", 0))
    if cycles < 0:
        raise ValueError(f"negative cycles {cycles}")
    error = fields.get("error")
    if error is not None and not isinstance(error, str):
        raise TypeError("the record's error is not a string")
    return MeasureResult(config, cycles, float(fields.get("latency_s", 0.0)), error,
                         bool(fields.get("checked", False)), float(fields.get("wall_s", 0.0)), str(fields.get("device", "")),
                         float(fields.get("std_s", 0.0)))


# ------------------------------------------------------------------------------------------------------------
# simple tuners

class RandomTuner(Tuner):
    """Uniform sampling without replacement (a seeded permutation of the space)."""

    name = "random"

    def __init__(self, task: Task, seed: int = 0):
        super().__init__(task, seed)
        self._order: np.ndarray | None = None
        self._pos = 0

    def _propose(self, n: int) -> Iterable[int]:
        if not self._enumerable:
            yield from self._random_open(n)
            return
        if self._order is None:
            self._order = self.rng.permutation(len(self.space))
        while self._pos < len(self._order):
            yield int(self._order[self._pos])
            self._pos += 1


class GridSearchTuner(Tuner):
    """The space in index order (the last knob varies fastest)."""

    name = "gridsearch"

    def __init__(self, task: Task, seed: int = 0):
        super().__init__(task, seed)
        self._pos = 0

    def _propose(self, n: int) -> Iterable[int]:
        while self._pos < len(self.space):
            yield self._pos
            self._pos += 1


def _fitness(cost: float) -> float:
    """Throughput-like score: 1e6 / cycles, 0 for a failed config."""
    return 1e6 / cost if cost > 0 else 0.0


class GATuner(Tuner):
    """Genetic search on genes = knob option indices. Each generation: the ``elite_num`` best configs ever
    measured and the last generation are the parents, chosen with probability (best cycles / cycles) **
    ``selection_power``; children take each knob from either parent and mutate each knob with
    ``mutation_prob``. The elites are never lost. The defaults suit VTA's spaces (hundreds to a few
    thousand valid configs): AutoTVM's pop_size=100 with plain throughput-proportional selection needed
    about 2x (1-3x) more trials to reach the optimum on ResNet-18's C2-C11 layers."""

    name = "ga"

    def __init__(self, task: Task, seed: int = 0, pop_size: int = 32, elite_num: int = 3,
                 mutation_prob: float = 0.1, selection_power: float = 8.0):
        super().__init__(task, seed)
        if pop_size < 2 or not 0 <= elite_num <= pop_size or not 0.0 <= mutation_prob <= 1.0 \
                or selection_power < 0:
            raise ValueError(f"GATuner needs pop_size >= 2, 0 <= elite_num <= pop_size, mutation_prob in "
                             f"[0, 1] and selection_power >= 0; got {pop_size}, {elite_num}, "
                             f"{mutation_prob}, {selection_power}")
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob
        self.selection_power = selection_power
        self.scores: dict[int, float] = {}      # space index -> fitness of every measured config
        self.generation: list[int] = []          # the last generation's measured members
        self.elites: list[int] = []              # the best measured indices, best first
        self._queue: list[int] = []              # the current generation, not yet proposed
        self._radix = np.array([len(k.options) for k in self.space.knobs])

    def _observe(self, indices: list[int], results: list[MeasureResult]) -> None:
        for i, r in zip(indices, results):
            self.scores[i] = _fitness(self.cost(r))
            self.generation.append(i)
        self.generation = self.generation[-self.pop_size:]
        ranked = sorted(self.scores, key=lambda i: (-self.scores[i], i))
        self.elites = [i for i in ranked[:self.elite_num] if self.scores[i] > 0]

    def _propose(self, n: int) -> Iterable[int]:
        while True:
            while self._queue:
                yield self._queue.pop(0)
            self._queue = self._breed()
            if not self._queue:
                return

    def _breed(self) -> list[int]:
        """The next generation: children of the scored population, topped up with random configs."""
        parents = list(dict.fromkeys(self.elites + self.generation))
        fit = np.array([self.scores.get(i, 0.0) for i in parents])
        children: list[int] = []
        if parents and fit.sum() > 0:
            fit = (fit / fit.max()) ** self.selection_power
            probs = fit / fit.sum()
            genes = feats.space_genes(self.space, np.array(parents))
            taken = set()
            for _ in range(20 * self.pop_size):
                if len(children) >= self.pop_size:
                    break
                a, b = self.rng.choice(len(parents), size=2, p=probs)
                child = np.where(self.rng.random(len(self._radix)) < 0.5, genes[a], genes[b])
                mutate = self.rng.random(len(self._radix)) < self.mutation_prob
                child = np.where(mutate, self.rng.integers(0, self._radix), child)
                index = int(feats.gene_indices(self.space, child)[0])
                if index not in taken and self._available(index):
                    taken.add(index)
                    children.append(index)
        if len(children) < self.pop_size:
            children += self._random_open(self.pop_size - len(children), exclude=children)
        return children


# ------------------------------------------------------------------------------------------------------------
# the cost-model tuner

_FOREIGN: dict[tuple[str, str], tuple[Task, Any] | None] = {}


def _foreign_task(key: str, task: Task) -> tuple[Task, Any] | None:
    """Another workload on ``task``'s hardware, with its feature info (cached: compiling a default op
    costs a little). None when the key is not a workload this stack can compile."""
    k = (key, task.cfg.fingerprint)
    if k not in _FOREIGN:
        try:
            workload = {a: tuple(v) if isinstance(v, list) else v for a, v in json.loads(key).items()}
            other = task_of(workload, task.cfg)
            _FOREIGN[k] = (other, feats.task_info(other))
        except Exception:  # noqa: BLE001 - an unusable foreign record is skipped, never a crash
            _FOREIGN[k] = None
        if len(_FOREIGN) > 64:  # each holds a compiled default op
            _FOREIGN.pop(next(iter(_FOREIGN)))
    return _FOREIGN[k]


class XGBTuner(Tuner):
    """Cost-model search (AutoTVM's XGBTuner): an XGBoost model on ``tuning.features`` scores configs;
    each round measures the model's best unvisited valid configs (every one scored when the space has up
    to ``max_candidates`` valid configs, else a random pool plus one-knob neighbours of the best measured),
    ``epsilon`` of them random instead. The model is refitted after every ``update``; ``plan_size`` configs
    are ranked per fit.

    The trees learn a correction to an analytical prior (``prior=True``): the base margin is
    -log2(estimated cycles) from the simulator's DMA / compute formulas (``log_est_cycles``), so a handful
    of samples already rank well and the model extrapolates past the best config measured. With the prior
    no random warm-up is needed (``n_warmup=0``: the prior ranks the first batch); with ``n_warmup > 0`` the
    warm-up batches interleave the prior's picks and random ones. ``prior=False`` is AutoTVM's scheme:
    random configs until the first fit, then the trees alone.

    ``loss_type`` "reg" regresses -log2(cycles) (failures a bit below the slowest); "rank" learns the order
    of best cycles / cycles with XGBoost's pairwise ranking, one query group per task. ``load_history``
    adds other tasks' records (transfer learning). Deterministic for a seed (nthread=1, seeded xgboost).
    """

    name = "xgb"

    def __init__(self, task: Task, seed: int = 0, loss_type: str = "reg", plan_size: int = 64,
                 n_warmup: int = 0, epsilon: float = 0.05, num_boost_round: int = 60, max_depth: int = 4,
                 max_candidates: int = 50_000, pool_size: int = 4096, max_transfer: int = 4000,
                 prior: bool = True, xgb_params: dict[str, Any] | None = None):
        super().__init__(task, seed)
        if loss_type not in ("reg", "rank"):
            raise ValueError(f"loss_type={loss_type!r}; allowed: 'reg', 'rank'")
        if plan_size < 1 or n_warmup < 0 or not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"XGBTuner needs plan_size >= 1, n_warmup >= 0, epsilon in [0, 1]; got "
                             f"{plan_size}, {n_warmup}, {epsilon}")
        try:
            import xgboost
        except ImportError:
            raise ImportError("XGBTuner (the default tuner, 'xgb') needs xgboost: pip install 'vta-stack[tuning]' "
                              "(or pip install xgboost-cpu); the 'random', 'gridsearch' and 'ga' tuners need "
                              "nothing more") from None
        self._xgb = xgboost
        self.loss_type, self.plan_size, self.n_warmup, self.epsilon = loss_type, plan_size, n_warmup, epsilon
        self.num_boost_round, self.max_depth = num_boost_round, max_depth
        self.max_candidates, self.pool_size, self.max_transfer = max_candidates, pool_size, max_transfer
        self.prior = prior
        self.xgb_params = dict(xgb_params or {})
        self._info = feats.task_info(task)
        self._xs: list[np.ndarray] = []          # features of measured configs
        self._cycles: list[float] = []           # their cycles (0: failed)
        self._indices: list[int] = []
        self._transfer: list[tuple[np.ndarray, np.ndarray]] = []   # (features, cycles) per other task
        self.model = None
        self._stale = True
        self._plan: list[int] = []
        self.fits = 0

    # ---- data ----
    def _observe(self, indices: list[int], results: list[MeasureResult]) -> None:
        self._xs.append(feats.features_of_indices(self.task, np.array(indices), self._info))
        self._cycles += [self.cost(r) for r in results]   # the objective, in board cycles (0: failed)
        self._indices += indices
        self._stale = True

    def load_history(self, records: Iterable[Record]) -> None:
        """This task's records count as measured; other tasks' records (same hardware) pre-train the
        model, so even the first proposals are model-driven."""
        records = list(records)
        super().load_history(records)
        by_task: dict[str, list[Record]] = {}
        for r in records:
            if r.workload != self.task.key and r.hw == self.task.cfg.fingerprint:
                by_task.setdefault(r.workload, []).append(r)
        if not by_task:
            return
        per_task = max(8, self.max_transfer // len(by_task))
        for key in sorted(by_task):
            found = _foreign_task(key, self.task)
            if found is None:
                continue
            other, info = found
            recs = by_task[key]
            if len(recs) > per_task:  # keep a deterministic even sample
                recs = [recs[int(j)] for j in np.linspace(0, len(recs) - 1, per_task)]
            idx, cyc = [], []
            for r in recs:
                try:
                    idx.append(other.space.index_of(r.config))
                except (KnobError, TypeError, ValueError):
                    continue
                cyc.append(self.cost(_result_of(r.config, r.result)) if r.ok else 0.0)
            if len(idx) >= 2 and max(cyc) > 0:
                x = feats.features_of_indices(other, np.array(idx), info)
                self._transfer.append((x, np.array(cyc)))
        self._stale = True

    # ---- model ----
    def _labels(self, cycles: np.ndarray) -> np.ndarray:
        """Training labels (higher = faster): -log2(cycles) for "reg" (failures a bit below the slowest),
        best cycles / cycles for "rank" (0 for failures)."""
        if self.loss_type == "rank":
            return _normalise(cycles)
        ok = cycles > 0
        out = np.empty(len(cycles), dtype=np.float32)
        out[ok] = -np.log2(cycles[ok])
        out[~ok] = out[ok].min() - 1.0 if ok.any() else 0.0
        return out

    def _margin(self, x: np.ndarray) -> np.ndarray | None:
        """The analytical prior, -log2(estimated cycles): the trees learn corrections to it, so a handful
        of samples already rank well, and the model extrapolates past the best measured config."""
        return -x[:, _EST].astype(np.float32) if self.prior else None

    def _fit(self) -> None:
        xs, ys, groups = [], [], []
        if self._xs and max(self._cycles, default=0) > 0:
            xs.append(np.concatenate(self._xs))
            ys.append(self._labels(np.array(self._cycles)))
            groups.append(len(ys[-1]))
        for x, cycles in self._transfer:
            xs.append(x)
            ys.append(self._labels(cycles))
            groups.append(len(cycles))
        self._stale = False
        self._plan = []
        if not xs:
            self.model = None
            return
        params = {"max_depth": self.max_depth, "eta": 0.3, "min_child_weight": 1, "gamma": 1e-4,
                  "subsample": 1.0, "lambda": 1.0, "alpha": 0.0, "nthread": 1, "seed": self.seed,
                  "verbosity": 0, **self.xgb_params}
        params["nthread"] = 1  # more threads on a busy 2-core machine are many times slower
        x = np.concatenate(xs)
        data = {"label": np.concatenate(ys), "base_margin": self._margin(x), "nthread": 1}
        if self.loss_type == "rank":
            params.update(objective="rank:pairwise", lambdarank_pair_method="mean",
                          lambdarank_num_pair_per_sample=8)
            data["qid"] = np.repeat(np.arange(len(groups)), groups)
        else:
            params["objective"] = "reg:squarederror"
        dtrain = self._xgb.DMatrix(x, **data)
        self.model = self._xgb.train(params, dtrain, num_boost_round=self.num_boost_round)
        self.fits += 1

    def predict(self, indices: np.ndarray) -> np.ndarray:
        """The model's scores (higher = faster) for space indices; before any data, the prior's."""
        x = feats.features_of_indices(self.task, np.asarray(indices), self._info)
        if self.model is None:
            if not self.prior:
                raise RuntimeError("the cost model has not been trained yet (and prior=False)")
            return self._margin(x)
        return self.model.predict(self._xgb.DMatrix(x, base_margin=self._margin(x), nthread=1))

    def _candidates(self) -> np.ndarray:
        if self._enumerable:
            cand = self.open_indices()
            if len(cand) <= self.max_candidates:
                return cand
            cand = self.rng.choice(cand, size=self.pool_size, replace=False)
        else:
            cand = np.array(self._random_open(self.pool_size), dtype=np.int64)
        return np.unique(np.concatenate([cand, self._neighbours()])).astype(np.int64)

    def _neighbours(self, top: int = 16) -> np.ndarray:
        """One-knob changes of the best measured configs (the local search of a large space)."""
        if not self._indices:
            return np.zeros(0, dtype=np.int64)
        order = np.argsort(-np.array([1 / c if c else 0.0 for c in self._cycles]), kind="stable")[:top]
        genes = feats.space_genes(self.space, np.array(self._indices)[order])
        out = []
        for k, knob in enumerate(self.space.knobs):
            for v in range(len(knob.options)):
                g = genes.copy()
                g[:, k] = v
                out.append(feats.gene_indices(self.space, g))
        out = np.unique(np.concatenate(out))
        return np.array([i for i in out if self._available(int(i))], dtype=np.int64)

    def _propose(self, n: int) -> Iterable[int]:
        warm = len(self._indices) < self.n_warmup and not self._transfer
        if not warm and self._stale:
            self._fit()
        if warm and self.prior:  # the prior's best guesses interleaved with unbiased random samples
            cand = self._candidates()
            x = feats.features_of_indices(self.task, cand, self._info)
            top = [int(i) for i in cand[np.lexsort((cand, -self._margin(x)))[:n]]]
            rnd = self._random_open(n, exclude=top)
            yield from (i for pair in zip(top, rnd) for i in pair)
            yield from top[len(rnd):] + rnd[len(top):]
            return
        if warm or (self.model is None and not self.prior):
            yield from self._random_open(n)
            return
        while True:
            if not self._plan:
                cand = self._candidates()
                if len(cand) == 0:
                    return
                scores = self.predict(cand)
                order = np.lexsort((cand, -scores))  # best first, ties by index (deterministic)
                self._plan = [int(i) for i in cand[order[:self.plan_size]]]
            for _ in range(n):
                if not self._plan:
                    break
                if self.epsilon > 0 and self.rng.random() < self.epsilon:
                    yield from self._random_open(1, exclude=self._plan)
                else:
                    yield self._plan.pop(0)

    def update(self, configs: Sequence[dict], results: Sequence[MeasureResult]) -> None:
        super().update(configs, results)
        self._plan = []


def _normalise(cycles: np.ndarray) -> np.ndarray:
    """Per-task throughput relative to the task's best: best cycles / cycles in (0, 1], 0 for failures."""
    ok = cycles > 0
    out = np.zeros(len(cycles), dtype=np.float32)
    if ok.any():
        out[ok] = cycles[ok].min() / cycles[ok]
    return out


# ------------------------------------------------------------------------------------------------------------

TUNERS = ("random", "gridsearch", "ga", "xgb", "xgb_rank")


_FACTORIES: dict[str, Callable[..., Tuner]] = {
    "random": RandomTuner, "gridsearch": GridSearchTuner, "ga": GATuner,
    "xgb": lambda t, seed, **kw: XGBTuner(t, seed, **{"loss_type": "reg", **kw}),
    "xgb_rank": lambda t, seed, **kw: XGBTuner(t, seed, **{"loss_type": "rank", **kw}),
}


def register_tuner(name: str, factory: Callable[..., Any]) -> None:
    """Make ``factory(task, seed=..., **kwargs)`` known to ``make_tuner`` as ``name`` (the auto-scheduler registers
    "auto" this way: a search is added by its module, not by editing this one)."""
    _FACTORIES[name] = factory


def tuner_names() -> tuple[str, ...]:
    return tuple(_FACTORIES)


def make_tuner(name: str, task: Task, seed: int = 0, **kwargs) -> Tuner:
    """A tuner by AutoTVM's names: random, gridsearch, ga, xgb (regression), xgb_rank (pairwise ranking); and those
    registered by other modules (``auto``: tuning.auto_network)."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown tuner {name!r}; allowed: {', '.join(_FACTORIES)}")
    tuner = _FACTORIES[name](task, seed=seed, **kwargs)
    tuner.name = name
    return tuner
