"""The perturbed floating-point environment of ``tests/perturbed-fp`` really changes rounding.

``make test`` runs nbval a second time under that script, to show the baseline does not depend on
one machine's last digits (on a CPU with AVX-512, with the code paths of one without). That pass
proves something only if each variable changes results here; this test runs the same computations
in a child process with and without each variable and checks that the digits change while the
values agree to float precision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "perturbed-fp"

# each computation returns its result as a list; run in a fresh interpreter so that the BLAS and
# ATen dispatch read the environment at start-up
PROGRAM = """
import json, numpy as np, torch
rng = np.random.default_rng(0)
a, b = rng.standard_normal((257, 300)), rng.standard_normal((300, 129))
ta, tb = torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32)
v = torch.tensor(rng.standard_normal(1_000_000), dtype=torch.float32)
print(json.dumps({
    "torch matmul": (ta @ tb).flatten().tolist(),
    "numpy matmul": (a @ b).flatten().tolist(),
    "torch softmax": ta.softmax(-1).flatten().tolist(),
    "torch layer_norm": torch.nn.functional.layer_norm(ta, (300,)).flatten().tolist(),
    "torch sum": [v.sum().item()],
}))
"""

CHANGED_BY = {
    "MKL_CBWR": "torch matmul",
    "OPENBLAS_CORETYPE": "numpy matmul",
    "ATEN_CPU_CAPABILITY": "torch softmax",
    "OMP_NUM_THREADS": "torch sum",
}


def script_environment() -> dict[str, str]:
    """The environment the script runs its command in, on this machine."""
    out = subprocess.run([str(SCRIPT), sys.executable, "-c",
                          "import os, json; print(json.dumps(dict(os.environ)))"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return json.loads(out)


def perturbed_variables() -> dict[str, str]:
    """The values the script's ``export`` lines set on this machine (it picks the code paths
    by the CPU; the cache folder is made at run time)."""
    exported = {
        item.split("=", 1)[0]
        for line in SCRIPT.read_text().splitlines()
        if line.strip().startswith("export ")
        for item in line.split()[1:]
        if "=" in item
    }
    env = script_environment()
    return {name: env[name] for name in exported if name in env}


def run(env: dict[str, str]) -> dict[str, np.ndarray]:
    base = {k: v for k, v in os.environ.items() if k not in CHANGED_BY}
    out = subprocess.run([sys.executable, "-c", PROGRAM], env={**base, **env},
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {k: np.array(v) for k, v in json.loads(out).items()}


@pytest.fixture(scope="module")
def native() -> dict[str, np.ndarray]:
    # two threads, as on the 2-core machines the baselines are written on
    return run({"OMP_NUM_THREADS": "2"})


def test_the_script_sets_every_variable_checked_here() -> None:
    assert set(perturbed_variables()) == set(CHANGED_BY)


@pytest.mark.parametrize("variable", sorted(CHANGED_BY))
def test_each_variable_changes_the_digits_but_not_the_values(variable, native) -> None:
    value = perturbed_variables()[variable]
    perturbed = run({"OMP_NUM_THREADS": "2", variable: value})
    target = CHANGED_BY[variable]
    assert not np.array_equal(perturbed[target], native[target]), f"{variable}={value} is a no-op"
    for name, result in perturbed.items():
        # float32 results of sums over 300 (matmul) and 1e6 (sum) terms
        np.testing.assert_allclose(result, native[name], rtol=1e-4, atol=1e-4, err_msg=name)


def test_the_script_runs_its_command_in_that_environment() -> None:
    env = script_environment()
    assert {k: env.get(k) for k in CHANGED_BY} == perturbed_variables()
    cpu = Path("/proc/cpuinfo").read_text().split()
    intel_avx512 = "avx512f" in cpu and "GenuineIntel" in cpu  # MKL ignores AVX2 on others
    assert env["MKL_CBWR"] == ("AVX2" if intel_avx512 else "COMPATIBLE")
    assert env["ATEN_CPU_CAPABILITY"] == ("avx2" if "avx512f" in cpu else "default")
    cache = Path(env["CIRCUITLASSO_CACHE"])
    assert cache.is_dir() and not any(cache.iterdir()), "the perturbed pass starts a fresh cache"
