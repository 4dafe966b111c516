"""The stopwatch: stages closed by lap and by block, against a fake clock."""

import pytest

from circuitlasso import timing
from circuitlasso.timing import Stopwatch


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


def test_a_stage_is_timed_once() -> None:
    clock = Stopwatch()
    clock.lap("fit")
    with pytest.raises(ValueError, match="stage 'fit' was already timed"):
        clock.lap("fit")
    with pytest.raises(ValueError, match="already timed"), clock.timed("fit"):
        pass
