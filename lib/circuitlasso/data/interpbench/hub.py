"""Loader for the trained InterpBench models published on the Hugging Face hub.

The hub repository ``cybershiptrooper/InterpBench`` has one folder per case (``"3"``, ``"4"``, ...,
``"ioi"``) holding

- ``ll_model.pth``: the TransformerLens state dict,
- ``ll_model_cfg.pkl``: a pickled ``HookedTransformerConfig`` or its ``dict``,
- ``edges.pkl``: a pickled list of the ground-truth circuit's edges.

An edge names its two endpoints by TransformerLens hook and index, ACDC style: either
``((child_hook, child_index), (parent_hook, parent_index))``, a flat 4-tuple of the same, or a pair
of hook strings (an index like ``"[:, :, 2]"`` may be appended to the hook). Hooks are mapped to the
graph nodes of :mod:`circuitlasso.collect` (embeddings -> ``input``, any hook of head ``h`` in
layer ``l`` -> ``a{l}.h{h}``, MLP hooks -> ``m{l}``, the last residual -> ``output``); edges inside
one node are dropped and the parent is whichever endpoint comes first in computation order, so both
orientations load. ``source`` is either a local directory with the case folders (offline use) or
``None`` to download with ``huggingface_hub`` (offline, a case missing from the hub cache is a
:class:`circuitlasso.cache.ResourceUnavailableError` naming the download command and the folder).
Pickles execute code when loaded: only load ``source`` directories you trust.

Models trained on text (the ``"ioi"`` case) name a tokenizer in their config; GPT-2's is built by
:func:`circuitlasso.data.models.gpt2_tokenizer` (so a local mirror works), any other is loaded by
TransformerLens, and ``tokenizer=`` overrides both.
"""

from __future__ import annotations

import pickle
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformers import PreTrainedTokenizerBase

from circuitlasso.cache import hub_resource_error
from circuitlasso.data.graph import INPUT, OUTPUT, Edge

HUB_REPO = "cybershiptrooper/InterpBench"
HUB_FILES = ("ll_model.pth", "ll_model_cfg.pkl", "edges.pkl")

_LAYER_HOOK = re.compile(r"^blocks\.(\d+)\.(.+)$")
_HEAD_INDEX = re.compile(r"\[\s*:\s*,\s*:\s*,\s*(\d+)\s*\]$")
_HEAD_HOOKS = (
    "attn.hook_result",
    "attn.hook_q",
    "attn.hook_k",
    "attn.hook_v",
    "attn.hook_z",
    "attn.hook_pattern",
    "hook_q_input",
    "hook_k_input",
    "hook_v_input",
)
_MLP_HOOKS = ("hook_mlp_in", "hook_mlp_out", "mlp.hook_pre", "mlp.hook_post")
_INPUT_HOOKS = ("hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre")


@dataclass(frozen=True)
class HubCase:
    """A hub model (with the hook flags circuit discovery needs) and its ground-truth circuit."""

    case_id: str
    model: HookedTransformer
    ground_truth: frozenset[Edge]


def _head_of(index: object, hook: str) -> int:
    """Head number from an ACDC index like ``(None, None, 2)`` or a ``"[:, :, 2]"`` suffix."""
    if isinstance(index, list | tuple) and len(index) >= 3 and isinstance(index[2], int):
        return index[2]
    raise ValueError(f"head hook {hook!r} needs a head index like (None, None, h), got {index!r}")


def hook_to_node(hook: str, index: object, n_layers: int) -> str:
    """Graph node name of a hook (and index); ValueError naming a hook that fits no node."""
    match = _HEAD_INDEX.search(hook)
    if match:
        hook, index = hook[: match.start()], (None, None, int(match.group(1)))
    if hook in _INPUT_HOOKS:
        return INPUT
    if hook in ("ln_final.hook_normalized", f"blocks.{n_layers - 1}.hook_resid_post"):
        return OUTPUT
    layer_match = _LAYER_HOOK.match(hook)
    if layer_match:
        layer, rest = int(layer_match.group(1)), layer_match.group(2)
        if rest in _HEAD_HOOKS:
            return f"a{layer}.h{_head_of(index, hook)}"
        if rest in _MLP_HOOKS:
            return f"m{layer}"
    raise ValueError(f"hook {hook!r} is not a node of the InterpBench graph")


def _order_key(node: str) -> tuple[int, int]:
    """Computation order: input, a0.*, m0, a1.*, m1, ..., output."""
    if node == INPUT:
        return (-1, 0)
    if node == OUTPUT:
        return (1 << 30, 0)
    if node.startswith("m"):
        return (2 * int(node[1:]) + 1, 0)
    layer, head = node[1:].split(".h")
    return (2 * int(layer), int(head))


def _endpoints(edge: object) -> tuple[tuple[str, object], tuple[str, object]]:
    """The two (hook, index) endpoints of an edge record in any of the accepted layouts."""
    if isinstance(edge, list | tuple):
        if len(edge) == 4 and isinstance(edge[0], str) and isinstance(edge[2], str):
            return (edge[0], edge[1]), (edge[2], edge[3])
        if len(edge) == 2 and all(isinstance(e, str) for e in edge):
            return (edge[0], None), (edge[1], None)
        if len(edge) == 2 and all(isinstance(e, list | tuple) and len(e) == 2 for e in edge):
            return (edge[0][0], edge[0][1]), (edge[1][0], edge[1][1])
    raise ValueError(f"cannot read edge record {edge!r}: expected ((hook, index), (hook, index))")


def node_edges(edges: list, n_layers: int) -> frozenset[Edge]:
    """A hub edge list as edges between the nodes of :mod:`circuitlasso.data.graph`."""
    result = set()
    for edge in edges:
        (hook_a, index_a), (hook_b, index_b) = _endpoints(edge)
        a, b = hook_to_node(hook_a, index_a, n_layers), hook_to_node(hook_b, index_b, n_layers)
        if a != b:
            result.add((a, b) if _order_key(a) < _order_key(b) else (b, a))
    return frozenset(result)


def _fetch(case_id: str, source: str | Path | None, revision: str | None) -> dict[str, Path]:
    if source is None:
        from huggingface_hub import hf_hub_download

        try:
            return {
                name: Path(hf_hub_download(HUB_REPO, name, subfolder=case_id, revision=revision))
                for name in HUB_FILES
            }
        except OSError as err:  # offline and not in the hub cache, or no such case on the hub
            raise hub_resource_error(
                f"InterpBench case {case_id!r}", HUB_REPO, err, include=f"{case_id}/*"
            ) from err
    folder = Path(source) / case_id
    if not folder.is_dir():
        raise ValueError(f"no InterpBench case folder {str(folder)!r}")
    missing = [name for name in HUB_FILES if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"InterpBench case folder {str(folder)!r} lacks {missing}")
    return {name: folder / name for name in HUB_FILES}


def _tokenizer_for(cfg: HookedTransformerConfig) -> PreTrainedTokenizerBase | None:
    """GPT-2's tokenizer through the project's verified cache when the config names it."""
    if cfg.tokenizer_name == "gpt2":
        from circuitlasso.data.models import gpt2_tokenizer

        return gpt2_tokenizer()
    return None


def load_hub_case(
    case_id: str | int,
    source: str | Path | None = None,
    revision: str | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> HubCase:
    """Load case ``case_id`` from ``source`` (a local directory) or from the hub (``None``).

    ``tokenizer`` is attached to the model (default: the one its config names, if any).
    """
    case_id = str(case_id)
    files = _fetch(case_id, source, revision)
    with open(files["ll_model_cfg.pkl"], "rb") as f:
        stored = pickle.load(f)
    if isinstance(stored, dict):
        cfg = HookedTransformerConfig.from_dict(stored)
    elif isinstance(stored, HookedTransformerConfig):
        cfg = stored
    else:
        raise ValueError(f"ll_model_cfg.pkl of case {case_id!r} holds a {type(stored).__name__}")
    cfg.device = "cpu"
    cfg.use_attn_result = cfg.use_split_qkv_input = cfg.use_hook_mlp_in = True
    if tokenizer is None:
        tokenizer = _tokenizer_for(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = HookedTransformer(cfg, tokenizer=tokenizer)
        except OSError as err:  # a named tokenizer that is neither cached nor downloadable
            name = str(cfg.tokenizer_name)
            raise hub_resource_error(f"tokenizer {name!r}", name, err) from err
    state = torch.load(files["ll_model.pth"], map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    model.eval()
    with open(files["edges.pkl"], "rb") as f:
        edges = pickle.load(f)
    return HubCase(case_id, model, node_edges(list(edges), cfg.n_layers))
