"""Reference predictors for regression tasks (linear), computed on exactly the prompts the model sees.

Each maps xs, ys [B, n] to predictions [B, n], where prediction i uses only examples j < i (as the
model does). Position 0 has no example and predicts 0.
"""

from __future__ import annotations

import torch


def least_squares(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Least squares with intercept, y ≈ a·x + b (float64 internally). Position 1 has one example,
    where the minimum-norm solution is used (as numpy.linalg.lstsq); from position 2 on a noise-free
    linear prompt is fit exactly. With an isotropic N(0, σ²I) prior on (a, b) and no noise this is also
    the Bayes posterior mean."""
    xs64, ys64 = xs.double(), ys.double()
    preds = torch.zeros_like(xs64)
    for i in range(1, xs.shape[1]):
        design = torch.stack([xs64[:, :i], torch.ones_like(xs64[:, :i])], dim=-1)  # [B, i, 2]
        coef = torch.linalg.pinv(design) @ ys64[:, :i, None]  # [B, 2, 1]
        preds[:, i] = coef[:, 0, 0] * xs64[:, i] + coef[:, 1, 0]
    return preds.to(xs.dtype)


def averaging(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Garg et al.'s averaging estimator: w = mean_{j<i} x_j·y_j, prediction w·x_i (no intercept)."""
    xy = (xs * ys).cumsum(1)  # [B, n] sums over j <= i
    count = torch.arange(1, xs.shape[1] + 1, device=xs.device, dtype=xs.dtype)
    w = torch.zeros_like(xs)
    w[:, 1:] = xy[:, :-1] / count[:-1]  # over j < i
    return w * xs


def nearest_neighbours(xs: torch.Tensor, ys: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Mean y of the k nearest earlier x's (fewer while fewer exist)."""
    n = xs.shape[1]
    dist = (xs[:, :, None] - xs[:, None, :]).abs()  # [B, i, j]
    earlier = torch.ones(n, n, dtype=torch.bool, device=xs.device).tril(-1)  # j < i
    dist = dist.masked_fill(~earlier, float("inf"))
    preds = torch.zeros_like(xs)
    for i in range(1, n):
        kk = min(k, i)
        idx = dist[:, i, :i].topk(kk, largest=False).indices  # [B, kk]
        preds[:, i] = ys[:, :i].gather(1, idx).mean(1)
    return preds


def zero(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Always 0: the best constant under symmetric a, b (its MSE is E[y²] = σ_a²·E[x²] + σ_b²)."""
    return torch.zeros_like(ys)


BASELINES = {"least_squares": least_squares, "averaging": averaging, "knn3": nearest_neighbours, "zero": zero}
