"""``CircuitLasso`` on planted three-layer features, for each target kind: its penalty against
``lam_max`` written out here, its predictions against the softmax/sigmoid of its own readout
computed by hand, and the traced roots against the planted features."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import (
    GridSearchCV,
    KFold,
    StratifiedKFold,
    check_cv,
    cross_val_score,
)
from sklearn.utils.estimator_checks import check_estimator

from circuitlasso import estimator as estimator_module
from circuitlasso.circuits import defaults
from circuitlasso.circuits import trace as tr
from circuitlasso.circuits.interpret import top_tokens
from circuitlasso.circuits.trace import trace_circuit
from circuitlasso.collect import LayerFeatures, collect_sae_features
from circuitlasso.data.models import load_model, load_saes
from circuitlasso.data.toyworld.datasets import load_toy_cola
from circuitlasso.estimator import CircuitLasso, NotFittedError, features_digest

M, D = 400, 12
PLANTED = [1, 4]  # features of the last layer that carry the target


@pytest.fixture(scope="module")
def layers() -> dict[int, sp.csr_matrix]:
    """Features of layers 0, 1, 2: sparse nonnegative, each layer's feature k driven by the layer
    below's feature k (and k + 1), plus noise."""
    rng = np.random.default_rng(21)

    def sparse_nonneg(rows: int, cols: int) -> np.ndarray:
        return np.where(rng.random((rows, cols)) < 0.4, rng.exponential(1.0, (rows, cols)), 0.0)

    Z0 = sparse_nonneg(M, D)
    Z1 = np.maximum(Z0 + 0.5 * np.roll(Z0, -1, axis=1) + 0.1 * rng.standard_normal((M, D)), 0)
    Z2 = np.maximum(Z1 + 0.1 * rng.standard_normal((M, D)), 0)
    return {0: sp.csr_matrix(Z0), 1: sp.csr_matrix(Z1), 2: sp.csr_matrix(Z2)}


def standardized_lam_max(Z: np.ndarray, theta: np.ndarray) -> float:
    """max_k |x~_k^T theta_j| / M over features k and columns j, x~_k centered unit-norm."""
    centered = Z - Z.mean(0)
    unit = centered / np.linalg.norm(centered, axis=0)
    return float(np.abs(unit.T @ theta.reshape(len(Z), -1)).max() / len(Z))


def roots(estimator: CircuitLasso) -> set[int]:
    return {d["feature"] for _, d in estimator.trace().nodes(data=True) if d["layer"] == 2}


def test_binary_target(layers) -> None:
    Z2 = layers[2].toarray()
    signal = 2 * Z2[:, 1] - 2 * Z2[:, 4]
    y = (signal > np.median(signal)).astype(int)
    estimator = CircuitLasso(label_lam_ratio=0.1, lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(
        layers, y
    )
    assert estimator.lam_ == pytest.approx(0.1 * standardized_lam_max(Z2, y - y.mean()))
    np.testing.assert_array_equal(estimator.classes_, [0, 1])
    assert estimator.coef_.shape == (1, D) and estimator.intercept_.shape == (1,)
    p = 1 / (1 + np.exp(-(Z2 @ estimator.coef_[0] + estimator.intercept_[0])))
    proba = estimator.predict_proba(layers)
    assert proba.shape == (M, 2)
    np.testing.assert_allclose(proba, np.column_stack([1 - p, p]), rtol=1e-12)
    np.testing.assert_array_equal(estimator.predict(layers), (p > 0.5).astype(int))
    assert np.mean(estimator.predict(layers) == y) > 0.9
    assert roots(estimator) == set(PLANTED)


def test_multiclass_target(layers) -> None:
    Z2 = layers[2].toarray()
    scores = np.column_stack([2 * Z2[:, 1], 2 * Z2[:, 4], np.full(M, 1.5)])
    names = np.array(["high 1", "high 4", "neither"])
    y = names[scores.argmax(1)]
    estimator = CircuitLasso(label_lam_ratio=0.1, lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(
        layers, y
    )
    onehot = (y[:, None] == names).astype(float)
    theta = onehot - onehot.mean(0)
    assert estimator.lam_ == pytest.approx(0.1 * standardized_lam_max(Z2, theta))
    np.testing.assert_array_equal(estimator.classes_, names)
    assert estimator.coef_.shape == (3, D) and estimator.intercept_.shape == (3,)
    logits = Z2 @ estimator.coef_.T + estimator.intercept_
    expected = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(estimator.predict_proba(layers), expected, rtol=1e-10)
    np.testing.assert_array_equal(estimator.predict(layers), names[expected.argmax(1)])
    assert np.mean(estimator.predict(layers) == y) > 0.9
    # the readout's importance sums |A| over the classes: the planted features lead
    assert roots(estimator) == set(PLANTED)


def test_regression_target(layers) -> None:
    Z2 = layers[2].toarray()
    rng = np.random.default_rng(22)
    y = 2 * Z2[:, 1] - 1.5 * Z2[:, 4] + 0.1 * rng.standard_normal(M)
    estimator = CircuitLasso(
        label_lam_ratio=0.05, lam_ratio=0.1, kind="regression", roots=2, k=1, min_prompts=1
    ).fit(layers, y)
    assert estimator.lam_ == pytest.approx(0.05 * standardized_lam_max(Z2, y - y.mean()))
    predicted = estimator.predict(layers)
    np.testing.assert_allclose(predicted, Z2 @ estimator.coef_ + estimator.intercept_)
    r2 = 1 - np.sum((y - predicted) ** 2) / np.sum((y - y.mean()) ** 2)
    assert r2 > 0.9
    assert roots(estimator) == set(PLANTED)
    assert not hasattr(estimator, "classes_")
    assert not hasattr(estimator, "predict_proba")
    with pytest.raises(AttributeError, match="has no attribute 'predict_proba'"):
        estimator.predict_proba(layers)
    # a classifier, the default, refuses real values, and reads counts as classes
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        CircuitLasso(min_prompts=1).fit(layers, y)
    counts = np.round(np.abs(y) * 2)
    assert CircuitLasso(label_lam_ratio=0.05, kind="regression", min_prompts=1).fit(
        layers, counts
    ).label_fit_.kind == ("regression")
    with pytest.raises(ValueError, match="exactly two values"):
        CircuitLasso(kind="binary", min_prompts=1).fit(layers, counts)


def test_all_layer_pairs_give_the_traced_circuit(layers) -> None:
    Z2 = layers[2].toarray()
    y = (Z2[:, 1] - Z2[:, 4] > np.median(Z2[:, 1] - Z2[:, 4])).astype(int)
    options = dict(lam_ratio=0.1, roots=2, k=1, min_prompts=1)
    traced = CircuitLasso(label_lam_ratio=0.1, **options).fit(layers, y)
    full = CircuitLasso(label_lam_ratio=0.1, layer_pairs="all", **options).fit(layers, y)
    # every column of both layer pairs fitted, against the trace's few
    assert {len(full._regressions._fits[layer]) for layer in (1, 2)} == {D}
    assert all(not fits for fits in traced._regressions._fits.values())  # nothing traced yet
    circuit = traced.trace()
    assert 0 < sum(len(f) for f in traced._regressions._fits.values()) < 2 * D
    assert full.trace() == circuit
    for parent, child, data in circuit.edges(data=True):
        assert full.trace().edges[parent, child]["coef"] == pytest.approx(data["coef"], abs=1e-3)
    with pytest.raises(ValueError, match="layer_pairs is 'traced' or 'all'"):
        CircuitLasso(layer_pairs="some").fit(layers, y)


def test_accessors_are_the_fits_readout_and_layer_pairs(layers) -> None:
    Z2 = layers[2].toarray()
    y = (Z2[:, 1] - Z2[:, 4] > np.median(Z2[:, 1] - Z2[:, 4])).astype(int)
    estimator = CircuitLasso(label_lam_ratio=0.1, lam_ratio=0.1, roots=2, k=1).fit(layers, y)
    fit = estimator.label_fit_
    assert (estimator.kind_, estimator.readout_layer_) == ("binary", 2)
    assert sorted(estimator.X_fit_) == [0, 1, 2]
    plain = np.abs(estimator.coef_[0])
    np.testing.assert_array_equal(estimator.readout_importance(standardized=False), plain)
    std = Z2.std(0)
    np.testing.assert_allclose(estimator.readout_importance(), plain * std, rtol=1e-12)
    # the estimator's own circuit, and another rule sharing its layer-pair fits
    assert estimator.trace() == estimator.trace(roots=2, k=1, standardized=True)
    assert estimator.trace() is not estimator.trace()  # a new circuit each time
    wider = estimator.trace(roots=3, k=2, standardized=False)
    assert wider == trace_circuit(fit, estimator._regressions, roots=3, k=2, standardized=False)
    parents = estimator.parent_fits(wider)
    with_parents = {(d["layer"], d["feature"]) for n, d in wider.nodes(data=True)
                    if wider.in_degree(n)}  # fmt: skip
    assert {(layer, f) for layer, fits in parents.items() for f in fits} == with_parents
    assert all(fits[f] is estimator._regressions.parents(layer, [f])[f]
               for layer, fits in parents.items() for f in fits)  # fmt: skip
    # per prompt: |A| * |z| on the readout layer, the edges' |coef| * |z| below
    rows = [3, 0]
    found = estimator.prompt_importance(wider, prompts=rows)
    for row, importance in zip(rows, found, strict=True):
        for node, data in wider.nodes(data=True):
            z = abs(layers[data["layer"]][row, data["feature"]])
            if data["layer"] == 2:
                weight = plain[data["feature"]]
            else:
                weight = sum(abs(c) for _, _, c in wider.out_edges(node, data="coef"))
            assert importance.get(node, 0.0) == pytest.approx(weight * z, rel=1e-12)
    assert estimator.prompt_importance(wider, layers, rows) == found
    assert len(estimator.prompt_importance(wider)) == M


def test_fitted_attributes_are_missing_before_fit(layers) -> None:
    estimator = CircuitLasso()
    fitted = (
        "coef_ intercept_ classes_ lam_ features_digest_ kind_ readout_layer_ X_fit_ "
        "n_features_in_ label_fit_"
    )
    for name in fitted.split():
        assert not hasattr(estimator, name), name
    with pytest.raises(NotFittedError, match="not fitted yet: call fit"):
        estimator.coef_  # noqa: B018
    with pytest.raises(NotFittedError, match="not fitted yet: call fit"):
        estimator.predict(layers)
    with pytest.raises(NotFittedError, match="not fitted yet: call fit"):
        estimator.trace()
    assert issubclass(NotFittedError, SklearnNotFittedError)
    assert issubclass(NotFittedError, RuntimeError)  # what an unfitted estimator raised before


def test_predict_wants_the_fitted_width(layers) -> None:
    y = (layers[2].toarray()[:, 1] > 0).astype(int)
    estimator = CircuitLasso(label_lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(layers, y)
    narrow = {**layers, 2: layers[2][:, :-1]}
    with pytest.raises(
        ValueError, match=rf"X has {D - 1} features, but CircuitLasso is expecting {D}"
    ):
        estimator.predict(narrow)
    with pytest.raises(ValueError, match=rf"layer 2 have shape \({M}, {D - 1}\)"):
        estimator.predict_proba(narrow)
    with pytest.raises(ValueError, match=r"the readout reads layer 2; Z has layers \[0, 1\]"):
        estimator.predict({0: layers[0], 1: layers[1]})
    assert estimator.features_digest_ == features_digest(layers)
    assert features_digest({**layers, 2: layers[2] * 2}) != estimator.features_digest_


# ---------------------------------------------------------------- the fitted state


def binary_target(layers) -> np.ndarray:
    Z2 = layers[2].toarray()
    return (Z2[:, 1] - Z2[:, 4] > np.median(Z2[:, 1] - Z2[:, 4])).astype(int)


def fitted_names(estimator: CircuitLasso) -> list[str]:
    """Every public name of ``estimator`` ending in ``_``: scikit-learn's fitted attributes."""
    names = {*dir(type(estimator)), *vars(estimator)}
    return sorted(n for n in names if n.endswith("_") and not n.startswith("_"))


def test_hasattr_on_a_fitted_attribute_solves_and_traces_nothing(layers, monkeypatch) -> None:
    y = binary_target(layers)
    fitted = CircuitLasso(label_lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(layers, y)
    unfitted = CircuitLasso()

    def no_work(*args, **kwargs):
        raise AssertionError("reading a fitted attribute ran a solver or a trace")

    monkeypatch.setattr(estimator_module, "fit_label", no_work)
    monkeypatch.setattr(tr, "trace_circuit", no_work)
    monkeypatch.setattr(tr.LayerRegressions, "parents", no_work)
    monkeypatch.setattr(tr.LayerRegressions, "fit_all", no_work)
    names = fitted_names(fitted)
    assert {"coef_", "X_fit_", "n_features_in_", "label_fit_"} <= set(names)
    assert "circuit_" not in names and "regressions_" not in names
    assert all(hasattr(fitted, name) for name in names)
    assert not any(hasattr(unfitted, name) for name in names)


def test_only_fit_sets_the_fitted_state(layers) -> None:
    """Traces, parent fits and per-prompt circuits are returned: the fitted attributes stay the
    objects ``fit`` set; the layer-pair fits they share are a cache of the fit, which a new fit
    replaces and ``clone`` leaves behind."""
    y = binary_target(layers)
    estimator = CircuitLasso(label_lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(layers, y)
    before = {name: value for name, value in vars(estimator).items() if name.endswith("_")}
    circuit = estimator.trace(roots=3)
    estimator.parent_fits(circuit)
    estimator.prompt_circuit(0)
    after = {name: value for name, value in vars(estimator).items() if name.endswith("_")}
    assert after.keys() == before.keys()
    assert all(after[name] is value for name, value in before.items())
    cache = estimator._regressions
    assert any(cache._fits.values())
    assert not hasattr(clone(estimator), "_regressions")
    assert estimator.fit(layers, y)._regressions is not cache
    assert not any(estimator._regressions._fits.values())


def test_x_fit_is_a_copy_of_the_features(layers) -> None:
    y = binary_target(layers)
    mine = {layer: z.copy() for layer, z in layers.items()}
    estimator = CircuitLasso(label_lam_ratio=0.1, roots=2, k=1, min_prompts=1).fit(mine, y)
    circuit, predicted = estimator.trace(), estimator.predict(layers)
    for layer, z in mine.items():
        for name in ("data", "indices", "indptr"):
            assert not np.shares_memory(getattr(estimator.X_fit_[layer], name), getattr(z, name))
        z.data *= 2  # the caller's arrays, in place
    for layer, z in layers.items():
        np.testing.assert_array_equal(estimator.X_fit_[layer].toarray(), z.toarray())
    assert estimator.features_digest_ == features_digest(layers)
    assert estimator.trace() == circuit
    np.testing.assert_array_equal(estimator.predict(layers), predicted)


def test_n_features_in_is_what_predict_reads(layers) -> None:
    narrow = {**layers, 0: layers[0][:, :5]}  # another width below the readout
    estimator = CircuitLasso(label_lam_ratio=0.1, min_prompts=1).fit(narrow, binary_target(layers))
    assert estimator.n_features_in_ == D == estimator.coef_.shape[1]
    assert estimator.predict({2: layers[2]}).shape == (M,)


def test_the_kind_makes_a_classifier_or_a_regressor(layers) -> None:
    for kind in ("classification", "binary", "multiclass"):
        assert is_classifier(CircuitLasso(kind=kind)) and not is_regressor(CircuitLasso(kind=kind))
        assert hasattr(CircuitLasso(kind=kind), "predict_proba")
    regressor = CircuitLasso(kind="regression")
    assert is_regressor(regressor) and not is_classifier(regressor)
    assert not hasattr(regressor, "predict_proba")
    y = binary_target(layers)
    assert isinstance(check_cv(3, y, classifier=is_classifier(CircuitLasso())), StratifiedKFold)
    # labels sorted by class: unstratified folds would train on one class
    imbalanced = np.sort(np.where(np.arange(M) < M // 5, 1, 0))
    options = {"label_lam_ratio": [0.1, 0.3]}
    search = GridSearchCV(CircuitLasso(min_prompts=1), options, cv=3, error_score="raise")
    Z = LayerFeatures(layers)
    assert np.isfinite(search.fit(Z, imbalanced).cv_results_["mean_test_score"]).all()
    with pytest.raises(ValueError, match="one class"):
        GridSearchCV(CircuitLasso(min_prompts=1), options, cv=KFold(3), error_score="raise").fit(
            Z, imbalanced
        )
    with pytest.raises(ValueError, match="kind must be one of"):
        CircuitLasso(kind="labels").fit(layers, y)


# ---------------------------------------------------------------- interpret on the toy world

N_TOY = 200
TOY_LAYERS = [2, 3]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The toy model, its SAEs of layers 2 and 3, ``N_TOY`` training sentences and a
    ``CircuitLasso`` fitted on their features."""
    model = load_model("toy")
    saes = load_saes("toy", TOY_LAYERS, model=model)
    train = load_toy_cola("train")
    prompts = list(train["sentence"][:N_TOY])
    cache_dir = tmp_path_factory.mktemp("cache")
    Z = collect_sae_features(model, saes, prompts, batch_size=50, cache_dir=cache_dir,
                             progress=False)  # fmt: skip
    y = np.asarray(train["label"][:N_TOY])
    estimator = CircuitLasso(label_lam_ratio=0.05, lam_ratio=0.1, roots=2, k=1, min_prompts=5).fit(
        Z, y
    )
    other = list(train["sentence"][N_TOY : 2 * N_TOY])
    return {"model": model, "saes": saes, "prompts": prompts, "other": other, "Z": Z, "y": y,
            "estimator": estimator}  # fmt: skip


def test_interpret_labels_the_nodes_from_the_prompts_of_the_features(toy) -> None:
    estimator, model, saes, prompts = (toy[k] for k in ("estimator", "model", "saes", "prompts"))
    circuit = estimator.interpret(model, saes, prompts, n_prompts=10)
    assert len(circuit) > 0
    for _, data in circuit.nodes(data=True):
        layer, feature = data["layer"], data["feature"]
        expected = top_tokens(model, saes[layer], feature, prompts, toy["Z"][layer], n_prompts=10)
        assert expected  # every traced feature is active on some prompts
        assert data["top_tokens"] == dict(expected.most_common(5))


def test_interpret_returns_a_new_circuit_and_leaves_the_fitted_one(toy) -> None:
    estimator, model, saes, prompts = (toy[k] for k in ("estimator", "model", "saes", "prompts"))
    traced = estimator.trace()
    circuit = estimator.interpret(model, saes, prompts, circuit=traced, n_prompts=10)
    assert circuit is not traced and circuit == traced
    assert all("top_tokens" not in data for _, data in traced.nodes(data=True))
    assert all("type" not in data for _, _, data in traced.edges(data=True))
    assert all("top_tokens" in data for _, data in circuit.nodes(data=True))


def test_prompt_circuit_is_the_trace_weighted_by_one_prompt(toy) -> None:
    estimator = toy["estimator"]
    for prompt in (0, 7):
        found = estimator.prompt_circuit(prompt)
        expected = trace_circuit(estimator.label_fit_, estimator._regressions, roots=2, k=1,
                                 prompt=prompt)  # fmt: skip
        assert found.to_json() == expected.to_json()
    assert len(estimator.prompt_circuit(0, roots=1, k=1)) <= len(estimator.prompt_circuit(0))
    with pytest.raises(IndexError, match="prompt 10000 is not a row of the"):
        estimator.prompt_circuit(10_000)


def test_interpret_refuses_prompts_out_of_order_or_others(toy) -> None:
    estimator, model, saes, prompts = (toy[k] for k in ("estimator", "model", "saes", "prompts"))
    shuffled = [prompts[i] for i in np.random.default_rng(0).permutation(len(prompts))]
    match = r"prompt \d+ is not the prompt the features were collected on: .* but Z\[\d+, \d+\] is"
    with pytest.raises(ValueError, match=match):
        estimator.interpret(model, saes, shuffled, n_prompts=10)
    with pytest.raises(ValueError, match=match):
        estimator.interpret(model, saes, toy["other"], n_prompts=10)
    # without the check the shuffled prompts would label the nodes with other sentences' tokens
    layer, feature = next((d["layer"], d["feature"]) for _, d in estimator.trace().nodes(data=True))
    right = top_tokens(model, saes[layer], feature, prompts, toy["Z"][layer], n_prompts=10)
    wrong = top_tokens(model, saes[layer], feature, shuffled, toy["Z"][layer], n_prompts=10)
    assert right != wrong


def test_interpret_refuses_a_wrong_number_of_prompts(toy) -> None:
    estimator, model, saes, prompts = (toy[k] for k in ("estimator", "model", "saes", "prompts"))
    with pytest.raises(ValueError, match=f"got {N_TOY - 1} prompts but .* {N_TOY} rows"):
        estimator.interpret(model, saes, prompts[:-1])
    with pytest.raises(ValueError, match=f"got {N_TOY + 1} prompts"):
        estimator.interpret(model, saes, [*prompts, prompts[0]])


def test_interpret_refuses_an_sae_under_the_wrong_layer(toy) -> None:
    estimator, model, saes, prompts = (toy[k] for k in ("estimator", "model", "saes", "prompts"))
    swapped = {2: saes[3], 3: saes[2]}
    with pytest.raises(ValueError, match=r"layer key 2 reads hook 'blocks\.3\.hook_resid_post'"):
        estimator.interpret(model, swapped, prompts)
    with pytest.raises(ValueError, match=r"the circuit has layer 2 but saes has layers \[3\]"):
        estimator.interpret(model, {3: saes[3]}, prompts)


def test_interpret_refuses_features_changed_since_fit(toy) -> None:
    estimator = CircuitLasso(label_lam_ratio=0.05, lam_ratio=0.1, roots=2, k=1, min_prompts=5).fit(
        toy["Z"], toy["y"]
    )
    estimator.X_fit_[3].data *= 2  # in place
    with pytest.raises(ValueError, match="X_fit_ was changed since fit: fit again"):
        estimator.interpret(toy["model"], toy["saes"], toy["prompts"])


# ---------------------------------------------------------------- scikit-learn's contract


def test_params_clone_and_grid_search_on_the_toy_world(toy) -> None:
    """``label_lam_ratio`` chosen on validation folds, as the paper chooses lambda: the search's
    best score is the best of the ratios' mean fold accuracies, and the refit circuit is that of
    a plain fit at the chosen ratio on all prompts."""
    estimator = CircuitLasso(lam_ratio=0.1, roots=2, k=1, min_prompts=5)
    assert estimator.get_params()["label_lam_ratio"] is None  # the default ratio
    copy = clone(estimator.set_params(label_lam_ratio=0.05))
    assert copy.get_params() == estimator.get_params() and not hasattr(copy, "coef_")
    ratios = [0.02, 0.1, 0.5]
    search = GridSearchCV(estimator, {"label_lam_ratio": ratios}, cv=3).fit(toy["Z"], toy["y"])
    folds = StratifiedKFold(3)  # a classifier's cv=3
    means = [
        np.mean(
            cross_val_score(
                clone(estimator).set_params(label_lam_ratio=r), toy["Z"], toy["y"], cv=folds
            )
        )  # fmt: skip
        for r in ratios
    ]
    assert search.best_params_["label_lam_ratio"] == ratios[int(np.argmax(means))]
    assert search.best_score_ == pytest.approx(max(means))
    best = clone(estimator).set_params(**search.best_params_).fit(toy["Z"], toy["y"])
    assert search.best_estimator_.trace() == best.trace()
    assert search.score(toy["Z"], toy["y"]) == best.score(toy["Z"], toy["y"])


@pytest.mark.slow  # fits on the toy world
def test_a_penalty_is_a_ratio_or_an_absolute_lambda(toy) -> None:
    """``label_lam`` / ``lam`` (absolute) give the fit of the ratio they amount to; the default
    is the shared default ratio; a ratio and a lambda together are refused at ``fit``."""
    params = {"roots": 2, "k": 1, "min_prompts": 5}
    by_default = CircuitLasso(**params).fit(toy["Z"], toy["y"])
    by_ratio = CircuitLasso(label_lam_ratio=defaults.LABEL_LAM_RATIO, **params)
    by_ratio.fit(toy["Z"], toy["y"])
    assert by_default.lam_ == by_ratio.lam_
    np.testing.assert_array_equal(by_default.coef_, by_ratio.coef_)
    absolute = CircuitLasso(label_lam=by_ratio.lam_, **params).fit(toy["Z"], toy["y"])
    np.testing.assert_allclose(absolute.coef_, by_ratio.coef_, rtol=1e-6, atol=1e-9)
    assert absolute.label_fit_.lam_ratio == pytest.approx(defaults.LABEL_LAM_RATIO)
    child = int(np.argmax(np.diff(sp.csc_matrix(toy["Z"][3]).indptr)))  # the most active
    pair = by_ratio._regressions.parents(3, [child])[child]
    lam = float(pair.lam[list(pair.children).index(child)])
    assert lam > 0 and pair.column(child).nnz > 0
    absolute = CircuitLasso(lam=lam, **params).fit(toy["Z"], toy["y"])
    same = absolute._regressions.parents(3, [child])[child]
    np.testing.assert_allclose(same.column(child).toarray(), pair.column(child).toarray(),
                               rtol=1e-5, atol=1e-8)  # fmt: skip
    with pytest.raises(ValueError, match="as lam_ratio or as lam, not both"):
        CircuitLasso(label_lam_ratio=0.1, label_lam=1e-3).fit(toy["Z"], toy["y"])
    with pytest.raises(ValueError, match="lam must be > 0"):
        CircuitLasso(label_lam=-1.0).fit(toy["Z"], toy["y"])
    lams = [by_ratio.lam_ / 10, by_ratio.lam_, by_ratio.lam_ * 10]
    search = GridSearchCV(CircuitLasso(**params), {"label_lam": lams}, cv=KFold(2))
    search.fit(toy["Z"], toy["y"])
    means = [
        cross_val_score(
            CircuitLasso(label_lam=lam, **params), toy["Z"], toy["y"], cv=KFold(2)
        ).mean()
        for lam in lams
    ]
    assert search.best_params_["label_lam"] == lams[int(np.argmax(means))]


def test_layer_features_split_by_prompts(layers) -> None:
    Z = LayerFeatures(layers)
    rows = np.array([3, 0, 7])
    part = Z[rows]
    assert sorted(part) == [0, 1, 2] and part.shape == (3, 3 * D)
    for layer in Z:
        np.testing.assert_array_equal(part[layer].toarray(), layers[layer][rows].toarray())
    assert Z.rows([3, 0, 7]).shape == part.shape and Z.rows(slice(0, 4)).shape == (4, 3 * D)
    np.testing.assert_array_equal(Z.rows([3, 0, 7])[1].toarray(), part[1].toarray())
    with pytest.raises(TypeError, match=r"Z.rows\(\[3\]\) for those prompts, or Z\[layer\]"):
        Z[[3]]
    with pytest.raises(KeyError, match="no layer 9"):
        Z[9]
    with pytest.raises(ValueError, match="one row per prompt"):
        LayerFeatures({0: layers[0], 1: layers[1][:5]})


@pytest.mark.slow  # scikit-learn's checks: dozens of fits
@pytest.mark.parametrize("kind", ["classification", "regression"])
def test_check_estimator(kind: str) -> None:
    """scikit-learn's estimator checks, on plain (M, D) matrices read as one layer, with the
    classifier's or the regressor's checks: every check passes (the array API check is skipped
    by scikit-learn itself unless SCIPY_ARRAY_API=1)."""
    results = check_estimator(CircuitLasso(kind=kind), on_fail=None)
    failed = {r["check_name"]: str(r["exception"]) for r in results if r["status"] == "failed"}
    assert not failed, failed
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert skipped <= {"check_array_api_input"}
    assert sum(r["status"] == "passed" for r in results) >= 40
