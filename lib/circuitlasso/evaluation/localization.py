"""Circuit localization on a real decoder, scored as MIB scores it: CircuitLasso against EAP and
EAP-IG on counterfactual tasks (IOI, subject-verb agreement).

For each task of :mod:`circuitlasso.data.counterfactual_tasks` (the development tasks by default,
the held-out ones when asked), every method finds edge scores on the train split and is scored
on the disjoint test split with :func:`circuitlasso.evaluation.mib.mib_scores` (f at MIB's edge
fractions; CPR from the signed ranking and CMD from the absolute one, as MIB reports them, and
the absolute ranking's CPR beside; m the logit difference answer - wrong at each prompt's last
real token).

- ``circuitlasso-*`` (:func:`~circuitlasso.evaluation.interpbench.evaluate.run_method`, as the
  InterpBench harness runs them): clean and counterfactual train prompts stacked, activations
  averaged over the real tokens (``lasso_positions="real"``, the paper's App. B.2) or over the
  last one (``"last"``, where the metric reads the logits), the output node each prompt's logit
  difference (one column, where the logits would be the whole vocabulary); node-edge scores, a
  head's score given to its q, k and v inputs alike. The paper's plain block Lasso over every
  node's d_model columns would, on SmolLM2, return over 100 GiB of dense coefficient blocks:
  its memory check refuses it before any work, and the default methods leave it out.
- ``circuitlasso-anchored`` (:mod:`circuitlasso.circuits.anchored`): signed scores per receiver
  slot, each sender's clean minus counterfactual contrast (averaged over the real tokens) times
  the receiver's sensitivity of the metric (read at the last real token) through the Lasso
  surrogate; forward passes only.
- ``circuitlasso-patched`` (:mod:`circuitlasso.evaluation.patched`): the logit difference's
  drop regressed on random per-prompt patchings of every head's q, k and v, MLP and the input
  (``patched_rows`` prompt passes), edges split by each sender's share of its receiver's
  contrast, the slots the Lasso leaves at zero filled in from their node's total effect through
  those shares; forward passes only.
- ``eap`` and ``eap-ig``: :func:`~circuitlasso.evaluation.eap.edge_attribution_patching` with
  MIB's metric; its ``metric`` sees no item ids, so the prompts run in chunks, each with its own
  metric, and the per-chunk mean scores are averaged weighted by chunk size (the same sum);
  scored per receiver slot (q, k, v apart) as MIB scores EAP.
- ``random``: every MIB edge a seeded standard normal score, the circuits MIB's random baseline
  scores (its signed and absolute rankings are two random orders); it finds them in no time.

A method's seconds are the wall time of finding its scores (forward passes included), not of
scoring them. :func:`compare_methods` keeps each (task, method) row in a store as it ends, keyed
by the model's weights, the tokens, the settings, the machine and the library's version, so a
stopped run resumes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.cache import digest_arrays
from circuitlasso.data.counterfactual_tasks import (
    ALL_TASKS,
    TASKS,
    TaskScore,
    TaskTokens,
    encode_for_model,
    task_score,
    task_splits,
)
from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    graph_nodes,
    hook_flags,
    prompts_per_batch,
    require_hook_flags,
)
from circuitlasso.data.prompt_pairs import PromptPairs
from circuitlasso.evaluation.cost.store import stored_row
from circuitlasso.evaluation.eap import (
    edge_attribution_patching,
    logit_difference_metric,
    receiver_slots,
)
from circuitlasso.evaluation.head_roles import candidates_in_circuits, direct_effects
from circuitlasso.evaluation.interpbench.evaluate import EAP_IG_STEPS, METHODS, run_method
from circuitlasso.evaluation.mib import (
    MIB_FRACTIONS,
    SlotEdge,
    circuit_ends,
    mib_edges,
    mib_scores,
)
from circuitlasso.evaluation.patched import FILL_WEIGHT, PATCHED_ROWS, SHARE_POSITIONS
from circuitlasso.timing import Stopwatch

RANDOM = "random"  # seeded random edge scores, the baseline every method is read against
LOCALIZATION_METHODS = (*METHODS, RANDOM)
DEFAULT_METHODS = (
    "circuitlasso-linear-read",
    "circuitlasso-anchored",
    "circuitlasso-patched",
    "eap",
    "eap-ig",
    RANDOM,
)
LassoPositions = Literal["real", "last"]
TOP_HEADS = 10
"""How many of a scoring's heads a row keeps (:func:`head_scores`)."""


@dataclass(frozen=True)
class LocalizationSettings:
    """One comparison's settings: the ``methods`` (names in :data:`LOCALIZATION_METHODS`: those
    of :data:`~circuitlasso.evaluation.interpbench.evaluate.METHODS` and ``random``), ``n_train``
    items to find circuits on and ``n_test`` to score them on, MIB's edge ``fractions``, the
    ``seed`` of the items and methods, EAP-IG's ``ig_steps``, the tokens CircuitLasso averages
    over (``lasso_positions``), the budget of one batch's passes (``memory_gib``) and the
    patched passes of ``circuitlasso-patched`` (``patched_rows``)."""

    methods: Sequence[str] = DEFAULT_METHODS
    n_train: int = 64
    n_test: int = 64
    fractions: Sequence[float] = MIB_FRACTIONS
    seed: int = 0
    ig_steps: int = EAP_IG_STEPS
    lasso_positions: LassoPositions = "real"
    memory_gib: float = DEFAULT_PASS_GIB
    patched_rows: int = PATCHED_ROWS

    def __post_init__(self) -> None:
        unknown = [m for m in self.methods if m not in LOCALIZATION_METHODS]
        if unknown or not self.methods:
            raise ValueError(
                f"methods must be a non-empty subset of {LOCALIZATION_METHODS}, got {unknown}"
            )
        if self.n_train < 1 or self.n_test < 1:
            raise ValueError(f"n_train and n_test must be >= 1, got {self.n_train}, {self.n_test}")
        fractions = [float(f) for f in self.fractions]
        increasing = bool(fractions) and sorted(set(fractions)) == fractions
        if not (increasing and fractions[0] > 0 and fractions[-1] <= 1):
            raise ValueError(f"fractions must increase strictly in (0, 1], got {fractions}")
        if self.lasso_positions not in ("real", "last"):
            raise ValueError(
                f"lasso_positions must be 'real' or 'last', not {self.lasso_positions!r}"
            )
        if self.ig_steps < 1:
            raise ValueError(f"ig_steps must be >= 1, got {self.ig_steps}")
        object.__setattr__(self, "methods", tuple(self.methods))
        object.__setattr__(self, "fractions", tuple(fractions))


PATCHING_FLAGS = ("use_split_qkv_input", "use_hook_mlp_in", "ungroup_grouped_query_attention")
"""The hook flags edge patching reads, and grouped-query heads ungrouped so that each query
head's key and value inputs are edges of their own, as MIB asks."""


@contextmanager
def patching_flags(model: HookedTransformer) -> Iterator[HookedTransformer]:
    """``model`` with every flag of :data:`PATCHING_FLAGS` on inside the block; the caller's
    flags restored after."""
    with hook_flags(model, **dict.fromkeys(PATCHING_FLAGS, True)):
        require_hook_flags(model)
        yield model


def _eap_chunk_size(model: HookedTransformer, n_positions: int, memory_gib: float) -> int:
    """Items per EAP chunk: what ``edge_attribution_patching`` would put in one batch."""
    nodes = graph_nodes(model)
    senders = sum(1 for n in nodes if n.kind != "output")
    slots = len(receiver_slots(model, nodes))
    kept = n_positions * model.cfg.d_model * (12 * senders + 20 * slots)
    return prompts_per_batch(
        model, n_positions, memory_gib, gradients=True, extra_bytes_per_prompt=kept
    )


def eap_logit_diff(
    model: HookedTransformer, tokens: TaskTokens, ig_steps: int, memory_gib: float
) -> dict[SlotEdge, float]:
    """EAP (``ig_steps=0``) or EAP-IG slot scores with the logit-difference metric, averaged
    over items (module docstring)."""
    size = _eap_chunk_size(model, tokens.clean.shape[1], memory_gib)
    totals: dict[SlotEdge, float] = {}
    for start in range(0, len(tokens), size):
        chunk = tokens.rows(slice(start, start + size))
        result = edge_attribution_patching(
            model,
            chunk.clean,
            chunk.counterfactual,
            ig_steps=ig_steps,
            metric=logit_difference_metric(chunk.answer, chunk.wrong),
            position_mask=chunk.last_mask,
            batch_size=len(chunk),
        )
        for edge, score in result.slot_scores.items():
            totals[edge] = totals.get(edge, 0.0) + score * len(chunk)
    return {edge: total / len(tokens) for edge, total in totals.items()}


def find_scores(
    method: str,
    model: HookedTransformer,
    train: TaskTokens,
    settings: LocalizationSettings = LocalizationSettings(),
) -> dict[tuple[str, str], float]:
    """One method's edge scores on the ``train`` split (module docstring)."""
    if method == RANDOM:
        edges = mib_edges(model)
        noise = np.random.default_rng(settings.seed).standard_normal(len(edges))
        return dict(zip(edges, noise.tolist(), strict=True))
    if method in ("eap", "eap-ig"):
        steps = settings.ig_steps if method == "eap-ig" else 0
        return eap_logit_diff(model, train, steps, settings.memory_gib)
    average = train.real_mask if settings.lasso_positions == "real" else train.last_mask
    pairs = PromptPairs(train.clean, train.counterfactual, train.last_mask, average)
    answers = torch.stack([train.answer, train.wrong], 1)
    found = run_method(
        method, model, pairs, settings.seed, answers=answers, patched_rows=settings.patched_rows
    )
    return found.scores if found.slot_scores is None else found.slot_scores


def head_scores(
    model: HookedTransformer, scores: dict[tuple[str, str], float], n: int = TOP_HEADS
) -> list[tuple[str, float]]:
    """The ``n`` attention heads whose edges out weigh most in ``scores`` (MIB or node edges):
    per head, the sum of ``|score|`` over the edges it sends, largest first."""
    heads = {node.name for node in graph_nodes(model) if node.kind == "head"}
    totals = dict.fromkeys(sorted(heads), 0.0)
    for (sender, _), score in scores.items():
        if sender in totals:
            totals[sender] += abs(float(score))
    return sorted(totals.items(), key=lambda item: -item[1])[:n]


def score_method(
    method: str,
    model: HookedTransformer,
    train: TaskTokens,
    test: TaskTokens,
    settings: LocalizationSettings = LocalizationSettings(),
    ends: tuple[float, float] | None = None,
) -> dict[str, object]:
    """One (task, method) row: the seconds to find the scores on ``train``, their MIB scores on
    ``test`` (``ends``: the empty and full circuits' metric there, when already known) and the
    top heads (:func:`head_scores`)."""
    clock = Stopwatch()
    scores = find_scores(method, model, train, settings)
    seconds = clock.lap("find")
    score = mib_scores(
        model, test, scores, settings.fractions, memory_gib=settings.memory_gib, ends=ends
    )
    return {
        "seconds": seconds,
        "cpr": score.cpr,
        "cmd": score.cmd,
        "cpr_abs": score.cpr_abs,
        "faithfulness": list(score.signed.faithfulness),
        "faithfulness_abs": list(score.absolute.faithfulness),
        "kept": list(score.signed.kept),
        "m_empty": score.signed.m_empty,
        "m_full": score.signed.m_full,
        "top_heads": [list(pair) for pair in head_scores(model, scores)],
    }


def model_digest(model: HookedTransformer) -> str:
    """sha256 of the model's weights (a store key part)."""
    return digest_arrays(*(p.detach().float().cpu().numpy() for p in model.parameters()))


def _tokens_digest(train: TaskTokens, test: TaskTokens) -> str:
    return digest_arrays(
        *(t.numpy() for tt in (train, test) for t in (tt.clean, tt.counterfactual)),
        *(t.numpy() for tt in (train, test) for t in (tt.answer, tt.wrong)),
    )


@dataclass(frozen=True)
class Localization:
    """A comparison: ``table`` has a row per (task, method) with ``seconds``, ``cpr`` (MIB's:
    the signed ranking's), ``cmd`` (the absolute ranking's), ``cpr_abs``, ``faithfulness`` and
    ``faithfulness_abs`` (f at each fraction, signed and absolute rankings), ``kept`` (edges of
    the signed ranking left after pruning), ``m_empty``,
    ``m_full`` and ``top_heads`` (``[head, score]``, :func:`head_scores`); ``model_scores`` the
    model's own accuracy and mean logit difference per task and split; ``n_edges`` the edges as
    MIB counts them."""

    table: pd.DataFrame
    model_scores: dict[str, dict[str, TaskScore]]
    n_edges: int
    settings: LocalizationSettings
    tokens: dict[str, tuple[TaskTokens, TaskTokens]]
    """``{task: (train, test)}``: the items the methods ran on."""

    def curves(self) -> pd.DataFrame:
        """Long table of the faithfulness curves: task, method, fraction, f."""
        rows = [
            {"task": r.task, "method": r.method, "fraction": fraction, "f": f}
            for r in self.table.itertuples()
            for fraction, f in zip(self.settings.fractions, r.faithfulness, strict=True)
        ]
        return pd.DataFrame(rows)

    def summary_table(self) -> pd.DataFrame:
        """CPR (signed), CMD, CPR of the absolute ranking and seconds per task and method,
        with f of the signed ranking at each fraction."""
        shown = self.table[["task", "method", "cpr", "cmd", "cpr_abs", "seconds"]].copy()
        for k, fraction in enumerate(self.settings.fractions):
            shown[f"f@{fraction:g}"] = [float(f[k]) for f in self.table["faithfulness"]]
        return shown

    def top_heads(self, task: str) -> dict[str, list[str]]:
        """``{method: its top heads on task, most important first}``."""
        rows = self.table[self.table["task"] == task]
        return {r.method: [head for head, _ in r.top_heads] for r in rows.itertuples()}

    def top_heads_table(self, n: int = 5) -> pd.DataFrame:
        """Each method's ``n`` top heads per task, side by side: a column per (task, method)."""
        columns = {
            (r.task, r.method): [f"{head} ({score:.3g})" for head, score in r.top_heads[:n]]
            for r in self.table.itertuples()
        }
        table = pd.DataFrame({key: pd.Series(heads) for key, heads in columns.items()})
        table.index = pd.RangeIndex(1, len(table) + 1, name="rank")
        return table

    def candidates(self, model: HookedTransformer, n: int = 5) -> pd.DataFrame:
        """Per task, the ``n`` heads of largest direct effect on its test items
        (:func:`~circuitlasso.evaluation.head_roles.direct_effects`: in IOI, name-mover
        candidates), with their rank among each method's top heads
        (:func:`~circuitlasso.evaluation.head_roles.candidates_in_circuits`)."""
        tables = []
        for task, (_, test) in self.tokens.items():
            effects = direct_effects(model, test)
            table = candidates_in_circuits(effects, self.top_heads(task), n)
            tables.append(table.assign(task=task).set_index(["task", "head"]))
        return pd.concat(tables)

    def summary(self, candidates: pd.DataFrame) -> dict[str, object]:
        """The section's summary: per task the model's test accuracy and mean logit difference,
        how many ``candidates`` attend more to the answer's earlier occurrence than to the wrong
        token's;
        per task and method CPR, CMD, f at each fraction and seconds, how many of the
        ``candidates`` (:meth:`candidates`) its top heads hold and the median layer of its five
        top heads; the edges and items."""
        methods = list(self.settings.methods)
        by_task: dict[str, object] = {}
        for task, scores in self.model_scores.items():
            rows = self.table[self.table["task"] == task].set_index("method")
            found = candidates.loc[task, methods].notna().sum()
            heads = candidates.loc[task]
            by_task[task] = {
                "model_accuracy": scores["test"].accuracy,
                "model_logit_diff": scores["test"].mean_logit_diff,
                "candidates_attending_answer": int(
                    (heads["attention_answer"] > heads["attention_wrong"]).sum()
                ),
                **{
                    method: {
                        "cpr": rows.loc[method, "cpr"],
                        "cmd": rows.loc[method, "cmd"],
                        "cpr_abs": rows.loc[method, "cpr_abs"],
                        "faithfulness": dict(
                            zip(
                                [f"{f:g}" for f in self.settings.fractions],
                                rows.loc[method, "faithfulness"],
                                strict=True,
                            )
                        ),
                        "seconds": rows.loc[method, "seconds"],
                        "candidates_in_top_heads": int(found[method]),
                        "median_top_head_layer": _median_layer(rows.loc[method, "top_heads"]),
                    }
                    for method in methods
                },
            }
        return {
            **by_task,
            "edges": self.n_edges,
            "items": {"train": self.settings.n_train, "test": self.settings.n_test},
        }

    def model_table(self) -> pd.DataFrame:
        """The model's own accuracy and mean logit difference per task and split."""
        return pd.DataFrame(
            [
                {
                    "task": task,
                    "split": split,
                    "items": s.n,
                    "accuracy": s.accuracy,
                    "mean_logit_diff": s.mean_logit_diff,
                    "counterfactual_logit_diff": s.counterfactual_logit_diff,
                }
                for task, splits in self.model_scores.items()
                for split, s in splits.items()
            ]
        )


def _median_layer(top_heads: Sequence[Sequence[object]], n: int = 5) -> float:
    """The median layer of the first ``n`` heads of ``[[head, score], ...]`` (``"a12.h3"``)."""
    layers = [int(str(head)[1:].split(".")[0]) for head, _ in top_heads[:n]]
    return float(np.median(layers))


def compare_methods(
    model: HookedTransformer,
    tasks: Sequence[str] = TASKS,
    settings: LocalizationSettings = LocalizationSettings(),
    *,
    store: str | Path | None = None,
    progress: bool = True,
) -> Localization:
    """Every method of ``settings`` on every task (module docstring), on ``model`` (its patching
    flags on during the call, :func:`patching_flags`); each (task, method) row kept in ``store``
    as it ends when one is given, and read back from it by a later call with the same model,
    tokens and settings."""
    unknown = [t for t in tasks if t not in ALL_TASKS]
    if unknown or not tasks:
        raise ValueError(f"tasks must be a non-empty subset of {ALL_TASKS}, got {unknown}")
    with patching_flags(model.eval()):
        return _compare(model, tasks, settings, store, progress)


def _compare(
    model: HookedTransformer,
    tasks: Sequence[str],
    settings: LocalizationSettings,
    store: str | Path | None,
    progress: bool,
) -> Localization:
    """:func:`compare_methods` on a model whose patching flags are on."""
    device = str(model.cfg.device)
    tokens = {}
    for task in tasks:
        split = task_splits(task, model.tokenizer, settings.n_train, settings.n_test, settings.seed)  # type: ignore[arg-type]
        tokens[task] = (encode_for_model(model, split.train), encode_for_model(model, split.test))
    model_scores = {
        task: {"train": task_score(model, train), "test": task_score(model, test)}
        for task, (train, test) in tokens.items()
    }
    digest = model_digest(model) if store is not None else ""
    rows = []
    ends: dict[str, tuple[float, float]] = {}  # per task, shared by its methods' scorings
    work = [(task, method) for task in tasks for method in settings.methods]
    for task, method in tqdm(work, desc="methods", disable=not progress):
        train, test = tokens[task]

        def run(method: str = method, task: str = task) -> dict[str, object]:
            train, test = tokens[task]
            if task not in ends:
                ends[task] = circuit_ends(model, test, memory_gib=settings.memory_gib)
            return score_method(method, model, train, test, settings, ends[task])

        if store is None:
            row = run()
        else:
            row = stored_row(store, run, kind="localization", model=digest,
                             tokens=_tokens_digest(train, test), task=task, method=method,
                             device=device, seed=settings.seed,
                             ig_steps=settings.ig_steps if method == "eap-ig" else 0,
                             fractions=list(settings.fractions),
                             lasso_positions=settings.lasso_positions if "lasso" in method else "",
                             **({"patched_rows": settings.patched_rows,
                                 "fill_weight": FILL_WEIGHT, "shares": SHARE_POSITIONS}
                                if method == "circuitlasso-patched" else {}),
                             )  # fmt: skip
        rows.append({"task": task, "method": method, **row})
    table = pd.DataFrame(rows)
    return Localization(table, model_scores, len(mib_edges(model)), settings, tokens)
