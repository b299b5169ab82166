"""Garg et al.'s function classes in context (Garg, Tsipras, Liang & Valiant 2022, "What Can Transformers
Learn In-Context?"; dtsip/in-context-learning, ``src/tasks.py`` and ``src/samplers.py``).

A prompt holds n examples (x_i, f(x_i)) of one function f drawn per prompt; x_i ∈ R^d with i.i.d.
coordinates from ``x_dist`` (N(0, 1) by default, as Garg's Gaussian sampler). Tokens as Garg encodes
them: the input x_i is one vector token, the answer is the next token with y_i in its first coordinate
and zeros elsewhere, so a prompt is [B, 2n, d] and the model's read-in is Linear(d, C) (``model.n_in``
follows ``task.n_dims``). The prediction of y_i is read at x_i's token. Loss and error: squared error.

Function classes (w, W drawn per prompt):
- ``linear_regression``  y = x·w,                  w ~ N(0, I_d)
- ``sparse_linear``      y = x·w,                  w ~ N(0, I_d) with all but ``sparsity`` random
                                                    coordinates set to 0
- ``noisy_linear``       y = x·w + ε,              ε ~ N(0, ``noise_std``²) per example
- ``quadratic``          y = (x ⊙ x)·w / √3,       w ~ N(0, I_d)  (√3 = the std of x², Garg's scale)
- ``relu_2nn``           y = √(2/h)·relu(x W₁) W₂,  W₁ ~ N(0, 1)^{d×h}, W₂ ~ N(0, 1)^{h}, h = ``hidden``
- ``decision_tree``      a complete binary tree of depth ``depth`` in heap order: node k tests
                         coordinate c_k ~ U{0..d−1}, goes to 2k+2 when x[c_k] > 0 else 2k+1; the
                         leaf's value v ~ N(0, 1) is y
- ``polynomial``         y = Σ_{k=0..K} c_k T_k(x) / √(K+1), one input dimension, x ~ U(−1, 1),
                         c_k ~ N(0, 1), T_k the Chebyshev polynomials (the SSA authors' public ICL code
                         has polynomial and Chebyshev regression; this is our version of it)

Evaluation: the σ × length grid (x ~ N(0, σ) per coordinate; U(−σ, σ) for ``polynomial``) with
least squares (minimum norm, no intercept), ridge, 3-nearest neighbours, averaging and the zero
predictor on the same prompts; and the shift suite (``eval=shift``: Garg's ``src/eval.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ssa_repro.core import distributions as D
from ssa_repro.core.distributions import DistConfig, DistKind, normal
from ssa_repro.tasks.base import Batch, Evaluation, Grid, Metric, Prompts, Task
from ssa_repro.tasks.registry import TASKS

BASELINES = ("least_squares_d", "ridge", "knn3", "averaging", "zero")


def _evaluation(sigmas: list[float]) -> Evaluation:
    return Evaluation(
        default="grid",
        quick=("grid", {"preset": "quick"}),
        grid=Grid(
            axes=("sigma_x",),
            rows="sigma_x",
            cols="length",
            # at the training length (null: curriculum.end), 8 × 64 prompts per cell
            paper={"sigmas": sigmas, "lengths": None, "n_samples": 8, "batch_size": 64},
            quick={"sigmas": sigmas[:3], "lengths": None, "n_samples": 2, "batch_size": 64},
            metrics=(Metric("mse", kind="positive"),),
            headline="mse",
            baselines=BASELINES,
            by_position="mse",
        ),
    )


@dataclass
class FunctionTaskConfig:
    name: str = "linear_regression"
    n_dims: int = 20  # d, Garg's default
    x_dist: DistConfig = field(default_factory=DistConfig)  # per coordinate


class FunctionTask(Task):
    """The shared part: vector inputs, Garg's token layout, squared error."""

    metric = "squared_error"
    vector_inputs = True
    evaluation = _evaluation([0.5, 1.0, 2.0, 4.0])

    @property
    def d(self) -> int:
        return int(self.cfg.n_dims)

    def n_tokens(self, n_points: int) -> int:
        return 2 * n_points

    def draw_function(self, batch_size: int, generator, device) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def draw(self, batch_size, n_points, generator, device, shift=None) -> Prompts:
        """The function of each prompt first, then xs [B, n, d] (N(0, σ) with ``sigma_x``); with
        ``dims`` in ``shift`` only the first ``dims`` coordinates are drawn, the rest are 0."""
        shift = shift or {}
        params = self.draw_function(batch_size, generator, device)
        x_dist = normal(shift["sigma_x"]) if "sigma_x" in shift else self.cfg.x_dist
        xs = D.sample(x_dist, (batch_size, n_points, self.d), generator, device)
        if shift.get("dims") is not None and int(shift["dims"]) < self.d:
            xs[..., int(shift["dims"]) :] = 0.0
        return Prompts(xs, params)

    def f(self, xs: torch.Tensor, params: dict) -> torch.Tensor:
        """xs [B, n, d] -> ys [B, n]: the noise-free function."""
        raise NotImplementedError

    def label(self, prompts: Prompts) -> torch.Tensor:
        return self.f(prompts.xs, prompts.params)

    def encode(self, prompts: Prompts, ys: torch.Tensor) -> Batch:
        xs = prompts.xs  # [B, n, d]
        bsz, n, d = xs.shape
        y_tokens = torch.zeros_like(xs)
        y_tokens[..., 0] = ys  # y in the first coordinate, zeros elsewhere
        tokens = torch.stack([xs, y_tokens], dim=2).reshape(bsz, 2 * n, d)  # x_1, y_1, x_2, ...
        pred_idx = torch.arange(0, 2 * n, 2, device=xs.device)  # the x tokens
        return Batch(tokens, ys, pred_idx, xs, ys, dict(prompts.params))

    def train_sigmas(self) -> dict[str, float]:
        return {"sigma_x": float(self.cfg.x_dist.std)}

    def loss(self, pred, targets):
        return ((pred - targets) ** 2).mean()

    def error(self, pred, targets):
        return (pred - targets) ** 2

    def prompt_metrics(self, pred, batch, skip_first):
        """``mse``: the mean squared error of a prompt's predictions from index ``skip_first`` on."""
        return {"mse": self.error(pred, batch.targets)[:, skip_first:].mean(1)}

    def check(self, cfg) -> list[str]:
        out = [] if self.d >= 1 else [f"task.n_dims={self.d} must be >= 1"]
        n_in = int(cfg.model.n_in)
        if n_in != self.d and not cfg.model.vocab_size:
            out.append(
                f"model.n_in={n_in} must equal task.n_dims={self.d} (the token width); leave n_in unset"
            )
        return out


def _normal(shape, generator, device) -> torch.Tensor:
    return torch.randn(shape, generator=generator, device=device)


# ---------------------------------------------------------------------------------------------- linear
@TASKS.register("linear_regression", schema=FunctionTaskConfig)
class LinearRegression(FunctionTask):
    def draw_function(self, batch_size, generator, device):
        return {"w": _normal((batch_size, self.d), generator, device)}  # [B, d]

    def f(self, xs, params):
        return torch.einsum("bnd,bd->bn", xs, params["w"])


@dataclass
class SparseLinearConfig(FunctionTaskConfig):
    name: str = "sparse_linear"
    sparsity: int = 3  # non-zero coordinates of w (Garg: 3)


@TASKS.register("sparse_linear", schema=SparseLinearConfig)
class SparseLinear(LinearRegression):
    def draw_function(self, batch_size, generator, device):
        w = _normal((batch_size, self.d), generator, device)
        keys = torch.rand((batch_size, self.d), generator=generator, device=device)
        keep = keys.argsort(dim=1)[:, : self.cfg.sparsity]  # a uniformly random subset per prompt
        mask = torch.zeros_like(w).scatter_(1, keep, 1.0)
        return {"w": w * mask}

    def check(self, cfg):
        k = int(self.cfg.sparsity)
        bad = [] if 1 <= k <= self.d else [f"task.sparsity={k} must be in 1..task.n_dims={self.d}"]
        return super().check(cfg) + bad


@dataclass
class NoisyLinearConfig(FunctionTaskConfig):
    name: str = "noisy_linear"
    noise_std: float = 0.5  # label noise (ours; Garg's class takes it as an argument)


@TASKS.register("noisy_linear", schema=NoisyLinearConfig)
class NoisyLinear(LinearRegression):
    def draw(self, batch_size, n_points, generator, device, shift=None):
        prompts = super().draw(batch_size, n_points, generator, device, shift)
        # the noise is part of the prompt (drawn with it), so label() stays a function of Prompts
        noise = _normal((batch_size, n_points), generator, device) * float(self.cfg.noise_std)
        return Prompts(prompts.xs, {**prompts.params, "noise": noise})

    def f(self, xs, params):
        ys = super().f(xs, params)
        noise = params.get("noise")
        return ys if noise is None else ys + noise[:, : ys.shape[1]]

    def check(self, cfg):
        s = float(self.cfg.noise_std)
        return super().check(cfg) + ([] if s >= 0 else [f"task.noise_std={s} must be >= 0"])


@dataclass
class QuadraticConfig(FunctionTaskConfig):
    name: str = "quadratic"


@TASKS.register("quadratic", schema=QuadraticConfig)
class Quadratic(LinearRegression):
    def f(self, xs, params):
        return torch.einsum("bnd,bd->bn", xs**2, params["w"]) / math.sqrt(3)


# ---------------------------------------------------------------------------------------------- relu_2nn
@dataclass
class Relu2nnConfig(FunctionTaskConfig):
    name: str = "relu_2nn"
    hidden: int = 100  # h, Garg's hidden_layer_size


@TASKS.register("relu_2nn", schema=Relu2nnConfig)
class Relu2nn(FunctionTask):
    def draw_function(self, batch_size, generator, device):
        h = int(self.cfg.hidden)
        return {
            "w1": _normal((batch_size, self.d, h), generator, device),  # [B, d, h]
            "w2": _normal((batch_size, h), generator, device),  # [B, h]
        }

    def f(self, xs, params):
        h = params["w2"].shape[1]
        hidden = torch.relu(torch.einsum("bnd,bdh->bnh", xs, params["w1"]))  # [B, n, h]
        return torch.einsum("bnh,bh->bn", hidden, params["w2"]) * math.sqrt(2 / h)

    def check(self, cfg):
        h = int(self.cfg.hidden)
        return super().check(cfg) + ([] if h >= 1 else [f"task.hidden={h} must be >= 1"])


# ---------------------------------------------------------------------------------------------- tree
@dataclass
class DecisionTreeConfig(FunctionTaskConfig):
    name: str = "decision_tree"
    depth: int = 4  # Garg's depth


@TASKS.register("decision_tree", schema=DecisionTreeConfig)
class DecisionTree(FunctionTask):
    def draw_function(self, batch_size, generator, device):
        nodes = 2 ** (int(self.cfg.depth) + 1) - 1  # heap order: internal nodes, then the leaves
        coords = torch.randint(0, self.d, (batch_size, nodes), generator=generator, device=device)
        return {"coords": coords, "values": _normal((batch_size, nodes), generator, device)}

    def f(self, xs, params):
        coords, values = params["coords"], params["values"]  # [B, nodes]
        bsz, n, _ = xs.shape
        node = torch.zeros(bsz, n, dtype=torch.long, device=xs.device)  # every example at the root
        for _ in range(int(self.cfg.depth)):
            c = coords.gather(1, node)  # [B, n] the coordinate each example's node tests
            right = xs.gather(2, c[..., None])[..., 0] > 0
            node = 2 * node + 1 + right.long()
        return values.gather(1, node).to(xs.dtype)

    def check(self, cfg):
        k = int(self.cfg.depth)
        return super().check(cfg) + ([] if 1 <= k <= 12 else [f"task.depth={k} must be in 1..12"])


# ---------------------------------------------------------------------------------------------- polynomial
@dataclass
class PolynomialConfig(FunctionTaskConfig):
    name: str = "polynomial"
    n_dims: int = 1
    degree: int = 3  # K
    x_dist: DistConfig = field(default_factory=lambda: DistConfig(kind=DistKind.uniform, low=-1.0, high=1.0))


@TASKS.register("polynomial", schema=PolynomialConfig)
class Polynomial(FunctionTask):
    evaluation = _evaluation([0.5, 1.0, 1.5, 2.0])

    def draw(self, batch_size, n_points, generator, device, shift=None):
        shift = shift or {}
        params = self.draw_function(batch_size, generator, device)
        if "sigma_x" in shift:  # the grid widens the interval: x ~ U(−σ, σ)
            s = float(shift["sigma_x"])
            x_dist = DistConfig(kind=DistKind.uniform, low=-s, high=s)
        else:
            x_dist = self.cfg.x_dist
        return Prompts(D.sample(x_dist, (batch_size, n_points, 1), generator, device), params)

    def draw_function(self, batch_size, generator, device):
        return {"c": _normal((batch_size, int(self.cfg.degree) + 1), generator, device)}

    def f(self, xs, params):
        x = xs[..., 0]  # [B, n]
        t_prev, t = torch.ones_like(x), x  # T_0, T_1; T_{k+1} = 2x T_k − T_{k−1}
        c = params["c"]  # [B, K+1]
        ys = c[:, :1] * t_prev
        for k in range(1, c.shape[1]):
            ys = ys + c[:, k : k + 1] * t
            t_prev, t = t, 2 * x * t - t_prev
        return ys / math.sqrt(c.shape[1])

    def train_sigmas(self):
        return {"sigma_x": float(self.cfg.x_dist.high)}

    def check(self, cfg):
        out = super().check(cfg)
        if int(self.cfg.n_dims) != 1:
            out.append(f"task.n_dims={self.cfg.n_dims}: polynomial has one input dimension (n_dims=1)")
        return out + ([] if int(self.cfg.degree) >= 0 else [f"task.degree={self.cfg.degree} must be >= 0"])
