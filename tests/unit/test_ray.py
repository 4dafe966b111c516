"""Layer pairs and collection on a local Ray cluster (2 workers): the same results as the serial
run, a killed worker's task retried, a killed driver resumed from the cache; workers without the
network, as the tests."""

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


class FakeRay:
    """Ray's cluster calls, recorded: a cluster runs from the start when ``running``."""

    def __init__(self, running: bool) -> None:
        self.running, self.calls = running, []

    def is_initialized(self) -> bool:
        return self.running

    def init(self, **kwargs) -> None:
        self.running = True
        self.calls.append("init")

    def shutdown(self) -> None:
        self.running = False
        self.calls.append("shutdown")


@pytest.mark.parametrize("running", [False, True])
def test_shutdown_stops_the_cluster_the_executor_started_and_no_other(monkeypatch, running):
    fake = FakeRay(running)
    monkeypatch.setattr("circuitlasso.executor._import_ray", lambda: fake)
    executor = RayExecutor()
    assert list(executor.map(int, [])) == []
    executor.shutdown()
    executor.shutdown()  # once stopped, nothing more to stop
    assert fake.calls == ([] if running else ["init", "shutdown"])
    assert fake.running is running


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


class HoldsTheFirstTask:
    """Ray, with the first attempt of the first task held until its worker is killed: the
    worker writes its pid to ``marker`` (created for that attempt only, so the retry runs)."""

    def __init__(self, marker: Path) -> None:
        self.inner, self.marker = RayExecutor(), marker

    def map(self, task, indices):
        marker, first = str(self.marker), indices[0]

        def held(i: int):  # a closure: pickled by value to the workers
            if i == first:
                try:
                    with open(marker, "x") as mine:
                        mine.write(str(os.getpid()))
                except FileExistsError:  # the retry
                    pass
                else:
                    while True:  # until the test kills this worker
                        time.sleep(1)
            return task(i)

        return self.inner.map(held, indices)


@pytest.mark.slow  # a local Ray cluster
def test_a_worker_killed_mid_task_gives_the_same_result(cluster, Z, serial, tmp_path):
    marker, killed = tmp_path / "held", []
    done = threading.Event()

    def kill_the_held_worker() -> None:
        while not done.is_set() and not killed:
            pid = marker.read_text() if marker.exists() else ""
            if pid:  # written by the worker running the held task, which waits to be killed
                os.kill(int(pid), signal.SIGKILL)
                killed.append(int(pid))
            time.sleep(0.01)

    killer = threading.Thread(target=kill_the_held_worker)
    killer.start()
    try:
        on_ray = LayerRegressions(Z, **SETTINGS, cache_dir=tmp_path / "cache",
                                  executor=HoldsTheFirstTask(marker))  # fmt: skip
        on_ray.fit_all()  # ends only if the held task ran again on another worker
    finally:
        done.set()
        killer.join()
    assert len(killed) == 1  # the held task's worker, killed mid-task
    assert_same_fits(serial, on_ray)


_DRIVER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import ray, scipy.sparse as sp
    from circuitlasso.circuits.trace import LayerRegressions
    from circuitlasso.executor import RayExecutor

    folder, cache, chunk_size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first = {int(i) for i in sys.argv[4].split(",")}


    class StopsAfterTheFirstChunks:
        # Ray for the chunks of `first`; then a sign to the test, and a wait to be killed
        def map(self, task, indices):
            yield from RayExecutor().map(task, [i for i in indices if i in first])
            Path(folder, "stopped").touch()
            while True:
                time.sleep(1)


    Z = {layer: sp.load_npz(f"{folder}/z{layer}.npz").tocsr() for layer in (0, 1, 2)}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    regressions = LayerRegressions(Z, lam_ratio=0.1, min_prompts=5, chunk_size=chunk_size,
                                   cache_dir=cache, executor=StopsAfterTheFirstChunks())
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
    first = {0, 5, 13}  # chunks of both layer pairs; the driver is killed once they are saved
    command = [sys.executable, "-c", _DRIVER, str(tmp_path), str(cache), str(CHUNK),
               ",".join(map(str, sorted(first)))]  # fmt: skip
    driver = subprocess.Popen(command, start_new_session=True)
    try:
        while not (tmp_path / "stopped").exists():
            assert driver.poll() is None, f"the driver ended with {driver.returncode} first"
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the cluster it started
        driver.wait()
    finished = {
        int(path.stem.removeprefix("chunk_")) for path in cache.glob("results/*/chunk_*.pt")
    }
    assert finished == first  # saved as each ended; none other was started
    counting = Counting(RayExecutor())
    resumed = LayerRegressions(Z, **SETTINGS, cache_dir=cache, executor=counting)
    resumed.fit_all()
    assert sorted(counting.indices) == sorted(set(range(n_tasks)) - first)
    assert_same_fits(serial, resumed)


@pytest.mark.slow  # a local Ray cluster
def test_a_ray_worker_cannot_reach_the_network_either(cluster):
    def connect_off_this_machine(_: int) -> tuple[int, str]:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)  # without the guard: a refusal or a timeout, not a hang
            try:
                sock.connect(("203.0.113.1", 443))  # TEST-NET-3
            except OSError as err:
                return os.getpid(), f"{type(err).__name__}: {err}"
        return os.getpid(), "connected"

    [(_, (pid, found))] = list(RayExecutor().map(connect_off_this_machine, [0]))
    assert pid != os.getpid()  # in a worker
    assert found.startswith("NetworkBlockedError: network access blocked in tests: connect to")
