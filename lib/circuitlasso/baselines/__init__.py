"""Baseline circuit-discovery methods run on the same component graph as CircuitLasso."""

from circuitlasso.baselines.eap import (
    AttributionResult,
    edge_attribution_patching,
    logit_projection_metric,
)

__all__ = ["AttributionResult", "edge_attribution_patching", "logit_projection_metric"]
