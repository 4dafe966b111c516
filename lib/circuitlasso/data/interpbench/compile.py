"""Compile a RASP task with tracr, keeping the graph, and derive its ground-truth circuit.

tracr's ``compile_rasp_to_model`` discards the RASP graph, so the stages are run here one by one
(``extract_rasp_graph`` -> ``infer_bases`` -> ``add_craft_components_to_rasp_graph`` ->
``craft_graph_to_model`` -> ``craft_model_to_transformer``). Each RASP operation that became a
model block is then located in the assembled model: an Aggregate is one attention head, a Map or
SequenceMap is (part of) one MLP layer, a SelectorWidth is a head followed by an MLP. The ground
truth is the RASP graph's edges mapped onto those components (Selects are contracted into the
Aggregate or SelectorWidth that uses them; ``tokens`` and ``indices`` are the ``input`` node and the
program's result feeds ``output``).

tracr encodings: categorical SOps are one-hot over their value set (MLPs are lookup tables);
numerical SOps are one residual dimension holding the value (numerical MLPs discretise their input).
A categorical program's output is the argmax over the output space; a numerical program's output
is the value in its single output dimension.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from itertools import pairwise

import networkx as nx
from tracr.compiler import (
    assemble,
    basis_inference,
    craft_graph_to_model,
    craft_model_to_transformer,
    expr_to_craft_graph,
    nodes,
    rasp_to_graph,
    validating,
)
from tracr.craft import bases, transformers
from tracr.rasp import rasp

from circuitlasso.data.graph import INPUT, OUTPUT, Edge
from circuitlasso.data.interpbench.programs import TracrTask, get_task

COMPILER_BOS = "compiler_bos"
COMPILER_PAD = "compiler_pad"


@dataclass(frozen=True)
class CompiledTask:
    """A tracr-compiled task with the map from RASP operations to model components.

    ``components[label]`` lists the model nodes computing the RASP operation ``label`` in order
    (``("a1.h0",)``, ``("m0",)`` or ``("a0.h0", "m0")`` for a SelectorWidth). ``n_heads`` is the
    number of head slots per layer of the assembled model (unused slots have zero weights).
    """

    task: TracrTask
    assembled: assemble.AssembledTransformerModel
    graph: nx.DiGraph
    sink_label: str
    components: dict[str, tuple[str, ...]]
    ground_truth: frozenset[Edge]
    n_layers: int
    n_heads: int

    @property
    def categorical_output(self) -> bool:
        return rasp.is_categorical(self.graph.nodes[self.sink_label][nodes.EXPR])


FAST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
"""XLA_FLAGS while tracr assembles a model, unless set: the assembly runs a few hundred tiny XLA
programs once each, which then compile in half the time (the weights are the same to the bit)."""


def compile_task(task: TracrTask, mlp_exactness: int = 100) -> CompiledTask:
    """Compile ``task`` (non-causal attention) and derive its ground-truth circuit.

    Sets ``XLA_FLAGS`` to :data:`FAST_XLA_FLAGS` if unset: XLA reads it once per process, so a
    process that compiles tracr programs before its first other JAX computation keeps it.
    Raises ValueError naming the task when tracr cannot compile the program.
    """
    os.environ.setdefault("XLA_FLAGS", FAST_XLA_FLAGS)
    program = task.make_program()
    if not isinstance(program, rasp.SOp):
        raise ValueError(f"task {task.case_id!r}: make_program must return a rasp.SOp")
    unsupported = validating.static_validate(program)
    if unsupported:
        reasons = "; ".join(f"{u.expr.label}: {u.reason}" for u in unsupported)
        raise ValueError(f"tracr cannot compile task {task.case_id!r}: {reasons}")
    for special in (COMPILER_BOS, COMPILER_PAD):
        if special in task.vocab:
            raise ValueError(f"task {task.case_id!r}: vocab must not contain {special!r}")
    try:
        extracted = rasp_to_graph.extract_rasp_graph(program)
        graph, sources, sink = extracted.graph, extracted.sources, extracted.sink
        basis_inference.infer_bases(graph, sink, set(task.vocab), task.max_seq_len)
        expr_to_craft_graph.add_craft_components_to_rasp_graph(
            graph,
            bos_dir=bases.BasisDirection(rasp.tokens.label, COMPILER_BOS),
            mlp_exactness=mlp_exactness,
        )
        craft_model = craft_graph_to_model.craft_graph_to_model(graph, sources)
        assembled = craft_model_to_transformer.craft_model_to_transformer(
            craft_model=craft_model,
            graph=graph,
            sink=sink,
            max_seq_len=task.max_seq_len,
            compiler_bos=COMPILER_BOS,
            compiler_pad=COMPILER_PAD,
        )
    except (NotImplementedError, TypeError, ValueError, KeyError) as err:
        raise ValueError(f"tracr cannot compile task {task.case_id!r}: {err}") from err
    components = _locate_components(graph, sources, craft_model)
    return CompiledTask(
        task=task,
        assembled=assembled,
        graph=graph,
        sink_label=sink[nodes.ID],
        components=components,
        ground_truth=ground_truth_edges(graph, sink[nodes.ID], components),
        n_layers=assembled.model_config.num_layers,
        n_heads=assembled.model_config.num_heads,
    )


@cache
def compile_case(case_id: str) -> CompiledTask:
    """The compiled InterpBench case ``case_id`` (compiled once per process)."""
    return compile_task(get_task(case_id))


def _locate_components(
    graph: nx.DiGraph, sources: list, craft_model: transformers.SeriesWithResiduals
) -> dict[str, tuple[str, ...]]:
    """RASP label -> model node names, replaying tracr's layer allocation and head order."""
    _, module_names = assemble._get_model_config_and_module_names(craft_model)
    allocation = craft_graph_to_model._allocate_modules_to_layers(graph, sources)
    # tracr numbers half-layers (even: attention, odd: MLP); the assembled model's layer of each
    # non-empty half-layer is read from the module names it was assigned, in the same order.
    half_layers: set[int] = set()
    for label, half in allocation.items():
        block = graph.nodes[label].get(nodes.MODEL_BLOCK)
        is_pair = isinstance(block, transformers.SeriesWithResiduals)
        half_layers.update({half, half + 1} if is_pair else {half})
    layer_of = {
        half: int(name.split("/")[1].removeprefix("layer_"))
        for half, name in zip(sorted(half_layers), module_names, strict=True)
    }
    head_slot: dict[int, str] = {}
    for name, block in zip(module_names, craft_model.blocks, strict=True):
        if isinstance(block, transformers.MultiAttentionHead):
            layer = int(name.split("/")[1].removeprefix("layer_"))
            for h, head in enumerate(block.heads()):
                head_slot[id(head)] = f"a{layer}.h{h}"

    components: dict[str, tuple[str, ...]] = {}
    for label, half in allocation.items():
        block = graph.nodes[label][nodes.MODEL_BLOCK]
        if isinstance(block, transformers.SeriesWithResiduals):
            attn, _mlp = block.blocks
            components[label] = (head_slot[id(attn)], f"m{layer_of[half + 1]}")
        elif isinstance(block, transformers.AttentionHead):
            components[label] = (head_slot[id(block)],)
        else:
            components[label] = (f"m{layer_of[half]}",)
    return components


def _sop_parents(graph: nx.DiGraph, label: str) -> list[str]:
    """SOp labels read by ``label``, looking through Select nodes to their keys and queries."""
    parents = []
    for pred in graph.predecessors(label):
        if isinstance(graph.nodes[pred][nodes.EXPR], rasp.Selector):
            parents.extend(_sop_parents(graph, pred))
        else:
            parents.append(pred)
    return parents


def ground_truth_edges(
    graph: nx.DiGraph, sink_label: str, components: dict[str, tuple[str, ...]]
) -> frozenset[Edge]:
    """Edges between model nodes implied by the RASP graph (see module docstring)."""
    edges: set[tuple[str, str]] = set()
    for label, parts in components.items():
        edges.update(pairwise(parts))  # head -> MLP inside a SelectorWidth
        for parent in _sop_parents(graph, label):
            source = components[parent][-1] if parent in components else INPUT
            edges.add((source, parts[0]))
    edges.add((components[sink_label][-1] if sink_label in components else INPUT, OUTPUT))
    return frozenset(edges)
