"""Small helpers on torch CSR tensors (row gathers, padded rows, sums) and sorted-key lookups."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor


def csr_from_scipy(a: sp.csr_matrix, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A scipy CSR matrix as a torch CSR tensor with sorted int64 indices and summed duplicates."""
    a = a.copy()
    a.sum_duplicates()
    a.sort_indices()
    return csr_from_parts(
        torch.from_numpy(a.indptr.astype(np.int64)),
        torch.from_numpy(a.indices.astype(np.int64)),
        torch.from_numpy(np.asarray(a.data)).to(dtype),
        a.shape,
    ).to(device)


def csr_from_parts(crow: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> Tensor:
    """torch CSR tensor, without torch's notices that sparse CSR support is in beta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, val, size=shape)


def with_int32_indices(csr: Tensor) -> Tensor:
    """The CSR tensor with int32 indices where its nonzeros fit them, else itself. Torch's
    CSR times dense product reads an index for every entry: alone, on the CPU, it ran 10 to
    25 % faster on int32 ones (X^T of the solver benchmark's 400 to 64 active per row)."""
    if csr.values().numel() >= 2**31 - 1 or max(csr.shape) >= 2**31 - 1:
        return csr
    return csr_from_parts(
        csr.crow_indices().int(),
        csr.col_indices().int(),
        csr.values(),
        (csr.shape[0], csr.shape[1]),
    )


def csr_from_dense(a: Tensor) -> Tensor:
    """A dense (n, m) tensor as CSR (exact zeros dropped), without torch's beta notices."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return a.to_sparse_csr()


def row_ids(csr: Tensor) -> Tensor:
    """(nnz,) row index of every stored entry of a CSR tensor."""
    crow = csr.crow_indices()
    counts = crow[1:] - crow[:-1]
    return torch.repeat_interleave(torch.arange(csr.shape[0], device=crow.device), counts)


def csr_rows(csr: Tensor, rows: Tensor) -> Tensor:
    """Rows `rows` (B,) of a CSR (n, m) tensor as a CSR (B, m) tensor."""
    crow, col, val = csr.crow_indices(), csr.col_indices(), csr.values()
    starts = crow[rows]
    counts = crow[rows + 1] - starts
    new_crow = torch.zeros(rows.numel() + 1, dtype=torch.int64, device=crow.device)
    torch.cumsum(counts, 0, out=new_crow[1:])
    total = int(new_crow[-1])
    gather = torch.repeat_interleave(starts - new_crow[:-1], counts, output_size=total)
    gather += torch.arange(total, device=crow.device)
    return csr_from_parts(new_crow, col[gather], val[gather], (rows.numel(), csr.shape[1]))


def csr_from_padded(index: Tensor, value: Tensor, n_cols: int) -> Tensor:
    """CSR (B, n_cols) whose row j holds value[j, k] at column index[j, k]; zeros are dropped.

    index: (B, K) sorted along each row wherever value is nonzero; value: (B, K).
    """
    keep = value != 0
    crow = torch.zeros(index.shape[0] + 1, dtype=torch.int64, device=index.device)
    torch.cumsum(keep.sum(1), 0, out=crow[1:])
    return csr_from_parts(crow, index[keep], value[keep], (index.shape[0], n_cols))


def _coo(csr: Tensor, transpose: bool = False, sign: float = 1.0) -> tuple[Tensor, Tensor]:
    """Coordinates (2, nnz) and values of a CSR tensor, without assuming sorted columns."""
    rows, cols = row_ids(csr), csr.col_indices()
    index = torch.stack([cols, rows] if transpose else [rows, cols])
    return index, csr.values() * sign


def _csr_of(index: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """CSR from possibly unsorted, duplicated coordinates (duplicates are summed)."""
    return torch.sparse_coo_tensor(index, values, shape).coalesce().to_sparse_csr()


def csr_transpose(csr: Tensor) -> Tensor:
    """Transpose of a CSR tensor, as CSR with sorted columns. (SpGEMM outputs may be unsorted.)

    On the CPU, scipy's conversion to CSC (a counting sort, linear in the nonzeros: the CSC of
    ``A`` is the CSR of ``A^T``, rows in order within each column); torch's sort of the
    coordinates took seconds for a few million nonzeros. On a GPU, torch's own.
    """
    shape = (csr.shape[1], csr.shape[0])
    values = csr.values()
    if csr.device.type != "cpu" or values.dtype not in (torch.float32, torch.float64):
        return _csr_of(*_coo(csr, transpose=True), shape)
    crow, col = csr.crow_indices(), csr.col_indices()
    columns = sp.csr_matrix((values.numpy(), col.numpy(), crow.numpy()), shape=csr.shape).tocsc()
    columns.sum_duplicates()  # a scan where there are none
    return csr_from_parts(
        torch.from_numpy(columns.indptr).to(crow.dtype),
        torch.from_numpy(columns.indices).to(col.dtype),
        torch.from_numpy(columns.data),
        shape,
    )


def row_sq_sums(csr: Tensor, center: Tensor | None = None) -> Tensor:
    """(n,) float64 sum of squares of each row of a CSR (n, m) tensor, minus `center` (n,)
    when given: sum_k (a_ik - c_i)^2, summed term by term (no cancellation of two large sums)."""
    rows = row_ids(csr)
    out = torch.zeros(csr.shape[0], dtype=torch.float64, device=csr.values().device)
    if center is None:
        return out.index_add_(0, rows, csr.values().double() ** 2)
    out.index_add_(0, rows, (csr.values().double() - center[rows]) ** 2)
    zeros = csr.shape[1] - (csr.crow_indices()[1:] - csr.crow_indices()[:-1])
    return out + zeros * center**2


def row_sums(csr: Tensor) -> Tensor:
    """(n,) float64 sum of each row of a CSR (n, m) tensor."""
    out = torch.zeros(csr.shape[0], dtype=torch.float64, device=csr.values().device)
    return out.index_add_(0, row_ids(csr), csr.values().double())


def column_sums(csr: Tensor, power: int = 1) -> Tensor:
    """(m,) float64 sum of `entry ** power` over each column of a CSR (n, m) tensor."""
    out = torch.zeros(csr.shape[1], dtype=torch.float64, device=csr.values().device)
    return out.index_add_(0, csr.col_indices(), csr.values().double() ** power)


def scale_columns(csr: Tensor, scale: Tensor) -> Tensor:
    """CSR (n, m) with column k multiplied by scale[k]."""
    values = csr.values() * scale.to(csr.values().dtype)[csr.col_indices()]
    return csr_from_parts(
        csr.crow_indices(), csr.col_indices(), values, (csr.shape[0], csr.shape[1])
    )


def padded_rows(csr: Tensor) -> tuple[Tensor, Tensor]:
    """A CSR (d, p) as padded (d, K) column indices and values, K = most entries in a row."""
    crow = csr.crow_indices()
    counts = crow.diff()
    width = int(counts.max()) if counts.numel() else 0
    rows = torch.repeat_interleave(torch.arange(csr.shape[0], device=crow.device), counts)
    slot = torch.arange(rows.numel(), device=crow.device) - crow[rows]
    W = torch.zeros(csr.shape[0], width, dtype=torch.int64, device=crow.device)
    b = torch.zeros(csr.shape[0], width, dtype=csr.values().dtype, device=crow.device)
    W[rows, slot] = csr.col_indices()
    b[rows, slot] = csr.values()
    return W, b


def block_products(rows_csr: Tensor, W: Tensor) -> Tensor:
    """Gram blocks (B, K, K) of the row sets W (B, K) of a CSR (n, M): block j holds the inner
    products of rows W[j] with each other.

    The K rows of block j are moved to their own column range [j M, (j + 1) M), so one sparse
    product of the stacked rows with their transpose computes within-block products only.
    """
    B, K = W.shape
    M = rows_csr.shape[1]
    picked = csr_rows(rows_csr, W.reshape(-1))
    block = torch.arange(B, device=W.device).repeat_interleave(K)
    cols = picked.col_indices() + block[row_ids(picked)] * M
    stacked = csr_from_parts(picked.crow_indices(), cols, picked.values(), (B * K, B * M))
    product = stacked @ csr_transpose(stacked)
    gram = torch.zeros(B * K * K, dtype=picked.values().dtype, device=W.device)
    gram[row_ids(product) * K + product.col_indices() % K] = product.values()
    return gram.view(B, K, K)


GRAM_CHUNK_ENTRIES = 2**24
"""Entries of the dense Gram computed at once (128 MiB in float64), over all threads."""


def dense_gram(xt: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
    """Dense X^T X (p, p) in `dtype` from CSR X (M, p) and its transpose xt (p, M), by chunks
    of rows; on the CPU on torch's threads (scipy's sparse product releases the GIL)."""
    p = xt.shape[0]
    out = torch.empty(p, p, dtype=dtype, device=xt.device)
    threads = torch.get_num_threads() if xt.device.type == "cpu" else 1
    step = max(1, GRAM_CHUNK_ENTRIES // threads // max(p, xt.shape[1]))

    def fill(start: int) -> None:
        rows = torch.arange(start, min(p, start + step), device=xt.device)
        out[start : start + step] = sparse_product(csr_rows(xt, rows), x).to(dtype)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fill, range(0, p, step)))
    return out


def sparse_product(a: Tensor, b: Tensor) -> Tensor:
    """Dense a @ b (n, m) of CSR a (n, k) and CSR b (k, m), in memory a dense (n, k) and the
    result take. On the CPU the product runs in scipy (two sparse operands: several times
    faster there than torch's); elsewhere as dense a times sparse b, whose memory, unlike a
    product of two sparse operands, does not grow with the number of partial products."""
    if a.device.type != "cpu":
        return a.to_dense() @ b
    return torch.from_numpy((_scipy_csr(a) @ _scipy_csr(b)).toarray())


def _scipy_csr(csr: Tensor) -> sp.csr_matrix:
    """A CPU torch CSR tensor as a scipy CSR matrix sharing its buffers."""
    return sp.csr_matrix(
        (csr.values().numpy(), csr.col_indices().numpy(), csr.crow_indices().numpy()),
        shape=tuple(csr.shape),
    )
