"""Labelled text data sets by name: ``load_dataset("cola", split="train")`` and so on."""

from __future__ import annotations

from typing import Any

DATASET_NAMES = ("cola", "bias_in_bios", "synthetic_bios", "toy_cola", "toy_bias_in_bios")


def load_dataset(name: str, **kwargs: Any) -> Any:
    """Load data set ``name`` (one of :data:`DATASET_NAMES`); ``kwargs`` go to its loader.

    ``cola`` -> :func:`~circuitlasso.data.cola.load_cola`, ``bias_in_bios`` ->
    :func:`~circuitlasso.data.bias_in_bios.load_bias_in_bios`, ``synthetic_bios`` -> its sets
    from biographies generated here
    (:func:`~circuitlasso.data.synthetic_bios.load_synthetic_bios`), ``toy_cola`` /
    ``toy_bias_in_bios`` -> the toy world's generators in
    :mod:`circuitlasso.data.toyworld.datasets`.
    """
    if name == "cola":
        from circuitlasso.data.cola import load_cola

        return load_cola(**kwargs)
    if name == "bias_in_bios":
        from circuitlasso.data.bias_in_bios import load_bias_in_bios

        return load_bias_in_bios(**kwargs)
    if name == "synthetic_bios":
        from circuitlasso.data.synthetic_bios import load_synthetic_bios

        return load_synthetic_bios(**kwargs)
    if name == "toy_cola":
        from circuitlasso.data.toyworld.datasets import load_toy_cola

        return load_toy_cola(**kwargs)
    if name == "toy_bias_in_bios":
        from circuitlasso.data.toyworld.datasets import load_toy_bias_in_bios

        return load_toy_bias_in_bios(**kwargs)
    raise ValueError(f"unknown data set {name!r}; valid names: {', '.join(DATASET_NAMES)}")
