"""Cost of the method (paper Propositions 1 and 2): measured solves and the provable regimes.

- :mod:`~circuitlasso.evaluation.cost.proposition1`: certified block Lasso solves of planted
  block-triangular problems timed over a grid of (M, L, d), next to Proposition 1's bound, and
  their log-log slopes (``time_and_slopes``).
- :mod:`~circuitlasso.evaluation.cost.algebra`: Proposition 2's algebra: both methods'
  operation counts, the regime of a model shape, its n_token threshold, the predicted ratio.
- :mod:`~circuitlasso.evaluation.cost.crossover`: EAP, EAP-IG and CircuitLasso timed on
  GPT-2-family models with random weights, the measured ratio next to the predicted one.
- :mod:`~circuitlasso.evaluation.cost.store`: measured rows kept as they end, so a grid resumes.
- :mod:`~circuitlasso.evaluation.cost.scaling`: log-log slopes along each size and where the
  measured ratio crosses 1.

The names below load on first use: ``crossover`` runs the methods of
:mod:`circuitlasso.evaluation.interpbench`, which compile tracr tasks with JAX, so the algebra and
the slopes come without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from circuitlasso._lazy import lazy_names

_EXPORTS = {
    "GEMMA_2_2B": ".algebra",
    "GPT2_SMALL": ".algebra",
    "MODEL_SHAPES": ".algebra",
    "PYTHIA_70M": ".algebra",
    "eap_ig_additional_count": ".algebra",
    "proposition1_count": ".algebra",
    "proposition2": ".algebra",
    "proposition2_table": ".algebra",
    "regime_table": ".algebra",
    "CROSSOVER_METHODS": ".crossover",
    "crossover_grid": ".crossover",
    "product_throughput": ".crossover",
    "projected_time_methods": ".crossover",
    "time_methods": ".crossover",
    "planted_block_sem": ".proposition1",
    "time_and_slopes": ".proposition1",
    "time_block_lasso": ".proposition1",
    "CROSSOVER_RATIOS": ".scaling",
    "CROSSOVER_SIZES": ".scaling",
    "SIZES": ".scaling",
    "crossover_fit": ".scaling",
    "crossover_scaling": ".scaling",
    "loglog_slopes": ".scaling",
    "rows_varying": ".scaling",
    "vary_one_at_a_time": ".scaling",
    "machine_description": ".store",
    "stored_row": ".store",
}

__all__ = [
    "CROSSOVER_METHODS",
    "CROSSOVER_RATIOS",
    "CROSSOVER_SIZES",
    "GEMMA_2_2B",
    "GPT2_SMALL",
    "MODEL_SHAPES",
    "PYTHIA_70M",
    "SIZES",
    "crossover_fit",
    "crossover_grid",
    "crossover_scaling",
    "eap_ig_additional_count",
    "loglog_slopes",
    "machine_description",
    "planted_block_sem",
    "product_throughput",
    "projected_time_methods",
    "proposition1_count",
    "proposition2",
    "proposition2_table",
    "regime_table",
    "rows_varying",
    "stored_row",
    "time_and_slopes",
    "time_block_lasso",
    "time_methods",
    "vary_one_at_a_time",
]

if TYPE_CHECKING:
    from circuitlasso.evaluation.cost.algebra import (
        GEMMA_2_2B,
        GPT2_SMALL,
        MODEL_SHAPES,
        PYTHIA_70M,
        eap_ig_additional_count,
        proposition1_count,
        proposition2,
        proposition2_table,
        regime_table,
    )
    from circuitlasso.evaluation.cost.crossover import (
        CROSSOVER_METHODS,
        crossover_grid,
        product_throughput,
        projected_time_methods,
        time_methods,
    )
    from circuitlasso.evaluation.cost.proposition1 import (
        planted_block_sem,
        time_and_slopes,
        time_block_lasso,
    )
    from circuitlasso.evaluation.cost.scaling import (
        CROSSOVER_RATIOS,
        CROSSOVER_SIZES,
        SIZES,
        crossover_fit,
        crossover_scaling,
        loglog_slopes,
        rows_varying,
        vary_one_at_a_time,
    )
    from circuitlasso.evaluation.cost.store import machine_description, stored_row


__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
