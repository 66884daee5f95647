"""The simulator's host-time profile (``Simulator.set_profile`` / ``profile``, what bench/network.py prints): it
never changes a result, counter or cycle, and it charges each class of work where it ran.
Correctness only: no timing thresholds."""

from __future__ import annotations

import numpy as np
from golden_files import requires_golden

from simulator.core import PROFILE_CLASSES, Simulator


@requires_golden
def test_profile_changes_nothing_and_counts_by_class() -> None:
    from test_golden import NAMES, assert_matches, image_path

    from simulator.image import load_image

    for name in NAMES:
        image = load_image(image_path(name))
        plain = Simulator(image.config).replay(image)
        sim = Simulator(image.config)
        assert sim.profile() == dict.fromkeys(PROFILE_CLASSES, 0.0), "a new simulator profiles nothing"
        sim.set_profile(True)
        got = sim.replay(image)
        prof = sim.profile()
        assert_matches(name, got.segments, got.stats)
        assert got.stats == plain.stats, name
        for (a1, d1), (a2, d2) in zip(plain.segments, got.segments):
            assert a1 == a2 and np.array_equal(d1, d2), name
        assert set(prof) == set(PROFILE_CLASSES) and all(v >= 0 for v in prof.values()), prof
        assert prof["run"] > 0 and prof["run"] >= sum(v for k, v in prof.items() if k != "run") * 0.999, prof
        for cls, counted in (("gemm", got.stats["gemm_counter"]), ("alu", got.stats["alu_counter"]),
                             ("store", got.stats["out_store_nbytes"]),
                             ("load", sum(got.stats[f"{m}_load_nbytes"] for m in ("inp", "wgt", "acc", "uop")))):
            assert (prof[cls] > 0) == (counted > 0), (name, cls, prof)
        sim.set_profile(False)
        assert sim.profile() == dict.fromkeys(PROFILE_CLASSES, 0.0), "set_profile zeroes the counters"
        sim.replay(image)
        assert sim.profile() == dict.fromkeys(PROFILE_CLASSES, 0.0), "profiling off counts nothing"
