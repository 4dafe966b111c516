"""The toy world on disk: layout, saving and loading of the model and SAEs.

Layout of a toy-world folder (default: :func:`default_toy_dir`, shipped inside the package)::

    tokenizer.json
    model/config.json              HookedTransformerConfig arguments and the data seed
    model/model.safetensors        state dict, parameters rounded to float16
    saes/blocks.{l}.hook_resid_post/cfg.json, sae_weights.safetensors   (sae-lens format, float16)
    report.json                    the quality report at build time
    manifest.json                  sha256 of every other file, seed, versions, command
                                   (:mod:`circuitlasso.data.artifacts`)

Weights are stored in float16 (half the size of the package data) and read as float32.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from sae_lens import SAE
from safetensors.torch import load_file, save_file
from transformer_lens import HookedTransformer

from circuitlasso.cache import atomic_path
from circuitlasso.data.artifacts import FILE_MODE, write_json
from circuitlasso.data.toyworld.lm import make_model, resid_hook
from circuitlasso.data.toyworld.tokenizer import TOKENIZER_FILE, load_tokenizer

BUILT_DIR = "built"
MODEL_DIR = "model"
MODEL_CONFIG = "config.json"
MODEL_WEIGHTS = "model.safetensors"
SAES_DIR = "saes"
STORED_DTYPE = torch.float16
BUILD_HINT = "build it with `circuitlasso toy build` (or pass the folder of a built toy world)"


def default_toy_dir() -> Path:
    """The toy world shipped as package data: ``circuitlasso/data/toyworld/built``."""
    root = resources.files("circuitlasso.data.toyworld") / BUILT_DIR
    if not isinstance(root, Path):  # a zipped install
        raise FileNotFoundError(f"the toy world at {root} is not a folder on disk")
    return root


def toy_dir(path: Path | str | None) -> Path:
    """``path`` (default: ``default_toy_dir()``), checked to hold a toy model."""
    root = Path(path) if path is not None else default_toy_dir()
    if not (root / MODEL_DIR / MODEL_WEIGHTS).is_file():
        raise FileNotFoundError(f"no toy world at {root}: {BUILD_HINT}")
    return root


def save_model(model: HookedTransformer, arch: dict[str, Any], seed: int, root: Path) -> None:
    """Write the model's architecture, data seed and weights (its parameters rounded to
    ``STORED_DTYPE``, its buffers as they are) under ``root/model``."""
    directory = root / MODEL_DIR
    directory.mkdir(parents=True, exist_ok=True)
    write_json(directory / MODEL_CONFIG, {"architecture": arch, "seed": seed})
    parameters = dict(model.named_parameters())
    weights = {
        k: (v.to(STORED_DTYPE) if k in parameters else v).contiguous()
        for k, v in model.state_dict().items()
    }
    with atomic_path(directory / MODEL_WEIGHTS, mode=FILE_MODE) as tmp:
        save_file(weights, tmp)


def model_config(path: Path | str | None = None) -> dict[str, Any]:
    """``{"architecture": HookedTransformerConfig arguments, "seed": data seed}``."""
    return json.loads((toy_dir(path) / MODEL_DIR / MODEL_CONFIG).read_text())


def load_toy_model(path: Path | str | None = None) -> HookedTransformer:
    """The toy language model (eval mode, CPU, float32) with its word-level tokenizer attached."""
    root = toy_dir(path)
    arch = model_config(root)["architecture"]
    model = make_model(arch, load_tokenizer(root / TOKENIZER_FILE))
    model.load_state_dict(load_file(root / MODEL_DIR / MODEL_WEIGHTS))
    return model.eval()


def sae_dir(root: Path, layer: int) -> Path:
    return root / SAES_DIR / resid_hook(layer)


def load_sae(directory: Path) -> SAE:
    """The SAE saved in ``directory``, in float32 on the CPU."""
    return SAE.load_from_disk(directory, device="cpu", dtype="float32")


def load_toy_saes(
    layers: list[int] | None = None, path: Path | str | None = None
) -> dict[int, SAE]:
    """SAEs on ``blocks.{l}.hook_resid_post`` by layer (default: every layer)."""
    root = toy_dir(path)
    n_layers = model_config(root)["architecture"]["n_layers"]
    chosen = list(range(n_layers)) if layers is None else list(layers)
    bad = [layer for layer in chosen if not 0 <= layer < n_layers]
    if bad:
        raise ValueError(f"layers {bad} out of range: the toy model has {n_layers} layers")
    missing = [layer for layer in chosen if not (sae_dir(root, layer) / "cfg.json").is_file()]
    if missing:
        raise FileNotFoundError(f"no toy SAE for layers {missing} under {root / SAES_DIR}")
    return {layer: load_sae(sae_dir(root, layer)) for layer in chosen}
