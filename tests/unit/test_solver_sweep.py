"""The solver benchmark's randomized shape sweep (benchmarks/solver.py --sweep)."""

import json
import time

import pytest

from circuitlasso import timing


@pytest.fixture(scope="module")
def solver(benchmark_script):
    return benchmark_script("solver")


def test_shapes_are_seeded_and_in_range(solver) -> None:
    shapes = solver.draw_shapes(12, seed=0)
    assert shapes == solver.draw_shapes(12, seed=0)
    assert shapes != solver.draw_shapes(12, seed=1)
    for shape in shapes:
        assert 8192 <= shape["p"] <= 49152
        assert 2048 <= shape["M"] <= 16384
        assert 16 <= shape["active_per_row"] <= 400
        assert shape["tol"] in (1e-4, 1e-6)
    assert {shape["frequency"] for shape in shapes} == {"power-law", "uniform"}
    assert {shape["tol"] for shape in shapes} == {1e-4, 1e-6}


def test_scale_shrinks_p_and_m_and_caps_the_density(solver) -> None:
    full, small = solver.draw_shapes(5, seed=3), solver.draw_shapes(5, seed=3, scale=0.02)
    for big, tiny in zip(full, small, strict=True):
        assert tiny["p"] == round(big["p"] * 0.02)
        assert tiny["M"] == round(big["M"] * 0.02)
        assert tiny["active_per_row"] == min(big["active_per_row"], tiny["p"] // 8)


class TickingClock:
    """``time`` whose ``perf_counter`` moves ``step`` seconds at each reading: every timed span
    between two readings takes ``step``, the X^T Y floor, our solve of all outputs and a peer's
    of one. Everything else is the ``time`` module's."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


def test_tiny_sweep_end_to_end(
    solver, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the benchmark's Stopwatch (the solvers time nothing themselves)
    monkeypatch.setattr(timing, "time", TickingClock(0.5))
    solver.main(
        ["--sweep", "2", "--seed", "0", "--scale", "0.02", "--sweep-outputs", "8",
         "--peer-outputs", "2", "--peers", "scikit-learn", "--threads", "1", "--tol", "1e-4"]
    )  # fmt: skip
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(summary) == {
        "min_speedup_vs_best_peer",
        "median_speedup_vs_best_peer",
        "max_over_xty_floor",
        "shapes",
    }
    assert len(summary["shapes"]) == 2
    for row in summary["shapes"]:
        assert row["tol"] == 1e-4  # --tol overrides the drawn tolerance
        # 0.5 s for our 8 outputs, 0.5 s for each of the peer's: 8 times faster per output
        assert row["ms_per_output_ours"] == 500 / 8 and row["ms_per_output_scikit-learn"] == 500
        assert row["speedup_vs_best_peer"] == 8.0 and row["over_xty_floor"] == 1.0
    assert summary["min_speedup_vs_best_peer"] == summary["median_speedup_vs_best_peer"] == 8.0
    assert summary["max_over_xty_floor"] == 1.0
