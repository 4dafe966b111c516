"""Run by every Python process whose ``PYTHONPATH`` holds this folder, at start-up: the test
session exports it (``no_network`` in ``tests/conftest.py``), so papermill's kernels, Ray's
workers, a benchmark or a driver run with ``subprocess`` block the network as the tests do.

Where ``CIRCUITLASSO_TEST_NO_NETWORK`` is ``1``: :func:`network_guard.install`, and
``HF_HUB_OFFLINE=1`` unless set (the hub reads its cache and never asks the network). The
``sitecustomize`` this one shadows on ``sys.path``, if any, runs after it.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("CIRCUITLASSO_TEST_NO_NETWORK") == "1":
    import network_guard  # beside this file, on the same PYTHONPATH

    network_guard.install()
    os.environ.setdefault(network_guard.HF_OFFLINE_ENV, "1")


def _run_shadowed() -> None:
    """The next ``sitecustomize.py`` on ``sys.path`` (a distribution's, a virtual
    environment's), which this one hides."""
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        path = os.path.join(folder, "sitecustomize.py")
        if folder != _HERE and os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", path)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


_run_shadowed()
