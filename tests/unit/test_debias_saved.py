"""A saved ``benchmarks/bias_in_bios.py --save`` result read back: its table, gap closed and
provenance by hand, and the shipped decoder result's summary against its own seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from circuitlasso.evaluation.debias import StoredComparison
from circuitlasso.evaluation.debias.tables import SCORES

SHIPPED = Path(__file__).parents[2] / "book" / "benchmarks" / "bias_in_bios_smollm2-135m.json"


def _method(worst: float, std: float, features: float | None = None) -> dict:
    """A method's saved statistics: profession 10 points above ``worst``, every spread ``std``."""
    means = {"profession": worst + 10, "gender": 50.0 + worst / 10, "worst_group": worst,
             "features": features, "seconds": 3.0}  # fmt: skip
    return {**{f"mean_{k}": v for k, v in means.items()},
            **{f"std_{k}": None if v is None else std for k, v in means.items()}}  # fmt: skip


def _result(tmp_path: Path, **drop: bool) -> Path:
    result = {
        "model": "smollm2-135m", "layer": 19, "seeds": [0, 1], "per_seed": {},
        "command": "python benchmarks/bias_in_bios.py --save x.json", "commit": "a" * 40,
        "machine": "a CPU", "SHIFT": _method(30.0, 2.0, 12.0), "ORIGINAL": _method(10.0, 1.0),
        "ORACLE": _method(60.0, 4.0), "CircuitLasso": _method(55.0, 0.5, 3.0),
    }  # fmt: skip
    for key in drop:
        del result[key]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    return path


def test_the_table_shows_mean_and_spread_and_the_gap_each_method_closes(tmp_path: Path) -> None:
    stored = StoredComparison.read(_result(tmp_path))
    table = stored.table()
    assert list(table.index) == ["ORIGINAL", "ORACLE", "SHIFT", "CircuitLasso"]  # Table 2's order
    assert table.loc["SHIFT", "worst_group"] == "30.0 ± 2.0"
    assert table.loc["CircuitLasso", "profession"] == "65.0 ± 0.5"
    assert table.loc["CircuitLasso", "features"] == "3 ± 0"
    assert table.loc["ORIGINAL", "features"] == ""  # nothing removed
    # (30 - 10) / (60 - 10) and (55 - 10) / (60 - 10); ORIGINAL and ORACLE define the gap
    assert table.loc["SHIFT", "worst-group gap closed"] == "0.40"
    assert table.loc["CircuitLasso", "worst-group gap closed"] == "0.90"
    assert table.loc["ORACLE", "worst-group gap closed"] == ""
    assert stored.provenance().startswith("smollm2-135m, probes on layer 19, seeds [0, 1]: python")
    builds = StoredComparison({**stored.result, "sae_seeds": [0, 1000]}).provenance()
    assert builds.startswith("smollm2-135m, probes on layer 19, seeds [0, 1], SAE builds [0, 1000]")
    assert "commit aaaaaaaaaaaa, a CPU" in repr(stored)
    assert "30.0 ± 2.0" in stored._repr_html_()


def test_a_file_that_is_not_a_saved_result_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"result.json is not .*--save result: no \['commit'\]"):
        StoredComparison.read(_result(tmp_path, commit=True))
    with pytest.raises(FileNotFoundError, match="no benchmarks/bias_in_bios.py results in"):
        StoredComparison.read_all(tmp_path)  # result.json is not named bias_in_bios_*.json


def test_a_folder_gives_its_results_by_name() -> None:
    found = StoredComparison.read_all(SHIPPED.parent)
    names = sorted(p.name for p in SHIPPED.parent.glob("bias_in_bios_*.json"))
    assert [f"bias_in_bios_{r.result['model']}.json" for r in found] == names
    assert SHIPPED.name in names


def test_the_shipped_decoder_result_summarizes_its_own_seeds() -> None:
    """Each method's saved mean and standard deviation (ddof 1) are those of its seeds' rows, to
    the 0.01 the file rounds to."""
    stored = StoredComparison.read(SHIPPED)
    seeds = stored.result["per_seed"]
    assert sorted(seeds) == [str(s) for s in stored.result["seeds"]] and len(seeds) >= 3
    mean, std = stored.statistic("mean"), stored.statistic("std")
    for method in stored.methods():
        for column in SCORES:
            values = np.array([seeds[s][method][column] for s in seeds])
            assert mean.loc[method, column] == pytest.approx(values.mean(), abs=0.006)
            assert std.loc[method, column] == pytest.approx(values.std(ddof=1), abs=0.006)
