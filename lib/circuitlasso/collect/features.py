"""Token-averaged SAE features per layer: the inputs of the layer-pair regressions.

:func:`collect_sae_features` (paper Sec. 3.3 and App. B.3): for each layer ``l`` its SAE encodes
every token of every prompt at the SAE's own hook, and the features are averaged over the prompt's
real tokens (BOS, EOS and padding left out, see :mod:`circuitlasso.forward`), giving
``Z_l: (M, D)`` as a float32 CSR matrix. Prompts stream through the model in batches, the forward
pass stops after the last block an SAE reads, and each batch's averages become sparse at once, so no
``(M, tokens, D)`` or ``(M, D)`` dense array is ever held. Batches are cached on disk
(:func:`circuitlasso.cache.load_or_compute_chunks`) under a key naming the model and the SAEs (a
hash of every byte of their weights), the prompts' tokens and the hooks: a rerun loads them, an
interrupted run resumes after the last saved batch; ``cache=False`` reads and writes nothing.
Each batch's compute seconds are kept beside it, so the features report the time of a first run
even when they are loaded (``Z.compute_seconds``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from sae_lens import SAE

from circuitlasso.cache import cache_key, chunk_seconds, load_or_compute_chunks
from circuitlasso.collect.layers import LayerFeatures
from circuitlasso.data.models import check_sae_fits
from circuitlasso.executor import Executor
from circuitlasso.forward import (
    Model,
    SAEMap,
    batches_by_length,
    check_prompts,
    hook_activations,
    mean_over_real,
    sae_layers,
    special_token_ids,
    stop_at_layer,
    to_dense,
)
from circuitlasso.timing import Stopwatch

SAE_COLLECTOR_VERSION = 4  # part of the cache key; bump when the stored chunks change meaning
CSRParts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # one batch's (indptr, indices, data)


def _hash_tensor(digest: hashlib._Hash, name: str, t: torch.Tensor) -> None:
    """Add ``name``, ``t``'s shape and dtype, and every byte of ``t`` to ``digest``."""
    t = t.detach()
    digest.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
    # the numpy view goes to hashlib as a buffer: no copy beyond the one to the CPU
    digest.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)


def _hash_module(digest: hashlib._Hash, module: torch.nn.Module) -> None:
    """Add the class, every parameter and every buffer (non-persistent ones too) to ``digest``."""
    digest.update(f"{type(module).__module__}.{type(module).__qualname__}".encode())
    for name, param in module.named_parameters():
        _hash_tensor(digest, f"parameter {name}", param)
    for name, buffer in module.named_buffers():
        _hash_tensor(digest, f"buffer {name}", buffer)


def model_fingerprint(model: Model) -> str:
    """Hex sha256 of the model's class, config (not its device) and every byte of every
    parameter and buffer.

    Any change of a weight, however small (one neuron of one MLP), gives a new fingerprint, so
    models that share a name but not their weights (seeds, fine-tuned or edited checkpoints)
    never share a cache entry. Hashing reads every weight once, on the CPU: about a second per
    GiB (sha256, twice as fast as blake2b with SHA CPU instructions), plus the copy to the CPU of
    a model on a GPU.
    """
    cfg = {k: v for k, v in model.cfg.to_dict().items() if k not in ("device", "n_devices")}
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    _hash_module(digest, model)
    return digest.hexdigest()


def sae_fingerprint(sae: SAE) -> str:
    """Hex sha256 of the SAE's class, config (hook, widths, architecture, dtype, activation
    normalization; not its device), ``hook_z`` reshaping mode and every byte of every parameter
    and buffer (thresholds and normalization buffers included)."""
    cfg = {k: v for k, v in sae.cfg.to_dict().items() if k not in ("device", "metadata")}
    cfg["hook_name"] = sae.cfg.metadata.hook_name
    cfg["architecture"] = sae.cfg.architecture()
    cfg["hook_z_reshaping_mode"] = getattr(sae, "hook_z_reshaping_mode", None)
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    _hash_module(digest, sae)
    return digest.hexdigest()


def _prompts_hash(prompts: list[str]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()


def _tokens_hash(batches: list[tuple[torch.Tensor, torch.Tensor]]) -> str:
    """Hex sha256 of every batch's token ids: what the tokenizer made of the prompts."""
    digest = hashlib.sha256()
    for i, (tokens, _) in enumerate(batches):
        _hash_tensor(digest, f"batch {i}", tokens)
    return digest.hexdigest()


def _nonfinite_error(
    what: str, rows: torch.Tensor, indices: list[int], prompts: list[str]
) -> ValueError:
    """Error naming the batch's rows ``rows`` by their places ``indices`` in the prompt list."""
    bad = sorted({indices[int(r)] for r in rows})
    return ValueError(
        f"non-finite values (NaN or inf) in {what} for prompts "
        f"{bad[:5]}{' ...' if len(bad) > 5 else ''}, e.g. {prompts[bad[0]][:80]!r}"
    )


def _average_features(sae: SAE, activations: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """Per-prompt mean of ``sae.encode(activations)``: ``(B, D)`` float32.

    ``activations: (T, d_in)`` are the batch's real tokens, ``activations_full[real]`` with
    ``real: (B, P)`` the batch's mask; only they are encoded.
    """
    features = sae.encode(activations.to(sae.W_enc.device))
    return mean_over_real(to_dense(features), real, dtype=torch.float32)


def _csr_parts(means: torch.Tensor) -> CSRParts:
    """``(indptr, indices, data)`` of a dense ``(B, D)`` matrix's nonzeros, int32 indices."""
    rows, cols = means.nonzero(as_tuple=True)
    data = means[rows, cols].cpu()
    counts = torch.bincount(rows.cpu(), minlength=means.shape[0])
    indptr = torch.zeros(means.shape[0] + 1, dtype=torch.int64)
    indptr[1:] = counts.cumsum(0)
    return indptr, cols.cpu().to(torch.int32), data


def collect_sae_features(
    model: Model,
    saes: SAEMap,
    prompts: Sequence[str],
    *,
    batch_size: int = 32,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    cache_key_parts: dict | None = None,
    progress: bool = True,
    executor: str | Executor | None = None,
    pooled: Collection[int] = (),
) -> LayerFeatures:
    """Token-averaged SAE features per layer: ``{layer: Z_layer}``, each ``(M, d_sae)`` CSR, as
    :class:`~circuitlasso.collect.layers.LayerFeatures` (a mapping that scikit-learn can split
    by prompts). For each layer of ``pooled``, the token-averaged activation the layer's SAE
    reads is kept too, from the same forward pass: ``Z.pooled[layer]``, ``(M, d_in)`` float64
    (what a dense probe of that hook reads).

    ``saes[layer]`` encodes the activations at its own hook (``sae.cfg.metadata.hook_name``;
    the SAE must fit the model, see :func:`circuitlasso.data.models.check_sae_fits`); the dict keys
    only name the outputs. Row ``i`` of ``Z_layer`` is the mean of the SAE's features over the
    real tokens of ``prompts[i]``, float32.

    Tokens: each prompt is tokenized as the model reads it (:func:`circuitlasso.forward.
    to_tokens`: a decoder's BOS prepended as its ``default_prepend_bos`` says, an encoder's
    ``[CLS] ... [SEP]``) and right-padded within its batch. Positions holding a special id (BOS,
    EOS, PAD, CLS, SEP) are left out of the average: they are the positions sae-lens drops when
    training with ``exclude_special_tokens`` (as the toy SAEs are), and the BOS position's
    large-norm activation would otherwise dominate every prompt's mean. Padding does not change
    the activations at real positions: a decoder's attention is causal, an encoder is given the
    attention mask. A prompt with no real token, or longer than the model's context, is an
    error naming it.

    Streaming: prompts go through the model ``batch_size`` at a time, shortest first
    (:func:`~circuitlasso.forward.batches_by_length`, so a batch pads little), only up to the
    last block an SAE reads (``stop_at_layer``) and saving only the SAEs' hooks; the SAE encodes
    the real tokens of the batch and the batch's means are made sparse at once. Peak memory is
    a few copies of one batch's ``(real tokens, D)`` dense features (the SAE's temporaries) plus
    the sparse result; lower ``batch_size`` to lower it.

    Cache: each batch is saved under ``cache_dir`` (default ``$CIRCUITLASSO_CACHE``, see
    :func:`circuitlasso.cache.cache_root`) as soon as it is done, keyed by the model (name,
    config and a hash of every byte of its parameters and buffers, :func:`model_fingerprint`),
    each SAE (hook, config and a hash of every byte of its parameters and buffers,
    :func:`sae_fingerprint`), the prompts and their token ids (so the tokenizer too), the
    special ids left out, the hooks and ``batch_size``, plus ``cache_key_parts`` (strings,
    numbers, booleans, None or lists of them). Editing any weight, even one neuron's, is a new
    entry. A rerun loads the batches without running the model; an interrupted run resumes after
    the last saved batch. Hashing reads every weight of the model and the SAEs once per call, on
    the CPU: about a second per GiB (GPT-2 small: 0.65 s, a few percent of a CPU forward pass over
    a few hundred prompts; a GPU's forward pass can be faster than the hash). Forward hooks
    attached to the model or the SAEs are not part of the key: pass ``cache=False`` when they
    change the activations.
    ``cache=False`` computes every batch without hashing, reading or writing anything on disk.
    Prompts are batched in an order that depends on their tokens and text alone, so the same
    prompts in another order share the entry (rows still follow ``prompts``).

    ``Z.compute_seconds`` is the time of a first run, cached or not: this call's tokenizing,
    hashing and stacking plus the seconds each batch took when it was computed (recorded beside
    it in the cache, :func:`circuitlasso.cache.chunk_seconds`).

    ``executor``: where the batches run (see :mod:`circuitlasso.executor`). With ``"ray"`` (or
    a configured :class:`~circuitlasso.executor.RayExecutor`, e.g. ``gpus_per_task=1``) the
    batches are Ray tasks: the model and SAEs go to the object store once, each worker keeps
    its own copy (on the device they are on), and each batch is cached as it finishes.

    Errors: an SAE whose hook is not a hook of the model (with close matches) or whose ``d_in``
    differs from the model's width, an empty prompt list, and non-finite activations or features
    (naming the hook and the prompts) raise ``ValueError``.
    """
    saes = sae_layers(saes)
    prompts = check_prompts(prompts)
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    for sae in saes.values():
        check_sae_fits(model, sae)
    layers = sorted(saes)
    pooled_layers = sorted({int(layer) for layer in pooled})
    unknown = [layer for layer in pooled_layers if layer not in saes]
    if unknown:
        raise ValueError(f"pooled layers {unknown} have no SAE; layers: {layers}")
    hooks = {layer: str(saes[layer].cfg.metadata.hook_name) for layer in layers}
    special_ids = special_token_ids(model)
    clock = Stopwatch()
    batches, order = batches_by_length(model, prompts, batch_size)
    members = [order[s : s + batch_size].tolist() for s in range(0, len(prompts), batch_size)]

    key = None  # cache=False: nothing is hashed, read or written
    if cache:
        extra = cache_key_parts or {}
        key = cache_key(
            what="sae_features",
            version=SAE_COLLECTOR_VERSION,
            model=model.cfg.model_name,
            model_fingerprint=model_fingerprint(model),
            saes=[[layer, hooks[layer], sae_fingerprint(saes[layer])] for layer in layers],
            prompts=_prompts_hash([prompts[i] for i in order]),  # the same in any order
            tokens=_tokens_hash(batches),
            n_prompts=len(prompts),
            batch_size=batch_size,
            prepend_bos=bool(model.cfg.default_prepend_bos),
            excluded_token_ids=special_ids,
            pad_token_id=getattr(model.tokenizer, "pad_token_id", None),
            extra=[[str(name), value] for name, value in sorted(extra.items())],
            **({"pooled": pooled_layers} if pooled_layers else {}),
        )
    hook_names = sorted(set(hooks.values()))
    stop = stop_at_layer(hook_names)
    setup = clock.lap("setup")

    def chunk(i: int) -> tuple[list[CSRParts], list[torch.Tensor]]:
        """The batch's sparse means per layer and its pooled activations per pooled layer."""
        tokens, real = batches[i]
        parts = []
        with torch.inference_mode():
            saved = hook_activations(model, tokens, hook_names, stop_at_layer=stop)
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
                        members[i],
                        prompts,
                    )
                means = _average_features(saes[layer], tokens_real, mask)
                if not bool(torch.isfinite(means).all()):
                    rows = (~torch.isfinite(means)).any(1).nonzero()[:, 0]
                    raise _nonfinite_error(
                        f"the features of the SAE on {hooks[layer]!r} (layer {layer})",
                        rows,
                        members[i],
                        prompts,
                    )
                parts.append(_csr_parts(means))
                del means
            dense = [mean_over_real(saved[hooks[layer]], real).cpu() for layer in pooled_layers]
        return parts, dense

    chunks = load_or_compute_chunks(
        key,
        len(batches),
        chunk,
        root=cache_dir,
        desc=f"SAE features ({batch_size} prompts/batch)",
        progress=progress,
        executor=executor,
    )
    batches_seconds = clock.lap("batches")
    if key is not None:
        batches_seconds = chunk_seconds(key, len(batches), root=cache_dir)
    inverse = np.argsort(order)  # row i of the stacked batches is prompt order[i]
    result = {}
    for j, layer in enumerate(layers):
        d_sae = saes[layer].cfg.d_sae
        blocks = [
            sp.csr_matrix(
                (data.numpy(), indices.numpy(), indptr.numpy()), shape=(len(indptr) - 1, d_sae)
            )
            for indptr, indices, data in (c[0][j] for c in chunks)
        ]
        result[layer] = sp.vstack(blocks, format="csr", dtype=np.float32)[inverse]
    dense = {
        layer: torch.cat([c[1][j] for c in chunks]).numpy()[inverse]
        for j, layer in enumerate(pooled_layers)
    }
    stack = clock.lap("stack")
    return LayerFeatures(result, compute_seconds=setup + batches_seconds + stack, pooled=dense)
