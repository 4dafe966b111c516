"""Collection: run the model on prompts and keep token-averaged activations.

``features``: SAE features per layer (``collect_sae_features``, returned as ``layers.
LayerFeatures``, with the compute seconds of a first run); ``components``: activations
of the component graph's nodes (``collect_nodes``). Both run the model through
:mod:`circuitlasso.forward`, the forward-pass toolkit every stage shares.
"""

from circuitlasso.collect.components import NodeActivations, collect_nodes
from circuitlasso.collect.features import collect_sae_features
from circuitlasso.collect.layers import LayerFeatures

__all__ = [
    "LayerFeatures",
    "NodeActivations",
    "collect_nodes",
    "collect_sae_features",
]
