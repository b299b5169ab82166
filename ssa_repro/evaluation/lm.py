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

import json
import logging
import math
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import pandas as pd

from ssa_repro.evaluation.perplexity import stream_nll, summarise
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig

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
    from ssa_repro.evaluation import lm_eval_adapter

    b = getattr(cfg.backend, "value", cfg.backend)
    if b == "auto":
        return "lm_eval" if lm_eval_adapter.available() else "builtin"
    return b


def task_rows(lm, root, names, shots, limit, backend, folder: Path, base: dict) -> list[dict]:
    """Long-form rows (task, shots, metric, value, stderr, n, backend) for every task and shot count."""
    from ssa_repro.evaluation import multiple_choice as mc

    rows = []
    for k in shots:
        if backend == "lm_eval":
            from ssa_repro.evaluation.lm_eval_adapter import run_harness

            res = run_harness(lm, root, list(names), k, limit, folder / "lm_eval_tasks")
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
                rows.append(
                    {
                        **base,
                        "task": name,
                        "paper_row": mc.TASKS[name].paper,
                        "shots": k,
                        "metric": metric,
                        "value": value,
                        "stderr": err,
                        "n": n,
                        "backend": backend,
                    }
                )
            log.info(
                "lm: %s %d-shot %s", name, k, {m: round(v[0], 4) for m, v in res[name].items() if m != "n"}
            )
    return rows


@EVALUATORS.register("lm", schema=LMEvalConfig)
class LMEval:
    @staticmethod
    def check(run_cfg, cfg) -> list[str]:
        from ssa_repro.evaluation import lm_eval_adapter
        from ssa_repro.evaluation.multiple_choice import TASKS

        out = []
        if run_cfg.task.name != "lm":
            return [f"eval=lm needs a task=lm run; this run is task={run_cfg.task.name}"]
        bad = [s for s in cfg.splits if s not in ("heldout", "valid", "test")]
        if bad:
            out.append(f"eval.splits has {bad}; allowed: heldout, valid, test")
        if "heldout" in cfg.splits and not run_cfg.task.heldout_every:
            out.append("eval.splits has heldout but the run held out no documents (task.heldout_every=0)")
        bad = [t for t in cfg.tasks if t not in TASKS]
        if bad:
            out.append(f"eval.tasks has {bad}; allowed: {', '.join(TASKS)}")
        if any(k < 0 for k in cfg.num_fewshot):
            out.append(f"eval.num_fewshot={list(cfg.num_fewshot)} must be >= 0")
        if cfg.stride is not None and not 1 <= cfg.stride <= run_cfg.task.context:
            out.append(f"eval.stride={cfg.stride} must be in [1, task.context={run_cfg.task.context}]")
        if cfg.max_tokens is not None and cfg.max_tokens < 1:
            out.append(f"eval.max_tokens={cfg.max_tokens} must be >= 1 or null (whole streams)")
        if cfg.limit is not None and cfg.limit < 1:
            out.append(f"eval.limit={cfg.limit} must be >= 1 or null (all items)")
        if getattr(cfg.backend, "value", cfg.backend) == "lm_eval" and not lm_eval_adapter.available():
            out.append(
                "eval.backend=lm_eval but lm_eval is not installed: pip install -e '.[lm]' (or backend=builtin)"
            )
        return out

    @staticmethod
    def run(run, cfg, out_dir: Path):
        from ssa_repro.evaluation.multiple_choice import PAPER_MISSING, TokenLM

        task, model = run.task, run.model
        base = dict(run.labels)
        base.pop("task", None)
        ppl = perplexity_table(
            model,
            task,
            list(cfg.splits),
            stride=cfg.stride,
            batch_size=cfg.ppl_batch_size,
            max_windows=None
            if cfg.max_tokens is None
            else -(-cfg.max_tokens // (cfg.stride or task.cfg.context)),
            device=run.device,
            base={"task": "lm", **base},
        )
        for r in ppl.itertuples():
            log.info("lm: %s perplexity %.2f (%d tokens)", r.split, r.perplexity, r.n_tokens)
        backend = _backend(cfg)
        lm = TokenLM(model, task.tokenizer, task.cfg.context, run.device, cfg.batch_size)
        rows = task_rows(
            lm, task.cfg.data_root, list(cfg.tasks), list(cfg.num_fewshot), cfg.limit, backend, out_dir, base
        )
        results = pd.DataFrame(rows)
        (out_dir / "table.md").write_text(
            _markdown(lm_table_frames([(run.labels["scorer"], ppl, results)])) + "\n"
        )
        summary = {
            "perplexity": {r.split: r.perplexity for r in ppl.itertuples()},
            "accuracy": {
                f"{r.task}_{r.shots}shot": r.value for r in results.itertuples() if r.metric == "acc"
            },
            "backend": backend,
            "tokenizer": task.tokenizer.fingerprint,
            "unavailable_offline": [*PAPER_MISSING, "WSC (SuperGLUE split)"],
            "stand_ins": {"RTE": "RTE-3 test", "WSC": "WSC273"},
            "figures": [],
        }
        return {"results": results, "perplexity": ppl}, summary


# --------------------------------------------------------------------------- table 2
def _cell(value, err, pct=True) -> str:
    if value is None or value != value:
        return "–"
    scale = 100 if pct else 1
    if err is None or err != err:
        return f"{value * scale:.1f}"
    return f"{value * scale:.1f} ± {err * scale:.1f}"


def lm_table_frames(runs: list[tuple[str, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Rows: perplexities, then each task's acc (acc_norm where lm-eval reports it, as the paper's
    harness numbers are); columns: ``<shots>-shot <label>`` for each run. Values in %, ± stderr."""
    from ssa_repro.evaluation.multiple_choice import TASKS

    table: dict[str, dict[str, str]] = {}
    order: list[str] = []

    def put(row, col, text):
        if row not in table:
            table[row] = {}
            order.append(row)
        table[row][col] = text

    shots = sorted({int(s) for _, _, res in runs for s in res["shots"].unique()}) if runs else []
    for label, ppl, _ in runs:  # perplexities do not depend on shots: in the first shot columns
        for r in ppl.itertuples():
            put(
                f"perplexity: {r.split}",
                f"{shots[0]}-shot {label}" if shots else label,
                f"{r.perplexity:.2f}",
            )
    for k in shots:
        for label, _, res in runs:
            sub = res[res.shots == k]
            for name in TASKS:
                rows = sub[sub.task == name]
                if rows.empty:
                    continue
                metric = "acc_norm" if "acc_norm" in set(rows.metric) else "acc"
                r = rows[rows.metric == metric].iloc[0]
                put(f"{TASKS[name].paper} [{name}, {metric}]", f"{k}-shot {label}", _cell(r.value, r.stderr))
    frame = pd.DataFrame.from_dict(table, orient="index").loc[order]
    frame.index.name = "row"
    return frame.fillna("")


def _markdown(frame: pd.DataFrame) -> str:
    cols = ["row", *frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for idx, r in frame.iterrows():
        lines.append("| " + " | ".join([str(idx), *[str(v) for v in r.values]]) + " |")
    return "\n".join(lines)


def lm_table(run_dirs: list[str | Path], out: str | Path | None = None) -> pd.DataFrame:
    """Table 2 for several ``eval=lm``-evaluated runs (labelled by scorer); writes ``<out>.csv`` and
    ``<out>.md`` when ``out`` is given."""
    runs = []
    for d in run_dirs:
        folder = Path(d) / "eval" / "lm"
        if not (folder / "summary.json").exists():
            raise FileNotFoundError(
                f"{folder}/summary.json missing: run python evaluate.py run_dir={d} eval=lm"
            )
        s = json.loads((folder / "summary.json").read_text())
        label = s.get("scorer", Path(d).name)
        if any(label == r[0] for r in runs):
            label = f"{label} ({Path(d).name})"
        runs.append((label, pd.read_csv(folder / "perplexity.csv"), pd.read_csv(folder / "results.csv")))
    frame = lm_table_frames(runs)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(out.with_suffix(".csv"))
        out.with_suffix(".md").write_text(_markdown(frame) + "\n")
    return frame


def lm_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run folders holding ``eval/lm/summary.json`` under each path (a run or a sweep folder)."""
    found: list[Path] = []
    for p in map(Path, paths):
        hits = [p] if (p / "eval" / "lm" / "summary.json").exists() else []
        hits = hits or sorted(s.parents[2] for s in p.rglob("eval/lm/summary.json"))
        found += [h for h in hits if h not in found]
    return found


def compare_main(paths: list[str | Path], out: str | Path | None = None) -> int:
    """``scripts/lm_table.py`` (and the hook for ``scripts/compare.py``): table 2 for the ``eval=lm``
    runs found under ``paths``, written to ``<out>/lm_table.csv`` and ``.md`` and printed."""
    runs = lm_run_dirs(paths)
    if not runs:
        print(
            f"no eval/lm results under {', '.join(map(str, paths))}: run python evaluate.py run_dir=... eval=lm"
        )
        return 1
    folder = Path(out) if out else Path(paths[0])
    frame = lm_table(runs, folder / "lm_table")
    print(_markdown(frame))
    print(f"\nwritten: {folder / 'lm_table.csv'}, {folder / 'lm_table.md'}")
    return 0
