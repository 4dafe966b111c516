"""Saved results of ``benchmarks/bias_in_bios.py --save``: the comparison on a real model over
several data seeds, too long for a book build, read back with the command, commit and machine
that made it (:func:`circuitlasso.evaluation.cost.store.provenance`)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from circuitlasso.evaluation.debias.compare import METHODS
from circuitlasso.evaluation.debias.tables import SCORES, gap_closed


@dataclass(frozen=True, repr=False)
class StoredComparison:
    """One ``benchmarks/bias_in_bios.py --save`` result: per method the mean and standard
    deviation over the ``seeds`` of each score, ``features`` and ``seconds``, each seed's table
    (``per_seed``), and the ``command``, ``commit`` and ``machine`` it ran with. A notebook shows
    it as its :meth:`provenance` over its :meth:`table`."""

    result: dict[str, Any]

    @classmethod
    def read(cls, path: str | Path) -> StoredComparison:
        """The result saved at ``path``; a clear error if it is not one."""
        result = json.loads(Path(path).read_text())
        missing = {"model", "seeds", "per_seed", "command", "commit", "machine"} - set(result)
        if missing:
            raise ValueError(f"{path} is not a benchmarks/bias_in_bios.py --save result: "
                             f"no {sorted(missing)}")  # fmt: skip
        return cls(result)

    @classmethod
    def read_all(cls, folder: str | Path) -> list[StoredComparison]:
        """The results saved in ``folder`` (``bias_in_bios_*.json``, by name); FileNotFoundError
        if none."""
        files = sorted(Path(folder).glob("bias_in_bios_*.json"))
        if not files:
            raise FileNotFoundError(f"no benchmarks/bias_in_bios.py results in {folder}")
        return [cls.read(path) for path in files]

    def provenance(self) -> str:
        """Its model, the probes' layer, the seeds (and SAE builds), the command, commit and
        machine."""
        r = self.result
        builds = f", SAE builds {r['sae_seeds']}" if "sae_seeds" in r else ""
        return (f"{r['model']}, probes on layer {r['layer']}, seeds {r['seeds']}{builds}: "
                f"{r['command']} (commit {r['commit'][:12]}, {r['machine']})")  # fmt: skip

    def methods(self) -> list[str]:
        """The methods it holds, in the comparison's order (:data:`compare.METHODS`)."""
        return [m for m in METHODS if m in self.result]

    def statistic(self, stat: str) -> pd.DataFrame:
        """``stat`` (``"mean"`` or ``"std"``) of each score, ``features`` and ``seconds`` over the
        seeds: a row per method."""
        columns = [*SCORES, "features", "seconds"]
        rows = {m: [self.result[m][f"{stat}_{c}"] for c in columns] for m in self.methods()}
        return pd.DataFrame.from_dict(rows, orient="index", columns=columns).astype(float)

    def table(self) -> pd.DataFrame:
        """Tables 1 and 2 as ``mean ± std`` over the seeds (percent to 0.1, features, seconds to
        1 s), with the share of the worst-group gap between ORIGINAL and ORACLE closed by each
        method's mean (:func:`~circuitlasso.evaluation.debias.tables.gap_closed`)."""
        mean, std = self.statistic("mean"), self.statistic("std")
        digits = {**dict.fromkeys(SCORES, 1), "features": 0, "seconds": 0}
        shown = pd.DataFrame(
            {
                column: [
                    "" if pd.isna(m) else f"{m:.{d}f} ± {s:.{d}f}"
                    for m, s in zip(mean[column], std[column], strict=True)
                ]
                for column, d in digits.items()
            },
            index=mean.index,
        )
        closed = gap_closed(mean)["worst-group gap closed"].reindex(mean.index)
        shown["worst-group gap closed"] = ["" if pd.isna(c) else f"{c:.2f}" for c in closed]
        return shown

    def __repr__(self) -> str:
        return f"{self.provenance()}\n{self.table().to_string()}"

    def _repr_html_(self) -> str:
        return f"<p>{html.escape(self.provenance())}</p>\n{self.table().to_html()}"
