"""What node ablation and the attribution baseline measure: the metric ``m`` of the model with
SAEs spliced in (:mod:`circuitlasso.evaluation.ablate`,
:func:`circuitlasso.evaluation.attribution.attribution_scores`), reported as a weighted mean over
a batch of prompts. A metric is a :class:`Metric`; two are defined here.

**The label readout** (:class:`Readout`). ``m = p(acceptable) - p(unacceptable) = 2 *
sigmoid(a^T zbar_L + b) - 1``, the learned classifier ``A_{L,y} = a``
(:class:`circuitlasso.circuits.features.LabelFit`) reading ``zbar_L: (D,)``, the last-layer SAE
features of the model's own forward pass averaged over the prompt's real tokens (BOS, EOS and
padding left out, as :func:`circuitlasso.collect.collect_sae_features` does); reported as the
mean over a batch of prompts. Given the prompts' labels ``y`` (1 = acceptable), the metric is
signed, ``(2y - 1) * m = p(correct) - p(wrong)``: on a mix of both classes the unsigned mean
mostly measures the share of each class, the signed one how well the model tells them apart (on
a class-balanced set it is 0 for a constant output). The model runs only as far as the last
spliced SAE.

**A decoder's judgement of minimal pairs** (:class:`MinimalPairMargin`). The prompts are the
good and the bad sentences of minimal pairs, labelled 1 and 0; a sentence's value is its
log-probability under the (spliced, ablated) decoder, ``log p(s) = sum over its real tokens t of
log p(s_t | s_<t)``, every token given everything before it with the BOS the tokenizer prepends
(so the first word is scored too), read from the logits of the whole model run to its end. Each
sentence is weighted by ``2 * (2y - 1)``: over ``n`` good and ``n`` bad sentences the weighted
mean is ``(sum of log p(good) - sum of log p(bad)) / n``, the mean over the pairs of the margin
``log p(good) - log p(bad)`` in nats, as :func:`circuitlasso.evaluation.acceptability.
minimal_pair_table` computes it for the model alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from sae_lens import SAE
from transformer_lens import HookedTransformer

from circuitlasso.circuits.features import LabelFit
from circuitlasso.data.models import check_sae_fits
from circuitlasso.estimator import CircuitLasso
from circuitlasso.evaluation.acceptability import token_log_probs
from circuitlasso.forward import Model, SAEMap, mean_over_real, sae_layers


@runtime_checkable
class Metric(Protocol):
    """A per-prompt metric of a forward pass with SAEs spliced in.

    ``layer``: the SAE layer whose (spliced, possibly ablated) features ``x: (B, P, D)`` the
    metric reads, or None for the model's logits ``x: (B, P, V)`` (the whole model runs).
    ``metric(x, tokens, real)`` is the ``(B,)`` value of each prompt of a batch of right-padded
    ``tokens: (B, P)`` with real-token mask ``real: (B, P)``; ``weights(labels, n)`` the ``(n,)``
    weight of each prompt in the reported mean; ``check(model, saes)`` raises ValueError where
    the metric cannot be measured on them.
    """

    @property
    def name(self) -> str: ...

    @property
    def layer(self) -> int | None: ...

    def check(self, model: Model, saes: Mapping[int, SAE]) -> None: ...

    def weights(self, labels: Sequence[int] | None, n: int) -> np.ndarray: ...

    def __call__(
        self, x: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor
    ) -> torch.Tensor: ...


def label_signs(labels: Sequence[int] | None, n: int) -> np.ndarray:
    """``(n,)`` sign of each prompt's metric: ``2y - 1``, or 1 without labels."""
    if labels is None:
        return np.ones(n)
    y = np.asarray(labels)
    if y.shape != (n,) or not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be {n} values in {{0, 1}}, one per prompt")
    return 2.0 * y - 1.0


@dataclass(frozen=True, eq=False)
class Readout:
    """The label readout ``2 * sigmoid(a^T zbar_L + b) - 1`` (module docstring) of a binary
    readout of layer ``layer`` with ``coef: (D,)`` (``a``) and ``intercept`` (``b``), signed by
    the labels where given."""

    layer: int
    coef: np.ndarray
    intercept: float

    @classmethod
    def of(cls, readout: LabelFit | CircuitLasso) -> Readout:
        """The readout metric of a binary label fit or fitted :class:`CircuitLasso`."""
        if isinstance(readout, LabelFit):
            kind, layer = readout.kind, readout.layer
            coef, intercept = readout.coef, readout.intercept
        else:
            kind, layer = readout.kind_, readout.readout_layer_
            coef, intercept = np.ravel(readout.coef_), np.ravel(readout.intercept_)[0]
        if kind != "binary":
            raise ValueError(f"the readout metric needs a binary readout, not a {kind} one")
        return cls(int(layer), coef, float(intercept))

    @property
    def name(self) -> str:
        return "readout"

    def __str__(self) -> str:
        return "the label readout, p(correct) - p(wrong)"

    def check(self, model: Model, saes: Mapping[int, SAE]) -> None:
        if self.layer not in saes:
            raise ValueError(f"the label fit reads layer {self.layer}, not among {sorted(saes)}")

    def weights(self, labels: Sequence[int] | None, n: int) -> np.ndarray:
        return label_signs(labels, n)

    def __call__(self, x: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``(B,)`` metric of features ``x: (B, P, D)``."""
        a = torch.as_tensor(self.coef, dtype=torch.float64, device=x.device)
        return 2 * torch.sigmoid(mean_over_real(x, real) @ a + self.intercept) - 1


@dataclass(frozen=True)
class MinimalPairMargin:
    """A decoder's log-probability of each sentence, weighted so that the mean over the good
    (label 1) and bad (label 0) sentences of minimal pairs is the mean over the pairs of
    ``log p(good) - log p(bad)`` in nats (module docstring)."""

    @property
    def name(self) -> str:
        return "minimal_pairs"

    @property
    def layer(self) -> None:
        return None

    def __str__(self) -> str:
        return "the decoder's log p(good) - log p(bad) over minimal pairs, nats"

    def check(self, model: Model, saes: Mapping[int, SAE]) -> None:
        """ValueError unless ``model`` is a decoder whose tokenizer prepends a BOS."""
        if not isinstance(model, HookedTransformer):
            raise ValueError(
                "the minimal-pair metric reads a decoder's next-token log-probabilities: it "
                f"needs a HookedTransformer, not a {type(model).__name__}"
            )
        if model.tokenizer is None:
            raise ValueError("the model has no tokenizer attached (model.set_tokenizer(...))")
        if getattr(model.tokenizer, "bos_token_id", None) is None:
            raise ValueError(
                "the model's tokenizer has no BOS token: the minimal-pair metric scores a "
                "sentence's first token given the BOS in front of it"
            )
        if not model.cfg.default_prepend_bos:
            raise ValueError(
                "the model does not prepend its BOS (cfg.default_prepend_bos is False): the "
                "minimal-pair metric scores a sentence's first token given the BOS in front of it"
            )

    def weights(self, labels: Sequence[int] | None, n: int) -> np.ndarray:
        """``2 * (2y - 1)``: ValueError unless ``labels`` mark as many good sentences (1) as bad
        ones (0)."""
        if labels is None:
            raise ValueError(
                "the minimal-pair metric needs labels: 1 for each good sentence, 0 for each bad one"
            )
        signs = label_signs(labels, n)
        if signs.sum() != 0:
            good = int((signs > 0).sum())
            raise ValueError(
                f"the minimal-pair metric needs as many good sentences as bad ones: labels mark "
                f"{good} good and {n - good} bad"
            )
        return 2 * signs

    def __call__(self, x: torch.Tensor, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float64 log-probability of each sentence from the logits ``x: (B, P, V)``:
        the sum over its real tokens of ``log p(token | every token before it)``."""
        tokens, real = tokens.to(x.device), real.to(x.device)
        if bool(real[:, 0].any()):
            raise ValueError("a sentence starts without a BOS: its first token has no context")
        chosen = token_log_probs(x, tokens)
        return torch.where(real[:, 1:], chosen, torch.zeros_like(chosen)).sum(1)


def as_metric(metric: Metric | LabelFit) -> Metric:
    """``metric`` itself, or the :class:`Readout` of a label fit."""
    return Readout.of(metric) if isinstance(metric, LabelFit) else metric


def check_saes(model: Model, saes: SAEMap, metric: Metric | None) -> dict[int, SAE]:
    """``saes`` keyed by layer (:func:`~circuitlasso.forward.sae_layers`), each checked to fit
    ``model``, and the ``metric`` checked to be measurable on them (:meth:`Metric.check`)."""
    if not saes:
        raise ValueError("saes is empty: need at least one {layer: SAE}")
    saes = sae_layers(saes)
    if metric is not None:
        metric.check(model, saes)
    for sae in saes.values():
        check_sae_fits(model, sae)
    return saes
