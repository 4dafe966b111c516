"""Layer pairs and collection on a local Ray cluster (2 workers): the same results as the serial
run, a killed worker's task retried, a killed driver resumed from the cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from circuitlasso.circuits.trace import LayerRegressions
from circuitlasso.collect.features import collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola
from circuitlasso.executor import RayExecutor, SerialExecutor, get_executor

ray = pytest.importorskip("ray")

LAYERS, WIDTH, CHUNK = (0, 1, 2), 192, 16  # 2 layer pairs x 12 chunks of child columns
SETTINGS = dict(lam_ratio=0.1, min_prompts=5, chunk_size=CHUNK)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def toy():
    model = load_model("toy")
    return model, load_saes("toy", LAYERS, model=model)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    return list(load_toy_cola("train")["sentence"][:200])


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread, as each Ray task runs it (cpus_per_task=1): the same rounding."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def features(toy, prompts, tmp_path_factory) -> dict[int, sp.csr_matrix]:
    model, saes = toy
    with one_thread():
        return collect_sae_features(model, saes, prompts, cache_dir=tmp_path_factory.mktemp("z"),
                                    progress=False)  # fmt: skip


@pytest.fixture(scope="module")
def Z(features) -> dict[int, sp.csr_matrix]:
    return {layer: z[:, :WIDTH].tocsr() for layer, z in features.items()}


@pytest.fixture(scope="module")
def serial(Z, tmp_path_factory) -> LayerRegressions:
    with one_thread():
        regressions = LayerRegressions(Z, **SETTINGS, cache_dir=tmp_path_factory.mktemp("serial"))
        regressions.fit_all()
    return regressions


def assert_same_fits(a: LayerRegressions, b: LayerRegressions) -> None:
    """Every child column: the same coefficients and the same certified gap, bit for bit."""
    for layer in LAYERS[1:]:
        assert sorted(a._fits[layer]) == sorted(b._fits[layer]) == list(range(WIDTH))
        for feature, fit in a._fits[layer].items():
            other = b._fits[layer][feature]
            i = int(np.flatnonzero(fit.children == feature)[0])
            j = int(np.flatnonzero(other.children == feature)[0])
            np.testing.assert_array_equal(fit.coef[:, i].toarray(), other.coef[:, j].toarray())
            assert fit.gap[i] == other.gap[j] and fit.converged[i] == other.converged[j]
    assert any(fit.coef.nnz for fit in a._fits[LAYERS[-1]].values())  # not all zero


class Counting:
    """An executor that counts the tasks it is given."""

    def __init__(self, inner) -> None:
        self.inner, self.indices = inner, []

    def map(self, task, indices):
        self.indices += list(indices)
        return self.inner.map(task, indices)


def test_get_executor_names_and_errors():
    assert isinstance(get_executor(None), SerialExecutor)
    assert isinstance(get_executor("ray"), RayExecutor)
    custom = Counting(SerialExecutor())
    assert get_executor(custom) is custom
    with pytest.raises(ValueError, match="executor is 'serial', 'ray' or an Executor"):
        get_executor("dask")
    with pytest.raises(ValueError, match="cpus_per_task must be > 0"):
        RayExecutor(cpus_per_task=0)


@pytest.mark.slow  # a local Ray cluster
def test_layer_pairs_on_ray_equal_the_serial_run(cluster, Z, serial, tmp_path):
    counting = Counting(RayExecutor(cpus_per_task=1))
    on_ray = LayerRegressions(Z, **SETTINGS, cache_dir=tmp_path, executor=counting)
    on_ray.fit_all()
    assert sorted(counting.indices) == list(range(2 * WIDTH // CHUNK))  # one task per chunk
    assert_same_fits(serial, on_ray)
    again = Counting(RayExecutor())  # a rerun reads every chunk from the cache
    rerun = LayerRegressions(Z, **SETTINGS, cache_dir=tmp_path, executor=again)
    rerun.fit_all()
    assert again.indices == []
    assert_same_fits(serial, rerun)


@pytest.mark.slow  # a local Ray cluster
def test_collection_on_ray_equals_the_serial_collection(cluster, toy, prompts, features, tmp_path):
    model, saes = toy
    counting = Counting(RayExecutor())
    on_ray = collect_sae_features(model, saes, prompts, cache_dir=tmp_path, progress=False,
                                  executor=counting)  # fmt: skip
    assert sorted(counting.indices) == list(range(len(prompts) // 32 + 1))  # one task per batch
    for layer in LAYERS:
        assert on_ray[layer].nnz and (on_ray[layer] != features[layer]).nnz == 0


def _task_workers() -> list[int]:
    """Processes of Ray workers running a task now (Ray titles them after the task)."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"ray::_run_on_worker"):
            found.append(int(pid))
    return found


@pytest.mark.slow  # a local Ray cluster
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds workers in /proc")
def test_a_worker_killed_mid_run_gives_the_same_result(cluster, Z, serial, tmp_path):
    killed: list[int] = []
    done = threading.Event()

    def kill_one_worker() -> None:
        while not done.is_set() and not killed:
            for pid in _task_workers():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                break
            time.sleep(0.002)

    killer = threading.Thread(target=kill_one_worker)
    killer.start()
    try:
        on_ray = LayerRegressions(Z, **SETTINGS, cache_dir=tmp_path, executor=RayExecutor())
        on_ray.fit_all()
    finally:
        done.set()
        killer.join()
    assert killed, "no worker was running a task to kill"
    assert_same_fits(serial, on_ray)


_DRIVER = textwrap.dedent(
    """
    import sys
    import ray, scipy.sparse as sp
    from circuitlasso.circuits.trace import LayerRegressions
    from circuitlasso.executor import RayExecutor

    Z = {layer: sp.load_npz(f"{sys.argv[1]}/z{layer}.npz").tocsr() for layer in (0, 1, 2)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    regressions = LayerRegressions(Z, lam_ratio=0.1, min_prompts=5, chunk_size=int(sys.argv[3]),
                                   cache_dir=sys.argv[2], executor=RayExecutor())
    regressions.fit_all()
    """
)


@pytest.mark.slow  # a local Ray cluster
def test_an_interrupted_driver_resumes_without_refitting_finished_chunks(
    cluster, Z, serial, tmp_path
):
    for layer, z in Z.items():
        sp.save_npz(tmp_path / f"z{layer}.npz", z)
    cache = tmp_path / "cache"
    n_tasks = 2 * WIDTH // CHUNK
    command = [sys.executable, "-c", _DRIVER, str(tmp_path), str(cache), str(CHUNK)]
    driver = subprocess.Popen(command, start_new_session=True)

    def saved() -> list[Path]:
        return list(cache.glob("results/*/chunk_*.pt"))

    try:
        deadline = time.monotonic() + 240
        while len(saved()) < 3 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the cluster it started
        driver.wait()
    finished, previous = set(), None
    while finished != previous:  # until no worker of the killed cluster saves any more
        previous = finished
        time.sleep(1.0)
        finished = {int(path.stem.removeprefix("chunk_")) for path in saved()}
    assert 3 <= len(finished) < n_tasks, f"the driver was stopped after {len(finished)} chunks"
    counting = Counting(RayExecutor())
    resumed = LayerRegressions(Z, **SETTINGS, cache_dir=cache, executor=counting)
    resumed.fit_all()
    assert sorted(counting.indices) == sorted(set(range(n_tasks)) - finished)
    assert_same_fits(serial, resumed)
