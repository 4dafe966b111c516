"""Wall-clock seconds of a run's named stages, shared by every stage of the pipeline, and the
peak resident memory of a block of work."""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd


class Stopwatch:
    """Seconds of named stages: :meth:`lap` closes the stage that ran since the previous one
    ended (or since the stopwatch was made), :meth:`timed` times a block; ``laps`` maps each
    stage's name to its seconds, in the order they first ended."""

    def __init__(self) -> None:
        self._mark = time.perf_counter()
        self.laps: dict[str, float] = {}

    def _close(self, name: str, start: float, add: bool = False) -> float:
        if name in self.laps and not add:
            raise ValueError(f"stage {name!r} was already timed")
        self._mark = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + (self._mark - start)
        return self.laps[name]

    def lap(self, name: str) -> float:
        """Close the running stage as ``name``; return its seconds."""
        return self._close(name, self._mark)

    @contextmanager
    def timed(self, name: str, *, add: bool = False) -> Iterator[None]:
        """Time the block as ``name``; the next :meth:`lap` starts where the block ends.
        ``add``: add the block's seconds to the stage's (a stage run in several blocks, such as
        one per batch) rather than refuse a name already timed."""
        start = time.perf_counter()
        yield
        self._close(name, start, add)

    def record(self, name: str, seconds: float | None) -> float:
        """Add the stage ``name`` with ``seconds`` measured elsewhere (work done before and read
        back, such as cached features with the seconds of their first collection); the next
        :meth:`lap` starts now."""
        if seconds is None:
            raise ValueError(f"the seconds of stage {name!r} are unknown")
        if name in self.laps:
            raise ValueError(f"stage {name!r} was already timed")
        self.laps[name] = float(seconds)
        self._mark = time.perf_counter()
        return self.laps[name]

    @property
    def total(self) -> float:
        """Seconds of every closed stage together."""
        return sum(self.laps.values())

    def table(self) -> pd.DataFrame:
        """One column ``seconds`` (to 0.1 s), a row per stage."""
        return pd.Series(self.laps, name="seconds", dtype=float).round(1).to_frame()


class PeakMemory:
    """Peak resident memory (GiB) of this process since the last :meth:`reset`, sampled every
    ``interval`` seconds by a daemon thread (a spike shorter than that can be missed). Reads
    ``/proc/self/statm`` (Linux); elsewhere only the process's peak so far is known.

    Use as a context manager, or :meth:`close` it when done.
    """

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self._linux = os.path.exists("/proc/self/statm")
        self._peak = self.resident_gib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def process_peak_gib() -> float:
        """The process's peak resident GiB so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / (2**30 if os.uname().sysname == "Darwin" else 2**20)

    def resident_gib(self) -> float:
        """Resident GiB now (the process's peak so far where /proc is missing)."""
        if not self._linux:
            return self.process_peak_gib()
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, self.resident_gib())

    def reset(self) -> float:
        """Start a new measurement; returns the resident GiB it starts from."""
        self._peak = self.resident_gib()
        return self._peak

    def peak_gib(self) -> float:
        """Peak resident GiB since the last reset, this moment included."""
        self._peak = max(self._peak, self.resident_gib())
        return self._peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> PeakMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
