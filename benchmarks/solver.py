"""Solver benchmark: CircuitLasso's working-set solver against scikit-learn, celer and skglm.

Four problems, every method measured in the same run, same data, same penalty, same tolerance:
  sae      M=8551 observations, p=d=32768 SAE-like features (about 64 active per row, power-law
           frequencies); targets are a ReLU of X times a planted sparse A plus noise, biased per
           output so that rows keep tens of active outputs; lam_j = 0.05 lam_max_j on unit-norm
           columns. Ours solves all outputs; the peers a random subset (per-output time ratio).
  dense    the same generator at p=d=24576 and the densities of token-averaged SAE features
           (`--dense-active`, default 64, 200 and 400 active per row); ours solves
           `--dense-outputs` random outputs at each (all 24576, a whole layer pair, where the
           time allows), within `--memory-gib`; the added resident memory of our solve is
           sampled. Time is also given as a multiple of one X^T Y product (the floor any
           method that reads the data pays), per output.
  neurons  13 blocks of 64 dense neurons from a planted block-upper-triangular linear SEM,
           M=2000; ours solves all child blocks at once, scikit-learn every output separately.
  logistic M=8000 token-averaged SAE-like features, p=2048 (about 180 active per row, nonnegative,
           correlated through a sparse dictionary), binary y with about 70 % ones; l1-logistic
           regression at two penalties, `logistic_lasso` against scikit-learn's liblinear and
           saga on the same problem: unit-norm centered columns (X / norms, the centering going
           to the intercept) and C = 1 / (lam M). liblinear penalizes its intercept column, so it
           gets intercept_scaling=1e4 (a penalty of lam |b| / 1e4 on the intercept).
Peers are single-threaded and fit one output per call (after one untimed warm-up fit; ours
after untimed solves of two small problems); ours uses `--threads` torch threads. The
tolerance is the duality gap rule of scikit-learn and celer: gap_j <= tol * ||y_j||^2 / M.
skglm stops on KKT violation instead, so it gets tol * lam_j as that bound. Every method's
achieved gap is then recomputed here with one function, from its coefficients. For the logistic
problem every method's objective is recomputed here and compared with the best one found.

A randomized shape sweep (`--sweep N --seed S`) replaces the fixed problems: N shapes drawn
from S, each the "sae" problem's generator at p = d from 8k to 48k features, M from 2k to 16k
rows, 16 to 400 active features per row, a power-law or uniform feature frequency and tol 1e-4
or 1e-6 (`--tol` overrides the drawn one); ours on `--sweep-outputs` random outputs, the peers on
`--peer-outputs` of them, as for "sae". `--scale f` multiplies p and M by f (active per row
capped at p / 8), for a quick run. Prints one row per shape and one JSON line: the smallest and
median speedup against the best peer, the largest multiple of the X^T Y floor, every row.
A peer that is not installed is skipped with a note.

Run: python benchmarks/solver.py [--problems neurons sae dense logistic] [--sae-outputs N]
     [--dense-active 64 200 400] [--dense-outputs 24576 24576 24576] [--memory-gib 8]
     [--peer-outputs N] [--threads 2] [--device cpu] [--tol 1e-6]
     python benchmarks/solver.py --sweep N [--seed S] [--sweep-outputs 1024] [--scale 1]
Prints the tables, then one JSON line with the headline figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import torch
from tqdm.auto import tqdm

from circuitlasso.evaluation.solver_check import lasso_objective, sae_like_problem
from circuitlasso.solve import (
    block_lasso,
    lam_max,
    lasso,
    logistic_lasso,
    upper_triangular_parents,
)
from circuitlasso.timing import PeakMemory, Stopwatch


def make_neurons_problem(
    M: int = 2000, n_blocks: int = 13, width: int = 64, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """X (M, n_blocks * width) from a linear SEM over blocks, and its planted (N, N) A.

    Each neuron of block j > 0 has 3 parents drawn from the earlier blocks, weights +-U(0.5, 1);
    each block is standardized after it is generated.
    """
    rng = np.random.default_rng(seed)
    N = n_blocks * width
    X = np.zeros((M, N))
    A = np.zeros((N, N))
    X[:, :width] = rng.standard_normal((M, width))
    for j in range(1, n_blocks):
        cols = slice(j * width, (j + 1) * width)
        for t in range(j * width, (j + 1) * width):
            parents = rng.choice(j * width, 3, replace=False)
            A[parents, t] = rng.uniform(0.5, 1.0, 3) * rng.choice([-1.0, 1.0], 3)
        block = X[:, : j * width] @ A[: j * width, cols] + 0.5 * rng.standard_normal((M, width))
        X[:, cols] = (block - block.mean(0)) / block.std(0)
    return X, A


def relative_gap(
    X: sp.csr_matrix | np.ndarray, y: np.ndarray, coef: np.ndarray, lam: float
) -> float:
    """Duality gap / (||y||^2 / M) of a Lasso point (dual point: best feasible multiple of r)."""
    M = X.shape[0]
    if not y.any():
        return 0.0 if not coef.any() else float("inf")
    r = y - X @ coef
    rr, yr = r @ r / M, y @ r / M
    s_max = M * lam / max(np.abs(X.T @ r).max(), 1e-300)
    s = min(s_max, yr / rr) if rr > 0 else s_max
    primal = rr / 2 + lam * np.abs(coef).sum()
    return (primal - (s * yr - s * s * rr / 2)) / (y @ y / M)


PEER_MODULES = {"scikit-learn": "sklearn", "celer": "celer", "skglm": "skglm"}


def installed_peers(names: list[str]) -> list[str]:
    """The peers of `names` whose package is installed; a note for each one that is not."""
    found = []
    for name in names:
        module = PEER_MODULES.get(name)
        if module is not None and importlib.util.find_spec(module) is None:
            print(f"note: {name} is not installed ({module}); skipped")
        else:
            found.append(name)
    return found


def _peers(tol: float) -> dict[str, Callable[[float], object]]:
    """Each installed peer's model factory (lam -> unfitted Lasso) at `tol`."""
    makers: dict[str, Callable[[float], object]] = {}
    if importlib.util.find_spec("sklearn") is not None:
        from sklearn.linear_model import Lasso

        makers["scikit-learn"] = lambda lam: Lasso(
            alpha=lam, fit_intercept=False, tol=tol, max_iter=100_000
        )
    if importlib.util.find_spec("celer") is not None:
        import celer

        makers["celer"] = lambda lam: celer.Lasso(
            alpha=lam, fit_intercept=False, tol=tol, max_iter=1000
        )
    if importlib.util.find_spec("skglm") is not None:
        import skglm

        makers["skglm"] = lambda lam: skglm.Lasso(
            alpha=lam, fit_intercept=False, tol=tol * lam, max_iter=1000
        )
    return makers


def time_peer(
    make, X, Y: sp.csc_matrix | np.ndarray, lams: np.ndarray, columns: np.ndarray, name: str
):
    """Fit `make(lam)` per output; return seconds per output, coefficients (p, n), relative gaps.

    One untimed fit comes first, so that compilation on first use (skglm's numba) is not
    counted as solving time.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        make(lams[columns[0]]).fit(X, _col(Y, columns[0]))
    coefs, seconds = [], 0.0
    for j in tqdm(columns, desc=name, leave=False):
        y = Y[:, j] if isinstance(Y, np.ndarray) else Y[:, [j]].toarray().ravel()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clock = Stopwatch()
            model = make(lams[j]).fit(X, y)
            seconds += clock.lap("run")
        coefs.append(np.asarray(model.coef_, dtype=np.float64))
    gaps = [relative_gap(X, _col(Y, j), c, lams[j]) for j, c in zip(columns, coefs, strict=True)]
    return seconds / len(columns), np.stack(coefs, 1), np.array(gaps)


def _col(Y, j: int) -> np.ndarray:
    return Y[:, [j]].toarray().ravel().astype(np.float64) if sp.issparse(Y) else Y[:, j]


def support_f1(estimate: sp.spmatrix, truth: sp.spmatrix) -> float:
    est = sp.csr_matrix(estimate != 0)
    true = sp.csr_matrix(truth != 0)
    tp = est.multiply(true).nnz
    return 2 * tp / max(est.nnz + true.nnz, 1)


HEADLINE_KEYS = (
    "speedup_vs_best_peer",
    "ms_per_output",
    "layer_pair_seconds",
    "added_gib",
    "support_f1",
    "rel_objective_diff",
)


def run_sae(args: argparse.Namespace) -> dict[str, float]:
    """The "sae" problem: p = d = 32768 at 64 active per row."""
    figures = run_sae_like(args, "sae", 32768, 64, args.sae_outputs)
    return {f"sae_{key}": figures[key] for key in HEADLINE_KEYS}


def run_dense(args: argparse.Namespace) -> dict[str, float]:
    """The "dense" problem: p = d = 24576 at each of `--dense-active` features per row."""
    if len(args.dense_outputs) != len(args.dense_active):
        raise ValueError("--dense-outputs needs one count per --dense-active density")
    figures = {}
    for active, outputs in zip(args.dense_active, args.dense_outputs, strict=True):
        found = run_sae_like(args, f"dense{active}", 24576, active, outputs)
        figures.update({f"dense{active}_{key}": found[key] for key in HEADLINE_KEYS})
    return figures


def run_sae_like(
    args: argparse.Namespace,
    name: str,
    p: int,
    active_per_row: int,
    n_outputs: int,
    M: int | None = None,
    frequency: str = "power-law",
) -> dict[str, float]:
    """Ours on `n_outputs` random outputs of `sae_like_problem(M, p=d=p, active_per_row)`, the
    peers on a subset of them; prints the table and returns the headline figures, each peer's
    ms per output (`ms_per_output_<peer>`) and ours as a multiple of the X^T Y floor.

    `M=None` is the generator's default (8551); `frequency`: its feature frequency law.
    """
    size: dict[str, Any] = {} if M is None else {"M": M}
    X, Y, A = sae_like_problem(
        p=p, d=p, active_per_row=active_per_row, seed=args.seed, frequency=frequency, **size
    )
    M = X.shape[0]
    d = min(n_outputs, Y.shape[1])
    rng = np.random.default_rng(args.seed)
    ours_cols = (
        np.sort(rng.choice(Y.shape[1], d, replace=False)) if d < Y.shape[1] else np.arange(d)
    )
    Y = Y[:, ours_cols]
    A = A[:, ours_cols]
    norms = np.sqrt(np.asarray(X.multiply(X).sum(0))).ravel()
    X_unit = (X @ sp.diags(np.where(norms > 0, 1 / np.maximum(norms, 1e-30), 0.0))).astype(
        np.float64
    )
    clock = Stopwatch()
    _ = X_unit.T @ Y.astype(np.float64)
    floor = clock.lap("run")

    lams = 0.05 * lam_max(X, Y, dtype=torch.float32).numpy()
    on_gpu = torch.device(args.device).type == "cuda"
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    with PeakMemory() as memory:
        base = memory.reset()
        clock = Stopwatch()
        ours = lasso(
            X, Y, lams, tol=args.tol, memory_gib=args.memory_gib, device=args.device, progress=True
        )
        ours = replace(ours, coef=ours.coef.cpu(), converged=ours.converged.cpu())
        seconds = clock.lap("run")
        added = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else memory.peak_gib() - base
    coef = ours.coef.coalesce()
    idx, val = coef.indices().numpy(), coef.values().double().numpy()
    ours_coef = sp.csc_matrix((val, (idx[0], idx[1])), shape=(p, d))
    ours_unit = sp.diags(norms) @ ours_coef  # coefficients of the unit-norm problem the peers see

    subset = np.sort(rng.choice(d, min(args.peer_outputs, d), replace=False))
    rows = [_row("CircuitLasso (all outputs)", seconds / d, None, ours.converged.float().mean())]
    ours_gaps = [
        relative_gap(X_unit, _col(Y, j), ours_unit[:, [j]].toarray().ravel(), lams[j])
        for j in subset
    ]
    rows[0]["max achieved rel. gap (subset)"] = max(ours_gaps)
    per_output, objectives = {}, {}
    for peer, make in _peers(args.tol).items():
        if peer not in args.peers:
            continue
        sec, coefs, gaps = time_peer(make, X_unit, Y, lams, subset, peer)
        per_output[peer] = sec
        objectives[peer] = [
            lasso_objective(X_unit, _col(Y, j), coefs[:, i], lams[j]) for i, j in enumerate(subset)
        ]
        rows.append(_row(peer, sec, gaps, None))
    ours_obj = np.array(
        [
            lasso_objective(X_unit, _col(Y, j), ours_unit[:, [j]].toarray().ravel(), lams[j])
            for j in subset
        ]
    )
    best = min(per_output, key=lambda peer: per_output[peer]) if per_output else None
    table = pd.DataFrame(rows).set_index("method")
    table["speedup (ours per output)"] = table["ms per output"] / (1000 * seconds / d)
    table["x one X^T Y (per output)"] = table["ms per output"] / (1000 * floor / d)
    print(
        f"\n== {name}: M={M}, p={p}, {X.nnz / M:.0f} active per row, d={d} (peers on "
        f"{subset.size} outputs), tol={args.tol} =="
    )
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    f1 = support_f1(ours_coef, A)
    rel_diff = (
        _max_relative_difference(ours_obj, np.array(objectives["scikit-learn"]))
        if "scikit-learn" in objectives
        else float("nan")
    )
    support = ours.support_size.double().cpu()
    print(
        f"ours: {seconds:.1f} s for {d} outputs ({seconds * p / d / 60:.1f} min projected for "
        f"all {p}), {'GPU memory' if on_gpu else 'memory added'} {added:.2f} GiB (budget "
        f"{args.memory_gib:g}) on {args.device}, support mean "
        f"{support.mean():.0f} max {support.max():.0f}, support F1 vs planted A {f1:.3f}, "
        f"X^T Y floor {floor:.2f} s (ours = {seconds / floor:.0f} x floor), max rel. objective "
        f"diff vs scikit-learn {rel_diff:.2e}"
    )
    return {
        "speedup_vs_best_peer": per_output[best] / (seconds / d) if best else float("nan"),
        "ms_per_output": 1000 * seconds / d,
        "layer_pair_seconds": seconds * p / d,
        "added_gib": added,
        "support_f1": f1,
        "rel_objective_diff": rel_diff,
        "over_xty_floor": seconds / floor,
        "M": M,
        "active_per_row": X.nnz / M,
        **{f"ms_per_output_{peer}": 1000 * sec for peer, sec in per_output.items()},
    }


def _max_relative_difference(values: np.ndarray, reference: np.ndarray) -> float:
    """Largest |values - reference| / reference over outputs with a nonzero objective."""
    nonzero = reference > 0
    if not nonzero.any():
        return 0.0
    return float(np.max(np.abs(values - reference)[nonzero] / reference[nonzero]))


def _row(name: str, seconds_per_output: float, gaps: np.ndarray | None, converged) -> dict:
    return {
        "method": name,
        "ms per output": 1000 * seconds_per_output,
        "max achieved rel. gap (subset)": float(np.max(gaps)) if gaps is not None else float("nan"),
        "share converged": float(converged) if converged is not None else float("nan"),
    }


def run_neurons(args: argparse.Namespace) -> dict[str, float]:
    from sklearn.linear_model import Lasso

    X, A_true = make_neurons_problem(seed=args.seed)
    width, n_blocks = 64, 13
    parents = upper_triangular_parents(n_blocks)
    lams = np.zeros(X.shape[1])
    for j in range(1, n_blocks):
        cols = slice(j * width, (j + 1) * width)
        lams[cols] = 0.05 * lam_max(X[:, : j * width], X[:, cols]).numpy()
    clock = Stopwatch()
    ours = block_lasso(X, [width] * n_blocks, parents, lams, tol=args.tol, dtype=torch.float32,
                       device=args.device)  # fmt: skip
    A = ours.to_dense().double().cpu().numpy()
    seconds = clock.lap("run")
    n_out = X.shape[1] - width
    rng = np.random.default_rng(args.seed)
    targets = np.sort(
        rng.choice(
            np.arange(width, X.shape[1]), min(args.neurons_peer_outputs, n_out), replace=False
        )
    )
    sk_seconds, diffs = 0.0, []
    for t in tqdm(targets, desc="scikit-learn (neurons)", leave=False):
        n_pred = (t // width) * width
        pred = X[:, :n_pred]
        unit = pred / np.linalg.norm(pred, axis=0)
        clock = Stopwatch()
        model = Lasso(alpha=lams[t], fit_intercept=False, tol=args.tol, max_iter=100_000).fit(
            unit, X[:, t]
        )
        sk_seconds += clock.lap("run")
        ref = lasso_objective(unit, X[:, t], model.coef_, lams[t])
        mine = lasso_objective(unit, X[:, t], A[:n_pred, t] * np.linalg.norm(pred, axis=0), lams[t])
        diffs.append(abs(mine - ref) / ref)
    ours_per, sk_per = seconds / n_out, sk_seconds / targets.size
    f1 = support_f1(sp.csr_matrix(A), sp.csr_matrix(A_true))
    table = pd.DataFrame(
        [
            {"method": "CircuitLasso block_lasso (all outputs)", "ms per output": 1000 * ours_per},
            {"method": "scikit-learn Lasso per output", "ms per output": 1000 * sk_per},
        ]
    ).set_index("method")
    print(
        f"\n== neurons: M={X.shape[0]}, {n_blocks} blocks x {width}, {n_out} outputs "
        f"(scikit-learn on {targets.size}), tol={args.tol} =="
    )
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    print(
        f"ours {seconds:.2f} s; speedup {sk_per / ours_per:.1f}x; support F1 vs planted A "
        f"{f1:.3f}; max rel. objective diff vs scikit-learn {max(diffs):.2e}"
    )
    return {
        "neurons_speedup_vs_sklearn": sk_per / ours_per,
        "neurons_rel_objective_diff": max(diffs),
    }


def make_logistic_problem(
    M: int = 8000,
    p: int = 2048,
    n_codes: int = 512,
    tokens: int = 24,
    codes_per_token: float = 5.0,
    features_per_code: int = 5,
    n_relevant: int = 100,
    signal: float = 5.0,
    positive_share: float = 0.7,
    seed: int = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """X (M, p) float32 CSR of token-averaged SAE-like features, and binary y (M,) float64.

    A sparse nonnegative dictionary sends each of `n_codes` codes to `features_per_code`
    features (drawn with frequencies proportional to rank^-1), weights Exp(1). Row i averages
    tokens/2 + Poisson(tokens/2) tokens; a token turns on Poisson(codes_per_token) codes (again
    rank^-1 frequencies) with strengths Exp(1), and every feature activation of a token gets an
    independent Exp(1) factor. Frequent features are thus present in almost every row, others
    correlate through shared codes. y_i ~ Bernoulli(sigmoid(eta_i + c)), eta a +-U(0.5, 1.5)
    combination of `n_relevant` standardized features scaled to standard deviation `signal`,
    c chosen for `positive_share` ones on average.
    """
    rng = np.random.default_rng(seed)

    def power_law(n: int) -> np.ndarray:
        weights = 1.0 / np.arange(1, n + 1)
        return rng.permutation(weights / weights.sum())

    code_rows = np.repeat(np.arange(n_codes), features_per_code)
    feature = rng.choice(p, code_rows.size, p=power_law(p))
    dictionary = sp.csr_matrix(
        (rng.exponential(1.0, code_rows.size), (code_rows, feature)), shape=(n_codes, p)
    )
    n_tokens = tokens // 2 + rng.poisson(tokens // 2, M)
    N = int(n_tokens.sum())
    token = np.repeat(np.arange(N), rng.poisson(codes_per_token, N))
    code = rng.choice(n_codes, token.size, p=power_law(n_codes))
    codes = sp.csr_matrix((rng.exponential(1.0, token.size), (token, code)), shape=(N, n_codes))
    activations = (codes @ dictionary).tocsr()
    activations.data *= rng.exponential(1.0, activations.data.size)
    average = sp.csr_matrix(
        (1.0 / np.repeat(n_tokens, n_tokens), (np.repeat(np.arange(M), n_tokens), np.arange(N))),
        shape=(M, N),
    )
    X = (average @ activations).tocsr()
    X.sum_duplicates()
    mean = np.asarray(X.mean(0)).ravel()
    sd = np.sqrt(np.maximum(np.asarray(X.multiply(X).mean(0)).ravel() - mean**2, 0.0))
    relevant = rng.choice(np.flatnonzero(sd > 0), n_relevant, replace=False)
    a = np.zeros(p)
    a[relevant] = rng.uniform(0.5, 1.5, n_relevant) * rng.choice([-1.0, 1.0], n_relevant)
    a[relevant] /= sd[relevant]
    eta = X @ a - mean @ a
    eta *= signal / eta.std()
    lo, hi = -30.0, 30.0
    for _ in range(100):  # bisection for the offset giving `positive_share` ones on average
        c = (lo + hi) / 2
        lo, hi = (c, hi) if np.mean(1 / (1 + np.exp(-(eta + c)))) < positive_share else (lo, c)
    y = (rng.random(M) < 1 / (1 + np.exp(-(eta + c)))).astype(np.float64)
    return X.astype(np.float32), y


def logistic_objective(
    X_unit: sp.csr_matrix, y: np.ndarray, coef: np.ndarray, intercept: float, lam: float
) -> float:
    """Mean cross-entropy + lam ||coef||_1 of a model on the unit-norm columns X_unit."""
    eta = X_unit @ coef + intercept
    return float(np.mean(np.logaddexp(0, eta) - y * eta) + lam * np.abs(coef).sum())


def run_logistic(args: argparse.Namespace) -> dict[str, float]:
    from sklearn.linear_model import LogisticRegression

    X, y = make_logistic_problem(seed=args.seed)
    M, p = X.shape
    X64 = X.astype(np.float64)
    mean = np.asarray(X64.mean(0)).ravel()
    norms = np.sqrt(np.maximum(np.asarray(X64.multiply(X64).sum(0)).ravel() - M * mean**2, 0.0))
    scale = np.where(norms > 0, 1 / np.maximum(norms, 1e-300), 0.0)
    X_unit = (X64 @ sp.diags(scale)).tocsr()
    tol = args.logistic_tol
    rows, figures = [], {}
    for lam in args.logistic_lams:
        clock = Stopwatch()
        ours = logistic_lasso(X, y, lam, tol=tol, dtype=torch.float64)
        ours_seconds = clock.lap("run")
        coef = ours.coef.double().numpy() * norms  # coefficients of the unit-norm problem
        null = -(y.mean() * np.log(y.mean()) + (1 - y.mean()) * np.log(1 - y.mean()))
        found = [
            {
                "method": "CircuitLasso logistic_lasso",
                "seconds": ours_seconds,
                "objective": logistic_objective(X_unit, y, coef, ours.intercept.item(), lam),
                "nonzeros": int((coef != 0).sum()),
                "certified rel. gap": ours.gap.item() / null,
            }
        ]
        peers: dict[str, dict[str, Any]] = {
            "scikit-learn liblinear": {"solver": "liblinear", "intercept_scaling": 1e4},
            "scikit-learn saga": {"solver": "saga"},
        }
        for name, options in peers.items():
            if name.split()[-1] not in args.logistic_peers:
                continue
            model = LogisticRegression(
                l1_ratio=1.0, C=1 / (lam * M), tol=tol, max_iter=args.logistic_max_iter, **options
            )
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                clock = Stopwatch()
                model.fit(X_unit, y)
                seconds = clock.lap("run")
            intercept = float(np.atleast_1d(model.intercept_)[0])
            found.append(
                {
                    "method": name,
                    "seconds": seconds,
                    "objective": logistic_objective(X_unit, y, model.coef_[0], intercept, lam),
                    "nonzeros": int((model.coef_ != 0).sum()),
                    "certified rel. gap": float("nan"),
                }
            )
        best = min(row["objective"] for row in found)
        for row in found:
            row["lam"] = lam
            row["rel. excess objective"] = (row["objective"] - best) / best
            row["time / ours"] = row["seconds"] / ours_seconds
        rows += found
        by_name = {row["method"]: row for row in found}
        if "scikit-learn liblinear" in by_name:
            figures[f"logistic_speedup_vs_liblinear_lam{lam:g}"] = by_name[
                "scikit-learn liblinear"
            ]["time / ours"]
        figures[f"logistic_seconds_lam{lam:g}"] = ours_seconds
    table = pd.DataFrame(rows).set_index(["lam", "method"])
    columns = ["seconds", "time / ours", "objective", "rel. excess objective", "nonzeros"]
    table = table[[*columns, "certified rel. gap"]]
    print(
        f"\n== logistic: M={M}, p={p}, {X.nnz / M:.0f} nonzeros per row, "
        f"{y.mean():.0%} ones, tol={tol} =="
    )
    print(table.to_string(float_format=lambda v: f"{v:.4g}"))
    figures["logistic_max_rel_excess_objective"] = float(
        table.loc[(slice(None), "CircuitLasso logistic_lasso"), "rel. excess objective"].max()
    )
    return figures


SWEEP_P = (8192, 49152)
SWEEP_M = (2048, 16384)
SWEEP_ACTIVE = (16, 400)
SWEEP_LAWS = ("power-law", "uniform")
SWEEP_TOLS = (1e-4, 1e-6)


def draw_shapes(n: int, seed: int, scale: float = 1.0) -> list[dict[str, Any]]:
    """`n` random shapes of the sweep, seeded by `seed`: p and M log-uniform in their ranges
    (times `scale`, at least 16 features and 16 rows), active features per row log-uniform from
    16 to 400 (capped at p / 8), a frequency law and a tolerance each with probability 1/2, and
    the seed of each shape's problem."""
    rng = np.random.default_rng(seed)

    def log_uniform(lo: int, hi: int) -> int:
        return int(round(np.exp(rng.uniform(np.log(lo), np.log(hi)))))

    shapes = []
    for _ in range(n):
        p = max(16, int(round(log_uniform(*SWEEP_P) * scale)))
        M = max(16, int(round(log_uniform(*SWEEP_M) * scale)))
        active = min(log_uniform(*SWEEP_ACTIVE), max(1, p // 8))
        shapes.append(
            {
                "p": p,
                "M": M,
                "active_per_row": active,
                "frequency": SWEEP_LAWS[int(rng.integers(2))],
                "tol": SWEEP_TOLS[int(rng.integers(2))],
                "seed": int(rng.integers(2**31)),
            }
        )
    return shapes


def warm_up(device: str) -> None:
    """Untimed solves of ours, as the peers get one: compilation on first use is not solving
    time (a dense and a sparse shape: working sets on Gram blocks and on columns)."""
    for p in (64, 1024):
        X, Y, _ = sae_like_problem(M=64, p=p, d=4, active_per_row=4, seed=0)
        lam = 0.05 * lam_max(X, Y, dtype=torch.float32).numpy()
        lasso(X, Y, lam, tol=1e-4, device=device)


def run_sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Ours and the peers on `args.sweep` random shapes (`draw_shapes`); prints the table and
    returns the summary: smallest and median speedup against the best peer, largest multiple of
    the X^T Y floor, and each shape's row."""
    shapes = draw_shapes(args.sweep, args.seed, args.scale)
    rows = []
    for i, shape in enumerate(tqdm(shapes, desc="sweep")):
        tol = args.tol if args.tol is not None else shape["tol"]
        shape_args = argparse.Namespace(**{**vars(args), "tol": tol, "seed": shape["seed"]})
        found = run_sae_like(
            shape_args,
            f"sweep{i}",
            shape["p"],
            shape["active_per_row"],
            args.sweep_outputs,
            M=shape["M"],
            frequency=shape["frequency"],
        )
        row = {
            "p": shape["p"],
            "M": shape["M"],
            "active_per_row": shape["active_per_row"],
            "measured_active_per_row": round(found["active_per_row"], 1),
            "frequency": shape["frequency"],
            "tol": tol,
            "ms_per_output_ours": found["ms_per_output"],
            **{k: v for k, v in found.items() if k.startswith("ms_per_output_")},
            "speedup_vs_best_peer": found["speedup_vs_best_peer"],
            "over_xty_floor": found["over_xty_floor"],
        }
        rows.append(row)
    table = pd.DataFrame(rows)
    print(f"\n== sweep: {len(shapes)} shapes, seed {args.seed}, scale {args.scale:g} ==")
    print(table.to_string(float_format=lambda v: f"{v:.3g}"))
    speedups = np.array([row["speedup_vs_best_peer"] for row in rows], dtype=np.float64)
    measured = speedups[np.isfinite(speedups)]
    return {
        "min_speedup_vs_best_peer": float(measured.min()) if measured.size else float("nan"),
        "median_speedup_vs_best_peer": float(np.median(measured))
        if measured.size
        else float("nan"),
        "max_over_xty_floor": max(row["over_xty_floor"] for row in rows),
        "shapes": [
            {k: float(f"{v:.6g}") if isinstance(v, float) else v for k, v in row.items()}
            for row in rows
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sae-outputs", type=int, default=32768, help="outputs solved by ours")
    parser.add_argument(
        "--peer-outputs", type=int, default=256, help="random outputs for the peers"
    )
    parser.add_argument("--neurons-peer-outputs", type=int, default=768)
    parser.add_argument(
        "--dense-active", type=int, nargs="*", default=[64, 200, 400], help="active per row"
    )
    parser.add_argument(
        "--dense-outputs",
        type=int,
        nargs="*",
        default=[24576, 24576, 24576],
        help="outputs solved by ours at each --dense-active density",
    )
    parser.add_argument("--memory-gib", type=float, default=8.0, help="our memory budget")
    parser.add_argument("--device", default="cpu", help="where ours runs (cpu, cuda)")
    parser.add_argument("--peers", nargs="*", default=["scikit-learn", "celer", "skglm"])
    parser.add_argument(
        "--tol", type=float, default=None, help="1e-6 by default; with --sweep, overrides the draw"
    )
    parser.add_argument(
        "--threads", type=int, default=2, help="torch threads (the target is 2 cores)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweep", type=int, default=0, help="random shapes (0: no sweep)")
    parser.add_argument(
        "--sweep-outputs", type=int, default=1024, help="outputs solved by ours per sweep shape"
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies the sweep's p and M (quick runs)"
    )
    parser.add_argument(
        "--problems",
        nargs="*",
        default=["neurons", "sae", "dense", "logistic"],
        help="problems to run",
    )
    parser.add_argument("--logistic-lams", type=float, nargs="*", default=[5e-4, 1e-4])
    parser.add_argument("--logistic-tol", type=float, default=1e-4)
    parser.add_argument("--logistic-peers", nargs="*", default=["liblinear", "saga"])
    parser.add_argument("--logistic-max-iter", type=int, default=1000)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.peers = installed_peers(args.peers)
    warm_up(args.device)
    if args.sweep:
        summary = run_sweep(args)
        print(json.dumps(summary))
        return
    if args.tol is None:
        args.tol = 1e-6
    figures: dict[str, float] = {}
    if "neurons" in args.problems:
        figures.update(run_neurons(args))
    if "sae" in args.problems:
        figures.update(run_sae(args))
    if "dense" in args.problems:
        figures.update(run_dense(args))
    if "logistic" in args.problems:
        figures.update(run_logistic(args))
    headline: dict[str, float] = {
        key: figures[key] for key in ("neurons_speedup_vs_sklearn",) if key in figures
    }
    headline.update(
        {
            key: value
            for key, value in figures.items()
            if key.startswith(("sae_", "dense")) and not key.endswith("rel_objective_diff")
        }
    )
    diff_keys = [key for key in figures if key.endswith("rel_objective_diff")]
    if diffs := [figures[k] for k in diff_keys]:
        headline["max_rel_objective_diff_vs_sklearn"] = max(diffs)
    headline.update({k: v for k, v in figures.items() if k.startswith("logistic_")})
    print(json.dumps({k: float(f"{float(v):.6g}") for k, v in headline.items()}))


if __name__ == "__main__":
    main()
