"""Collection: run the model on prompts and keep token-averaged activations.

``features``: SAE features per layer (``collect_sae_features``); ``components``: activations of the
component graph's nodes (``collect_nodes``); ``forward``: tokenization, real-token masks and SAE
splicing shared by every forward pass in the library.
"""

from circuitlasso.collect.components import NodeActivations, collect_nodes
from circuitlasso.collect.features import collect_sae_features

__all__ = ["NodeActivations", "collect_nodes", "collect_sae_features"]
