"""Seeds as one stacked model: K copies of one architecture trained by one call.

A seed ensemble (``ensemble.py``) holds K seeds' weights as stacked parameters {name: [K, *shape]}
(``torch.func.stack_module_state``) and computes the forward and the loss of all seeds in one call:
``functional_call`` of one skeleton module with the stacked parameters, under ``vmap`` over the seed
dimension (each matmul becomes a batched matmul over K weight matrices: a batched-weights model
without a second model implementation). Loss of seed k = ``task.training_loss`` of its own batch;
the backward of Σ_k loss_k gives each seed its own gradient, as the seeds share nothing. Here:

- :func:`stack_batches`: K batches of one kind as [K, ...] tensors, and :func:`vmapped_loss` over them;
- :func:`clip_per_seed`: ``clip_grad_norm_`` with each seed's own global norm;
- :func:`stack_problem`: whether a config's seeds can train stacked, found by trying (an
  autograd.Function without a vmap rule, or a loss that selects by value, fails), and through which
  attention path;
- :func:`stacked_opt_state` / :func:`unstack`: between the stacked state and each seed's own module
  and optimizer (what its checkpoint saves, in the separate run's format).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import warnings

import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.func import functional_call, stack_module_state, vmap
from torch.utils import _pytree as pytree

from ssa_repro.core.enums import value_of
from ssa_repro.core.rundir import plain, resolve_device
from ssa_repro.models import build_model
from ssa_repro.tasks import curriculum
from ssa_repro.training.trainer import DRAW_DEVICE, host_to, init_model

FALLBACK = "hydra/launcher=basic (one job after another) or hydra/launcher=joblib (parallel processes)"
FREE_KEYS = ("seed", "logger")  # what may differ between the seeds of one ensemble
# PyTorch's warning that vmap runs CPU SDPA seed by seed (no batching rule; measured no slower here)
SDPA_CPU_LOOP = "There is a performance drop because we have not yet implemented the batching rule"


def group_key(cfg: DictConfig) -> str:
    """What jobs of one ensemble share: the whole config but ``seed`` and ``logger``, unresolved, so a
    key defined from the seed (the LM's ``task.shuffle_seed: ${seed}``) follows each job's seed."""
    d = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
    return json.dumps({k: v for k, v in d.items() if k not in FREE_KEYS}, sort_keys=True, default=str)


# ------------------------------------------------------------------ batches as stacked tensors
def _flatten(batch) -> tuple[list, object]:
    """A task's batch (a dataclass of tensors, dicts of tensors, None) -> (leaves, spec)."""
    fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    return pytree.tree_flatten(fields)


def stack_batches(batches: list, device) -> tuple[list[torch.Tensor], tuple, type]:
    """K batches of one kind -> ([K, ...] tensors, layout, kind): every tensor leaf stacked over the
    seeds; a leaf that is not a tensor (a field left None) must be the same in every batch and is kept
    in ``layout`` = (spec, which leaves are tensors, the other leaves)."""
    flat = [_flatten(b) for b in batches]
    cols = list(zip(*(f[0] for f in flat)))
    is_tensor = tuple(isinstance(c[0], torch.Tensor) for c in cols)
    for t, c in zip(is_tensor, cols):
        if not t and any(x is not c[0] and x != c[0] for x in c):
            raise ValueError(f"a batch field differs between seeds and is not a tensor: {c}")
    consts = tuple(None if t else c[0] for t, c in zip(is_tensor, cols))
    leaves = [host_to(torch.stack(c), device) for t, c in zip(is_tensor, cols) if t]  # CUDA: not blocking
    return leaves, (flat[0][1], is_tensor, consts), type(batches[0])


def vmapped_loss(skeleton: torch.nn.Module, task, layout: tuple, kind):
    """(params {name: [K, ...]}, buffers, *leaves [K, ...]) -> losses [K]: task.training_loss of each
    seed's batch through the skeleton with that seed's weights."""
    spec, is_tensor, consts = layout

    def one(params, buffers, *leaves):
        given = iter(leaves)
        values = [next(given) if t else c for t, c in zip(is_tensor, consts)]
        batch = kind(**pytree.tree_unflatten(values, spec))

        def forward(*args, **kw):
            return functional_call(skeleton, (params, buffers), args, kw)

        return task.training_loss(forward, batch)

    return vmap(one)


def clip_per_seed(grads: list[torch.Tensor], max_norm: float) -> None:
    """``clip_grad_norm_`` for each seed k of stacked gradients [K, ...]: g_k ← g_k·min(1, c/(‖g_k‖ +
    1e-6)), ‖g_k‖ the 2-norm over all of seed k's parameters (torch's formula, per seed)."""
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads], dim=1)  # [K, P]
    coef = (max_norm / (torch.linalg.vector_norm(norms, dim=1) + 1e-6)).clamp(max=1.0)  # [K]
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))


# ------------------------------------------------------------------ what can be stacked
def skeleton_cfg(cfg: DictConfig, impl: str) -> DictConfig:
    out = OmegaConf.create(plain(cfg))
    with open_dict(out):
        out.model.attn_impl = impl
    return out


_PROBED: dict[str, tuple[str | None, str]] = {}


def stack_problem(cfg: DictConfig) -> tuple[str | None, str]:
    """(why ``cfg``'s seeds cannot train stacked or None, the attention path they train through):
    one vmapped forward and backward of two seeds on a batch of two, through the configured path,
    else the plain one (``eager``). Found by trying: an autograd.Function without a vmap rule, or a
    loss that selects by value, fails here. Cached per config (seed aside)."""
    key = group_key(cfg)
    if key in _PROBED:
        return _PROBED[key]
    configured = str(value_of(cfg.model.attn_impl))
    first = None
    # the configured path first (softmax: SDPA, batched natively on CUDA; on CPU vmap loops over the
    # seeds inside it, measured no slower than the plain path), else the plain one
    for impl in dict.fromkeys([configured, "eager"]):
        try:
            _probe(skeleton_cfg(cfg, impl))
            _PROBED[key] = (None, impl)
            return _PROBED[key]
        except Exception as e:  # noqa: BLE001  (any failure under vmap means: not this path)
            first = first or f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
    why = (
        f"scorer={cfg.scorer.name} with task={cfg.task.name} cannot be trained as a seed ensemble "
        f"(torch.func.vmap over the model and loss fails: {first}); run these jobs with {FALLBACK}"
    )
    _PROBED[key] = (why, configured)
    return _PROBED[key]


def _probe(cfg: DictConfig) -> None:
    device = resolve_device(cfg.device)  # the kernels the ensemble will run (CUDA's differ from CPU's)
    with rng_kept():
        task, a = init_model(cfg, device)
        b = build_model(cfg.model, cfg.scorer).to(device)
    stage = curriculum.stage(cfg.curriculum, 0)
    gen = torch.Generator().manual_seed(0)
    batches = [task.train_batch(i, 2, stage, gen, DRAW_DEVICE) for i in range(2)]
    leaves, layout, kind = stack_batches(batches, device)
    params, buffers = stack_module_state([a, b])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SDPA_CPU_LOOP)
        losses = vmapped_loss(a, task, layout, kind)(params, buffers, *leaves)
        losses.sum().backward()
    if not all(p.grad is not None and p.grad.shape == p.shape for p in params.values() if p.requires_grad):
        raise RuntimeError("the stacked parameters got no gradient of their own shape")


@contextlib.contextmanager
def rng_kept():
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


# ------------------------------------------------------------------ stacked state <-> each seed's own
def stacked_opt_state(opts: list[torch.optim.Optimizer]) -> dict:
    """The stacked optimizer's state dict from K separate ones (moments stacked, the step shared)."""
    sds = [o.state_dict() for o in opts]
    state = {
        i: {n: v if n == "step" else torch.stack([sd["state"][i][n] for sd in sds]) for n, v in st.items()}
        for i, st in sds[0]["state"].items()
    }
    return {"state": state, "param_groups": sds[0]["param_groups"]}


def unstack(models: list[torch.nn.Module], params: dict, buffers: dict, opt=None, opts=()) -> None:
    """Copy each seed's slice k back into its own module ``models[k]`` (and, given the stacked ``opt``,
    into its own optimizer ``opts[k]``): what its checkpoint saves."""
    with torch.no_grad():
        for i, model in enumerate(models):
            for name, t in [*model.named_parameters(), *model.named_buffers()]:
                t.copy_((params[name] if name in params else buffers[name])[i])
    if opt is None:
        return
    sd = opt.state_dict()
    for i, own in enumerate(opts):
        state = {
            j: {n: v.clone() if n == "step" else v[i].clone() for n, v in st.items()}
            for j, st in sd["state"].items()
        }
        own.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
