"""Fixtures shared by the unit, integration and browser tests."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd
import pytest

from circuitlasso import cache
from circuitlasso.circuits.circuit import Circuit
from circuitlasso.circuits.features import LabelFit
from circuitlasso.data.bias_in_bios import (
    GENDERS,
    HUB_COLUMNS,
    PROFESSIONS,
    TEST_SPLIT,
    TRAIN_SPLITS,
)
from circuitlasso.estimator import CircuitLasso
from circuitlasso.presentation import reproduce as rp
from circuitlasso.study import FeatureStudy

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "book" / "quickstart.md"
# The local mirror of the real data sets (CoLA's zip, GPT-2's tokenizer files), defined once: the
# folder this variable names, else the first that exists of those `make book` looks in (beside
# the checkout, then the checkout's data/mirror/; data/README.md).
TEST_MIRROR_ENV = "CIRCUITLASSO_TEST_MIRROR"
MIRRORS = (ROOT.parent / "shared" / "data", ROOT / "data" / "mirror")
SHARED_DATA = (
    Path(os.environ[TEST_MIRROR_ENV])
    if os.environ.get(TEST_MIRROR_ENV)
    else next((folder for folder in MIRRORS if folder.is_dir()), MIRRORS[0])
)


def _mirrored(folder: Path, what: str) -> Path:
    """``folder`` if it exists, else skip the test, naming the folder that is missing.

    A skip, not a failure, by design: the real data sets cannot ship with the repository (their
    licences, their size), so a checkout without the mirror still runs every other test; the
    reason names the folder and the variable that fixes it, so the skip is never silent
    (``pytest -rs`` lists it). Where the mirror exists, as on CI, these tests run."""
    if not folder.is_dir():
        pytest.skip(f"{what} is missing: no folder {folder} (set {TEST_MIRROR_ENV} to a mirror "
                    "holding it)")  # fmt: skip
    return folder


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The local mirror of the real data sets (``cola_public_1.1.zip``, ``gpt2-tokenizer/``);
    a test that asks for it is skipped when the folder is missing."""
    return _mirrored(SHARED_DATA, "the local mirror of the real data sets")


@pytest.fixture(scope="session")
def gpt2_tokenizer_dir(shared_data: Path) -> Path:
    """GPT-2's tokenizer files (``vocab.json``, ``merges.txt``) in the mirror; a test that asks
    for it is skipped when the folder is missing."""
    return _mirrored(shared_data / "gpt2-tokenizer", "GPT-2's mirrored tokenizer")


def _load_network_guard() -> ModuleType:
    """``tests/hermetic/network_guard.py``, the one definition of the guard (a process a test
    starts imports the same file at start-up, :func:`no_network`)."""
    if "network_guard" in sys.modules:  # a test session run by a process a test started
        return sys.modules["network_guard"]
    spec = importlib.util.spec_from_file_location("network_guard", GUARD_DIR / "network_guard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GUARD_DIR = ROOT / "tests" / "hermetic"  # network_guard.py and the sitecustomize.py that runs it
network_guard = _load_network_guard()
NetworkBlockedError = network_guard.NetworkBlockedError


@pytest.fixture(scope="session", autouse=True)
def no_network() -> Iterator[None]:
    """Every test runs without the network, and so does every Python process it starts.

    In this process: ``urllib.request.urlopen`` of a URL that is not a local file (``file:``,
    ``data:``) or on loopback, and ``socket.socket.connect`` / ``connect_ex`` to an address that
    is not loopback, raise :class:`NetworkBlockedError` (a ``ConnectionError``, so code that
    handles being offline still does) naming the URL or the host and port. A download of a
    resource neither cached nor mirrored thus fails at once instead of fetching it. Loopback and
    Unix sockets keep working (Ray's local cluster, Jupyter kernels over ZMQ on 127.0.0.1,
    Playwright's browser). Host names other than ``localhost`` are refused without being
    resolved.

    In child processes: ``tests/hermetic`` goes first on ``PYTHONPATH`` and
    ``CIRCUITLASSO_TEST_NO_NETWORK=1`` is exported, so the ``sitecustomize.py`` there installs
    the same guard at the start of every Python process a test starts (papermill's kernels,
    Ray's workers, benchmark and driver subprocesses) and sets ``HF_HUB_OFFLINE=1`` there.

    Not covered: a process whose environment drops them (``python -I`` or ``-E``, or an
    environment a test writes from scratch), programs that are not Python (the browser, git),
    and sockets that do not go through Python's ``socket`` module (C libraries' own, such as
    gRPC or ZMQ's); code run at import time, before the first test, is not guarded either.
    """
    path = os.environ.get("PYTHONPATH")
    with pytest.MonkeyPatch.context() as patch:
        for owner, name, replacement in network_guard.guarded():
            patch.setattr(owner, name, replacement)
        patch.setenv("PYTHONPATH", os.pathsep.join([str(GUARD_DIR), *([path] if path else [])]))
        patch.setenv(network_guard.ENV, "1")
        yield


@dataclass
class ToyCircuit:
    """A traced and interpreted circuit of the toy world (layers 1 to 3, 300 sentences)."""

    study: FeatureStudy
    lasso: CircuitLasso
    circuit: Circuit


@pytest.fixture(scope="session")
def toy_circuit(tmp_path_factory: pytest.TempPathFactory) -> ToyCircuit:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cache.CACHE_ENV, str(tmp_path_factory.mktemp("cache")))
        study = FeatureStudy.load("toy", [1, 2, 3], "resid_post", "toy_cola", max_prompts=300,
                                  label_prompts=20, seed=1, batch_size=100)  # fmt: skip
    lasso = CircuitLasso(label_lam_ratio=0.05, lam_ratio=0.1, roots=4, k=2, min_prompts=5)
    lasso.fit(study.Z, study.y)
    return ToyCircuit(study, lasso, study.trace_circuit(lasso))


@pytest.fixture(scope="session")
def hand_readout() -> Callable[..., CircuitLasso]:
    """``hand_readout(Z, label_fit, **params)``: ``CircuitLasso(**params)`` fitted on ``Z``
    (``{layer: (M, D)}``) with the readout written by hand, ``label_fit`` of the last layer, in
    place of the one it fitted; its layer-pair regressions are the estimator's own."""

    def fitted(Z: dict[int, Any], label_fit: LabelFit, **params: Any) -> CircuitLasso:
        lasso = CircuitLasso(**params).fit(Z, np.arange(Z[max(Z)].shape[0]) % 2)
        lasso.label_fit_ = label_fit
        return lasso

    return fitted


@pytest.fixture(scope="session")
def quickstart_script() -> str:
    """The one Python script of the book's Quickstart page."""
    blocks = re.findall(r"```python\n(.*?)```", QUICKSTART.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the Quickstart page shows exactly one script"
    return blocks[0]


def _write_bias_in_bios(
    folder: Path, group_sizes: dict[tuple[str, str], int], *, seed: int = 0
) -> Path:
    """Write a small copy of the Bias in Bios hub data set (its file layout and schema) under
    ``folder``: ``group_sizes[(profession, gender)]`` rows of each group in each of the
    ``train``, ``dev`` and ``test`` splits, in a seeded random order; each text names its row's
    profession and gender, so group membership can be read back from the text."""
    rng = np.random.default_rng(seed)
    for split in (*TRAIN_SPLITS, TEST_SPLIT):
        rows = []
        for (profession, gender), size in group_sizes.items():
            ids = (PROFESSIONS.index(profession), GENDERS.index(gender))
            rows += [(f"{split} bio {i}: a {gender} {profession}.", *ids) for i in range(size)]
        frame = pd.DataFrame(rows, columns=list(HUB_COLUMNS)).iloc[rng.permutation(len(rows))]
        with cache.atomic_path(folder / "data" / f"{split}-00000-of-00001.parquet") as tmp:
            frame.to_parquet(tmp, index=False)
    return folder


@pytest.fixture(scope="session")
def write_bias_in_bios() -> Callable[..., Path]:
    """The writer of a small local copy of Bias in Bios in the hub's format."""
    return _write_bias_in_bios


@pytest.fixture(scope="session")
def benchmark_script() -> Callable[[str], ModuleType]:
    """``load(name)``: the script ``benchmarks/<name>.py`` imported as a module (registered in
    ``sys.modules``, as its dataclasses need), once per session."""
    loaded: dict[str, ModuleType] = {}

    def load(name: str) -> ModuleType:
        if name not in loaded:
            path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
            spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
            assert spec is not None and spec.loader is not None, path
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            loaded[name] = module
        return loaded[name]

    return load


@pytest.fixture(scope="session")
def smollm2_model() -> Any:
    """SmolLM2-135M as ``load_model("smollm2-135m")`` gives it, loaded once per session (each
    load dequantizes and converts its weights again). Tests run it, with hooks TransformerLens
    removes after each run; none may change it (copy it first, as the BOS checks do)."""
    from circuitlasso.data.models import load_model

    return load_model("smollm2-135m")


# -- the book as `make book` builds it, at the quick build's sizes -----------------------------

BOOK_FILES = ("_config.yml", "_toc.yml", "book", "notebooks")
PERTURBED_FP = ROOT / "tests" / "perturbed-fp"


def _copy_book(root: Path) -> rp.Project:
    """The files `make book` reads, copied to ``root`` (no executed section among them)."""
    for name in BOOK_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("sections"))
        else:
            shutil.copy(source, root / name)
    return rp.Project(root)


@pytest.fixture(scope="session")
def built_book(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """The whole book, every section run and rendered, in a copy of the repository; its root
    (``_build/html`` holds the pages, ``book/sections`` the executed notebooks and graphs).
    Built once per session, for the book test (tests/integration/test_book.py) and the browser
    tests that open its pages (tests/browser, marked ``book`` too).

    Two parts at once, each section on one thread as `make book` runs them: the sections on the
    toy world, one at a time, under another machine's rounding (tests/perturbed-fp), so that
    comparing them with the committed outputs is nbval's check on another machine (make's
    perturbed nbval job checks the other notebooks), and the sections on the real models at the
    quick build's sizes (notebooks/params/quick/), two at a time. Each part in a copy of its own
    (no reproduce reads a notebook the other is writing); the toy part's pages then join the
    others and the book is rendered."""
    project = _copy_book(tmp_path_factory.mktemp("book"))
    toy = _copy_book(tmp_path_factory.mktemp("book_toy"))
    planned = rp.plan(project, rp.BOOK_PROFILES)
    on_toy = {rp.page_section(project, page) for page, kind in planned.items() if kind == "toy"}
    on_models = {rp.page_section(project, page) for page in planned} - on_toy
    env = {**os.environ, cache.MIRROR_ENV: str(shared_data)}  # CoLA, for the real chapters
    cli = [str(Path(sys.executable).parent / "circuitlasso"), "reproduce", "--no-progress"]
    runs = [
        subprocess.Popen(
            [*wrap, *cli, *flags, f"--root={part.root}", *(f"--section={s}" for s in chosen)],
            env=env,
        )
        for wrap, flags, part, chosen in (
            ([str(PERTURBED_FP)], [], toy, sorted(on_toy)),
            ([], ["--quick", "--jobs=2"], project, sorted(on_models)),
        )
    ]
    assert [run.wait() for run in runs] == [0, 0], "a section failed (see its output above)"
    shutil.copytree(toy.sections_out, project.sections_out, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("build_info.md"))  # fmt: skip
    rp.write_build_info(project)
    jb = Path(sys.executable).parent / "jupyter-book"
    subprocess.run([str(jb), "build", str(project.root)], check=True)
    return project.root
