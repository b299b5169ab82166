"""Reference predictors, computed on exactly the prompts the model sees.

Regressors (task=linear, Garg's function classes) map xs [B, n] (one input dimension) or [B, n, d]
and ys [B, n] to predictions [B, n], where prediction i uses only examples j < i (as the model does);
position 0 has no example and predicts 0.

Label rules (the quantifiers, ``LABEL_RULES``) map xs [B, n] to answers [B, n] in {-1, +1}; answer i
sees x_1..x_i (the model reads it at the x_i token). ``cumulative_and`` is "every"'s rule and
``cumulative_or`` "some"'s, so each is exact on its own task and the wrong quantifier on the other
(with labels in context, "copy the previous label, AND/OR the sign of x_i" is the same rule);
``sign_x`` is the context-free answer (what a model that reads only the current number says);
``sign_of_largest`` answers with the sign of the largest |x_j| so far (the paper's "prediction follows
the largest element"); ``always_true`` / ``always_false`` are the constant answers.

Guesses (the token tasks, ``TOKEN_GUESSES``) map tokens [B, T] and targets [B, P] (IGNORE where not
scored) to logits [B, T, V] whose argmax is the guess at every position: ``majority_token`` answers
the most frequent scored target of the batch everywhere (the constant-answer floor), ``random_token``
a uniformly random one of the batch's distinct scored targets per position (chance: token error
≈ 1 − 1/(number of possible answers) when the batch shows them all; a fixed seed, so it is the same
on every model's prompts). Neither reads the prompt: a model must beat both to have used it.
``context_token`` reads it without recall: at each position a uniformly random one of the answers that
have occurred in the prompt so far (the batch's majority answer where none has), so on MQAR it names a
value of the prompt without knowing which (token error ≈ 1 − 1/n at n pairs): a model must beat it to
have recalled anything.
"""

from __future__ import annotations

import importlib.util

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


def _vectors(xs: torch.Tensor) -> torch.Tensor:
    return xs if xs.dim() == 3 else xs[..., None]  # [B, n, d]


PINV_RTOL = 1e-5


def least_squares_d(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Garg et al.'s least squares: the minimum-norm w with X_{<i} w ≈ y_{<i} (no intercept; exact
    interpolation while i ≤ d), prediction w·x_i; float64 internally. Singular values below 1e-5 of the
    largest count as 0: the prompts are float32, so a context confined to a subspace (the shift
    suite) has round-off components outside it that must not be inverted."""
    x64, y64 = _vectors(xs).double(), ys.double()
    preds = torch.zeros_like(y64)
    for i in range(1, x64.shape[1]):
        w = torch.linalg.pinv(x64[:, :i], rtol=PINV_RTOL) @ y64[:, :i, None]  # [B, d, 1]
        preds[:, i] = (x64[:, i : i + 1] @ w)[:, 0, 0]
    return preds.to(ys.dtype)


RIDGE_LAMBDA = 0.1  # Garg et al. compare with Lasso at several α; ridge at this λ is our fixed choice


def ridge(xs: torch.Tensor, ys: torch.Tensor, lam: float = RIDGE_LAMBDA) -> torch.Tensor:
    """Ridge regression, w = (XᵀX + λI)⁻¹ Xᵀy on the examples j < i (no intercept); float64."""
    x64, y64 = _vectors(xs).double(), ys.double()
    d = x64.shape[2]
    eye = torch.eye(d, dtype=torch.float64, device=x64.device)
    preds = torch.zeros_like(y64)
    for i in range(1, x64.shape[1]):
        x = x64[:, :i]  # [B, i, d]
        w = torch.linalg.solve(x.transpose(1, 2) @ x + lam * eye, x.transpose(1, 2) @ y64[:, :i, None])
        preds[:, i] = (x64[:, i : i + 1] @ w)[:, 0, 0]
    return preds.to(ys.dtype)


LASSO_ALPHA = 0.01  # one of Garg et al.'s Lasso α's (they compare 1 ... 1e-4)


def lasso(xs: torch.Tensor, ys: torch.Tensor, alpha: float = LASSO_ALPHA) -> torch.Tensor:
    """Lasso, w = argmin (1/2i)‖y_{<i} − X_{<i} w‖² + α‖w‖₁ (no intercept; scikit-learn's coordinate
    descent, as Garg et al.'s LassoModel), prediction w·x_i. Needs the ``garg`` extra (scikit-learn)."""
    from sklearn.linear_model import Lasso  # optional: pip install -e '.[garg]'

    x64, y64 = _vectors(xs).double().cpu().numpy(), ys.double().cpu().numpy()
    preds = torch.zeros(ys.shape, dtype=torch.float64)
    for b in range(x64.shape[0]):
        for i in range(1, x64.shape[1]):
            fit = Lasso(alpha=alpha, fit_intercept=False, max_iter=10_000, tol=1e-8).fit(
                x64[b, :i], y64[b, :i]
            )
            preds[b, i] = float(fit.coef_ @ x64[b, i])
    return preds.to(ys.dtype).to(ys.device)


def tree(xs: torch.Tensor, ys: torch.Tensor, max_depth: int = 4) -> torch.Tensor:
    """A greedy regression tree of depth ``max_depth`` on the examples j < i (scikit-learn's CART, as
    Garg et al.'s DecisionTreeModel for the decision_tree task), prediction at x_i. Needs the ``garg``
    extra (scikit-learn)."""
    from sklearn.tree import DecisionTreeRegressor  # optional: pip install -e '.[garg]'

    x64, y64 = _vectors(xs).double().cpu().numpy(), ys.double().cpu().numpy()
    preds = torch.zeros(ys.shape, dtype=torch.float64)
    for b in range(x64.shape[0]):
        for i in range(1, x64.shape[1]):
            fit = DecisionTreeRegressor(max_depth=max_depth).fit(x64[b, :i], y64[b, :i])
            preds[b, i] = float(fit.predict(x64[b, i : i + 1])[0])
    return preds.to(ys.dtype).to(ys.device)


NEEDS_SKLEARN = ("lasso", "tree")


def problems(names, classification: bool | None = None, tokens: bool = False) -> list[str]:
    """Unknown baselines, those of the other kind (label rules for a classification task, guesses for a
    token task, regressors otherwise; ``classification=None``: not checked), and those whose optional
    package is missing."""
    out = []
    unknown = [b for b in names if b not in BASELINES]
    if unknown:
        out.append(f"eval.baselines has {unknown}; allowed: {', '.join(BASELINES)}")
    if classification is not None:
        if tokens:
            allowed, kind = TOKEN_GUESSES, "a token task (guesses)"
        elif classification:
            allowed, kind = LABEL_RULES, "a classification task (label rules)"
        else:
            allowed = tuple(b for b in BASELINES if b not in LABEL_RULES + TOKEN_GUESSES)
            kind = "a regression task"
        wrong = [b for b in names if b in BASELINES and b not in allowed]
        if wrong:
            out.append(f"eval.baselines {wrong} do not apply to {kind}; allowed: {', '.join(allowed)}")
    need = [b for b in names if b in NEEDS_SKLEARN]
    if need and importlib.util.find_spec("sklearn") is None:
        out.append(
            f"eval.baselines {need} need scikit-learn, which is not installed: pip install -e '.[garg]'"
        )
    return out


def averaging(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Garg et al.'s averaging estimator: w = mean_{j<i} x_j·y_j, prediction w·x_i (no intercept)."""
    x = _vectors(xs)  # [B, n, d]
    xy = (x * ys[..., None]).cumsum(1)  # [B, n, d] sums over j <= i
    count = torch.arange(1, x.shape[1] + 1, device=xs.device, dtype=xs.dtype)[:, None]
    w = torch.zeros_like(x)
    w[:, 1:] = xy[:, :-1] / count[:-1]  # over j < i
    return (w * x).sum(-1)


def nearest_neighbours(xs: torch.Tensor, ys: torch.Tensor, k: int = 3) -> torch.Tensor:
    """Mean y of the k nearest earlier x's in Euclidean distance (fewer while fewer exist)."""
    x = _vectors(xs)
    n = x.shape[1]
    dist = torch.cdist(x.double(), x.double())  # [B, i, j]
    earlier = torch.ones(n, n, dtype=torch.bool, device=xs.device).tril(-1)  # j < i
    dist = dist.masked_fill(~earlier, float("inf"))
    preds = torch.zeros_like(ys)
    for i in range(1, n):
        kk = min(k, i)
        idx = dist[:, i, :i].topk(kk, largest=False).indices  # [B, kk]
        preds[:, i] = ys[:, :i].gather(1, idx).mean(1)
    return preds


def zero(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Always 0: the best constant under symmetric a, b (its MSE is E[y²] = σ_a²·E[x²] + σ_b²)."""
    return torch.zeros_like(ys)


def _signs(positive: torch.Tensor) -> torch.Tensor:
    return positive.to(torch.float32) * 2 - 1  # bool -> {-1, +1}


def always_true(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    return torch.ones(xs.shape, dtype=torch.float32, device=xs.device)


def always_false(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    return -always_true(xs)


def sign_x(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    """+1 iff x_i > 0: the answer from the current number alone."""
    return _signs(xs > 0)


def cumulative_and(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    """+1 iff x_1, ..., x_i > 0 ("every")."""
    return _signs((xs > 0).to(torch.int8).cummin(dim=1).values.bool())


def cumulative_or(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    """+1 iff some x_j > 0, j <= i ("some")."""
    return _signs((xs > 0).to(torch.int8).cummax(dim=1).values.bool())


def sign_of_largest(xs: torch.Tensor, ys: torch.Tensor | None = None) -> torch.Tensor:
    """+1 iff the x_j with the largest |x_j| among j <= i is positive (the earliest on ties)."""
    mag = xs.abs()
    best = mag.cummax(dim=1).values
    # the earliest j <= i with |x_j| equal to the running maximum
    n = xs.shape[1]
    j = torch.arange(n, device=xs.device)
    hit = (mag[:, None, :] == best[:, :, None]) & (j[None, None, :] <= j[None, :, None])  # [B, i, j]
    idx = torch.where(hit, j, n).amin(-1)
    return _signs(xs.gather(1, idx) > 0)


def _scored(targets: torch.Tensor) -> torch.Tensor:
    return targets[targets >= 0]  # IGNORE (−100) positions are not scored


def _one_hot_logits(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(ids, vocab).float()  # [..] -> [.., V], argmax = ids


def majority_token(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T, V]: the batch's most frequent scored target at every position (ties: the smallest id)."""
    scored = _scored(targets)
    vocab = int(max(tokens.max(), scored.max())) + 1
    top = torch.bincount(scored, minlength=vocab).argmax()
    return _one_hot_logits(top.expand(tokens.shape), vocab)


RANDOM_TOKEN_SEED = 0


def random_token(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T, V]: per position, a uniformly random one of the batch's distinct scored targets
    (seeded: the same guesses for the same prompts)."""
    answers = torch.unique(_scored(targets))  # [K]
    vocab = int(max(tokens.max(), answers.max())) + 1
    g = torch.Generator(device="cpu").manual_seed(RANDOM_TOKEN_SEED)
    pick = torch.randint(0, len(answers), tokens.shape, generator=g)
    return _one_hot_logits(answers.cpu()[pick], vocab).to(tokens.device)


def context_token(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[B, T, V]: at position t, a uniformly random one of the batch's distinct scored targets that occur
    in tokens[:, :t + 1] (seeded); where none has occurred yet, the batch's majority answer."""
    answers = torch.unique(_scored(targets))  # [K]
    vocab = int(max(tokens.max(), answers.max())) + 1
    is_answer = torch.zeros(vocab, dtype=torch.bool, device=tokens.device)
    is_answer[answers] = True
    seen = torch.nn.functional.one_hot(tokens, vocab).cumsum(1) > 0  # [B, T, V]: occurred up to t
    seen &= is_answer
    g = torch.Generator(device="cpu").manual_seed(RANDOM_TOKEN_SEED)
    draw = torch.rand(seen.shape, generator=g).to(tokens.device)  # a uniform pick among the seen answers
    pick = torch.where(seen, draw, -1.0).argmax(-1)  # [B, T]
    top = majority_token(tokens, targets).argmax(-1)  # [B, T]
    return _one_hot_logits(torch.where(seen.any(-1), pick, top), vocab)


TOKEN_GUESSES = ("majority_token", "random_token", "context_token")

LABEL_RULES = ("always_true", "always_false", "sign_x", "cumulative_and", "cumulative_or", "sign_of_largest")

BASELINES = {
    "least_squares": least_squares,
    "least_squares_d": least_squares_d,
    "ridge": ridge,
    "lasso": lasso,
    "tree": tree,
    "averaging": averaging,
    "knn3": nearest_neighbours,
    "zero": zero,
    "always_true": always_true,
    "always_false": always_false,
    "sign_x": sign_x,
    "cumulative_and": cumulative_and,
    "cumulative_or": cumulative_or,
    "sign_of_largest": sign_of_largest,
    "majority_token": majority_token,
    "random_token": random_token,
    "context_token": context_token,
}
