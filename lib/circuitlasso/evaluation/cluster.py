"""What a cluster buys: layer pairs run serially and as Ray tasks, measured on the same problem,
and a projection of the full layer-pair fits at the paper's model sizes.

- :func:`time_layer_pairs`: the wall time of :meth:`LayerRegressions.fit_all` with each
  executor, from an empty cache, its number of tasks and how far its coefficients are from the
  first executor's.
- :func:`serial_vs_ray`: :func:`time_layer_pairs` of SAE-like features, serial and on Ray.
- :func:`task_overhead`: seconds per empty task on an executor (scheduling and the round trip).
- :func:`time_task`: seconds of one layer-pair task at a given shape (``chunk`` child columns of
  SAE-like features, :func:`~circuitlasso.evaluation.solver_check.sae_like_problem`).
- :func:`projection`: for each of :data:`PAPER_RUNS`, tasks = pairs x ceil(width / chunk) times
  the measured task's seconds, dealt out to a number of workers. A projection, not a
  measurement: every task is assumed to cost what the measured one did (a wider SAE, or more
  prompts, costs more per column), and the workers to scale perfectly.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence

import pandas as pd

from circuitlasso.circuits.features import Features, fit_layer_pair
from circuitlasso.circuits.trace import LayerRegressions
from circuitlasso.evaluation.solver_check import sae_like_problem
from circuitlasso.executor import Executor, RayExecutor, SerialExecutor
from circuitlasso.timing import Stopwatch

PAPER_RUNS = {  # model: (layers with SAEs, SAE width), residual-stream SAEs as in the paper
    "Pythia-70M": (6, 32768),
    "GPT-2 small": (12, 32768),
    "Gemma-2-2B": (26, 65536),
    "Gemma-2-9B": (42, 131072),
}


def time_layer_pairs(
    Z: Mapping[int, Features],
    executors: Mapping[str, Executor],
    *,
    lam_ratio: float = 0.1,
    min_prompts: int = 1,
    chunk_size: int = 256,
) -> pd.DataFrame:
    """One row per executor: ``tasks``, ``seconds`` (every layer pair, from an empty cache),
    ``seconds_per_task`` and ``coef_diff_vs_first``, the largest difference of a coefficient
    from the first executor's, relative to the largest coefficient (0: the same result; Ray
    tasks run torch on ``cpus_per_task`` threads, which can round differently)."""
    rows, first, clock = [], None, Stopwatch()
    for name, executor in executors.items():
        with tempfile.TemporaryDirectory() as cache:
            regressions = LayerRegressions(dict(Z), lam_ratio, min_prompts=min_prompts,
                                           executor=executor, chunk_size=chunk_size,
                                           cache_dir=cache)  # fmt: skip
            with clock.timed(name):
                regressions.fit_all()
        seconds = clock.laps[name]
        coef = [regressions.coef(layer) for layer in regressions.layers[1:]]
        first = coef if first is None else first
        tasks = sum(math.ceil(Z[layer].shape[1] / chunk_size) for layer in sorted(Z)[1:])
        scale = max(abs(a).max() for a in first) or 1.0
        diff = max(abs(a - b).max() for a, b in zip(first, coef, strict=True)) / scale
        rows.append({"executor": name, "tasks": tasks, "seconds": seconds,
                     "seconds_per_task": seconds / tasks, "coef_diff_vs_first": diff})  # fmt: skip
    return pd.DataFrame(rows).set_index("executor")


def serial_vs_ray(shape: tuple[int, int], *, seed: int = 0, chunk_size: int = 256) -> pd.DataFrame:
    """:func:`time_layer_pairs` of one layer pair of SAE-like features (``shape`` = (prompts,
    SAE width), parents and children alike,
    :func:`~circuitlasso.evaluation.solver_check.sae_like_problem`) run by a
    :class:`SerialExecutor` ("serial") and by a :class:`RayExecutor` on this machine
    ("ray (this machine)"): one row per executor, columns as :func:`time_layer_pairs`'."""
    X, Y, _ = sae_like_problem(*shape, d=shape[1], seed=seed)
    ray = RayExecutor(logging_level="ERROR")
    executors: dict[str, Executor] = {"serial": SerialExecutor(), "ray (this machine)": ray}
    try:
        return time_layer_pairs({0: X, 1: Y.tocsr()}, executors, chunk_size=chunk_size)
    finally:
        ray.shutdown()  # the cluster it started: a kernel left with one exits slowly


def task_overhead(executor: Executor, n_tasks: int = 200) -> float:
    """Seconds per empty task: ``n_tasks`` tasks that return their index, timed together."""
    list(executor.map(int, range(2)))  # start the workers first
    clock = Stopwatch()
    list(executor.map(int, range(n_tasks)))
    return clock.lap("tasks") / n_tasks


def time_task(
    *,
    n_prompts: int = 8551,
    width: int = 32768,
    active_per_row: int = 200,
    chunk: int = 1024,
    lam_ratio: float = 0.1,
    seed: int = 0,
) -> float:
    """Seconds of one layer-pair task: ``chunk`` child columns on SAE-like parents
    (``n_prompts`` x ``width``, ``active_per_row`` active per prompt), the children as sparse
    as one layer's ``width`` outputs would be (about 30 active per prompt among ``width``)."""
    X, Y, _ = sae_like_problem(M=n_prompts, p=width, d=chunk, active_per_row=active_per_row,
                               active_outputs_per_row=30 * chunk / width, seed=seed)  # fmt: skip
    clock = Stopwatch()
    fit_layer_pair(X, Y.tocsr(), lam_ratio, parent=0, child=1)
    return clock.lap("task")


def projection(
    task_seconds: float,
    chunk_size: int,
    *,
    workers: Sequence[int] = (1, 8, 64),
    runs: Mapping[str, tuple[int, int]] = PAPER_RUNS,
) -> pd.DataFrame:
    """Projected hours of every layer pair of each run, as tasks of ``chunk_size`` columns that
    each take ``task_seconds``, on each number of workers (tasks dealt out evenly)."""
    rows = []
    for model, (layers, width) in runs.items():
        tasks = (layers - 1) * math.ceil(width / chunk_size)
        row = {"model": model, "layer pairs": layers - 1, "SAE width": width, "tasks": tasks}
        for n in workers:
            row[f"hours on {n} workers"] = math.ceil(tasks / n) * task_seconds / 3600
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")
