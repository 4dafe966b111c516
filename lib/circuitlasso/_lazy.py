"""Packages whose public names load on first use: ``import circuitlasso`` stays quick, and a
package leaves a heavy dependency (tracr and JAX) to the modules that need it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(
    package: str, exports: Mapping[str, str], also: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package named ``package``: ``exports`` maps each
    public name to the module that defines it (dotted, or relative to ``package`` with a leading
    dot); a name is imported when first read and then kept in the package. ``__dir__`` lists the
    exported names and ``also`` (names the package defines itself)."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*exports, *also})

    return __getattr__, __dir__
