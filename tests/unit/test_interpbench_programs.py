import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from tracr.rasp import rasp

from circuitlasso.circuits.circuit import Circuit
from circuitlasso.data.interpbench import (
    CASE_IDS,
    TracrTask,
    compile_case,
    compile_task,
    decode_outputs,
    encode_inputs,
    get_task,
    to_hooked_transformer,
)
from circuitlasso.data.interpbench.compile import COMPILER_BOS, FAST_XLA_FLAGS

FAST_CASES = ("3", "11", "13")


@pytest.fixture(scope="session")
def compiled():
    """Compiled fast cases, shared by all tests of a run (``compile_case`` caches per process)."""
    return {case_id: compile_case(case_id) for case_id in FAST_CASES}


def _reference(compiled, inputs):
    """tracr's own forward pass on the batch: final residual (n, T, D) and decoded outputs."""
    assembled = compiled.assembled
    ids = [assembled.input_encoder.encode([COMPILER_BOS, *row]) for row in inputs]
    out = assembled.forward(assembled.params, jnp.array(ids))
    residual = np.asarray(out.transformer_output.output)
    values = np.asarray(out.unembedded_output)[:, 1:].tolist()
    return residual, [assembled.output_encoder.decode(row) for row in values]


def _check_reproduces(compiled, variant):
    inputs = compiled.task.sample_inputs(np.random.default_rng(1), 16)
    residual, decoded = _reference(compiled, inputs)
    model = to_hooked_transformer(compiled, variant)
    logits, cache = model.run_with_cache(encode_inputs(compiled, inputs))
    final = cache[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]
    d = residual.shape[-1]
    np.testing.assert_allclose(final[..., :d].detach().numpy(), residual, atol=1e-4)
    ours = decode_outputs(compiled, logits)
    if compiled.categorical_output:
        top2 = logits[:, 1:].topk(2, dim=-1).values if logits.shape[-1] > 1 else None
        defined = (top2[..., 0] - top2[..., 1] > 0.5) if top2 is not None else None
        for i, (row_ours, row_ref) in enumerate(zip(ours, decoded, strict=True)):
            for t, (a, b) in enumerate(zip(row_ours, row_ref, strict=True)):
                if defined is None or defined[i, t]:
                    assert a == b, (compiled.task.case_id, variant, inputs[i], t)
    else:
        np.testing.assert_allclose(np.array(ours), np.array(decoded, dtype=float), atol=1e-4)
    return model, cache, d


@pytest.mark.parametrize("case_id", FAST_CASES)
def test_converted_model_reproduces_tracr(compiled, case_id):
    _check_reproduces(compiled[case_id], "exact")


@pytest.mark.parametrize("case_id", FAST_CASES)
def test_distractor_heads_are_active_but_change_nothing(compiled, case_id):
    model, cache, d = _check_reproduces(compiled[case_id], "distractors")
    assert model.cfg.n_heads >= 4
    used = {n for parts in compiled[case_id].components.values() for n in parts}
    for layer in range(model.cfg.n_layers):
        result = cache[f"blocks.{layer}.attn.hook_result"]
        for head in range(model.cfg.n_heads):
            if f"a{layer}.h{head}" not in used:
                written = result[:, :, head]
                assert written[..., :d].abs().max() == 0
                assert written[..., d:].std(0).max() > 1e-3  # varies across prompts
    assert model.W_U[d:].abs().max() == 0


def test_case_3_ground_truth_follows_the_program(compiled):
    # is_x = Map(tokens) -> MLP of layer 0; frac = Aggregate(Select(indices, indices), is_x)
    # -> the one head of layer 1; the program's output is frac.
    expected = {("input", "m0"), ("m0", "a1.h0"), ("input", "a1.h0"), ("a1.h0", "output")}
    assert compiled["3"].ground_truth == expected


def test_selector_width_is_a_head_feeding_an_mlp(compiled):
    # word_length = Map (m0) -> SelectorWidth(Select(word_length, word_length)) = head + MLP
    expected = {("input", "m0"), ("m0", "a1.h0"), ("a1.h0", "m1"), ("m1", "output")}
    assert compiled["11"].ground_truth == expected


@pytest.mark.parametrize("case_id", FAST_CASES)
def test_ground_truth_is_a_nonempty_dag_of_model_edges(compiled, case_id, check_ground_truth):
    check_ground_truth(compiled[case_id])


def test_samplers_are_seeded_and_in_vocabulary():
    task = get_task("20")
    a = task.sample_inputs(np.random.default_rng(5), 8)
    b = task.sample_inputs(np.random.default_rng(5), 8)
    assert a == b
    corrupted = task.sample_corrupted(np.random.default_rng(6), a)
    assert len(corrupted) == len(a)
    for row in a + corrupted:
        assert len(row) == task.max_seq_len and set(row) <= task.vocab


def test_unknown_case_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown InterpBench case id '99'"):
        get_task("99")


def test_program_tracr_cannot_compile_is_a_clear_error():
    def bad_program():
        # a numerical aggregate of categorical tokens: encodings must match
        select = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
        return rasp.numerical(rasp.Aggregate(select, rasp.tokens, default=0))

    task = TracrTask.from_program("bad", bad_program, ["a", "b"], 3)
    with pytest.raises(ValueError, match="tracr cannot compile task 'bad'"):
        compile_task(task)


def test_custom_program_compiles_with_its_own_ground_truth():
    def program():
        return rasp.Map(lambda t: t == "a", rasp.tokens).named("is_a")

    compiled = compile_task(TracrTask.from_program("is_a", program, ["a", "b"], 4))
    assert compiled.ground_truth == {("input", "m0"), ("m0", "output")}
    _check_reproduces(compiled, "exact")


def test_encode_rejects_bad_inputs(compiled):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        encode_inputs(compiled["3"], [["a", "b", "c", "x", "a", "zz"]])
    with pytest.raises(ValueError, match="max_seq_len"):
        encode_inputs(compiled["3"], [["a"]])
    assert encode_inputs(compiled["3"], [["a"] * 6]).dtype == torch.long


@pytest.mark.slow
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_every_case_compiles_and_reproduces(case_id):
    compiled = compile_case(case_id)
    assert len(compiled.ground_truth) > 0 and Circuit(compiled.ground_truth).is_acyclic()
    for variant in ("exact", "distractors"):
        _check_reproduces(compiled, variant)


WEIGHTS_DIGEST = """
import hashlib, os, sys, jax, numpy as np
from circuitlasso.data.interpbench.compile import compile_case
digest = hashlib.sha256()
for path, leaf in jax.tree_util.tree_leaves_with_path(compile_case("13").assembled.params):
    digest.update(str(path).encode() + np.asarray(leaf).tobytes())
print(os.environ["XLA_FLAGS"], digest.hexdigest())
"""


@pytest.mark.slow  # compiles the programs twice
def test_fast_xla_flags_assemble_the_same_weights() -> None:
    # XLA_FLAGS unset: compile_task sets the fast flags; set but empty: XLA's defaults
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    runs = [subprocess.run([sys.executable, "-c", WEIGHTS_DIGEST], env=e, capture_output=True,
                           text=True, check=True).stdout.rsplit(" ", 1)
            for e in (env, {**env, "XLA_FLAGS": ""})]  # fmt: skip
    assert runs[0][0] == FAST_XLA_FLAGS and runs[1][0] == ""
    assert runs[0][1] == runs[1][1]
