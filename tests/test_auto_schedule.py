"""The auto-scheduler's search (tuning/auto_schedule.py): the default schedule is measured first and kept unless
something beat it in the same measurements, every measured kernel's output is checked, the cost model learns
from the features what makes a schedule fast, and evolution moves the population toward what the model
predicts. No timing thresholds: the synthetic costs below stand in for a clock where a test needs to know the
answer."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from extras import needs

import host
from graph_pack import kernels as K
from host import compile_schedule, ops
from host.features import NAMES, features
from host.schedule import lower
from host.sketch import generate_sketches, sample
from tuning.auto_schedule import CostModel, SearchPolicy, auto_schedule, evolve

pytestmark = needs("xgboost")
SMALL = SearchPolicy(population=12, generations=1, batch=4)


def _synthetic_seconds(dag, sched) -> float:
    """A made-up cost with a known best: vector lanes and an accumulator tile of ~16 help, a long
    innermost stride hurts."""
    _, nests = lower(dag, sched)
    n = max(nests, key=lambda n: math.prod(lp.extent for lp in n.loops))
    lanes = n.vector.extent if n.vector else 1
    tile = math.prod(lp.extent for lp in n.tile_loops) if n.stage.reduce else 1
    return 1e-3 / lanes * (1 + abs(math.log2(tile) - 4))


def test_search_measures_the_default_first_keeps_the_fastest_and_its_output_is_exact():
    dag = ops.dense((2, 32), (16, 32), consumers=[("add", "channel"), ("relu",)])
    result = auto_schedule(dag, n_trial=9, policy=SMALL, seed=1)
    assert len(result.trials) == 9 and result.trials[0].source == "default"
    assert result.default_seconds == result.trials[0].seconds
    ok = [t for t in result.trials if t.seconds is not None]
    assert result.best_seconds == min(t.seconds for t in ok) <= result.default_seconds
    assert len({t.schedule.to_json() for t in result.trials}) == 9   # never measures a schedule twice
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 32), (16, 32), (16,)))
    got = compile_schedule(dag, result.best)(x, w, b)
    assert np.array_equal(got, np.maximum(K.dense(x, w) + b, 0))


def test_a_kernel_whose_output_differs_is_a_failed_trial_never_the_best(monkeypatch):
    import tuning.auto_schedule as search

    class Wrong:
        def __init__(self, kernel):
            self.kernel = kernel

        def __call__(self, *xs, **kw):
            out = self.kernel(*xs, **kw)
            out.flat[0] = np.nextafter(out.flat[0], np.float32(np.inf))   # one ulp off, in one element
            return out

    real = host.compile_schedule   # what the search compiles with
    monkeypatch.setattr(host, "compile_schedule",
                        lambda dag, s: real(dag, s) if s.sketch == "default" else Wrong(real(dag, s)))
    result = search.auto_schedule(ops.dense((2, 16), (8, 16)), n_trial=5, policy=SMALL)
    assert [t.error for t in result.trials[1:]] == ["ArithmeticError: output differs from the default schedule's"] * 4
    assert result.best.sketch == "default"


def test_one_trial_is_the_default_schedule():
    dag = ops.gelu((4, 8))
    result = auto_schedule(dag, n_trial=1)
    assert result.best.sketch == "default" and result.speedup == 1.0
    with pytest.raises(ValueError, match="n_trial must be >= 1"):
        auto_schedule(dag, n_trial=0)


def test_reassociating_search_offers_rfactor_and_checks_outputs_to_tolerance():
    dag = ops.softmax((1, 4096))   # lane partials over 256 chunks: long enough for rfactor
    result = auto_schedule(dag, n_trial=6, exact=False, policy=SMALL, seed=2)
    assert all(t.error is None for t in result.trials), [t.error for t in result.trials]
    assert any(t.schedule.rfactors for t in result.trials)


def test_features_have_one_length_for_every_sketch_and_see_the_annotations():
    dag = ops.conv2d((1, 4, 6, 6), (8, 4, 3, 3), padding=(1, 1, 1, 1), consumers=[("relu",)])
    rng = random.Random(0)
    for sketch in generate_sketches(dag):
        s = sample(dag, sketch, rng)
        f = features(dag, s)
        assert f.shape == (len(NAMES),) and np.isfinite(f).all()
    s = next(s for s in (sample(dag, generate_sketches(dag)[0], rng) for _ in range(50)) if s.stage("conv").vectorize)
    plain = s.replace_stage(replace(s.stage("conv"), vectorize=False))
    assert not np.array_equal(features(dag, s), features(dag, plain))


def _dataset(dag, n, seed):
    rng = random.Random(seed)
    sketches = generate_sketches(dag)
    scheds = [sample(dag, rng.choice(sketches), rng) for _ in range(n)]
    return scheds, np.stack([features(dag, s) for s in scheds]), [_synthetic_seconds(dag, s) for s in scheds]


def _rank_corr(a, b) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_the_cost_model_learns_what_makes_a_schedule_fast_and_evolution_follows_it():
    dag = ops.dense((4, 64), (32, 64))
    _, x_train, secs = _dataset(dag, 120, 0)
    model = CostModel(seed=0)
    for x, s in zip(x_train, secs, strict=True):
        model.add(x, s)
    model.fit()
    _, x_test, test_secs = _dataset(dag, 60, 1)
    pred = model.predict(x_test, random.Random(0))
    assert _rank_corr(pred, [-math.log2(s) for s in test_secs]) > 0.7
    rng = random.Random(5)
    ranked = evolve(dag, generate_sketches(dag), model, [], SearchPolicy(population=24, generations=2), rng)
    top = [s for _, s in ranked[:8]]
    random_mean = np.mean([_synthetic_seconds(dag, s) for s in _dataset(dag, 40, 9)[0]])
    assert np.mean([_synthetic_seconds(dag, s) for s in top]) < random_mean


def test_schedules_are_records_of_integer_knobs_and_back():
    from host.knobs import config_schedule, schedule_config
    rng = random.Random(4)
    for dag in (ops.conv2d((1, 4, 6, 6), (8, 4, 3, 3), padding=(1, 1, 1, 1), consumers=[("relu",)]),
                ops.softmax((1, 128)), ops.layer_norm((4, 16))):
        from host.schedule import default_schedule
        assert config_schedule(dag, schedule_config(dag, default_schedule(dag))) == default_schedule(dag)
        for sketch in generate_sketches(dag, exact=False):
            s = sample(dag, sketch, rng)
            config = schedule_config(dag, s)
            assert all(isinstance(v, int) or (isinstance(v, list) and all(isinstance(x, int) for x in v))
                       for v in config.values())
            assert config_schedule(dag, config) == s
    dag = ops.dense((2, 8), (4, 8))
    config = schedule_config(dag, sample(dag, generate_sketches(dag)[0], rng))
    with pytest.raises(ValueError, match="sketch 7 is not one of"):
        config_schedule(dag, {**config, "sketch": 7})
    with pytest.raises(ValueError, match="tiles has 3 factors"):
        config_schedule(dag, {**config, "dense.tiles": [1, 2, 1]})


def test_a_search_logs_its_trials_as_tuning_records_and_resumes_from_them(tmp_path):
    from host.knobs import AUTO_VERSION
    from host.templates import host
    from tuning.records import load_records
    log = tmp_path / "auto.jsonl"
    dag = ops.dense((2, 16), (8, 16), consumers=[("relu",)])
    first = auto_schedule(dag, n_trial=4, policy=SMALL, log=log)
    records = load_records(log, cfg=host(), template=AUTO_VERSION)
    assert len(records) == 5 and {r.op for r in records} == {"auto.dense"}
    assert [r.tuner for r in records] == ["auto", "untuned", "auto", "auto", "auto"]   # build's kernel timed too
    assert records[0].config == {"sketch": -1} and records[0].result["latency_s"] == first.default_seconds
    assert records[1].config == {"untuned": 1} and records[1].result["latency_s"] == first.untuned_seconds
    assert first.applied == (first.best_seconds < first.untuned_seconds)
    again = auto_schedule(dag, n_trial=6, policy=SMALL, log=log)
    assert len(log.read_text().splitlines()) == 7                       # two new trials, nothing measured twice
    assert again.untuned_seconds == first.untuned_seconds
    assert [t.source for t in again.trials[:4]] == ["default", "log", "log", "log"]
    assert again.default_seconds == first.default_seconds                # the default came from the log
    assert len({t.schedule.to_json() for t in again.trials}) == 6
