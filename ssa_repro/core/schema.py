"""The typed schema of a run's config: plain dataclasses, the defaults every reader of a config shares.

Task and scorer schemas sit beside their component (``ssa_repro/tasks/linear.py``, ...) and reach the
run folder through their registries (:func:`ssa_repro.core.registry.schema_of`); the end-of-run
evaluation block (``evaluation``) is the evaluation layer's (``ssa_repro/config.py`` types it for
composition). :mod:`ssa_repro.config` stores all of them in Hydra's ConfigStore; each YAML option in
``conf/`` extends one (``defaults: [/schema/<group>/<x>@_here_]``), so a mistyped key fails when the
config is composed. :class:`ssa_repro.core.rundir.RunDir` merges a saved ``config.yaml`` over the same
schema, so a run written before a key existed reads that key's default. Checks a schema cannot express
(std > 0, lengths that fit the model, ...) are in :mod:`ssa_repro.training.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from omegaconf import II, MISSING


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class AttnImpl(str, Enum):
    auto = "auto"  # the scorer's fastest exact path (SDPA for softmax, the fused SSA function, ...)
    eager = "eager"  # the plain path: logits, weights, weights @ v (attention maps, debugging)
    flex = "flex"  # FlexAttention score_mod in a fused kernel (CUDA training; for long T: slower at T = 82)
    triton = "triton"  # SSA through the fused Triton kernel (ssa_repro/kernels/; CUDA, or TRITON_INTERPRET=1)


class Pos(str, Enum):
    """``model.pos``: the position scheme (ssa_repro/models/positions/)."""

    learned = "learned"
    none = "none"
    sinusoidal = "sinusoidal"
    rope = "rope"
    alibi = "alibi"
    t5 = "t5"


class Optimizer(str, Enum):
    adam = "adam"
    adamw = "adamw"


class Schedule(str, Enum):
    constant = "constant"  # lr after warmup (the paper's ICL runs: no schedule)
    cosine = "cosine"  # linear warmup, then cosine decay to lr * min_lr_ratio at train.steps


class Precision(str, Enum):
    fp32 = "fp32"
    bf16 = "bf16"  # bf16 autocast for forward and loss (weights, optimizer and scorer maths stay float32)


class LoggerMode(str, Enum):
    offline = "offline"
    online = "online"
    disabled = "disabled"


# ---------------------------------------------------------------- model
@dataclass
class ModelConfig:
    name: str = "gpt2"  # gpt2 | attn_only | ff_only | encoder
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    max_positions: int = 512  # tokens, not examples: an interleaved (x, y) example is 2 tokens
    mlp_ratio: int = 4
    vocab_size: int = 0  # 0: one scalar per token (linear read-in/out); > 0: token table + tied LM head
    # the width of a token for the linear read-in: the task's n_dims (vector-input tasks), else 1
    n_in: int = II("oc.select:task.n_dims,1")
    causal: bool = True  # false: a bidirectional encoder (masked LM)
    post_ln: bool = False  # LayerNorm after each residual add (BERT/RoBERTa) instead of before (GPT-2)
    # a LayerNorm on the embeddings before the first block; null: as post_ln (BERT has one, GPT-2 not)
    emb_ln: bool | None = None
    final_ln: bool = True  # pre-LN only: the LayerNorm before the read-out (false: none, ablation)
    attn_impl: AttnImpl = AttnImpl.auto  # eager: the plain path, same numbers (tested)
    # position scheme (ssa_repro/models/positions/): learned (GPT-2's table, max_positions long) | none
    # (NoPE) | sinusoidal | rope | alibi | t5 (learned relative buckets); only learned limits the length
    pos: Pos = Pos.learned
    rope_base: float = 10000.0  # pos=rope: θ_i = rope_base^(−2i/D)


# ---------------------------------------------------------------- training
@dataclass
class TrainConfig:
    steps: int = 4000
    batch_size: int = 64
    lr: float = 1e-4
    log_interval: int = 100  # steps between metrics rows / progress lines
    ckpt_interval: int = 500  # steps between writes of the last checkpoint
    keep_every: int = 0  # also keep a numbered checkpoint every this many steps (0: never)
    # also keep a numbered checkpoint at these steps (learning curves: evaluate a run at several points)
    keep_at: list[int] = field(default_factory=list)
    resume: bool = True  # continue from the run folder's last checkpoint when it exists
    # a folder holding results but no checkpoint is refused; true: train again, old results moved aside
    discard_old_results: bool = False
    optimizer: Optimizer = Optimizer.adam
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0  # adamw: applied to matrices only (not biases, norms, scorer scalars)
    schedule: Schedule = Schedule.constant
    warmup_steps: int = 0  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.1  # cosine: final lr = lr * min_lr_ratio
    grad_clip: float = 0.0  # max global gradient norm (0: off)
    grad_accum: int = 1  # micro-batches of batch_size per optimizer step
    # auto | true | false | reduce-overhead: torch.compile the model's forward. auto: where it pays, from
    # the device, scorer, train.steps, model width and a C compiler (ssa_repro/training/compile_policy.py;
    # docs/performance.md); reduce-overhead: with CUDA graphs (forward and backward replayed as one launch
    # each, for small launch-bound models on a GPU; on a CPU the same as true). No compiler, or a compile
    # that fails: eager, with one line saying why
    compile: str = "auto"
    precision: Precision = Precision.fp32


@dataclass
class CurriculumConfig:
    """Number of in-context examples: start, +inc every interval steps, capped at end; and, for tasks
    with vector inputs, active dimensions: dims_start (0: all from the start), +dims_inc every
    dims_interval steps, capped at task.n_dims (Garg et al.'s curriculum.dims)."""

    enabled: bool = True
    start: int = 11
    end: int = 41
    inc: int = 2
    interval: int = 2000
    dims_start: int = 0
    dims_inc: int = 1
    dims_interval: int = 2000


@dataclass
class LoggerConfig:
    mode: LoggerMode = LoggerMode.offline
    project: str = "ssa_repro"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    log_checkpoints: bool = False  # checkpoints also as W&B "model" artifacts (ssa_repro/tracking/)


@dataclass
class DataConfig:
    """Offline data for the NLP tasks (never copied into the repo or downloaded)."""

    # relative paths resolve against the working directory, else the repository (ssa_repro/data/paths.py)
    root: str = "${oc.env:SSA_DATA_ROOT,../shared/data}"
    cache_dir: str = "${oc.env:SSA_CACHE_DIR,outputs/cache}"  # tokenisers and tokenised corpora


@dataclass
class RootConfig:
    """A training run's config. ``task`` and ``scorer`` take their component's schema; ``evaluation``
    the end-of-run evaluation's (``ssa_repro/config.py``)."""

    task: Any = MISSING
    model: ModelConfig = MISSING
    scorer: Any = MISSING
    train: TrainConfig = MISSING
    curriculum: CurriculumConfig = MISSING
    evaluation: Any = MISSING
    logger: LoggerConfig = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 0
    device: Device = Device.auto


@dataclass
class EvaluateRootConfig:
    """``python evaluate.py run_dir=... eval=...`` (conf/evaluate.yaml)."""

    run_dir: str = MISSING
    eval: Any = MISSING
    step: int | None = None  # the checkpoint kept at this step (train.keep_at); null: the last one
    device: Device = Device.auto
    wandb: bool = True  # also log tables and figures to the run's W&B run, when it had one
