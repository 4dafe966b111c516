"""Certified sparse regression for circuits: multi-output Lasso problems (paper Sec. 3).

Conventions. Observations are rows: X (M, p), Y (M, d). Every problem here is mean-scaled,

    lasso:        min_A  1/(2M) ||Y - X A||_F^2 + lam ||A||_1                        (a)
    logistic:     min_a  1/M sum_i CE(y_i, x_i a + b) + lam ||a||_1                  (b)
    multinomial:  min_A  1/M sum_i CE(y_i, softmax(x_i A + b)) + lam ||A||_1          (c)

and A[k, j] != 0 reads "predictor k is a parent of output j", the orientation of the paper's A.

Conversion to the paper. The paper writes observations as columns, X_paper = X^T (N x M), and
sums over observations. Its numbered equations: (2) the general circuit problem, (3) the block
upper-triangular neuron problem, (4) SAE layer pairs Z_i -> Z_j, (5) a prediction target y.

- Eqs. (2)-(4): ||X_paper - A^T X_paper||_F^2 + lambda ||A||_1 (no 1/2). Multiplying (a) by
  2M gives it with lambda = 2 M lam.
- App. B.1: 1/2 ||X_paper - A^T X_paper||_F^2 + lambda ||A||_1. Multiplying (a) by M gives it
  with lambda = M lam.
- Eq. (5) with the summed cross-entropy, binary or multi-class: multiplying (b) or (c) by M
  gives it with lambda = M lam (scikit-learn's LogisticRegression(penalty="l1", C) is the case
  C = 1/(M lam)); with the squared error (a real-valued target) it is (a), as above.

The minimizers are the same; only the scale of lambda differs. As in App. B.1, predictor
columns are centered (with an intercept) and scaled to unit l2 norm before solving, and the
coefficients are rescaled afterwards (`normalize=True`, the default); `normalize=False` keeps the
plain Lasso of scikit-learn.

Penalties. The solvers take lam, on the mean scale above. The fits on features
(`circuitlasso.circuits.features`, `circuitlasso.estimator`) take either that absolute lam (`lam`,
`label_lam`) or lam_ratio, the fraction of that regression's lam_max, the smallest lam whose
solution is all zero (a ratio by default)::

    lam = lam_ratio * lam_max,   lam_max = max_k |x~_k^T theta_j| / (M omega_k),

with x~_k the centered unit-norm column, omega_k its penalty factor (1 with normalize=True) and
theta the residual of the intercept-only model: for (a) theta_j = y_j - mean(y_j), one lam_max
per output j (`lam_max`); for (b) and (c) theta is the one-hot labels minus the class
frequencies and lam_max the largest over the classes j (`logistic_lam_max`; the binary and the
two-class multinomial problem share it). A ratio is scale-free (rescaling X or y leaves
it meaning the same sparsity), means the same for every target kind and every output, and
ratios >= 1 give all-zero coefficients. In the paper's units, lambda = 2 M lam_ratio lam_max for
Eqs. (2)-(4) and M lam_ratio lam_max for App. B.1 and Eq. (5). An absolute lam is one value for
every output (outputs whose lam_max is below it get zero coefficients), converted as above.

Memory. `lasso`, `lasso_path`, `block_lasso` and `lam_max` stay within `memory_gib` (default 8
GiB): they batch outputs by the bytes a batch allocates and raise `MemoryBudgetError` before any
work when a problem cannot fit (`circuitlasso.solve.memory`).

Options. Every solver takes its options as keywords (`tol`, `max_iter`, `dtype`, ...): which
ones each accepts and their defaults are stated once, in `circuitlasso.solve.options`.

Entry points: `lasso` (multi-output; Eq. 4 layer pairs), `block_lasso` (Eq. 3 with any allowed
block pattern), `lasso_path` (warm-started grid), `logistic_lasso` (Eq. 5 with a binary target),
`multinomial_lasso` (Eq. 5 with a multi-class target), `lam_max`, `logistic_lam_max`.
"""

from circuitlasso.memory import MemoryBudgetError
from circuitlasso.solve.block import BlockLassoResult, block_lasso, upper_triangular_parents
from circuitlasso.solve.lasso import (
    ConvergenceWarning,
    LassoPath,
    LassoResult,
    lam_max,
    lasso,
    lasso_path,
)
from circuitlasso.solve.logistic import (
    LogisticResult,
    logistic_lam_max,
    logistic_lasso,
    multinomial_lasso,
)

__all__ = [
    "BlockLassoResult",
    "ConvergenceWarning",
    "LassoPath",
    "LassoResult",
    "LogisticResult",
    "MemoryBudgetError",
    "block_lasso",
    "lam_max",
    "lasso",
    "lasso_path",
    "logistic_lam_max",
    "logistic_lasso",
    "multinomial_lasso",
    "upper_triangular_parents",
]
