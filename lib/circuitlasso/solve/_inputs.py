"""Validation of solver inputs and their conversion to torch tensors.

Dense inputs (numpy arrays, dense torch tensors, nested lists) become strided tensors; sparse
inputs (any scipy.sparse format, torch COO/CSR/CSC) become torch CSR tensors with int64 indices.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from circuitlasso.solve._sparse import csr_from_scipy

Matrix: TypeAlias = Any
"""A 2-D (targets: also 1-D) numpy array, torch tensor (dense or sparse) or scipy.sparse matrix."""


def is_sparse(a: Matrix) -> bool:
    """True for scipy.sparse matrices/arrays and torch tensors of a sparse layout."""
    return sp.issparse(a) or (isinstance(a, Tensor) and a.layout != torch.strided)


def as_matrix(
    a: Matrix, name: str, dtype: torch.dtype, device: torch.device, allow_1d: bool = False
) -> tuple[Tensor, bool]:
    """Convert `a` to a finite 2-D torch tensor (M, n); return it and whether `a` was 1-D.

    Sparse inputs become CSR tensors. Raises ValueError naming `name` (and the offending column)
    for a wrong number of dimensions, an empty matrix, a non-numeric dtype or NaN/inf entries.
    """
    if sp.issparse(a):
        source = torch.as_tensor(sp.csr_matrix(a).data)
        out = csr_from_scipy(sp.csr_matrix(a), dtype, device)
        was_1d = False
    elif isinstance(a, Tensor) and a.layout != torch.strided:
        if a.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got a sparse tensor of shape {tuple(a.shape)}")
        coo = a.to_sparse_coo().coalesce()
        rows, cols = coo.indices()
        scipy_csr = sp.csr_matrix(
            (coo.values().detach().cpu().numpy(), (rows.cpu().numpy(), cols.cpu().numpy())),
            shape=tuple(a.shape),
        )
        source = coo.values()
        out = csr_from_scipy(scipy_csr, dtype, device)
        was_1d = False
    else:
        dense = a.detach() if isinstance(a, Tensor) else _numeric_tensor(a, name)
        if dense.dtype == torch.bool or dense.is_complex() or not _is_numeric(dense):
            raise ValueError(f"{name} must hold real numbers, got dtype {dense.dtype}")
        was_1d = dense.dim() == 1
        if was_1d and allow_1d:
            dense = dense.unsqueeze(1)
        if dense.dim() != 2:
            expected = "1-D or 2-D" if allow_1d else "2-D"
            raise ValueError(f"{name} must be {expected}, got shape {tuple(dense.shape)}")
        source = dense
        out = dense.to(device=device, dtype=dtype).contiguous()
    if out.shape[0] == 0 or out.shape[1] == 0:
        raise ValueError(
            f"{name} is empty (shape {tuple(out.shape)}): need at least one observation and column"
        )
    _check_finite(out, name, source)
    return out, was_1d


def _numeric_tensor(a: Any, name: str) -> Tensor:
    """A numpy array or nested lists as a tensor; ValueError naming `name` unless it holds real
    numbers (an object array is converted to float64 where every entry is a number)."""
    array = np.asarray(a)
    if array.dtype.kind == "O":
        try:
            array = array.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must hold real numbers, got non-numeric entries") from None
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers, got dtype {array.dtype}")
    return torch.as_tensor(array)


def _is_numeric(t: Tensor) -> bool:
    return t.dtype.is_floating_point or t.dtype in (
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
    )


def _check_finite(a: Tensor, name: str, source: Tensor) -> None:
    """ValueError naming `name` and the first bad column if `a` holds NaN or inf: entries of the
    input `source`, or finite ones beyond the range of `a`'s dtype."""
    if a.layout == torch.sparse_csr:
        bad = ~torch.isfinite(a.values())
        column = int(a.col_indices()[bad].min()) if bool(bad.any()) else -1
    else:
        bad_columns = (~torch.isfinite(a)).any(dim=0)
        column = int(bad_columns.nonzero()[0, 0]) if bool(bad_columns.any()) else -1
    if column < 0:
        return
    if bool(torch.isfinite(source).all()):
        largest = float(source.abs().max())
        raise ValueError(
            f"{name} has entries up to {largest:.3g} in magnitude, beyond the range of "
            f"{a.dtype} (first such column: {column}): rescale {name} or pass dtype=torch.float64"
        )
    raise ValueError(f"{name} has NaN or inf entries (first bad column: {column})")


def check_rows(x_rows: int, y: Tensor, name: str) -> None:
    """Raise ValueError unless `y` has `x_rows` rows (observations)."""
    if y.shape[0] != x_rows:
        raise ValueError(
            f"{name} has {y.shape[0]} rows but X has {x_rows}: observations must be rows of both"
        )


def per_output(value: float | Matrix, d: int, name: str) -> Tensor:
    """Broadcast a scalar or a length-d vector to a float64 (d,) tensor of finite values >= 0."""
    t = torch.as_tensor(
        value.detach().cpu() if isinstance(value, Tensor) else np.asarray(value, dtype=np.float64),
        dtype=torch.float64,
    )
    if t.dim() == 0:
        t = t.expand(d).clone()
    if t.shape != (d,):
        raise ValueError(
            f"{name} must be a scalar or have one entry per output ({d}), got {tuple(t.shape)}"
        )
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite, got {t.tolist()[:5]}...")
    if bool((t < 0).any()):
        raise ValueError(f"{name} must be >= 0, got {float(t.min())} (output {int(t.argmin())})")
    return t
