"""Where independent tasks run: one after another in this process (:class:`SerialExecutor`, the
default) or as Ray tasks on a local or remote cluster (:class:`RayExecutor`, the optional extra
``pip install circuitlasso[ray]``).

A run hands an executor one task function and the indices to run it on; the executor yields
``(index, result)`` as tasks finish, in any order. With Ray the function, and the data it closes
over (feature matrices, a model and its SAEs), goes to the object store once; each worker
deserializes it once and keeps it for every task of the run it is given. A task whose worker
dies is retried on another (``max_retries``). Callers cache each task's result as the task
finishes (:func:`circuitlasso.cache.load_or_compute_chunks`), so a driver that is killed and
rerun resumes from the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Executor(Protocol):
    def map(self, task: Callable[[int], T], indices: Sequence[int]) -> Iterator[tuple[int, T]]:
        """Run ``task(i)`` for every ``i`` of ``indices``; yield ``(i, result)`` as each ends."""
        ...


class SerialExecutor:
    """Run every task in this process, in order (the default)."""

    def map(self, task: Callable[[int], T], indices: Sequence[int]) -> Iterator[tuple[int, T]]:
        for i in indices:
            yield i, task(i)

    def __repr__(self) -> str:
        return "SerialExecutor()"


class RayExecutor:
    """Run tasks on a Ray cluster: the local machine by default (``ray.init()`` starts one), or
    the cluster at ``address`` (``"auto"``, ``"ray://host:10001"``).

    ``cpus_per_task`` and ``gpus_per_task`` (a fraction shares a GPU) are the resources Ray
    reserves for each task; a task runs torch with ``max(1, int(cpus_per_task))`` threads.
    ``max_retries``: how often a task whose worker died is run again. ``init_kwargs`` go to
    ``ray.init`` when this executor starts the cluster (``num_cpus=...`` for example); a
    running Ray session is joined as it is.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        cpus_per_task: float = 1,
        gpus_per_task: float = 0,
        max_retries: int = 3,
        **init_kwargs: Any,
    ) -> None:
        if cpus_per_task <= 0 or gpus_per_task < 0 or max_retries < 0:
            raise ValueError(
                "cpus_per_task must be > 0, gpus_per_task and max_retries >= 0; got "
                f"{cpus_per_task}, {gpus_per_task}, {max_retries}"
            )
        self.address, self.init_kwargs = address, init_kwargs
        self.cpus_per_task, self.gpus_per_task = cpus_per_task, gpus_per_task
        self.max_retries = max_retries
        self._started = False  # whether map() started the cluster (shutdown() stops it)

    def map(self, task: Callable[[int], T], indices: Sequence[int]) -> Iterator[tuple[int, T]]:
        ray = _import_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_kwargs)
            self._started = True
        if not indices:
            return
        holder = [ray.put(task)]  # in a list, so that tasks get the reference, not a copy each
        remote = ray.remote(_run_on_worker).options(
            num_cpus=self.cpus_per_task,
            num_gpus=self.gpus_per_task,
            max_retries=self.max_retries,
        )
        threads = max(1, int(self.cpus_per_task))
        pending = {remote.remote(holder, i, threads): i for i in indices}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), ray.get(ref)
        finally:
            for ref in pending:  # the caller stopped early (an error, an interrupt)
                ray.cancel(ref)

    def shutdown(self) -> None:
        """Stop the cluster this executor started (a local one, when none was running at its
        first ``map``), so that the process exits promptly; a cluster it joined keeps running."""
        if self._started:
            _import_ray().shutdown()
            self._started = False

    def __repr__(self) -> str:
        return (
            f"RayExecutor(address={self.address!r}, cpus_per_task={self.cpus_per_task}, "
            f"gpus_per_task={self.gpus_per_task}, max_retries={self.max_retries})"
        )


def get_executor(executor: str | Executor | None) -> Executor:
    """``None`` or ``"serial"``: a :class:`SerialExecutor`; ``"ray"``: a :class:`RayExecutor`
    on the local machine; an executor is returned as it is."""
    if executor is None or executor == "serial":
        return SerialExecutor()
    if executor == "ray":
        return RayExecutor()
    if isinstance(executor, str) or not callable(getattr(executor, "map", None)):
        raise ValueError(f"executor is 'serial', 'ray' or an Executor, got {executor!r}")
    return executor


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as err:
        raise ImportError(
            "RayExecutor needs Ray: pip install 'circuitlasso[ray]' (or pip install ray)"
        ) from err
    return ray


_WORKER_TASK: dict[str, Callable[[int], Any]] = {}
"""The task function a Ray worker deserialized last, by object id: the same run's later tasks
on this worker reuse it instead of deserializing the data again."""


def _run_on_worker(holder: list, index: int, threads: int) -> Any:
    import ray
    import torch

    key = holder[0].hex()
    task = _WORKER_TASK.get(key)
    if task is None:
        _WORKER_TASK.clear()
        task = _WORKER_TASK[key] = ray.get(holder[0])
    torch.set_num_threads(threads)
    return task(index)
