"""The toy world: a planted English-like language, a small language model and one SAE per layer.

The heavy entry points (torch, TransformerLens, sae-lens) load on first use, so the language
itself (``lexicon``, ``grammar``, ``biographies``) imports in milliseconds.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from circuitlasso.data.toyworld.artifacts import default_toy_dir, load_toy_model, load_toy_saes
    from circuitlasso.data.toyworld.build import build_toy_world
    from circuitlasso.data.toyworld.report import format_report, report_summary, toy_report

_EXPORTS = {
    "default_toy_dir": "artifacts",
    "load_toy_model": "artifacts",
    "load_toy_saes": "artifacts",
    "build_toy_world": "build",
    "format_report": "report",
    "report_summary": "report",
    "toy_report": "report",
}
__all__ = [
    "build_toy_world",
    "default_toy_dir",
    "format_report",
    "load_toy_model",
    "load_toy_saes",
    "report_summary",
    "toy_report",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'circuitlasso.data.toyworld' has no attribute {name!r}")
    return getattr(import_module(f"circuitlasso.data.toyworld.{_EXPORTS[name]}"), name)
