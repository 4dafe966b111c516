"""The paper's real-model row: CircuitLasso vs EAP and EAP-IG on IOI and subject-verb agreement,
scored as MIB scores circuit localization (CPR, CMD), with each method's wall time.

On a model (default ``smollm2-135m``; grouped-query attention is ungrouped so that each head's key
and value inputs are edges of their own, as MIB asks) and for each task of
:mod:`circuitlasso.data.counterfactual_tasks` (``ioi``: counterfactual ABC; ``sva``: the subject's
number flipped), every method finds a circuit on the train split and is scored on the disjoint
test split with :func:`circuitlasso.evaluation.mib.mib_score` (f at MIB's edge fractions, CPR and
CMD; m the logit difference answer - wrong at each prompt's last real token).

- ``circuitlasso-linear`` (the default variant of ``component_circuit``: one block Lasso) and
  ``circuitlasso-linear-read`` (parents seen through the child's read weights), run as the
  InterpBench harness runs them (:func:`~circuitlasso.evaluation.interpbench.evaluate.run_method`):
  clean and counterfactual train prompts stacked, activations averaged over the real tokens (no
  BOS), the output node each prompt's logit difference answer - wrong (one column, where the
  logits would be the whole vocabulary); node-edge scores, a head's score given to its q, k and
  v inputs alike. ``circuitlasso-linear`` and the nonlinear variants are options
  (``--methods``): on SmolLM2 the paper's block Lasso over every node's d_model columns (173k)
  would return over 100 GiB of dense coefficient blocks, which its memory check refuses before
  any work (:func:`~circuitlasso.solve.block.check_coefficient_bytes`).
  ``--lasso-positions last`` averages CircuitLasso's activations over the last token only, where
  the metric reads the logits, instead of every real token (the paper's App. B.2; default).
- ``eap`` and ``eap-ig`` (``--ig-steps``): :func:`~circuitlasso.evaluation.eap.
  edge_attribution_patching` with MIB's metric, the logit difference answer - wrong at the last
  real token (its ``metric`` sees no item ids, so the prompts run in chunks, each with its own
  metric, and the per-chunk mean scores are averaged weighted by chunk size: the same sum);
  scored per receiver slot (q, k, v apart) as MIB scores EAP.

A method's seconds are the wall time of finding its circuit (forward passes included), not of
scoring it. Each (task, method) row is kept in ``--store`` as it ends, keyed by the model's
weights, the tokens, the options, this machine and the library's version, so a stopped run
resumes (``--fresh`` measures all). Prints a table and one JSON line (``tasks``, ``cpr``,
``cmd``, ``seconds`` and ``faithfulness`` per task and method, ``model_logit_diff`` per task,
``edges`` as MIB counts them, ``n_prompts``, ``device``).

The component graph covers every layer: there is no option for a window of layers.

    python benchmarks/ioi.py --n-train 8 --n-test 8 --fractions 0.01 0.1 1.0
    python benchmarks/ioi.py --device cuda --n-train 64 --n-test 64
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from transformer_lens import HookedTransformer

from circuitlasso.cache import cache_root, digest_arrays
from circuitlasso.data.counterfactual_tasks import (
    TASKS,
    TaskTokens,
    encode_for_model,
    task_score,
    task_splits,
)
from circuitlasso.data.graph import (
    DEFAULT_PASS_GIB,
    graph_nodes,
    prompts_per_batch,
    require_hook_flags,
)
from circuitlasso.data.interpbench.prompts import PromptPairs
from circuitlasso.data.models import DECODER_NAME, load_model
from circuitlasso.evaluation.cost.store import stored_row
from circuitlasso.evaluation.eap import edge_attribution_patching, receiver_slots
from circuitlasso.evaluation.interpbench.evaluate import EAP_IG_STEPS, METHODS, run_method
from circuitlasso.evaluation.mib import MIB_FRACTIONS, mib_edges, mib_score

DEFAULT_METHODS = ("circuitlasso-linear-read", "eap", "eap-ig")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DECODER_NAME, help="a name load_model knows")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
    parser.add_argument("--n-train", type=int, default=64, help="items to find circuits on")
    parser.add_argument("--n-test", type=int, default=64, help="items to score circuits on")
    parser.add_argument("--fractions", nargs="+", type=float, default=list(MIB_FRACTIONS))
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--ig-steps", type=int, default=EAP_IG_STEPS, help="EAP-IG's steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--lasso-positions",
        choices=("real", "last"),
        default="real",
        help="CircuitLasso's activations averaged over every real token (the paper's App. B.2) "
        "or over the last one, where the metric reads the logits",
    )
    parser.add_argument(
        "--memory-gib", type=float, default=DEFAULT_PASS_GIB, help="budget of one batch's passes"
    )
    parser.add_argument(
        "--store",
        default=str(cache_root() / "ioi_benchmark"),
        help="folder keeping each (task, method) row as it ends, so that a stopped run resumes",
    )
    parser.add_argument("--fresh", action="store_true", help="measure every row, keep nothing")
    args = parser.parse_args(argv)
    if sorted(set(args.fractions)) != args.fractions:
        parser.error(f"--fractions must be strictly increasing, got {args.fractions}")
    return args


def prepare(model: HookedTransformer) -> HookedTransformer:
    """The hook flags the component graph needs, and grouped-query heads ungrouped."""
    model.set_use_attn_result(True)
    model.set_use_split_qkv_input(True)
    model.set_use_hook_mlp_in(True)
    model.set_ungroup_grouped_query_attention(True)
    require_hook_flags(model)
    return model


def logit_diff_metric(answer: torch.Tensor, wrong: torch.Tensor):
    """EAP's metric for one chunk of items: per item, the sum over positions of the position
    weights (1 at the last real token) times logit(answer) - logit(wrong)."""

    def metric(logits, clean_logits, corrupted_logits, weights):
        index = torch.stack([answer, wrong], 1).to(logits.device)  # (B, 2)
        picked = logits.gather(-1, index[:, None, :].expand(-1, logits.shape[1], -1))
        return ((picked[..., 0] - picked[..., 1]) * weights).sum(-1)

    return metric


def eap_chunk_size(model: HookedTransformer, n_positions: int, memory_gib: float) -> int:
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
) -> dict[tuple[str, str], float]:
    """EAP (``ig_steps=0``) or EAP-IG slot scores with the logit-difference metric, averaged
    over items (see the module docstring)."""
    size = eap_chunk_size(model, tokens.clean.shape[1], memory_gib)
    totals: dict[tuple[str, str], float] = {}
    for start in range(0, len(tokens), size):
        chunk = tokens.rows(slice(start, start + size))
        result = edge_attribution_patching(
            model,
            chunk.clean,
            chunk.counterfactual,
            ig_steps=ig_steps,
            metric=logit_diff_metric(chunk.answer, chunk.wrong),
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
    ig_steps: int,
    seed: int,
    memory_gib: float,
    lasso_positions: str = "real",
) -> dict[tuple[str, str], float]:
    """One method's edge scores on the train split; CircuitLasso averages activations over
    ``lasso_positions``: every real token (``"real"``) or the last one (``"last"``)."""
    if method in ("eap", "eap-ig"):
        return eap_logit_diff(model, train, ig_steps if method == "eap-ig" else 0, memory_gib)
    average = train.real_mask if lasso_positions == "real" else train.last_mask
    pairs = PromptPairs(train.clean, train.counterfactual, train.last_mask, average)
    answers = torch.stack([train.answer, train.wrong], 1)
    return run_method(method, model, pairs, seed, answers=answers).scores


def measure(
    method: str,
    model: HookedTransformer,
    train: TaskTokens,
    test: TaskTokens,
    args: argparse.Namespace,
) -> dict[str, object]:
    """One (task, method) row: the seconds to find the circuit and its MIB scores."""
    start = time.perf_counter()
    scores = find_scores(
        method, model, train, args.ig_steps, args.seed, args.memory_gib, args.lasso_positions
    )
    seconds = time.perf_counter() - start
    score = mib_score(model, test, scores, args.fractions, memory_gib=args.memory_gib)
    return {
        "seconds": seconds,
        "cpr": score.cpr,
        "cmd": score.cmd,
        "faithfulness": list(score.faithfulness),
        "kept": list(score.kept),
        "m_empty": score.m_empty,
        "m_full": score.m_full,
    }


def model_digest(model: HookedTransformer) -> str:
    """sha256 of the model's weights (a store key part)."""
    return digest_arrays(*(p.detach().float().cpu().numpy() for p in model.parameters()))


def main(argv: list[str] | None = None, model: HookedTransformer | None = None) -> dict:
    """Run the benchmark; ``model`` (hook flags set here) replaces ``--model``'s."""
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.manual_seed(args.seed)
    name = args.model if model is None else "the model given"
    if model is None:
        loaded = load_model(args.model, device=args.device)
        if not isinstance(loaded, HookedTransformer):
            raise SystemExit(f"{args.model} is not a decoder (HookedTransformer)")
        model = loaded
    model = prepare(model.eval())
    device = str(model.cfg.device)
    store = None if args.fresh else args.store
    digest = model_digest(model) if store is not None else ""
    n_edges = len(mib_edges(model))
    start = time.perf_counter()

    rows = []
    logit_diffs: dict[str, float] = {}
    work = [(task, method) for task in args.tasks for method in args.methods]
    splits = {
        task: task_splits(task, model.tokenizer, args.n_train, args.n_test, args.seed)  # type: ignore[arg-type]
        for task in args.tasks
    }
    tokens = {
        task: (encode_for_model(model, s.train), encode_for_model(model, s.test))
        for task, s in splits.items()
    }
    for task in args.tasks:
        logit_diffs[task] = task_score(model, tokens[task][1]).mean_logit_diff
    for task, method in tqdm(work, desc="rows"):
        train, test = tokens[task]

        def run(method=method, train=train, test=test) -> dict[str, object]:
            return measure(method, model, train, test, args)

        if store is None:
            row = run()
        else:
            data = digest_arrays(
                *(t.numpy() for tt in (train, test) for t in (tt.clean, tt.counterfactual)),
                *(t.numpy() for tt in (train, test) for t in (tt.answer, tt.wrong)),
            )
            row = stored_row(store, run, kind="ioi_benchmark", model=digest, tokens=data,
                             task=task, method=method, device=device, seed=args.seed,
                             ig_steps=args.ig_steps if method == "eap-ig" else 0,
                             fractions=list(args.fractions),
                             lasso_positions=args.lasso_positions if "lasso" in method else "",
                             )  # fmt: skip
        rows.append({"task": task, "method": method, **row})

    table = pd.DataFrame(rows)
    shown = table[["task", "method", "cpr", "cmd", "seconds"]].copy()
    for k, fraction in enumerate(args.fractions):
        shown[f"f@{fraction:g}"] = [float(f[k]) for f in table["faithfulness"]]
    with pd.option_context("display.width", 250, "display.max_rows", None):
        print(
            f"{name}: {n_edges} edges (MIB), "
            f"{args.n_train} train / {args.n_test} test items, device {device}, "
            f"CircuitLasso over the {args.lasso_positions} token(s), "
            f"{time.perf_counter() - start:.0f} s"
        )
        if store is not None and "measured_at" in table:
            print(f"rows kept in {store} (--fresh measures every row)")
        print(
            "model's own mean logit difference on the test split: "
            + ", ".join(f"{t} {v:.3f}" for t, v in logit_diffs.items())
        )
        print(shown.round(4).to_string(index=False))

    def by_task(column: str) -> dict[str, dict[str, object]]:
        return {
            task: {r["method"]: r[column] for r in rows if r["task"] == task} for task in args.tasks
        }

    result = {
        "tasks": list(args.tasks),
        "methods": list(args.methods),
        "fractions": list(args.fractions),
        "cpr": by_task("cpr"),
        "cmd": by_task("cmd"),
        "seconds": by_task("seconds"),
        "faithfulness": by_task("faithfulness"),
        "model_logit_diff": logit_diffs,
        "edges": n_edges,
        "n_prompts": {"train": args.n_train, "test": args.n_test},
        "lasso_positions": args.lasso_positions,
        "device": device,
    }
    print(json.dumps(_plain(result)))
    return result


def _plain(value: object) -> object:
    """``value`` with numpy and torch scalars as Python numbers (for ``json.dumps``)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic | torch.Tensor):
        return value.item()
    return value


if __name__ == "__main__":
    main()
