"""The Quickstart page's script, run as a user would: a fresh interpreter in an empty folder, with
the package installed from its wheel (conftest.py's ``installed_quickstart``).

Its circuit is checked against the same pipeline called function by function, and against the
toy world's planted categories.
"""

from __future__ import annotations

import re

import pytest
from installed_wheel import InstalledQuickstart

import circuitlasso as cl
from circuitlasso.circuits import trace as tr
from circuitlasso.data.toyworld.datasets import dominant_category


def test_the_script_is_short_and_imports_only_circuitlasso(quickstart_script: str) -> None:
    lines = [s for s in quickstart_script.splitlines() if s.strip()]
    assert len(lines) <= 15
    imports = [s for s in lines if re.match(r"\s*(import|from)\s", s)]
    assert imports == ["import circuitlasso as cl"]


@pytest.mark.slow
def test_the_script_writes_the_circuit_the_pipeline_traces(
    installed_quickstart: InstalledQuickstart,
) -> None:
    circuit = cl.Circuit.load(installed_quickstart.run_dir / "circuit.json")
    ratio, nodes, _, edges = installed_quickstart.stdout.split()
    assert (int(nodes), int(edges)) == (circuit.number_of_nodes(), circuit.number_of_edges())
    # the same steps by hand, with the same settings
    model = cl.load_model("toy")
    saes = cl.load_saes("toy", range(model.cfg.n_layers), model=model)
    train = cl.load_dataset("toy_cola", split="train")
    Z = cl.collect_sae_features(model, saes, train["sentence"].tolist(), progress=False)
    # one of the ratios it searched (that the search's folds are stratified, a classifier's, is
    # tests/unit/test_estimator.py's check: is_classifier)
    assert float(ratio) in (0.01, 0.03, 0.1)
    # the functions' defaults are the estimator's
    readout = cl.fit_label(Z[3], train["label"], float(ratio), layer=3)
    expected = tr.trace_circuit(readout, tr.LayerRegressions(Z))
    assert set(circuit.edges) == set(expected.edges)
    for node, data in expected.nodes(data=True):
        assert circuit.nodes[node]["importance"] == pytest.approx(data["importance"], rel=1e-6)
    # every node labelled and every edge typed; the roots read the planted final punctuation
    assert all(circuit.nodes[n]["top_tokens"] for n in circuit.nodes)
    assert all(d["type"] in {"persistence", "merging", "dropping", "other"}
               for _, _, d in circuit.edges(data=True))  # fmt: skip
    roots = [n for n, d in circuit.nodes(data=True) if d["layer"] == 3]
    categories = {dominant_category(circuit.nodes[n]["top_tokens"]) for n in roots}
    assert "final_punctuation" in categories


def test_an_unfitted_estimator_says_so() -> None:
    with pytest.raises(RuntimeError, match="not fitted yet: call fit"):
        cl.CircuitLasso().interpret(None, {}, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Expected 2D array, got scalar array instead"):
        cl.CircuitLasso().fit({3: None}, [0, 1])
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        cl.CircuitLasso().fit([0.5, 1.5], [0, 1])
    with pytest.raises(ValueError, match="could not convert string to float"):
        cl.CircuitLasso().fit([["a"], ["b"]], [0, 1])
    with pytest.raises(AttributeError, match="no attribute 'CircuitLaso'"):
        cl.CircuitLaso  # noqa: B018


def test_every_export_loads_from_its_module() -> None:
    assert sorted(cl.__all__) == sorted(["__version__", *cl._EXPORTS])
    for name in cl._EXPORTS:
        assert callable(getattr(cl, name)), name
