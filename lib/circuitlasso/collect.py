"""Activations at the nodes of a HookedTransformer's component graph, token-averaged.

The graph has the nodes EAP-IG and InterpBench use, in computation order: ``input`` (token plus
position embedding), per layer the heads ``a{l}.h{h}`` then the MLP ``m{l}``, and ``output`` (the
logits). A node's activation is what it writes: the embedding, a head's ``hook_result`` slice, the
MLP's ``hook_mlp_out``, the logits for ``output``. A child may read any node that comes before it,
except that heads of one layer run in parallel and so never feed each other.

:func:`collect_nodes` runs the model on a batch of prompts (for CircuitLasso: clean and corrupted
prompts stacked) and averages every node's activation over the selected token positions, giving one
observation row per prompt: ``X: (M, N)`` with the node blocks side by side in computation order.

:func:`collect_sae_features` gives the inputs of the layer-pair regressions on SAE features (paper
Sec. 3.3 and App. B.3): for each layer ``l`` its SAE encodes every token of every prompt at the
SAE's own hook, and the features are averaged over the prompt's real tokens (BOS and padding left
out), giving ``Z_l: (M, D)`` as a float32 CSR matrix. Prompts stream through the model in batches,
the forward pass stops after the last block an SAE reads, and each batch's averages become sparse
at once, so no ``(M, tokens, D)`` or ``(M, D)`` dense array is ever held. Batches are cached on disk
(:func:`circuitlasso.cache.load_or_compute_chunks`) under a key naming the model, the SAEs, the
prompts and the hooks: a rerun loads them, an interrupted run resumes after the last saved batch.
:func:`binary_labels` turns two-valued labels into the 0/1 target of the classification
regression (Eq. 6).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
from sae_lens import SAE
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.cache import cache_key, load_or_compute_chunks
from circuitlasso.circuit import INPUT, OUTPUT, Edge
from circuitlasso.models import check_sae_fits

NodeKind = Literal["input", "head", "mlp", "output"]
REQUIRED_HOOK_FLAGS = ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in")
LOGITS = "logits"
INPUT_HOOK = "blocks.0.hook_resid_pre"  # token plus position embedding


@dataclass(frozen=True)
class NodeLocation:
    """Where a graph node's activation lives: ``hook`` (and ``head`` for attention heads).

    ``layer`` is -1 for ``input`` and ``n_layers`` for ``output``; ``hook`` is ``"logits"`` for
    ``output`` (the model's return value).
    """

    name: str
    kind: NodeKind
    layer: int
    hook: str
    head: int | None = None


def require_hook_flags(model: HookedTransformer) -> None:
    """ValueError naming every hook flag in ``REQUIRED_HOOK_FLAGS`` the model's config lacks."""
    missing = [flag for flag in REQUIRED_HOOK_FLAGS if not getattr(model.cfg, flag, False)]
    if missing:
        raise ValueError(
            f"model config lacks hook flags {missing}; set them with "
            f"model.set_use_attn_result(True), model.set_use_split_qkv_input(True), "
            f"model.set_use_hook_mlp_in(True) (or in the HookedTransformerConfig)"
        )


def graph_nodes(model: HookedTransformer) -> list[NodeLocation]:
    """The model's component nodes in computation order."""
    cfg = model.cfg
    nodes = [NodeLocation(INPUT, "input", -1, INPUT_HOOK)]
    for layer in range(cfg.n_layers):
        nodes.extend(
            NodeLocation(f"a{layer}.h{h}", "head", layer, f"blocks.{layer}.attn.hook_result", h)
            for h in range(cfg.n_heads)
        )
        if not cfg.attn_only:
            nodes.append(NodeLocation(f"m{layer}", "mlp", layer, f"blocks.{layer}.hook_mlp_out"))
    nodes.append(NodeLocation(OUTPUT, "output", cfg.n_layers, LOGITS))
    return nodes


def can_feed(parent: NodeLocation, child: NodeLocation) -> bool:
    """Whether ``parent`` is computed before ``child`` and writes something ``child`` can read."""
    if parent.kind == "output" or child.kind == "input":
        return False
    if parent.layer != child.layer:
        return parent.layer < child.layer
    return parent.kind == "head" and child.kind == "mlp"


def allowed_parents(nodes: list[NodeLocation]) -> list[list[int]]:
    """For each node index ``j``, the indices of the nodes that may feed it."""
    return [[i for i, p in enumerate(nodes) if can_feed(p, c)] for c in nodes]


def candidate_edges(nodes: list[NodeLocation]) -> list[Edge]:
    """Every edge of the full component graph, parents in computation order."""
    return [(p.name, c.name) for c in nodes for p in nodes if can_feed(p, c)]


@dataclass(frozen=True)
class NodeActivations:
    """Token-averaged node activations: ``X: (M, N)``, blocks in computation order.

    ``block_sizes[j]`` columns belong to ``names[j]``; ``parents[j]`` lists the block indices
    allowed to feed block ``j``.
    """

    X: torch.Tensor
    names: list[str]
    block_sizes: list[int]
    parents: list[list[int]]

    def block(self, name: str) -> torch.Tensor:
        """The columns of node ``name``: (M, block_size)."""
        if name not in self.names:
            raise ValueError(f"no node named {name!r}; nodes: {self.names}")
        j = self.names.index(name)
        start = sum(self.block_sizes[:j])
        return self.X[:, start : start + self.block_sizes[j]]


def _position_weights(position_mask: torch.Tensor | None, tokens: torch.Tensor) -> torch.Tensor:
    """Averaging weights over positions: (M, P), rows summing to 1."""
    m, p = tokens.shape
    if position_mask is None:
        mask = torch.ones(m, p)
    else:
        mask = position_mask.to(torch.float32)
        if mask.ndim == 1:
            mask = mask.expand(m, -1)
        if mask.shape != (m, p):
            raise ValueError(f"position_mask shape {tuple(position_mask.shape)} != tokens {(m, p)}")
    counts = mask.sum(1, keepdim=True)
    if (counts == 0).any():
        raise ValueError("position_mask selects no position for some prompts")
    return mask / counts


def collect_nodes(
    model: HookedTransformer,
    tokens: torch.Tensor,
    position_mask: torch.Tensor | None = None,
    batch_size: int = 1024,
    progress: bool = False,
) -> NodeActivations:
    """Token-averaged activations of every graph node on ``tokens: (M, P)``.

    ``position_mask: (P,)`` or ``(M, P)`` bool selects the positions averaged over (default all).
    """
    require_hook_flags(model)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be (prompts, positions), got shape {tuple(tokens.shape)}")
    nodes = graph_nodes(model)
    weights = _position_weights(position_mask, tokens)
    hooks = sorted({n.hook for n in nodes if n.hook != LOGITS})
    blocks: list[list[torch.Tensor]] = [[] for _ in nodes]
    device = model.cfg.device
    for start in tqdm(range(0, len(tokens), batch_size), desc="collect", disable=not progress):
        batch = tokens[start : start + batch_size].to(device)
        w = weights[start : start + batch_size].to(device)
        cache: dict[str, torch.Tensor] = {}

        def save(activation: torch.Tensor, hook, cache=cache) -> None:
            cache[hook.name] = activation

        with torch.inference_mode():
            logits = model.run_with_hooks(batch, fwd_hooks=[(h, save) for h in hooks])
        cache[LOGITS] = logits
        for j, node in enumerate(nodes):
            act = cache[node.hook]
            if node.head is not None:
                act = act[:, :, node.head]
            blocks[j].append(torch.einsum("mp,mpd->md", w, act.float()).cpu())
    columns = [torch.cat(b) for b in blocks]
    return NodeActivations(
        X=torch.cat(columns, dim=1),
        names=[n.name for n in nodes],
        block_sizes=[c.shape[1] for c in columns],
        parents=allowed_parents(nodes),
    )


# --- SAE features -------------------------------------------------------------------------------

SAE_COLLECTOR_VERSION = 1  # part of the cache key; bump when the stored chunks change meaning
_FINGERPRINT_SAMPLES = 64  # values sampled from each model parameter for the cache key


def check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a single string")
    prompts = list(prompts)
    if not prompts:
        raise ValueError("prompts is empty: need at least one prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt {i} is a {type(prompt).__name__}, not a string: {prompt!r}")
    return prompts


def special_token_ids(model: HookedTransformer) -> list[int]:
    """The tokenizer's BOS, EOS and PAD ids: the positions left out of the token average."""
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise ValueError("the model has no tokenizer attached (model.set_tokenizer(...))")
    ids = {tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}
    return sorted(i for i in ids if i is not None)


def tokenize_batch(
    model: HookedTransformer, prompts: list[str], first: int, special: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ``tokens: (B, P)`` of prompts ``first...`` and ``real: (B, P)``, the
    positions averaged over; an error names a prompt with no real token or too many."""
    tokens = model.to_tokens(prompts, padding_side="right", truncate=False, move_to_device=False)
    real = ~torch.isin(tokens, special)
    n_ctx = model.cfg.n_ctx
    too_long = real[:, n_ctx:].any(1).nonzero()[:, 0]
    if len(too_long):
        row = int(too_long[0])
        raise ValueError(
            f"prompt {first + row} is longer than the model's context of {n_ctx} tokens: "
            f"{prompts[row][:80]!r}"
        )
    empty = (~real.any(1)).nonzero()[:, 0]
    if len(empty):
        row = int(empty[0])
        raise ValueError(
            f"prompt {first + row} has no token to average over (only BOS, EOS or padding): "
            f"{prompts[row]!r}"
        )
    return tokens[:, :n_ctx], real[:, :n_ctx]


def stop_at_layer(hooks: Sequence[str]) -> int | None:
    """The ``stop_at_layer`` that runs the model just far enough to reach every hook."""
    last = -1
    for hook in hooks:
        match = re.match(r"blocks\.(\d+)\.", hook)
        if match:
            last = max(last, int(match[1]))
        elif not hook.startswith("hook_"):  # ln_final, unembed: the whole model runs
            return None
    return last + 1


def _tensor_bytes(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def model_fingerprint(model: HookedTransformer) -> str:
    """Hex sha256 of the model's config and a strided sample of every parameter's values.

    Cheap even for billions of parameters, and different for models that share a name but not
    their weights (random initialisations with different seeds, fine-tuned checkpoints).
    """
    cfg = {k: v for k, v in model.cfg.to_dict().items() if k not in ("device", "n_devices")}
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, param in model.named_parameters():
        flat = param.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // _FINGERPRINT_SAMPLES)]
        digest.update(f"{name}{tuple(param.shape)}{param.dtype}".encode())
        digest.update(_tensor_bytes(sample))
    return digest.hexdigest()


def sae_fingerprint(sae: SAE) -> str:
    """Hex sha256 of the SAE's config (hook, widths, architecture; not its device) and weights."""
    cfg = {k: v for k, v in sae.cfg.to_dict().items() if k not in ("device", "metadata")}
    cfg["hook_name"] = sae.cfg.metadata.hook_name
    cfg["architecture"] = sae.cfg.architecture()
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    for name, value in sorted(sae.state_dict().items()):
        digest.update(f"{name}{tuple(value.shape)}{value.dtype}".encode())
        digest.update(_tensor_bytes(value))
    return digest.hexdigest()


def _prompts_hash(prompts: list[str]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()


def _nonfinite_error(what: str, rows: torch.Tensor, first: int, prompts: list[str]) -> ValueError:
    bad = sorted({int(r) for r in rows})
    return ValueError(
        f"non-finite values (NaN or inf) in {what} for prompts "
        f"{[first + r for r in bad[:5]]}{' ...' if len(bad) > 5 else ''}, "
        f"e.g. {prompts[bad[0]][:80]!r}"
    )


def _average_features(
    sae: SAE, activations: torch.Tensor, rows: torch.Tensor, counts: torch.Tensor
) -> torch.Tensor:
    """Per-prompt mean of ``sae.encode(activations)``: ``(B, D)`` float32.

    ``activations: (T, d_in)`` are the batch's real tokens, ``rows: (T,)`` their prompts and
    ``counts: (B,)`` the real tokens per prompt.
    """
    device = sae.W_enc.device
    features = sae.encode(activations.to(device))
    if features.is_sparse:
        features = features.to_dense()
    sums = torch.zeros(len(counts), sae.cfg.d_sae, dtype=torch.float32, device=device)
    sums.index_add_(0, rows.to(device), features.to(torch.float32))
    del features
    return sums / counts.to(device=device, dtype=torch.float32).unsqueeze(1)


def _csr_parts(means: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(indptr, indices, data)`` of a dense ``(B, D)`` matrix's nonzeros, int32 indices."""
    rows, cols = means.nonzero(as_tuple=True)
    data = means[rows, cols].cpu()
    counts = torch.bincount(rows.cpu(), minlength=means.shape[0])
    indptr = torch.zeros(means.shape[0] + 1, dtype=torch.int64)
    indptr[1:] = counts.cumsum(0)
    return indptr, cols.cpu().to(torch.int32), data


def collect_sae_features(
    model: HookedTransformer,
    saes: dict[int, SAE],
    prompts: Sequence[str],
    *,
    batch_size: int = 32,
    cache_dir: str | Path | None = None,
    cache_key_parts: dict | None = None,
    progress: bool = True,
) -> dict[int, sp.csr_matrix]:
    """Token-averaged SAE features per layer: ``{layer: Z_layer}``, each ``(M, d_sae)`` CSR.

    ``saes[layer]`` encodes the activations at its own hook (``sae.cfg.metadata.hook_name``;
    the SAE must fit the model, see :func:`circuitlasso.models.check_sae_fits`); the dict keys
    only name the outputs. Row ``i`` of ``Z_layer`` is the mean of the SAE's features over the
    real tokens of ``prompts[i]``, float32.

    Tokens: each prompt is tokenized with ``model.to_tokens`` (BOS prepended as the model's
    ``default_prepend_bos`` says) and right-padded within its batch. Positions holding the
    tokenizer's BOS, EOS or PAD id are left out of the average: they are the positions sae-lens
    drops when training with ``exclude_special_tokens`` (as the toy SAEs are), and the BOS
    position's large-norm activation would otherwise dominate every prompt's mean. With right
    padding and causal attention, padding does not change the activations at real positions. A
    prompt with no real token, or longer than the model's context, is an error naming it.

    Streaming: prompts go through the model ``batch_size`` at a time, only up to the last block
    an SAE reads (``stop_at_layer``) and saving only the SAEs' hooks; the SAE encodes the real
    tokens of the batch and the batch's means are made sparse at once. Peak memory is a few
    copies of one batch's ``(real tokens, D)`` dense features (the SAE's temporaries) plus the
    sparse result; lower ``batch_size`` to lower it.

    Cache: each batch is saved under ``cache_dir`` (default ``$CIRCUITLASSO_CACHE``, see
    :func:`circuitlasso.cache.cache_root`) as soon as it is done, keyed by the model (name and a
    fingerprint of its weights), each SAE (hook, config and a hash of its weights), the prompts
    (a hash), the hooks and ``batch_size``, plus ``cache_key_parts`` (strings, numbers,
    booleans, None or lists of them). A rerun loads the batches without running the model; an
    interrupted run resumes after the last saved batch. Hashing the SAE weights reads them once
    per call (about a second per GiB).

    Errors: an SAE whose hook is not a hook of the model (with close matches) or whose ``d_in``
    differs from the model's width, an empty prompt list, and non-finite activations or features
    (naming the hook and the prompts) raise ``ValueError``.
    """
    prompts = check_prompts(prompts)
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    for sae in saes.values():
        check_sae_fits(model, sae)
    layers = sorted(saes)
    hooks = {layer: str(saes[layer].cfg.metadata.hook_name) for layer in layers}
    special_ids = special_token_ids(model)
    special = torch.tensor(special_ids, dtype=torch.long)
    starts = range(0, len(prompts), batch_size)
    batches = [tokenize_batch(model, prompts[s : s + batch_size], s, special) for s in starts]

    extra = cache_key_parts or {}
    key = cache_key(
        what="sae_features",
        version=SAE_COLLECTOR_VERSION,
        model=model.cfg.model_name,
        model_fingerprint=model_fingerprint(model),
        saes=[[layer, hooks[layer], sae_fingerprint(saes[layer])] for layer in layers],
        prompts=_prompts_hash(prompts),
        n_prompts=len(prompts),
        batch_size=batch_size,
        prepend_bos=bool(model.cfg.default_prepend_bos),
        excluded_token_ids=special_ids,
        extra=[[str(name), value] for name, value in sorted(extra.items())],
    )
    hook_names = sorted(set(hooks.values()))
    stop = stop_at_layer(hook_names)

    def chunk(i: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        tokens, real = batches[i]
        first = starts[i]
        batch_prompts = prompts[first : first + len(tokens)]
        saved: dict[str, torch.Tensor] = {}

        def save(activation: torch.Tensor, hook: Any) -> None:
            saved[hook.name] = activation

        parts = []
        with torch.inference_mode():
            model.run_with_hooks(
                tokens.to(model.cfg.device),
                fwd_hooks=[(name, save) for name in hook_names],
                stop_at_layer=stop,
            )
            for layer in layers:
                activations = saved[hooks[layer]]
                mask = real.to(activations.device)
                rows = mask.nonzero()[:, 0]
                tokens_real = activations[mask]  # (real tokens, d_in)
                finite = torch.isfinite(tokens_real).all(1)
                if not bool(finite.all()):
                    raise _nonfinite_error(
                        f"the activations at hook {hooks[layer]!r}",
                        rows[~finite],
                        first,
                        batch_prompts,
                    )
                means = _average_features(saes[layer], tokens_real, rows, mask.sum(1))
                if not bool(torch.isfinite(means).all()):
                    rows = (~torch.isfinite(means)).any(1).nonzero()[:, 0]
                    raise _nonfinite_error(
                        f"the features of the SAE on {hooks[layer]!r} (layer {layer})",
                        rows,
                        first,
                        batch_prompts,
                    )
                parts.append(_csr_parts(means))
                del means
        return parts

    chunks = load_or_compute_chunks(
        key,
        len(batches),
        chunk,
        root=cache_dir,
        desc=f"SAE features ({batch_size} prompts/batch)",
        progress=progress,
    )
    result = {}
    for j, layer in enumerate(layers):
        d_sae = saes[layer].cfg.d_sae
        blocks = [
            sp.csr_matrix(
                (data.numpy(), indices.numpy(), indptr.numpy()), shape=(len(indptr) - 1, d_sae)
            )
            for indptr, indices, data in (c[j] for c in chunks)
        ]
        result[layer] = sp.vstack(blocks, format="csr", dtype=np.float32)
    return result


# --- Classification target ----------------------------------------------------------------------


def binary_labels(labels: Any, *, positive: Any = None) -> np.ndarray:
    """The 0/1 target ``y`` of the classification regression (Eq. 6), float64, shape ``(M,)``.

    ``labels`` is 1-D (list, array, tensor, Series) with exactly two distinct values, numbers or
    strings, not mixed. ``positive`` is the value mapped to 1; by default the larger of the two
    (``1`` of ``{0, 1}``, ``True``, the later string in sort order). Anything else (one or three
    or more values, NaN or None, mixed types) raises ``ValueError`` naming the problem.
    """
    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    array = np.asarray(labels)
    if array.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {array.shape}")
    if array.size == 0:
        raise ValueError("labels is empty")
    kind = array.dtype.kind
    if kind in "fc":
        nan = np.flatnonzero(np.isnan(array))
        if len(nan):
            raise ValueError(f"labels hold NaN at positions {nan[:5].tolist()}")
    elif kind in "OU":
        items = array.tolist() if kind == "O" or isinstance(labels, np.ndarray) else list(labels)
        missing = [i for i, v in enumerate(items) if v is None or (isinstance(v, float) and v != v)]
        if missing:
            raise ValueError(f"labels hold None or NaN at positions {missing[:5]}")
        types = sorted({type(v).__name__ for v in items})
        if len(types) > 1 and not set(types) <= {"bool", "int", "float"}:
            raise ValueError(f"labels mix types {types}; use one type (numbers or strings)")
    elif kind not in "biu":
        raise ValueError(f"labels have dtype {array.dtype}; use numbers, booleans or strings")
    values = np.unique(array)
    if len(values) != 2:
        shown = values[:5].tolist()
        more = " ..." if len(values) > 5 else ""
        raise ValueError(f"labels must take exactly two values, got {len(values)}: {shown}{more}")
    if positive is None:
        positive = values[1]
    elif positive not in values.tolist():
        raise ValueError(f"positive={positive!r} is not one of the label values {values.tolist()}")
    return (array == positive).astype(np.float64)
