"""Tuning several tasks: sequentially (AutoTVM's ``tune_tasks``) or with a task scheduler that spends each
next batch where it is expected to cut the network's latency most (weights x latency, as Ansor does).

Progress is printed as AutoTVM does, ``[Task  1/10]  Current/Best:  x/ y GOPS (board model) | Progress: (n/N) |
t s``, followed by a summary table (per task: default vs best latency, trials) and the end-to-end latency
estimate before and after. Every time and throughput says its basis (``simulator.stats``): the board model's
prediction, the simulator's cycles at the clock where the config has no board model, or measured (a board, a
CPU); accelerator throughput is GOPS (int8 operations), the host CPU's GFLOPS (float).

Budgets: ``n_trial`` is per task, as AutoTVM's: the sequential strategy gives each task ``n_trial`` trials, the
gradient scheduler shares ``n_trial`` x tasks (or ``total_trials``) among them, spending where the network gains
most. A log's records of these tasks are read first and said so (``resuming from N records in LOG``): the
configs there are never measured again, the trials of this tuner (or of records that name none) count toward
its budget, and another tuner's count as known results, not as this tuner's trials.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from graph_pack.untuned import UNTUNED, UNTUNED_TUNER, is_untuned
from hw_config.checks import is_whole
from tuning.measure import LocalRunner, MeasureResult
from tuning.records import RecordLog, check_log_path, load_records, log_lock, make_record
from tuning.task import Task
from tuning.tuners import Tuner, _result_of, make_tuner, tuner_names

STRATEGIES = ("sequential", "gradient")


@dataclass
class TaskState:
    """A task under tuning: its tuner, the trials spent, and the best latency after each batch."""

    task: Task
    tuner: Tuner
    default_cycles: int = 0
    default_s: float = float("inf")   # the default config's time on the board (the model's, or measured)
    basis: str = ""                    # what default_s and best_s are (figure_basis)
    untuned_s: float = float("inf")    # the kernel build runs without a record (a CPU task's; graph_pack.untuned)
    confirmed_s: float = float("inf")  # the best config's fastest time in the rounds against it (``confirm``)
    history: list[tuple[int, float]] = field(default_factory=list)   # (trials, best latency s)

    @property
    def best_s(self) -> float:
        """The best config's time on the board: what the tuners minimise (and its re-timings against the untuned
        kernel, ``confirm``)."""
        return min(_seconds(self.tuner.best_cost, self.task), self.confirmed_s)

    @property
    def baseline_s(self) -> float:
        """What the task runs at without tuning: the untuned build's kernel where it was measured (a CPU task),
        else the default config; a tuned config is applied only when faster."""
        return self.untuned_s if self.untuned_s < float("inf") else self.default_s

    @property
    def tuned_s(self) -> float:
        """What the task runs at after tuning: the best config, where it beat the baseline."""
        return min(self.baseline_s, self.best_s)

    @property
    def trials(self) -> int:
        """The trials that count toward this run's budget (``Tuner.budget_used``)."""
        return self.tuner.budget_used

    @property
    def earlier(self) -> int:
        """The configs another tuner measured, read from the log."""
        return self.tuner.earlier


def _on_cpu(task: Task) -> bool:
    """A host template's task (measured on a CPU, its "cycles" nanoseconds) rather than the accelerator's."""
    return getattr(task.cfg, "TARGET", "") == "cpu"


def _cycles_text(cycles: int | None, task: Task) -> str:
    return f"{cycles or 0:,} ns" if _on_cpu(task) else f"{cycles or 0:,} simulated cycles"


def figure_basis(task: Task, results: Sequence[MeasureResult] = ()) -> str:
    """What a task's times (the tuners' objective) are: "measured" on a board or a CPU, the "board model"'s
    prediction, or "simulated" (the simulator's cycles at the clock, where the config has no board model)."""
    from simulator.stats import MEASURED as MEASURED_BASIS
    from simulator.stats import latency_basis
    from tuning.measure import MEASURED
    if _on_cpu(task):
        return f"{MEASURED_BASIS} on the CPU"
    if any(r.device == MEASURED for r in results):
        return f"{MEASURED_BASIS} on a board"
    return latency_basis(task.cfg)


def _rate_unit(task: Task) -> str:
    """The accelerator runs int8 operations (GOPS, as vta run says); a host template float ones (GFLOPS)."""
    return "GFLOPS" if _on_cpu(task) else "GOPS"


def _seconds(cost: float | None, task: Task) -> float:
    """Board seconds of an objective value (``cost_cycles``: board time in clock cycles)."""
    return cost / (task.cfg.CLOCK_MHZ * 1e6) if cost else float("inf")


def resume(tuner: Tuner, log: str | os.PathLike | None) -> int:
    """Feed the task's finished trials in ``log`` to ``tuner`` (not the untuned kernel's, no config of its space,
    nor the re-timings of ``confirm``); returns how many."""
    if log is None:
        return 0
    return tuner.feed_records([r for r in load_records(log, task=tuner.task)
                               if not is_untuned(r.config) and r.tuner != CONFIRM_TUNER])


def measure_untuned(task: Task, runner, log: str | os.PathLike | None) -> MeasureResult | None:
    """The time of the kernel build runs for ``task`` without a record (``graph_pack.untuned``), measured by
    ``runner`` as a trial (the same timing as the configs) and logged as tuner ``untuned``, unless the log has it;
    None for a task without one (the accelerator's)."""
    if not getattr(task, "measures_untuned", False):
        return None
    logged = [r for r in load_records(log, task=task) if is_untuned(r.config) and r.ok] if log is not None else []
    if logged:
        return _result_of(dict(UNTUNED), min(logged, key=lambda r: r.rank).result)
    result = runner.measure(task, [dict(UNTUNED)])[0]
    if log is not None:
        RecordLog(log).append([make_record(task, result, UNTUNED_TUNER)])
    return result


def resume_line(tuners: Sequence[Tuner], log: str | os.PathLike, per_task: int | None, total: int) -> str:
    """What a log holds for these tasks and what this run does with it: ``resuming from N records in LOG: ...``.
    ``per_task``: each task's budget (sequential), else ``total`` is shared by all tasks."""
    keys = {(t.task.key, t.task.cfg.fingerprint) for t in tuners}
    records = [r for r in load_records(log, template=None) if (r.workload, r.hw) in keys]
    by = Counter(r.tuner or "an unnamed tuner" for r in records)
    name = tuners[0].name
    measured = sum(1 for t in tuners if t.trials)
    used = sum(t.budget_used for t in tuners)
    line = (f"resuming from {len(records)} records in {log}: {measured} of {len(tuners)} tasks measured before ("
            + ", ".join(f"{n} by {who}" for who, n in by.most_common()) + "; no config is measured twice); ")
    if per_task is not None:
        left = sum(max(0, per_task - t.budget_used) for t in tuners)
        line += f"{name} tunes each task to {per_task} trials of its own ({used} done, {left} to go)"
    else:
        left = max(0, total - used)
        line += f"{name} shares {total} trials among the tasks ({used} done, {left} to go)"
    if any(t.earlier for t in tuners):
        line += f"; trials of other tuners are known results, not {name}'s"
    if not left:
        line += ("; nothing left to measure: raise the budget to measure more (--n-trial), or start a new log "
                 "(another --log; vta tune --fresh moves this one aside)")
    return line


def run_batch(tuner: Tuner, runner, n: int, log: str | os.PathLike | None) -> tuple[list[dict], list[MeasureResult]]:
    """Measure the tuner's next ``n`` configs, update it, append the records (fsync'ed)."""
    configs = tuner.next_batch(n)
    return (configs, tuner.measure(runner, configs, log)) if configs else ([], [])


class Progress:
    """AutoTVM-style progress lines (rewritten in place on a terminal)."""

    def __init__(self, n_tasks: int, out: TextIO | None = None):
        self.n_tasks, self.out = n_tasks, out if out is not None else sys.stdout
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.t0 = time.perf_counter()

    def update(self, index: int, state: TaskState, results: list[MeasureResult], done: int, budget: int) -> None:
        """One line after a batch: this batch's best and the task's best throughput, trials done / budget
        (the task's own under sequential tuning, all tasks' under the scheduler)."""
        ok = [r for r in results if r.ok]
        cur = max((state.task.flop / r.latency_s / 1e9 for r in ok if r.latency_s), default=0.0)
        best = state.task.flop / state.best_s / 1e9 if state.best_s != float("inf") else 0.0
        basis = figure_basis(state.task, ok) if ok else state.basis
        line = (f"[Task {index + 1:2d}/{self.n_tasks:2d}]  Current/Best: {cur:7.2f}/{best:7.2f} "
                f"{_rate_unit(state.task)} ({basis}) | Progress: ({done}/{budget}) | "
                f"{time.perf_counter() - self.t0:.2f} s | best {state.best_s * 1e3:.3f} ms ({basis}), "
                f"{_cycles_text(state.tuner.best_cycles, state.task)}")
        self.out.write(("\r" + line) if self.tty else line + "\n")
        self.out.flush()
        self._open = self.tty

    def end_line(self) -> None:
        """Finish a line rewritten in place (terminals only)."""
        if getattr(self, "_open", False):
            self.out.write("\n")
            self.out.flush()
            self._open = False


@dataclass
class TuneSummary:
    states: list[TaskState]

    @property
    def latency_before_s(self) -> float:
        return sum(s.task.weight * s.baseline_s for s in self.states)

    @property
    def latency_after_s(self) -> float:
        return sum(s.task.weight * s.tuned_s for s in self.states)

    def best_configs(self) -> dict[str, dict]:
        """``{workload_key: config}`` for build's ``schedules`` (a task keeps its untuned kernel, or its default,
        when tuning found nothing faster)."""
        return {s.task.key: s.tuner.best_config for s in self.states
                if s.tuner.best_config is not None and s.best_s < s.baseline_s}

    def table(self) -> str:
        untuned = any(s.untuned_s < float("inf") for s in self.states)
        lines = [f"{'#':>3} {'task':54} {'weight':>6} {'default ms':>11} " + ("untuned ms " if untuned else "")
                 + f"{'best ms':>9} {'speedup':>8} {'trials':>7}"]
        for i, s in enumerate(self.states, 1):
            best = s.tuned_s
            cycles = s.tuner.best_cycles if s.best_s < s.baseline_s else (
                s.default_cycles if s.baseline_s == s.default_s else round(s.untuned_s * 1e9))
            lines.append(f"{i:3d} {s.task.name[:54]:54} {s.task.weight:6d} {s.default_s * 1e3:11.3f} "
                         + (f"{s.untuned_s * 1e3:10.3f} " if untuned else "")
                         + f"{best * 1e3:9.3f} {s.baseline_s / best if best else 0:7.2f}x {s.trials:7d}   "
                         f"{_cycles_text(cycles, s.task)}" + (f"; +{s.earlier} by another tuner, from the log"
                                                             if s.earlier else ""))
        before, after = self.latency_before_s, self.latency_after_s
        bases = sorted({s.basis for s in self.states if s.basis})
        where = " / ".join(bases) or "-"
        lines.append(f"end-to-end (tuned layers, weighted): {before * 1e3:.3f} ms -> {after * 1e3:.3f} ms "
                     f"({before / after if after else 0:.2f}x); default ms and best ms: {where}"
                     + (" (docs/simulate.md, \"Which time is which\")" if where != "-" else "")
                     + ("; untuned ms: the kernel build runs without a record (host.jit's), the baseline; speedup: "
                        "best over it" if untuned else ""))
        return "\n".join(lines)


MAX_TRIALS = 10_000_000   # the CLI's --n-trial / --total-trials / --early-stopping bound (tuning.cli.TRIALS)


def _check_count(name: str, value, *, none_ok: bool = False) -> None:
    """Refuse, before any work, a trial count that is not an integer 1..MAX_TRIALS (None where ``none_ok``): a float
    (1.5), a bool (True) or 10**30 would tune a different budget than the one asked for."""
    if value is None and none_ok:
        return
    allowed = f"an integer 1..{MAX_TRIALS:,}" + (" or None" if none_ok else "")
    if not is_whole(value):
        raise TypeError(f"{name}={value!r}: {allowed}")
    if not 1 <= value <= MAX_TRIALS:
        raise ValueError(f"{name}={value!r}: {allowed}")


def check_tuning_arguments(*, tuner: str, strategy: str, n_trial, total_trials=None, batch_size=16,
                           early_stopping=None, log: str | os.PathLike | None = None) -> None:
    """``tune_tasks``' arguments checked (TypeError, ValueError naming them): also called first by the whole-network
    tuners, so a bad count is refused before a model is loaded and packed."""
    if tuner not in tuner_names():
        raise ValueError(f"unknown tuner {tuner!r}; allowed: {', '.join(tuner_names())}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}; allowed: {', '.join(STRATEGIES)}")
    _check_count("n_trial", n_trial)
    _check_count("total_trials", total_trials, none_ok=True)
    _check_count("batch_size", batch_size)
    _check_count("early_stopping", early_stopping, none_ok=True)
    if log is not None:
        check_log_path(log)


def tune_tasks(tasks: Sequence[Task], *, tuner: str = "xgb", n_trial: int = 200, total_trials: int | None = None,
               runner=None, log: str | os.PathLike | None = None, early_stopping: int | None = None,
               strategy: str = "sequential", batch_size: int = 16, seed: int = 0, transfer: bool = True,
               out: TextIO | None = None) -> TuneSummary:
    """Tune ``tasks``; ``n_trial`` per task (sequential) or ``total_trials`` shared by the scheduler
    (gradient; default n_trial x tasks). Resumes from ``log``, which it holds meanwhile (``records.log_lock``: another
    run on the same log is refused naming its pid); prints progress and the summary to ``out``.
    ``n_trial``, ``total_trials``, ``batch_size`` and ``early_stopping`` are integers 1..10,000,000 (``total_trials``
    and ``early_stopping`` may be None), refused naming them before any work (TypeError, ValueError)."""
    check_tuning_arguments(tuner=tuner, strategy=strategy, n_trial=n_trial, total_trials=total_trials,
                           batch_size=batch_size, early_stopping=early_stopping, log=log)
    # one run per log: a second one would measure the same configs and interleave its records with these
    with log_lock(log) if log is not None else contextlib.nullcontext():
        return _tune_tasks(tasks, tuner, n_trial, total_trials, runner, log, early_stopping, strategy, batch_size,
                           seed, transfer, out)


def _tune_tasks(tasks: Sequence[Task], tuner: str, n_trial: int, total_trials: int | None, runner,
                log: str | os.PathLike | None, early_stopping: int | None, strategy: str, batch_size: int, seed: int,
                transfer: bool, out: TextIO | None) -> TuneSummary:
    runner = runner or LocalRunner()
    out = out if out is not None else sys.stdout
    states = []
    tuners = [make_tuner(tuner, task, seed=seed + i) for i, task in enumerate(tasks)]
    for t in tuners:
        if transfer and log is not None and hasattr(t, "load_history"):
            others = [r for r in load_records(log, cfg=t.task.cfg, template=t.task.template_version)
                      if r.workload != t.task.key and not is_untuned(r.config) and r.tuner != CONFIRM_TUNER]
            if others:
                t.load_history(others)
        resume(t, log)
    if log is not None and any(t.trials for t in tuners):
        out.write(resume_line(tuners, log, n_trial if strategy == "sequential" else None,
                              total_trials or n_trial * len(tasks)) + "\n")
    for t in tuners:
        task = t.task
        default = t.measure_default(runner, log)
        if default is None or not t.cost(default):
            raise RuntimeError(f"{task.name}: the template's default config failed to run")
        untuned = measure_untuned(task, runner, log)
        if untuned is not None and not t.cost(untuned):
            raise RuntimeError(f"{task.name}: the untuned build's kernel failed to run: {untuned.error}")
        states.append(TaskState(task, t, int(default.cycles), _seconds(t.cost(default), task),
                                figure_basis(task, [default]),
                                untuned_s=_seconds(t.cost(untuned), task) if untuned is not None else float("inf")))
    progress = Progress(len(states), out)
    if strategy == "sequential":
        for i, s in enumerate(states):
            _tune_one(i, s, runner, n_trial, batch_size, early_stopping, log, progress)
    else:
        _schedule(states, runner, total_trials or n_trial * len(states), batch_size, log, progress)
    for s in states:
        confirm(s, runner, log)
    summary = TuneSummary(states)
    out.write(summary.table() + "\n")
    return summary


CONFIRM_ROUNDS = 3
CONFIRM_TUNER = "confirm"   # the tuner field of a best config's re-timings against the untuned kernel


def confirm(s: TaskState, runner, log: str | os.PathLike | None) -> None:
    """Where a task's best config beat its untuned kernel, time the two again in alternating rounds (one runner,
    back to back, the same load) and log every timing, the config's as tuner ``confirm``: build keeps each side's
    fastest record, so the untuned kernel has as many chances as the config it is compared with, and a config
    that won by one lucky timing among its trials meets it again in the same rounds. A resumed run whose log has
    them does not time them again."""
    config = s.tuner.best_config
    if config is None or s.untuned_s == float("inf") or not s.best_s < s.untuned_s:
        return
    key = json.dumps(config, sort_keys=True)   # (a config's tuples are a record's lists)
    done = [r for r in load_records(log, task=s.task) if r.tuner == CONFIRM_TUNER and r.ok
            and json.dumps(r.config, sort_keys=True) == key] if log is not None else []
    if len(done) >= CONFIRM_ROUNDS:   # a resumed run: these rounds were timed (the untuned ones are in untuned_s)
        s.confirmed_s = min(_seconds(s.tuner.cost(_result_of(config, r.result)), s.task) for r in done)
        return
    configs = [dict(UNTUNED), dict(config)] * CONFIRM_ROUNDS
    results = runner.measure(s.task, configs)
    if log is not None:
        RecordLog(log).append([make_record(s.task, r, UNTUNED_TUNER if is_untuned(c) else CONFIRM_TUNER)
                               for c, r in zip(configs, results, strict=True)])
    for c, r in zip(configs, results, strict=True):
        seconds = _seconds(s.tuner.cost(r), s.task)
        if is_untuned(c):
            s.untuned_s = min(s.untuned_s, seconds)
        else:
            s.confirmed_s = min(s.confirmed_s, seconds)


def _tune_one(index: int, s: TaskState, runner, n_trial: int, batch_size: int, early_stopping: int | None,
              log, progress: Progress) -> None:
    last_gain = s.trials
    best = s.best_s
    while s.trials < n_trial and s.tuner.has_next():
        _, results = run_batch(s.tuner, runner, min(batch_size, n_trial - s.trials), log)
        if not results:
            break
        s.history.append((s.trials, s.best_s))
        progress.update(index, s, results, s.trials, n_trial)
        if s.best_s < best:
            best, last_gain = s.best_s, s.trials
        if early_stopping is not None and s.trials - last_gain >= early_stopping:
            break
    progress.end_line()


def _schedule(states: list[TaskState], runner, total: int, batch_size: int, log, progress: Progress) -> None:
    """Ansor-style allocation: after one warm-up batch each, the next batch goes to the task with the
    largest expected drop of weight x latency per trial (recent improvement, or a share of its latency
    when it has not improved lately, so no task starves)."""
    spent = sum(s.trials for s in states)

    def step(i: int, n: int) -> int:
        """One batch of ``n`` for task ``i``; returns the trials it spent."""
        s = states[i]
        before = s.trials
        _, results = run_batch(s.tuner, runner, n, log)
        if s.trials > before:
            s.history.append((s.trials, s.best_s))
            progress.update(i, s, results, spent + s.trials - before, total)
        return s.trials - before

    # warm-up: one batch for every task that has only its default measured (a resumed task had its warm-up)
    live = [i for i, s in enumerate(states) if s.tuner.has_next() and s.trials <= 1]
    warm_up = max(1, min(batch_size, (total - spent) // max(1, len(live))))  # every task gets one, budget allowing
    for s in states:
        if s.trials > 1:
            s.history.append((s.trials, s.best_s))
    for i in live:
        if spent >= total:
            break
        spent += step(i, min(warm_up, total - spent))
    while spent < total:
        live = [i for i, s in enumerate(states) if s.tuner.has_next()]
        if not live:
            break
        used = step(max(live, key=lambda j: (_expected_gain(states[j]), -j)), min(batch_size, total - spent))
        if not used:
            break
        spent += used
    progress.end_line()


def _expected_gain(s: TaskState, window: int = 3, alpha: float = 0.05) -> float:
    best = s.tuned_s
    if len(s.history) >= 2:
        old_trials, old_best = s.history[max(0, len(s.history) - 1 - window)]
        new_trials, new_best = s.history[-1]
        backward = max(0.0, min(old_best, s.baseline_s) - min(new_best, s.baseline_s)) / max(1, new_trials - old_trials)
    else:
        backward = 0.0
    forward = alpha * best / max(1, s.trials)
    return s.task.weight * max(backward, forward)
