"""Config schemas (dataclasses) stored in Hydra's ConfigStore.

Task and scorer schemas sit beside their component (``ssa_repro/tasks/linear.py``, ...) and are stored
from the registries; the shared ones are below. Each YAML option in ``conf/`` extends one schema (``defaults: [/schema/<group>/<x>@_here_]``),
so a mistyped key fails when the config is composed, with the key and the schema named; enum fields
(``task.supervise``, ``device``, ...) reject bad values with the allowed ones listed. Schemas live under
``schema/`` so that ``scorer=glob(*)`` sweeps only the real options. Checks a schema cannot express
(std > 0, lengths that fit the model, ...) are in :mod:`ssa_repro.training.validate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import II, MISSING

from ssa_repro import resolvers  # noqa: F401  (the resolvers conf/ uses: ssa_job_dir, ssa_eval_sweep_dir)
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.evaluation.runner import QuickConfig
from ssa_repro.models.positions import Pos
from ssa_repro.scorers import SCORERS, Scorer, build_scorer
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
    compile: str = "auto"  # auto | true | false: torch.compile the model (auto: >= 1000 steps, not softmax)
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
class EvaluationConfig(QuickConfig):
    """The evaluations at the end of training: ``eval=quick`` with the keys below (the task's quick
    grid where they are null; set ``sigmas``/``lengths`` to give every job of a sweep one fixed grid),
    then each evaluation named in ``also`` with its defaults. Results are stored as ``evaluate.py``'s."""

    enabled: bool = True
    also: list[str] = field(default_factory=list)  # e.g. [default] (the paper grid), [deviant, boundary]


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
    for group, registry in (("task", TASKS), ("scorer", SCORERS), ("eval", EVALUATORS)):
        for name, schema in registry.schemas.items():
            cs.store(group=f"schema/{group}", name=name, node=schema)
    cs.store(group="schema/model", name="base", node=ModelConfig)
    cs.store(group="schema/train", name="base", node=TrainConfig)
    cs.store(group="schema/curriculum", name="base", node=CurriculumConfig)
    cs.store(group="schema/evaluation", name="base", node=EvaluationConfig)
    cs.store(group="schema/logger", name="base", node=LoggerConfig)


register_configs()

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def scorer_options(conf_dir: Path = CONF_DIR) -> list[str]:
    """The YAML option names in conf/scorer (file stems), sorted."""
    return sorted(p.stem for p in (Path(conf_dir) / "scorer").glob("*.yaml"))


def load_scorer(
    option: str, n_head: int = 8, max_positions: int = 256, overrides: Sequence[str] = ()
) -> Scorer:
    """Build the scorer of YAML option ``option`` (``conf/scorer/<option>.yaml``) as training would.

    The full training config is composed (so presets, interpolations such as CosFormer's
    ``m: ${model.max_positions}`` and schema checks apply) with ``model.n_embd=256``; ``overrides``
    adds more (e.g. ``["scorer.heads=[average]"]``). Uses Hydra's ``initialize_config_dir``, so it
    cannot be called while another Hydra app holds Hydra's global state.
    """
    overrides = [
        f"scorer={option}",
        f"model.n_head={n_head}",
        f"model.max_positions={max_positions}",
        "model.n_embd=256",
        *overrides,
    ]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return build_scorer(cfg.scorer, n_head, n_embd=cfg.model.n_embd)
