"""Saved results of ``benchmarks/ioi.py --save``: the MIB comparison at the benchmark's size, too
long for a book build, read back with the command, commit and machine that made it
(:func:`circuitlasso.evaluation.cost.store.provenance`) and set against a reference method."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class StoredBenchmarks:
    """``benchmarks/ioi.py --save`` results: each its JSON line with the ``command``, ``commit``
    and ``machine`` it ran with (:meth:`read` takes a folder's ``ioi_*.json`` files)."""

    results: tuple[dict[str, Any], ...]

    @classmethod
    def read(cls, folder: str | Path) -> StoredBenchmarks:
        """The results saved in ``folder`` (``ioi_*.json``, by name); FileNotFoundError if none."""
        files = sorted(Path(folder).glob("ioi_*.json"))
        if not files:
            raise FileNotFoundError(f"no benchmarks/ioi.py results (ioi_*.json) in {folder}")
        return cls(tuple(json.loads(path.read_text()) for path in files))

    def provenance(self) -> str:
        """One line per result: its model, command, commit and machine."""
        return "\n".join(
            f"{r['model']}: {r['command']} (commit {r['commit'][:12]}, {r['machine']})"
            for r in self.results
        )

    def table(self) -> pd.DataFrame:
        """A row per model, task and method: ``held_out`` (a task of the result's
        ``heldout_tasks``), ``cpr``, ``cmd``, ``cpr_abs`` and ``seconds``."""
        rows = [
            {
                "model": r["model"],
                "task": task,
                "held_out": task in r["heldout_tasks"],
                "method": method,
                **{key: r[key][task][method] for key in ("cpr", "cmd", "cpr_abs", "seconds")},
            }
            for r in self.results
            for task in r["tasks"]
            for method in r["methods"]
        ]
        return pd.DataFrame(rows).set_index(["model", "task", "method"])

    def versus(self, method: str, reference: str, tolerance: float = 0.05) -> pd.DataFrame:
        """Per model and task: ``method``'s CPR and CMD minus ``reference``'s, its seconds over
        the reference's, and ``met``: a CPR at least the reference's minus ``tolerance``, a CMD
        at most the reference's plus ``tolerance``, in less time."""
        table = self.table()
        mine = table.xs(method, level="method")
        theirs = table.xs(reference, level="method")
        out = pd.DataFrame(
            {
                "held_out": mine["held_out"],
                "cpr_difference": mine["cpr"] - theirs["cpr"],
                "cmd_difference": mine["cmd"] - theirs["cmd"],
                "seconds_ratio": mine["seconds"] / theirs["seconds"],
            }
        )
        out["met"] = (
            (out["cpr_difference"] >= -tolerance)
            & (out["cmd_difference"] <= tolerance)
            & (out["seconds_ratio"] < 1)
        )
        return out
