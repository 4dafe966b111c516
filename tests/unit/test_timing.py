"""The stopwatch: stages closed by lap and by block (one block or several added up), against a
fake clock; the memory sampler."""

import sys
import threading

import numpy as np
import pytest

from circuitlasso import timing
from circuitlasso.timing import PeakMemory, Stopwatch


def test_laps_and_blocks_time_consecutive_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 3.0, 10.0, 13.0, 20.5])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    clock = Stopwatch()  # made at 0
    assert clock.lap("load") == 3.0
    with clock.timed("block"):  # 10 to 13
        pass
    assert clock.lap("fit") == 7.5  # from the block's end, 13, to 20.5
    assert clock.laps == {"load": 3.0, "block": 3.0, "fit": 7.5}
    assert list(clock.laps) == ["load", "block", "fit"]
    assert clock.total == 13.5
    assert clock.table()["seconds"].to_dict() == {"load": 3.0, "block": 3.0, "fit": 7.5}


def test_blocks_added_to_one_stage_sum_their_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 1.0, 3.0, 4.0, 4.5, 10.0, 10.25, 12.0, 13.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    clock = Stopwatch()  # made at 0
    with clock.timed("collect", add=True):  # 1 to 3
        pass
    with clock.timed("attribute", add=True):  # 4 to 4.5
        pass
    with clock.timed("collect", add=True):  # 10 to 10.25
        pass
    assert clock.laps == {"collect": 2.25, "attribute": 0.5}
    assert list(clock.laps) == ["collect", "attribute"]  # in the order they first ended
    assert clock.lap("rest") == 1.75  # from the last block's end, 10.25, to 12
    with pytest.raises(ValueError, match="stage 'collect' was already timed"):
        with clock.timed("collect"):  # from 13: refused without add
            pass


def test_a_stage_is_timed_once() -> None:
    clock = Stopwatch()
    clock.lap("fit")
    with pytest.raises(ValueError, match="stage 'fit' was already timed"):
        clock.lap("fit")
    with pytest.raises(ValueError, match="already timed"), clock.timed("fit"):
        pass


def test_a_recorded_stage_keeps_its_seconds_and_the_next_lap_starts_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = iter([0.0, 5.0, 7.0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    clock = Stopwatch()  # made at 0
    assert clock.record("collect (first run)", 42.0) == 42.0  # read back at 5
    assert clock.lap("fit") == 2.0  # from 5, not from 0
    assert clock.laps == {"collect (first run)": 42.0, "fit": 2.0}
    with pytest.raises(ValueError, match="already timed"):
        clock.record("fit", 1.0)
    with pytest.raises(ValueError, match="seconds of stage 'load' are unknown"):
        clock.record("load", None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="samples /proc/self/statm")
def test_peak_memory_sees_a_block_freed_before_it_is_read() -> None:
    with PeakMemory(interval=0.001) as memory:
        start = memory.reset()
        block = np.ones(2**27 // 8)  # 128 MiB, every page touched
        # held until the sampler has read it (its own reading, not peak_gib's, which reads now):
        # two readings of its thread from here, so that the first one's peak is stored
        readings, read = [], memory.resident_gib
        enough = threading.Event()

        def reading() -> float:
            if threading.current_thread() is memory._thread:
                readings.append(1)
                if len(readings) == 2:
                    enough.set()
            return read()

        memory.resident_gib = reading  # type: ignore[method-assign]
        while not enough.wait(1.0):  # however long a loaded machine keeps the thread waiting
            assert memory._thread.is_alive(), "the sampler stopped"
        del block
        assert memory.peak_gib() - start >= 0.1
        assert memory.resident_gib() < memory.peak_gib() - 0.1
        assert memory.reset() < start + 0.1
