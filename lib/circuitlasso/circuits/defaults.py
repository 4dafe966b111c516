"""The defaults of the feature-circuit fits, one source for the estimator and the functions.

:class:`~circuitlasso.estimator.CircuitLasso`, :func:`~circuitlasso.circuits.features.fit_label`,
:func:`~circuitlasso.circuits.features.fit_layer_pair`,
:class:`~circuitlasso.circuits.trace.LayerRegressions` and
:func:`~circuitlasso.circuits.trace.trace_circuit` read their defaults from here.
"""

LABEL_LAM_RATIO = 0.01
"""The readout's penalty ``A_{L,y}``, as a fraction of its ``lam_max``."""

LAM_RATIO = 0.1
"""Each layer-pair column's penalty ``A_{l-1,l}``, as a fraction of its own ``lam_max``."""

MIN_PROMPTS = 1
"""Features active on fewer prompts are not predictors (1: every feature, as in the paper)."""

ROOTS = 5
"""Last-layer features a trace starts from."""

K = 3
"""Parents kept per node by the top-k rule."""

STANDARDIZED = True
"""Rank by ``|A| * std(z)`` (False: by ``|A|`` alone, as the paper does)."""

LABEL_TOL = 1e-6
"""Certified tolerance of the readout: one small problem that chooses the roots."""

PAIR_TOL = 1e-4
"""Certified tolerance of each layer-pair column: many problems that only rank parents."""
