"""``eval=lm``: perplexity and zero/few-shot LM-eval tasks for a ``task=lm`` run (the paper's table 2).

Writes ``<run_dir>/eval/lm/``: ``perplexity.csv`` (one row per split: held-out training documents,
WikiText-2 valid and test; NLL, token perplexity, word perplexity and bits per byte over the whole
stream, windows as in :mod:`ssa_repro.evaluation.perplexity`), ``results.csv`` (long form: one row per
task × shots × metric with value, stderr and n), ``table.md`` (this run's half of table 2) and
``summary.json``. The tasks run through the ``lm_eval`` library when it is installed (``backend=auto``
or ``lm_eval``; local task YAMLs over the shared JSONL, written to ``lm_eval_tasks/``) and through the
built-in scorer (:mod:`ssa_repro.evaluation.multiple_choice`) otherwise or with ``backend=builtin``.

Unavailable offline (the paper's CB, MultiRC, WiC and SuperGLUE's WSC split) are listed in the summary;
RTE is RTE-3 test and WSC is WSC273 (stand-ins, not comparable with SuperGLUE's validation numbers).

:func:`lm_table` puts several runs side by side in the layout of the paper's table 2 (softmax vs SSA,
each task's accuracy ± standard error, zero- and few-shot); ``scripts/lm_table.py`` is its command.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pandas as pd

from ssa_repro.core.enums import value_of
from ssa_repro.evaluation import lm_eval_adapter
from ssa_repro.evaluation import multiple_choice as mc
from ssa_repro.evaluation.multiple_choice import PAPER_MISSING, TokenLM
from ssa_repro.evaluation.multiple_choice import TASKS as MC_TASKS
from ssa_repro.evaluation.perplexity import stream_nll, summarise
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.tasks.lm import LMTask

log = logging.getLogger("ssa_repro.evaluate")

PAPER_TASKS = ["arc_challenge", "arc_easy", "hellaswag", "lambada_openai", "boolq", "copa", "rte", "wsc273"]


class Backend(str, Enum):
    auto = "auto"  # lm_eval when installed, else builtin
    lm_eval = "lm_eval"  # the lm_eval library (pip install -e '.[lm]')
    builtin = "builtin"  # ssa_repro.evaluation.multiple_choice (no extra dependency)


@dataclass
class LMEvalConfig(EvalConfig):
    name: str = "lm"
    splits: list[str] = field(default_factory=lambda: ["heldout", "valid", "test"])
    stride: int | None = None  # null: non-overlapping windows of task.context tokens
    max_tokens: int | None = None  # score only about the first this many tokens of each split (null: all)
    ppl_batch_size: int = 8
    tasks: list[str] = field(default_factory=lambda: list(PAPER_TASKS))  # + piqa, winogrande
    num_fewshot: list[int] = field(default_factory=lambda: [0, 3])
    limit: int | None = 500  # items per task (null: all; the CPU default keeps eval=lm to minutes)
    backend: Backend = Backend.auto
    batch_size: int = 16  # sequences per forward pass for the tasks
    max_windows: int | None = None  # score only the first this many windows of each split (null: all)


def perplexity_table(model, task, splits, *, stride, batch_size, max_windows, device, base) -> pd.DataFrame:
    """One row per split: NLL, token perplexity, and (whole streams only) word perplexity, bits/byte."""
    rows = []
    for split in splits:
        corpus = task.corpus(split)
        nll, n = stream_nll(
            model,
            corpus.tokens,
            task.cfg.context,
            stride=stride,
            batch_size=batch_size,
            max_windows=max_windows,
            device=device,
        )
        key = "stream" if split in ("valid", "test") else split
        whole = n == len(corpus) - 1
        words = corpus.meta.get("words", {}).get(key) if whole else None
        nbytes = corpus.meta.get("text_bytes", {}).get(key) if whole else None
        rows.append(
            {
                **base,
                "split": split,
                "tokenizer": task.tokenizer.fingerprint,
                "context": task.cfg.context,
                "stride": stride or task.cfg.context,
                "whole_stream": whole,
                **summarise(nll, n, words, nbytes),
            }
        )
    return pd.DataFrame(rows)


def _backend(cfg) -> str:
    b = value_of(cfg.backend)
    if b == "auto":
        return "lm_eval" if lm_eval_adapter.available() else "builtin"
    return b


def chance(items: list[mc.Item]) -> dict[str, float]:
    """What guessing scores on ``items``: ``chance`` = the mean of 1/(number of choices) (a uniform
    guess; 0 for LAMBADA's open last word) and ``majority`` = the share of the most common gold
    position (always picking that answer; e.g. BoolQ's "yes")."""
    if not items:
        return {}
    k = [len(it.continuations) for it in items]
    if max(k) == 1:  # an open answer (LAMBADA): no guess is right by chance
        return {"chance": 0.0, "majority": 0.0}
    gold = pd.Series([it.gold for it in items])
    return {
        "chance": float(sum(1 / n for n in k) / len(k)),
        "majority": float(gold.value_counts().iloc[0] / len(gold)),
    }


def task_rows(lm, root, names, shots, limit, backend, folder: Path, base: dict) -> list[dict]:
    """Long-form rows (task, shots, metric, value, stderr, n, backend) for every task and shot count;
    per task also its ``chance`` and ``majority`` levels on the items scored (:func:`chance`)."""
    rows = []

    def row(name, k, n, metric, value, err) -> dict:
        out = {**base, "benchmark": name, "paper_row": mc.TASKS[name].paper, "shots": k, "metric": metric}
        return out | {"value": value, "stderr": err, "n": n, "backend": backend}

    for k in shots:
        if backend == "lm_eval":
            res = lm_eval_adapter.run_harness(lm, root, list(names), k, limit, folder / "lm_eval_tasks")
        else:
            res = {}
            for name in names:
                items = mc.load_items(root, name)
                res[name] = mc.score_task(lm, name, items[:limit] if limit else items, k, pool=items)
        for name in names:
            n = res[name].get("n")
            for metric, val in res[name].items():
                if metric == "n":
                    continue
                value, err = val
                if metric in ("acc", "acc_norm") and not (err == err) and n and n > 1:  # nan: closed form
                    err = math.sqrt(value * (1 - value) / (n - 1))
                rows.append(row(name, k, n, metric, value, err))
            items = mc.load_items(root, name)
            for metric, value in chance(items[:limit] if limit else items).items():
                rows.append(row(name, k, n, metric, value, math.nan))
            log.info(
                "lm: %s %d-shot %s", name, k, {m: round(v[0], 4) for m, v in res[name].items() if m != "n"}
            )
    return rows


@EVALUATORS.register("lm", schema=LMEvalConfig)
class LMEval(Evaluator):
    """One cell: every split's perplexity and every task × shots (reused whole when stored)."""

    name = "lm"

    @classmethod
    def applies_to(cls, task) -> bool:
        """Causal language models trained on a corpus (task=lm)."""
        return issubclass(task, LMTask)

    def check(self) -> list[str]:
        run_cfg, cfg, out = self.run_cfg, self.cfg, []
        bad = [s for s in cfg.splits if s not in ("heldout", "valid", "test")]
        if bad:
            out.append(f"eval.splits has {bad}; allowed: heldout, valid, test")
        if "heldout" in cfg.splits and not run_cfg.task.heldout_every:
            out.append("eval.splits has heldout but the run held out no documents (task.heldout_every=0)")
        bad = [t for t in cfg.tasks if t not in MC_TASKS]
        if bad:
            out.append(f"eval.tasks has {bad}; allowed: {', '.join(MC_TASKS)}")
        if any(k < 0 for k in cfg.num_fewshot):
            out.append(f"eval.num_fewshot={list(cfg.num_fewshot)} must be >= 0")
        if cfg.stride is not None and not 1 <= cfg.stride <= run_cfg.task.context:
            out.append(f"eval.stride={cfg.stride} must be in [1, task.context={run_cfg.task.context}]")
        for key in ("max_tokens", "max_windows", "limit"):
            if cfg[key] is not None and cfg[key] < 1:
                out.append(f"eval.{key}={cfg[key]} must be >= 1 or null (all)")
        if value_of(cfg.backend) == "lm_eval" and not lm_eval_adapter.available():
            out.append(
                "eval.backend=lm_eval but lm_eval is not installed: pip install -e '.[lm]' (or backend=builtin)"
            )
        return out

    def tables(self) -> tuple[str, ...]:
        return ("results", "perplexity")

    def compute(self, run, cells, progress):
        cfg, task, model = self.cfg, run.task, run.model
        base = dict(run.labels)
        windows = cfg.max_windows
        if cfg.max_tokens is not None:
            windows = -(-cfg.max_tokens // (cfg.stride or task.cfg.context))
        ppl = perplexity_table(
            model,
            task,
            list(cfg.splits),
            stride=cfg.stride,
            batch_size=cfg.ppl_batch_size,
            max_windows=windows,
            device=run.device,
            base=base,
        )
        for r in ppl.itertuples():
            log.info("lm: %s perplexity %.2f (%d tokens)", r.split, r.perplexity, r.n_tokens)
        rows = [
            {**base, "split": r.split, "metric": "perplexity", "value": r.perplexity, "n": r.n_tokens}
            for r in ppl.itertuples()
        ]
        if cfg.tasks:
            backend = _backend(cfg)
            lm = TokenLM(model, task.tokenizer, task.cfg.context, run.device, cfg.batch_size)
            rows += task_rows(
                lm,
                task.cfg.data_root,
                list(cfg.tasks),
                list(cfg.num_fewshot),
                cfg.limit,
                backend,
                self.out_dir,
                base,
            )
        progress.update(1)
        yield {"results": pd.DataFrame(rows), "perplexity": ppl}

    def summarize(self, frames) -> dict:
        res, ppl = frames["results"], frames["perplexity"]
        bench = res[res["benchmark"].notna()] if "benchmark" in res else res.iloc[:0]
        return {
            "perplexity": {r.split: r.perplexity for r in ppl.itertuples()},
            "in_distribution": {f"{r.split}_ppl": r.perplexity for r in ppl.itertuples()},
            "accuracy": {
                f"{r.benchmark}_{int(r.shots)}shot": r.value for r in bench.itertuples() if r.metric == "acc"
            },
            "tokenizer": str(ppl["tokenizer"].iloc[0]) if len(ppl) else None,
            "unavailable_offline": [*PAPER_MISSING, "WSC (SuperGLUE split)"],
            "stand_ins": {"RTE": "RTE-3 test", "WSC": "WSC273"},
        }
