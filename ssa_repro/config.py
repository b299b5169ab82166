"""Config schemas (dataclasses) stored in Hydra's ConfigStore.

Task and scorer schemas sit beside their component (``ssa_repro/tasks/linear.py``, ...) and are stored
from the registries; the shared ones are below. Each YAML option in ``conf/`` extends one schema (``defaults: [/schema/<group>/<x>@_here_]``),
so a mistyped key fails when the config is composed, with the key and the schema named; enum fields
(``task.supervise``, ``device``, ...) reject bad values with the allowed ones listed. Schemas live under
``schema/`` so that ``scorer=glob(*)`` sweeps only the real options. Checks a schema cannot express
(std > 0, lengths that fit the model, ...) are in :mod:`ssa_repro.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from ssa_repro.evaluation import EVALUATORS, EvalConfig
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import TASKS


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class AttnImpl(str, Enum):
    auto = "auto"  # the scorer's fastest exact path (SDPA for softmax, the fused SSA function, ...)
    eager = "eager"  # the plain path: logits, weights, weights @ v (attention maps, debugging)
    flex = "flex"  # FlexAttention score_mod in a fused kernel (CUDA training; softmax and ssa)


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
    name: str = "gpt2"  # gpt2 | attn_only | ff_only
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 64
    max_positions: int = 512  # tokens, not examples: an interleaved (x, y) example is 2 tokens
    mlp_ratio: int = 4
    vocab_size: int = 0  # 0: one scalar per token (linear read-in/out); > 0: token table + tied LM head
    causal: bool = True  # false: a bidirectional encoder (masked LM)
    post_ln: bool = False  # LayerNorm after each residual add (BERT/RoBERTa) instead of before (GPT-2)
    attn_impl: AttnImpl = AttnImpl.auto  # eager: the plain path, same numbers (tested)


# ---------------------------------------------------------------- training
@dataclass
class TrainConfig:
    steps: int = 4000
    batch_size: int = 64
    lr: float = 1e-4
    log_interval: int = 100  # steps between metrics.jsonl rows / progress lines
    ckpt_interval: int = 500  # steps between writes of checkpoints/last.pt
    keep_every: int = 0  # also keep checkpoints/step_XXXXXXX.pt every this many steps (0: never)
    resume: bool = True  # continue from <run_dir>/checkpoints/last.pt when it exists
    optimizer: Optimizer = Optimizer.adam
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0  # adamw: applied to matrices only (not biases, norms, scorer scalars)
    schedule: Schedule = Schedule.constant
    warmup_steps: int = 0  # linear warmup from 0 to lr
    min_lr_ratio: float = 0.1  # cosine: final lr = lr * min_lr_ratio
    grad_clip: float = 0.0  # max global gradient norm (0: off)
    grad_accum: int = 1  # micro-batches of batch_size per optimizer step
    compile: bool = False  # torch.compile the model (first steps slower while it compiles)
    precision: Precision = Precision.fp32


@dataclass
class CurriculumConfig:
    """Number of in-context examples: start, +inc every interval steps, capped at end."""

    enabled: bool = True
    start: int = 11
    end: int = 41
    inc: int = 2
    interval: int = 2000


@dataclass
class EvaluationConfig:
    """The short evaluation at the end of training (the full suite is ``evaluate.py``)."""

    enabled: bool = True
    sigmas: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    lengths: list[int] = field(default_factory=list)  # quantifier tasks; linear uses curriculum.end
    n_batches: int = 10
    batch_size: int = 64
    skip_first: int = 3  # errors are counted from this prediction index on
    seed: int = 1234  # fixed, so every model is evaluated on exactly the same prompts


@dataclass
class LoggerConfig:
    mode: LoggerMode = LoggerMode.offline
    project: str = "ssa_repro"
    entity: str | None = None
    group: str | None = None
    tags: list[str] = field(default_factory=list)
    log_checkpoints: bool = False  # checkpoints also as W&B "model" artifacts (core/tracking.py)


@dataclass
class DataConfig:
    """Offline data for the NLP tasks (never copied into the repo or downloaded)."""

    # relative paths resolve against the working directory, else the repository (ssa_repro/data/paths.py)
    root: str = "${oc.env:SSA_DATA_ROOT,../shared/data}"
    cache_dir: str = "${oc.env:SSA_CACHE_DIR,outputs/cache}"  # tokenisers and tokenised corpora


@dataclass
class RootConfig:
    task: Any = MISSING
    model: ModelConfig = MISSING
    scorer: Any = MISSING
    train: TrainConfig = MISSING
    curriculum: CurriculumConfig = MISSING
    evaluation: EvaluationConfig = MISSING
    logger: LoggerConfig = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    seed: int = 0
    device: Device = Device.auto


@dataclass
class EvaluateRootConfig:
    """``python evaluate.py run_dir=... eval=...`` (conf/evaluate.yaml)."""

    run_dir: str = MISSING
    eval: Any = MISSING
    device: Device = Device.auto
    wandb: bool = True  # also log tables and figures to the run's W&B run, when it had one


def register_configs() -> None:
    """Store every schema; idempotent, called on import."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=RootConfig)
    cs.store(name="evaluate_schema", node=EvaluateRootConfig)
    cs.store(group="schema/eval", name="default", node=EvalConfig)
    for group, registry in (("task", TASKS), ("scorer", SCORERS), ("eval", EVALUATORS)):
        for name, schema in registry.schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=schema)
    cs.store(group="schema/model", name="base", node=ModelConfig)
    cs.store(group="schema/train", name="base", node=TrainConfig)
    cs.store(group="schema/curriculum", name="base", node=CurriculumConfig)
    cs.store(group="schema/evaluation", name="base", node=EvaluationConfig)
    cs.store(group="schema/logger", name="base", node=LoggerConfig)


register_configs()
