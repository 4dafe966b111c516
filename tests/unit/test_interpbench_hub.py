"""The hub loader on a local directory written in the hub's per-case format."""

import pickle

import pytest
import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.collect import collect_nodes
from circuitlasso.data.interpbench import load_hub_case
from circuitlasso.data.interpbench.hub import hook_to_node, node_edges

# ACDC-style records: ((child hook, child index), (parent hook, parent index)).
ACDC_EDGES = [
    (("blocks.0.hook_q_input", (None, None, 1)), ("blocks.0.hook_resid_pre", (None,))),
    (("blocks.0.attn.hook_q", (None, None, 1)), ("blocks.0.hook_q_input", (None, None, 1))),
    (("blocks.0.attn.hook_result", (None, None, 1)), ("blocks.0.attn.hook_q", (None, None, 1))),
    (("blocks.0.hook_mlp_in", (None,)), ("blocks.0.attn.hook_result", (None, None, 1))),
    (("blocks.0.hook_mlp_out", (None,)), ("blocks.0.hook_mlp_in", (None,))),
    (("blocks.1.hook_v_input", (None, None, 0)), ("blocks.0.hook_mlp_out", (None,))),
    (("blocks.1.hook_resid_post", (None,)), ("blocks.1.attn.hook_result", (None, None, 0))),
]
EXPECTED = Circuit([("input", "a0.h1"), ("a0.h1", "m0"), ("m0", "a1.h0"), ("a1.h0", "output")])


def _config(as_dict: bool):
    cfg = HookedTransformerConfig(
        n_layers=2,
        d_model=16,
        n_ctx=6,
        d_head=4,
        n_heads=2,
        d_mlp=32,
        d_vocab=9,
        act_fn="relu",
        normalization_type=None,
        seed=1,
    )
    return cfg.to_dict() if as_dict else cfg


def _write_case(root, case_id, cfg, edges):
    folder = root / case_id
    folder.mkdir(parents=True)
    model = HookedTransformer(
        HookedTransformerConfig.from_dict(cfg) if isinstance(cfg, dict) else cfg
    )
    torch.save(model.state_dict(), folder / "ll_model.pth")
    with open(folder / "ll_model_cfg.pkl", "wb") as f:
        pickle.dump(cfg, f)
    with open(folder / "edges.pkl", "wb") as f:
        pickle.dump(edges, f)
    return model


@pytest.mark.parametrize("as_dict", [True, False])
def test_loads_model_flags_and_circuit(tmp_path, as_dict):
    original = _write_case(tmp_path, "3", _config(as_dict), ACDC_EDGES)
    case = load_hub_case(3, source=tmp_path)
    tokens = torch.randint(0, 9, (4, 6), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(case.model(tokens), original(tokens))
    assert Circuit(case.ground_truth) == EXPECTED
    for flag in ("use_attn_result", "use_split_qkv_input", "use_hook_mlp_in"):
        assert getattr(case.model.cfg, flag)
    acts = collect_nodes(case.model, tokens)  # the loaded model is ready for collection
    assert acts.names[0] == "input" and acts.names[-1] == "output"


def test_other_edge_layouts_and_orientation():
    flat = [("blocks.0.hook_resid_pre", None, "blocks.0.attn.hook_result", (None, None, 1))]
    strings = [("blocks.1.hook_resid_post", "blocks.1.attn.hook_result[:, :, 0]")]
    edges = node_edges(flat + strings, n_layers=2)
    assert edges == {("input", "a0.h1"), ("a1.h0", "output")}


@pytest.mark.parametrize(
    ("hook", "index", "node"),
    [
        ("hook_embed", None, "input"),
        ("blocks.1.mlp.hook_post", None, "m1"),
        ("blocks.0.attn.hook_z", (None, None, 3), "a0.h3"),
        ("blocks.2.hook_resid_post", None, "output"),
    ],
)
def test_hook_names_map_to_graph_nodes(hook, index, node):
    assert hook_to_node(hook, index, n_layers=3) == node


def test_bad_inputs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="not a node"):
        hook_to_node("blocks.0.hook_resid_mid", None, n_layers=2)
    with pytest.raises(ValueError, match="head index"):
        hook_to_node("blocks.0.attn.hook_result", None, n_layers=2)
    with pytest.raises(ValueError, match="no InterpBench case folder"):
        load_hub_case("4", source=tmp_path)
    (tmp_path / "5").mkdir()
    with pytest.raises(ValueError, match="lacks"):
        load_hub_case("5", source=tmp_path)
