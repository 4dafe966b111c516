"""Debiasing a profession classifier on Bias in Bios (paper Sec. 4.2.2, App. C.6, Tables 1-2).

- :mod:`~circuitlasso.evaluation.debias.data`: the four splits and their group sizes, CBP's
  concepts, targets, the accuracies of Table 2.
- :mod:`~circuitlasso.evaluation.debias.probes`: mean-pooled activations (optionally with SAE
  features zeroed in the forward pass), logistic probes, concept-bottleneck probes.
- :mod:`~circuitlasso.evaluation.debias.shift`: SHIFT's integrated-gradient attribution on SAE
  features.
- :mod:`~circuitlasso.evaluation.debias.gender`: the automatic gender-feature rule and the toy
  world's truth.
- :mod:`~circuitlasso.evaluation.debias.compare`: every method of the comparison on one task.
- :mod:`~circuitlasso.evaluation.debias.runs`: each model of the section and its SAEs, loaded and
  compared in turn.
- :mod:`~circuitlasso.evaluation.debias.toy`: on the toy world only, the gender-feature rule's
  calls against the planted truth.
- :mod:`~circuitlasso.evaluation.debias.tables`: the section's tables and summary.
- :mod:`~circuitlasso.evaluation.debias.saved`: a saved ``benchmarks/bias_in_bios.py`` result,
  read back with its provenance.
"""

from circuitlasso.evaluation.debias.compare import (
    Comparison,
    ComparisonOptions,
    Method,
    chosen_nodes,
    compare_methods,
    describe,
    zero_columns,
)
from circuitlasso.evaluation.debias.data import (
    TOY_CONCEPTS,
    accuracies,
    bottleneck,
    check_split,
    concept_table,
    group_sizes,
    load_splits,
    targets,
)
from circuitlasso.evaluation.debias.gender import (
    GENDER_SWAPS,
    gender_swap,
    gendered_tokens,
    precision_recall,
    rule_vs_truth,
    swap_effects,
    top_prompt_share,
    toy_name_coverage,
    toy_truth,
)
from circuitlasso.evaluation.debias.probes import (
    ConceptBottleneck,
    Probe,
    concept_directions,
    concept_scores,
    fit_concept_bottleneck,
    fit_probe,
    pooled_activations,
)
from circuitlasso.evaluation.debias.runs import compare_models, load_run
from circuitlasso.evaluation.debias.saved import StoredComparison
from circuitlasso.evaluation.debias.shift import ig_scores
from circuitlasso.evaluation.debias.tables import (
    ablation_table,
    by_model,
    candidate_counts,
    candidate_table,
    candidate_tables,
    gap_closed,
    removal_table,
    results_table,
    scores_table,
    summaries,
    summary,
    write_results,
)
from circuitlasso.evaluation.debias.toy import rule_vs_toy_truth

__all__ = [
    "GENDER_SWAPS",
    "TOY_CONCEPTS",
    "Comparison",
    "ConceptBottleneck",
    "Method",
    "Probe",
    "StoredComparison",
    "ablation_table",
    "accuracies",
    "bottleneck",
    "by_model",
    "candidate_counts",
    "candidate_counts",
    "candidate_table",
    "candidate_tables",
    "check_split",
    "chosen_nodes",
    "ComparisonOptions",
    "compare_methods",
    "compare_models",
    "concept_directions",
    "concept_scores",
    "concept_table",
    "describe",
    "fit_concept_bottleneck",
    "fit_probe",
    "gap_closed",
    "gender_swap",
    "gendered_tokens",
    "group_sizes",
    "ig_scores",
    "load_run",
    "load_splits",
    "pooled_activations",
    "precision_recall",
    "removal_table",
    "results_table",
    "rule_vs_toy_truth",
    "rule_vs_truth",
    "scores_table",
    "summaries",
    "summary",
    "swap_effects",
    "targets",
    "top_prompt_share",
    "toy_name_coverage",
    "toy_truth",
    "write_results",
    "zero_columns",
]
