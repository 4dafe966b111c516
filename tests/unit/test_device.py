"""Device correctness: every path that takes ``device``, or runs a model or an SAE, works off the
CPU and gives the CPU's results.

Each path of :data:`PATHS` runs on fixed inputs (toy-CoLA prompts, features collected once on
the CPU, synthetic solver problems) and returns plain numbers, once as a reference (everything
on the CPU, ``device=None``) and once on an accelerator:

- ``gpu`` tests (deselected by default; ``pytest -m gpu`` on a machine with CUDA): the toy model
  and SAEs, or a tiny random transformer with the component-graph hook flags, moved to ``cuda``
  and ``device="cuda"`` passed to the solver. Paths that only run the model must match the
  reference within ``MODEL_TOLERANCE`` (rtol 1e-3, atol 1e-4): the float32 kernels round
  differently on CUDA (about 1e-6 relative), and TopK SAEs pass that on unless two latents are
  within rounding of each other. Paths that end in a fit must match within ``FIT_TOLERANCE``
  (rtol 1e-2, atol 1e-3), room for a certified solver to stop at another iterate within its
  duality gap (layer pairs solved to 1e-6, the label fits and the component-graph Lasso to the
  defaults, 1e-6 and 1e-4). Discrete results (traced edges, top prompts and tokens) must be the
  same, which assumes no near ties on the toy data.
- CPU tests: the same paths on :class:`SimulatedCuda`, a stand-in CUDA device on the CPU that
  enforces CUDA's two rules that device bugs break (numpy refuses device tensors; an op refuses
  non-scalar tensors of two devices). The computation is the CPU's, so the results must equal the
  reference (the reference solves its working sets by FISTA, as a device does): exactly, up to
  one float32 rounding, where only a model runs; within ``STAND_IN_FIT_TOLERANCE`` with the same
  zeros where a fit ends the path. The fit
  wrappers must also pass ``device`` on to every solver call they make: the solver entry points
  they call are wrapped to record it, because a wrapper that drops ``device`` just solves on the
  CPU and gives the same numbers.
"""

from __future__ import annotations

import tempfile
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sae_lens import SAE
from sklearn.model_selection import GridSearchCV
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.circuits import features as feature_circuits
from circuitlasso.circuits import interpret
from circuitlasso.circuits.components import component_circuit
from circuitlasso.circuits.features import LabelFit, fit_label, fit_layer_pair
from circuitlasso.circuits.trace import LayerRegressions, trace_circuit
from circuitlasso.collect import collect_nodes, collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola
from circuitlasso.estimator import CircuitLasso, penalty_table
from circuitlasso.evaluation.ablate import feature_means, node_ablation_sweep
from circuitlasso.evaluation.attribution import attribution_scores
from circuitlasso.evaluation.debias.probes import Probe, pooled_activations
from circuitlasso.evaluation.debias.shift import ig_scores
from circuitlasso.evaluation.eap import edge_attribution_patching
from circuitlasso.solve import block_lasso, lam_max, lasso, lasso_path, lasso_sets, logistic_lasso
from circuitlasso.solve.fista import fista
from circuitlasso.solve.problems import SparseProblem

LAYERS = (1, 3)  # the SAE layers: one layer pair, the label read from the last
N_PROMPTS = 40
MODEL_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}  # CUDA against CPU (see the module docstring)
FIT_TOLERANCE = {"rtol": 1e-2, "atol": 1e-3}
# the stand-in device batches a fit's outputs by its memory budget, not the CPU's cache caps: a
# batched product then rounds differently in its last float32 bit, and FISTA's iterates carry
# that rounding to where they stop within the gap (up to 1e-5 relative on the toy world)
STAND_IN_FIT_TOLERANCE = {"rtol": 1e-4, "atol": 0.0}
ONE_ULP = {"rtol": 2 * float(np.finfo(np.float32).eps), "atol": 0.0}
CUDA = torch.device("cuda", 0)

# --- A stand-in CUDA device ---------------------------------------------------------------------


class _Identity:
    """Tensors kept by identity (a WeakSet would compare them with ``==``)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}

    def __contains__(self, t: object) -> bool:
        ref = self._refs.get(id(t))
        return ref is not None and ref() is t

    def add(self, t: torch.Tensor) -> None:
        key = id(t)
        self._refs[key] = weakref.ref(t, lambda _, key=key: self._refs.pop(key, None))

    def discard(self, t: torch.Tensor) -> None:
        if t in self:
            del self._refs[id(t)]


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


_MOVES = (torch.Tensor.to, torch.Tensor.cpu)


class SimulatedCuda(TorchFunctionMode):
    """A second device on a CPU-only machine: ``cuda:0``, computed by the CPU.

    A tensor is on the device when a factory or ``.to`` names a cuda device (or a tensor on it),
    or when an op has an input on it; its ``.device`` then reads ``cuda:0``, and ``.cpu()`` (or
    ``.to`` naming the CPU) copies it back. :meth:`place` puts a module's parameters and buffers
    there, as ``module.to("cuda")`` would. Like CUDA, the device refuses

    - ``numpy()`` (and ``np.asarray``) of a tensor on it;
    - an op mixing a tensor on it with a non-scalar CPU tensor, except the mixes CUDA allows:
      ``copy_`` and moves, indexing a device tensor with CPU indices, and assigning a tensor of
      the other device into a slice (not an advanced index).

    It sees only calls that go through ``__torch_function__``; tensors made inside C++ (autograd
    included) follow their inputs. It says nothing about CUDA numerics, kernels CUDA lacks or
    memory: those need a GPU.
    """

    def __init__(self) -> None:
        super().__init__()
        self.on = _Identity()

    def place(self, *modules: torch.nn.Module) -> None:
        for module in modules:
            for t in [*module.parameters(), *module.buffers()]:
                self.on.add(t)

    def _named_device(
        self, func: Callable, args: tuple, kwargs: dict
    ) -> tuple[tuple, dict, torch.device | None]:
        """The arguments with every device made the CPU's, and the device they named."""
        named = None
        if kwargs.get("device") is not None:
            named, kwargs = torch.device(kwargs["device"]), {**kwargs, "device": "cpu"}
        if func is torch.Tensor.to:
            rest = []
            for a in args[1:]:
                if isinstance(a, (str, torch.device)):
                    named, a = torch.device(a), "cpu"
                elif isinstance(a, torch.Tensor):
                    named = CUDA if a in self.on else torch.device("cpu")
                rest.append(a)
            args = (args[0], *rest)
        if func is torch.Tensor.cpu:
            named = torch.device("cpu")
        return args, kwargs, named

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if func == torch.Tensor.device.__get__:
            return CUDA if first in self.on else torch.device("cpu")
        if func in (torch.Tensor.numpy, torch.Tensor.__array__) and first in self.on:
            raise TypeError(
                "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy "
                "the tensor to host memory first."
            )
        args, kwargs, named = self._named_device(func, args, kwargs)
        inputs = _tensors((args, kwargs))
        on_device = any(t in self.on for t in inputs)
        if named is None and on_device and func is not torch.Tensor.copy_:
            self._check_one_device(func, args, inputs)
        out = func(*args, **kwargs)
        if func is torch.Tensor.copy_ or func is torch.Tensor.__setitem__:
            return out  # in place: the destination keeps its device
        to_device = on_device if named is None else named.type == "cuda"
        if func in _MOVES and out is first and (first in self.on) != to_device:
            out = out.clone()  # a move between devices copies
        for t in _tensors(out):
            if to_device:
                self.on.add(t)
            elif t is not first:
                self.on.discard(t)
        return out

    def _check_one_device(self, func: Callable, args: tuple, inputs: list[torch.Tensor]) -> None:
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            target_on = args[0] in self.on
            index = _tensors(args[1])
            if not target_on and any(t in self.on and t.dim() > 0 for t in index):
                raise RuntimeError(
                    "indices should be either on cpu or on the same device as the indexed "
                    "tensor (cpu)"
                )
            value = args[2] if func is torch.Tensor.__setitem__ else None
            if (
                isinstance(value, torch.Tensor)
                and value.dim() > 0
                and index
                and (value in self.on) != target_on
            ):
                raise RuntimeError("index_put_: values and the indexed tensor on two devices")
            return
        if any(t not in self.on and t.dim() > 0 for t in inputs):
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two devices, "
                f"cuda:0 and cpu! ({getattr(func, '__name__', func)})"
            )


def test_simulated_cuda_enforces_the_device_rules() -> None:
    host = torch.arange(4.0)
    with SimulatedCuda():
        device = host.to("cuda")
        assert device.device == CUDA and host.device.type == "cpu"
        assert torch.zeros(2, device="cuda").device == CUDA
        assert (device * 2 + torch.tensor(1.0)).device == CUDA  # a CPU scalar may join
        with pytest.raises(TypeError, match="numpy"):
            device.numpy()
        with pytest.raises(TypeError, match="numpy"):
            np.asarray(device + 1)
        with pytest.raises(RuntimeError, match="same device"):
            device + host
        with pytest.raises(RuntimeError, match="indices"):
            host[torch.tensor([0, 1], device="cuda")]
        assert device[torch.tensor([0, 1])].device == CUDA  # CUDA takes CPU indices
        host[1:3] = device[:2]  # a slice assignment copies across
        np.testing.assert_array_equal(device.cpu().numpy(), [0.0, 1.0, 2.0, 3.0])
        assert host.numpy().tolist() == [0.0, 0.0, 1.0, 3.0]


# --- Inputs and paths ---------------------------------------------------------------------------


def tiny_transformer() -> HookedTransformer:
    """A random 1-layer transformer with the hook flags of the component graph, on the CPU."""
    cfg = HookedTransformerConfig(
        n_layers=1, d_model=16, n_heads=2, d_head=8, d_mlp=32, n_ctx=6, d_vocab=12,
        act_fn="relu", normalization_type="LN", use_attn_result=True,
        use_split_qkv_input=True, use_hook_mlp_in=True, device="cpu",
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HookedTransformer(cfg).eval()


@dataclass(frozen=True)
class Inputs:
    """What every run of a path shares, made once on the CPU."""

    prompts: list[str]  # N_PROMPTS toy-CoLA training sentences
    y: np.ndarray  # their 0/1 labels
    Z: dict[int, sp.csr_matrix]  # their token-averaged features at LAYERS
    feature: int  # the most active feature of the last layer
    children: list[int]  # child features of the layer pair
    label_fit: LabelFit
    means: dict[int, torch.Tensor]
    probe: Probe
    clean: torch.Tensor  # (8, 6) token ids for the tiny transformer
    corrupted: torch.Tensor
    X: np.ndarray  # (50, 12) dense design, Y (50, 4) its targets
    Y: np.ndarray
    Xs: sp.csr_matrix  # (60, 30) sparse design, Ys (60, 5) sparse targets
    Ys: sp.csr_matrix
    labels: np.ndarray  # (50,) 0/1 target for the logistic fits


@dataclass(frozen=True)
class Setup:
    """Where one run of a path computes: the models, and the ``device`` passed to fits."""

    model: HookedTransformer
    saes: dict[int, SAE]
    tiny: HookedTransformer
    device: str | None
    inputs: Inputs


@pytest.fixture(scope="module")
def cpu_setup() -> Setup:
    model = load_model("toy")
    saes = load_saes("toy", LAYERS, model=model)
    cola = load_toy_cola("train").iloc[:N_PROMPTS]
    prompts, y = list(cola["sentence"]), cola["label"].to_numpy()
    with tempfile.TemporaryDirectory() as tmp:
        Z = collect_sae_features(model, saes, prompts, cache_dir=tmp, progress=False)
    last = LAYERS[-1]
    counts = np.asarray((Z[last] > 0).sum(0)).ravel()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 12))
    g = torch.Generator().manual_seed(0)
    inputs = Inputs(
        prompts=prompts,
        y=y,
        Z=Z,
        feature=int(np.argmax(np.asarray(Z[last].sum(0)).ravel())),
        children=[int(f) for f in np.argsort(-counts, kind="stable")[:4]],
        label_fit=fit_label(Z[last], y, 0.1, layer=last, min_prompts=2),
        means=feature_means(model, saes, prompts[:10]),
        probe=Probe(rng.standard_normal(model.cfg.d_model), 0.1),
        clean=torch.randint(12, (8, 6), generator=g),
        corrupted=torch.randint(12, (8, 6), generator=g),
        X=X,
        Y=X[:, :3] @ rng.standard_normal((3, 4)) + 0.1 * rng.standard_normal((50, 4)),
        Xs=sp.random(60, 30, density=0.2, random_state=1, format="csr"),
        Ys=sp.random(60, 5, density=0.3, random_state=2, format="csr"),
        labels=(X[:, 0] + rng.standard_normal(50) > 0).astype(float),
    )
    return Setup(model, saes, tiny_transformer(), None, inputs)


def _np(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return (t.to_dense() if t.layout != torch.strided else t).numpy()


def _frame(frame: pd.DataFrame) -> dict[str, Any]:
    numbers = frame.select_dtypes("number")
    return {"numbers": numbers.to_numpy(float), "columns": list(frame.columns)}


def run_collect(s: Setup) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        Z = collect_sae_features(s.model, s.saes, s.inputs.prompts, cache_dir=tmp, progress=False)
    return {f"Z{layer}": z.toarray() for layer, z in Z.items()}


def run_layer_pair(s: Setup) -> dict[str, Any]:
    i = s.inputs
    parent, child = LAYERS
    fit = fit_layer_pair(i.Z[parent], i.Z[child], 0.1, parent=parent, child=child,
                         children=i.children, tol=1e-6, device=s.device)  # fmt: skip
    return {"coef": fit.coef.toarray(), "lam": fit.lam, "converged": fit.converged}


def run_trace(s: Setup) -> dict[str, Any]:
    regressions = LayerRegressions(s.inputs.Z, 0.1, tol=1e-6, device=s.device)
    graph = trace_circuit(s.inputs.label_fit, regressions, roots=3, k=2)
    edges = sorted(graph.edges(data="coef"))
    return {"edges": [e[:2] for e in edges], "coef": np.array([e[2] for e in edges])}


def run_label_fit(s: Setup) -> dict[str, Any]:
    fit = fit_label(s.inputs.Z[LAYERS[-1]], s.inputs.y, 0.1, layer=LAYERS[-1], min_prompts=2,
                    device=s.device)  # fmt: skip
    return {"coef": fit.coef, "intercept": np.array(fit.intercept)}


def run_penalty_table(s: Setup) -> dict[str, Any]:
    Z, y, half = s.inputs.Z[LAYERS[-1]], s.inputs.y, N_PROMPTS // 2
    estimator = CircuitLasso(min_prompts=2, device=s.device)
    search = GridSearchCV(estimator, {"label_lam_ratio": [0.1]}, cv=2).fit(Z[:half], y[:half])
    return _frame(penalty_table(search, Z[:half], y[:half], Z[half:], y[half:]))


def run_labels(s: Setup) -> dict[str, Any]:
    i, sae = s.inputs, s.saes[LAYERS[-1]]
    tokens = [s.model.to_tokens(p)[0] for p in i.prompts[:3]]
    values = interpret.token_values(s.model, sae, i.feature, tokens)
    tops = interpret.top_activations(s.model, sae, i.feature, i.prompts, i.Z[LAYERS[-1]], n=3)
    prompts = interpret.activation_table(tops)
    top = interpret.top_tokens(s.model, sae, i.feature, i.prompts, i.Z[LAYERS[-1]], n_prompts=5)
    other = str(s.model.to_str_tokens(i.prompts[1])[2])
    changed = interpret.perturb(s.model, sae, i.feature, i.prompts[0], 1, [other])
    return {
        "token_values": np.concatenate(values),
        "top_prompts": prompts["prompt"].tolist(),
        "top_prompt_values": np.concatenate([np.array(v) for v in prompts["per_token"]]),
        "top_tokens": sorted(top.items()),
        "perturb": changed[["value", "change"]].to_numpy(),
    }


def run_ablation(s: Setup) -> dict[str, Any]:
    i = s.inputs
    means = feature_means(s.model, s.saes, i.prompts[:10])
    ranking = [(LAYERS[-1], int(f)) for f in np.flatnonzero(i.label_fit.coef)[:6]]
    sweep = node_ablation_sweep(s.model, s.saes, i.label_fit, i.prompts[:8], ranking, [2, 6],
                                i.means, labels=list(i.y[:8]))  # fmt: skip
    scores = attribution_scores(s.model, s.saes, i.label_fit, i.prompts[:4], i.means, steps=2)
    return {
        **{f"means{layer}": _np(m) for layer, m in means.items()},
        "sweep": _frame(sweep)["numbers"],
        **{f"attribution{layer}": v for layer, v in scores.scores.items()},
    }


def run_debias(s: Setup) -> dict[str, Any]:
    i, first, hook = s.inputs, LAYERS[0], f"blocks.{LAYERS[-1]}.hook_resid_post"
    busy = int(np.argmax(np.asarray(i.Z[first].sum(0)).ravel()))
    pooled = pooled_activations(s.model, hook, i.prompts[:6], saes=s.saes,
                                zeroed=[(first, busy)])  # fmt: skip
    scores = ig_scores(s.model, {first: s.saes[first]}, i.probe, hook, i.prompts[:4], i.y[:4],
                       steps=2)  # fmt: skip
    return {"pooled": pooled, "ig": scores[first]}


def run_neuron_circuits(s: Setup) -> dict[str, Any]:
    tokens = torch.cat([s.inputs.clean, s.inputs.corrupted])
    result = component_circuit(s.tiny, tokens)
    return {
        "X": _np(collect_nodes(s.tiny, tokens).X),
        "scores": np.array(list(result.scores.values())),
    }


def run_eap(s: Setup) -> dict[str, Any]:
    result = edge_attribution_patching(s.tiny, s.inputs.clean, s.inputs.corrupted, ig_steps=3)
    return {"scores": np.array(list(result.slot_scores.values()))}


def run_solvers(s: Setup) -> dict[str, Any]:
    i, d, exact = s.inputs, s.device, {"tol": 1e-10, "dtype": torch.float64}
    block = block_lasso(i.Xs, [10, 10, 10], [[], [0], [0, 1]], 0.05, fit_intercept=True,
                        device=d, **exact)  # fmt: skip
    return {
        "lam_max": _np(lam_max(i.Xs, i.Ys, fit_intercept=True, device=d)),
        "lasso": _np(lasso(i.X, i.Y, 0.05, device=d, **exact).coef),
        "lasso_sparse": _np(lasso(i.Xs, i.Ys, 0.02, fit_intercept=True, device=d, **exact).coef),
        "path": _np(
            lasso_path(i.X, i.Y, n_lams=4, fit_intercept=True, device=d, **exact).coefs[-1]
        ),
        "block": _np(block.to_dense()),
        "block_sparse": _np(block.to_sparse()),
        "block_intercept": _np(block.intercept),
        "logistic": _np(logistic_lasso(i.X, i.labels, 0.01, device=d).coef),
        "logistic_sparse": _np(logistic_lasso(i.Xs[:50], i.labels, 1e-3, device=d).coef),
    }


@dataclass(frozen=True)
class Path:
    """A path's run (plain numbers from a :class:`Setup`) and how it is checked."""

    run: Callable[[Setup], dict[str, Any]]
    tolerance: dict[str, float]  # CUDA against CPU
    wraps: tuple[str, ...] = ()  # solver entry points of feature_circuits it must give `device`


PATHS = {
    "collect_sae_features": Path(run_collect, MODEL_TOLERANCE),
    "fit_layer_pair": Path(run_layer_pair, FIT_TOLERANCE, ("lam_max", "lasso")),
    "trace_circuit": Path(run_trace, FIT_TOLERANCE, ("lam_max", "lasso")),
    "fit_label": Path(run_label_fit, FIT_TOLERANCE, ("logistic_lasso",)),
    "penalty_table": Path(run_penalty_table, FIT_TOLERANCE, ("logistic_lasso",)),
    "labels": Path(run_labels, MODEL_TOLERANCE),
    "ablation_and_attribution": Path(run_ablation, MODEL_TOLERANCE),
    "debias": Path(run_debias, MODEL_TOLERANCE),
    "neuron_circuits": Path(run_neuron_circuits, FIT_TOLERANCE),
    "eap": Path(run_eap, MODEL_TOLERANCE),
    "solvers": Path(run_solvers, FIT_TOLERANCE),
}


def assert_same(got: dict[str, Any], expected: dict[str, Any], **tolerance: float) -> None:
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            np.testing.assert_allclose(got[key], value, err_msg=key, **tolerance)
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(got[key], value, err_msg=key)
        else:
            assert got[key] == value, key


@pytest.fixture(scope="module")
def references() -> dict[str, dict[str, Any]]:
    """Reference results by path name, each computed on first use."""
    return {}


def reference(name: str, cpu_setup: Setup, references: dict[str, dict[str, Any]]) -> dict:
    """The CPU's results, its working sets solved by FISTA on Gram blocks as on a device (the
    CPU's own inner solvers, coordinate descent on Gram blocks or on sparse columns, reach the
    same certified objectives by other iterates: `tests/unit/test_coordinate.py`,
    `tests/unit/test_column_descent.py`); a stand-in device run does the same wherever it
    solves."""
    if name not in references:
        with (
            mock.patch.object(lasso_sets, "inner_solver", lambda device: fista),
            mock.patch.object(SparseProblem, "columns_pay", lambda self, W: False),
        ):
            references[name] = PATHS[name].run(cpu_setup)
    return references[name]


# --- On the stand-in device (CPU) ---------------------------------------------------------------


@contextmanager
def simulated(setup: Setup) -> Iterator[Setup]:
    """``setup``'s models and SAEs on a :class:`SimulatedCuda`, and ``device="cuda"``."""
    models = [setup.model, setup.tiny]
    saes = list(setup.saes.values())
    sim = SimulatedCuda()
    with sim:
        sim.place(*models, *saes)
        for model in models:
            model.cfg.device = "cuda"
        for sae in saes:
            sae.cfg.device, sae.device = "cuda", CUDA
        try:
            yield replace(setup, device="cuda")
        finally:
            for model in models:
                model.cfg.device = "cpu"
            for sae in saes:
                sae.cfg.device, sae.device = "cpu", torch.device("cpu")


def recording(solver: Callable, calls: list) -> Callable:
    def record(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("device"))
        return solver(*args, **kwargs)

    return record


@pytest.mark.parametrize("name", sorted(PATHS))
def test_path_on_simulated_cuda_matches_cpu(
    name: str, cpu_setup: Setup, references, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU's results on the stand-in device, every solver call given ``device``: up to one
    float32 rounding where only a model runs, within ``STAND_IN_FIT_TOLERANCE`` where a fit
    ends the path."""
    expected = reference(name, cpu_setup, references)
    calls: dict[str, list] = {}
    for solver in PATHS[name].wraps:
        calls[solver] = []
        monkeypatch.setattr(
            feature_circuits, solver, recording(getattr(feature_circuits, solver), calls[solver])
        )
    monkeypatch.setattr(lasso_sets, "inner_solver", lambda device: fista)  # as the reference's
    monkeypatch.setattr(SparseProblem, "columns_pay", lambda self, W: False)
    with simulated(cpu_setup) as setup:
        got = PATHS[name].run(setup)
    fits = PATHS[name].tolerance == FIT_TOLERANCE
    assert_same(got, expected, **(STAND_IN_FIT_TOLERANCE if fits else ONE_ULP))
    for solver, devices in calls.items():
        assert devices and all(d == "cuda" for d in devices), f"{solver} got device {devices}"


# --- On CUDA ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cuda_setup(cpu_setup: Setup) -> Setup:
    model = load_model("toy", device="cuda")
    saes = load_saes("toy", LAYERS, device="cuda", model=model)
    return Setup(model, saes, tiny_transformer().to("cuda"), "cuda", cpu_setup.inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PATHS))
def test_path_on_cuda_matches_cpu(
    name: str, cpu_setup: Setup, cuda_setup: Setup, references
) -> None:
    """The CPU's results on CUDA, within the path's tolerance."""
    expected = reference(name, cpu_setup, references)
    assert_same(PATHS[name].run(cuda_setup), expected, **PATHS[name].tolerance)
