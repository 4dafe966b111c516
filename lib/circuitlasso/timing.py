"""Wall-clock seconds of a run's named stages, shared by every stage of the pipeline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pandas as pd


class Stopwatch:
    """Seconds of named stages: :meth:`lap` closes the stage that ran since the previous one
    ended (or since the stopwatch was made), :meth:`timed` times a block; ``laps`` maps each
    stage's name to its seconds, in the order they ended."""

    def __init__(self) -> None:
        self._mark = time.perf_counter()
        self.laps: dict[str, float] = {}

    def _close(self, name: str, start: float) -> float:
        if name in self.laps:
            raise ValueError(f"stage {name!r} was already timed")
        self._mark = time.perf_counter()
        self.laps[name] = self._mark - start
        return self.laps[name]

    def lap(self, name: str) -> float:
        """Close the running stage as ``name``; return its seconds."""
        return self._close(name, self._mark)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Time the block as ``name``; the next :meth:`lap` starts where the block ends."""
        start = time.perf_counter()
        yield
        self._close(name, start)

    @property
    def total(self) -> float:
        """Seconds of every closed stage together."""
        return sum(self.laps.values())

    def table(self) -> pd.DataFrame:
        """One column ``seconds`` (to 0.1 s), a row per stage."""
        return pd.Series(self.laps, name="seconds", dtype=float).round(1).to_frame()
