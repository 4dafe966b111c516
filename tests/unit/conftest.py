"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from huggingface_hub import constants as hf_constants
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso import cache, timing
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit, LayerPairFit
from circuitlasso.data import minilm_saes, sae_training
from circuitlasso.data.cola import load_cola
from circuitlasso.data.counterfactual_tasks import TaskTokens
from circuitlasso.data.graph import candidate_edges, graph_nodes
from circuitlasso.data.interpbench import CompiledTask, to_hooked_transformer


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpt2_tokenizer_dir: Path) -> Path:
    """An empty Hugging Face hub cache in offline mode; our own cache mirrors the tokenizer."""
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "circuitlasso"))
    monkeypatch.setenv(cache.MIRROR_ENV, str(gpt2_tokenizer_dir))
    return hub


PlantSeconds = Callable[[ModuleType, Mapping[str, float]], None]


@pytest.fixture
def plant_seconds(monkeypatch: pytest.MonkeyPatch) -> PlantSeconds:
    """``plant(module, seconds)``: every :class:`~circuitlasso.timing.Stopwatch` that ``module``
    makes times each stage, a :meth:`~circuitlasso.timing.Stopwatch.lap` or a block, as
    ``seconds[name]`` (a stage of several blocks, that many times; a name not planted raises
    ``KeyError``); :meth:`~circuitlasso.timing.Stopwatch.record` keeps what it is given. What a
    run reports of its stages is then checked against known times, not the wall clock."""

    def plant(module: ModuleType, seconds: Mapping[str, float]) -> None:
        class Planted(timing.Stopwatch):
            def _planted(self, name: str, add: bool) -> float:
                if name in self.laps and not add:
                    raise ValueError(f"stage {name!r} was already timed")
                self.laps[name] = self.laps.get(name, 0.0) + seconds[name]
                return self.laps[name]

            def lap(self, name: str) -> float:
                return self._planted(name, add=False)

            @contextmanager
            def timed(self, name: str, *, add: bool = False) -> Iterator[None]:
                yield
                self._planted(name, add)

        monkeypatch.setattr(module, "Stopwatch", Planted)

    return plant


@pytest.fixture
def quick_minilm_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> list[int]:
    """The SAEs of all-MiniLM-L6-v2 that are built on first use (the layers the package does not
    ship) built, in an empty cache, on 200 training sentences for 4,096 tokens (seconds, not
    minutes); returns the layers trained, in order."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "circuitlasso"))
    monkeypatch.setattr(
        minilm_saes, "load_cola", lambda split: load_cola(split, mirror=shared_data).iloc[:200]
    )
    trained: list[int] = []
    train = sae_training.train_layer_sae

    def quick_train(acts, layer, cfg, hook_name):
        trained.append(layer)
        return train(acts, layer, replace(cfg, training_tokens=4096, rounds=1), hook_name)

    monkeypatch.setattr(sae_training, "train_layer_sae", quick_train)
    return trained


@pytest.fixture(scope="session")
def planted_layers() -> tuple[dict[int, sp.csr_matrix], np.ndarray]:
    """Three layers of planted sparse features ``{layer: (200, D)}`` (D = 12, 10, 8), each a
    rectified noisy linear function of the one below, and binary labels ``(200,)`` from the
    last layer's first feature."""
    rng = np.random.default_rng(1)
    z0 = rng.exponential(1.0, (200, 12)) * (rng.random((200, 12)) < 0.5)
    A1 = rng.normal(0, 1, (12, 10)) * (rng.random((12, 10)) < 0.3)
    z1 = np.maximum(z0 @ A1 + 0.1 * rng.normal(size=(200, 10)), 0)
    z2 = np.maximum(z1 @ rng.normal(0, 1, (10, 8)) + 0.1 * rng.normal(size=(200, 8)), 0)
    Z = {layer: sp.csr_matrix(z) for layer, z in enumerate((z0, z1, z2))}
    return Z, (z2[:, 0] > np.median(z2[:, 0])).astype(int)


def _hand_fit(parent: int, child: int, coef: np.ndarray, children: list[int]) -> LayerPairFit:
    k = len(children)
    return LayerPairFit(parent, child, np.array(children), sp.csc_matrix(coef), np.zeros(k),
                        np.ones(k, dtype=bool), np.zeros(k))  # fmt: skip


@pytest.fixture
def hand_chain() -> tuple[dict[int, sp.csr_matrix], dict[int, dict[int, LayerPairFit]], LabelFit]:
    """Layers 0, 1, 2 of 4 features ``{layer: (20, 4)}``; layer-pair columns written by hand,
    fitted columns 1.{0, 2} on layer 0 and 2.{1, 3} on 1; a readout of layer 2."""
    rng = np.random.default_rng(0)
    Z = {layer: sp.csr_matrix(rng.exponential(1.0, (20, 4)) * (rng.random((20, 4)) < 0.7))
         for layer in range(3)}  # fmt: skip
    A1 = np.array([[0.5, 0.0], [-1.0, 0.3], [0.0, 0.0], [0.2, 0.7]])
    A2 = np.array([[0.4, 0.0], [0.0, -0.6], [1.1, 0.0], [0.0, 0.9]])
    fit1, fit2 = _hand_fit(0, 1, A1, [0, 2]), _hand_fit(1, 2, A2, [1, 3])
    columns = {1: {0: fit1, 2: fit1}, 2: {1: fit2, 3: fit2}}
    label = LabelFit(2, np.array([0.3, -0.8, 0.5, 1.2]), -0.2, 0.0, True)
    return Z, columns, label


@pytest.fixture
def check_ground_truth() -> Callable[[CompiledTask], None]:
    """Asserts that a compiled task's ground truth is a nonempty DAG from input to output whose
    edges are all in the candidate graph of both converted variants."""

    def check(compiled: CompiledTask) -> None:
        truth = Circuit(compiled.ground_truth)
        assert len(truth) > 0 and truth.is_acyclic()
        assert {"input", "output"} <= truth.nodes
        for variant in ("exact", "distractors"):
            model = to_hooked_transformer(compiled, variant)
            assert truth.edges <= set(candidate_edges(graph_nodes(model)))

    return check


@pytest.fixture
def no_norm_model() -> HookedTransformer:
    """A small random transformer without norms (2 layers of 2 heads and a ReLU MLP, 11 tokens),
    every hook edge patching reads on: a receiver's input is exactly the sum of its senders'
    outputs and the logit difference is linear in the last residual stream."""
    cfg = HookedTransformerConfig(n_layers=2, d_model=8, n_ctx=6, d_head=4, n_heads=2,
                                  d_mlp=16, d_vocab=11, act_fn="relu", normalization_type=None,
                                  seed=0, use_attn_result=True, use_split_qkv_input=True,
                                  use_hook_mlp_in=True)  # fmt: skip
    return HookedTransformer(cfg)


@pytest.fixture
def random_task_tokens() -> Callable[..., TaskTokens]:
    """``make(m=16, p=6, seed=0)``: ``m`` random prompts of ``p`` tokens of 11, each
    counterfactual differing at position 1, the answer read at the last token."""

    def make(m: int = 16, p: int = 6, seed: int = 0) -> TaskTokens:
        g = torch.Generator().manual_seed(seed)
        clean = torch.randint(0, 11, (m, p), generator=g)
        counter = clean.clone()
        counter[:, 1] = torch.randint(0, 11, (m,), generator=g)
        last = torch.full((m,), p - 1)
        answer = torch.randint(0, 11, (m,), generator=g)
        wrong = (answer + 1 + torch.randint(0, 10, (m,), generator=g)) % 11
        return TaskTokens(clean, counter, last, answer, wrong, bos=False)

    return make
