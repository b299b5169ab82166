"""Zorro grammar probes for masked LMs (``python evaluate.py run_dir=... eval=zorro``; the paper's table 3).

Zorro (Huebner et al., 2021; ``data.root``/zorro/) has 23 paradigms of 2000 minimal pairs each; in
every file line 2k-1 (counting from 1) is the ungrammatical sentence and line 2k the grammatical one.
A pair is right when the model scores the grammatical sentence strictly higher (ties are wrong).

Scores (``eval.methods``):

- ``pll``: the masked-LM pseudo-log-likelihood (Salazar et al., 2020): mask each ordinary token in
  turn (never ``<s>``/``</s>``) and sum log p(token | rest). All masked copies of all sentences of one
  token length go through the model together (no padding: the attention has no key-padding mask).
- ``holistic``: BabyBERTa's own forced-choice score (phueb/BabyBERTa ``probing.predict_forced_choice``
  with ``score_with_mask=False``): the unmasked sentence in, the mean cross entropy of every position
  (``<s>`` and ``</s>`` included) predicting its own token; lower is better, so the score is its
  negative.

Casing: the AO-CHILDES text is all lower case, Zorro title-cases proper nouns ("Michael"). With
``eval.lowercase=true`` (default) sentences are lower-cased before tokenising, so names are scored as
the corpus spells them; both sentences of a pair hold the same names, so this changes no pair's
words, only how the names are split into tokens. ``false`` keeps Zorro's casing.

Results (``eval/zorro/``): ``results.csv`` (one row per paradigm × method: accuracy in %, pairs,
correct, binomial standard error sqrt(p(1-p)/n) and a 95% interval; plus the mean over all 23 and over
the paper's 12 reported probes, with the standard error of a mean of independent paradigms),
``pairs.csv`` (both scores of every pair), ``zorro_accuracy.png``/``.pdf`` (the paper's 12 highlighted).
Across runs, :func:`zorro_table` gives the paper's table-3 layout with seeds aggregated
(``python scripts/zorro_table.py <sweep or run folders>``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from matplotlib.patches import Patch

from ssa_repro.core import plotting
from ssa_repro.data import childes
from ssa_repro.data.paths import resolve_root
from ssa_repro.evaluation.registry import EVALUATORS, EvalConfig, Evaluator
from ssa_repro.stats.intervals import wilson
from ssa_repro.tasks.mlm import MLMTask, logits_at

log = logging.getLogger("ssa_repro.evaluate")

METHODS = ("pll", "holistic")
# 50257-vocabulary logits of 512 rows × 128 positions would be 13 GB; chunks stay under this many
MAX_LOGIT_ELEMENTS = 2**25  # floats per forward pass (128 MiB)

# The paper's table 3 (accuracy %, softmax / SSA n=1.5 / SSA n=2), keyed by its short probe names.
PAPER_TABLE3 = {
    "agr_subj_verb-across_PP": (56.0, 58.95, 65.95),
    "agr_subj_verb-across_RC": (55.5, 57.7, 61.55),
    "agr_subj_verb-in_Q+aux": (76.5, 79.0, 70.45),
    "anaphor_agr-pron_gender": (48.1, 51.45, 53.7),
    "arg_str-dropped_arg": (79.65, 74.65, 85.55),
    "arg_str-swapped_args": (83.3, 92.0, 88.0),
    "arg_str-transitive": (53.44, 53.85, 57.2),
    "binding-principle_a": (78.25, 87.9, 80.2),
    "case-subjective_pron": (85.55, 89.7, 91.75),
    "filler-gap-wh_Q_subject": (79.2, 83.3, 68.25),
    "irregular-verb": (70.05, 78.3, 69.2),
    "quantifiers-superlative": (71.2, 83.95, 65.25),
}
PAPER_SCORERS = ("softmax", "ssa_n1.5", "ssa_n2")


# ---------------------------------------------------------------- files
def read_pairs(path: Path, n_pairs: int | None = None) -> list[tuple[str, str]]:
    """(ungrammatical, grammatical) pairs of a paradigm file, in file order; the first ``n_pairs``."""
    lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    if len(lines) % 2:
        raise ValueError(f"{path}: {len(lines)} non-empty lines; a Zorro file holds pairs (an even number)")
    pairs = list(zip(lines[0::2], lines[1::2], strict=True))
    return pairs[:n_pairs] if n_pairs else pairs


def paradigms(zorro_dir: Path) -> list[str]:
    """File stems of the paradigms in ``zorro_dir`` (sorted)."""
    return sorted(p.stem for p in Path(zorro_dir).glob("*.txt"))


def paper_names(zorro_dir: Path) -> dict[str, str]:
    """file stem -> the paper's short name, for the 12 probes it reports (names.tsv)."""
    path = Path(zorro_dir) / "names.tsv"
    if not path.exists():
        return {}
    frame = pd.read_csv(path, sep="\t")
    return dict(zip(frame.file_stem, frame.paper_name, strict=True))


# ---------------------------------------------------------------- scores
def _by_length(seqs: list[list[int]]) -> dict[int, np.ndarray]:
    lengths = np.array([len(s) for s in seqs])
    return {int(n): np.flatnonzero(lengths == n) for n in np.unique(lengths)}


def _vocab(model) -> int:
    return int(getattr(model, "vocab_size", 0) or model.wte.weight.shape[0])


@torch.inference_mode()
def pll_scores(model, seqs: list[list[int]], device, mask_id: int = 4, max_elements=MAX_LOGIT_ELEMENTS):
    """Pseudo-log-likelihood of each ``<s> ... </s>`` sequence: sum over the ordinary positions 1..L-2
    of log p(token | sequence with that token masked). [N] float64."""
    out = np.zeros(len(seqs))
    vocab = _vocab(model)
    for length, idx in _by_length(seqs).items():
        n_pos = length - 2
        if n_pos <= 0:
            continue
        base = torch.tensor([seqs[i] for i in idx], dtype=torch.long)  # [N, L]
        copies = base.repeat_interleave(n_pos, 0)  # [N * n_pos, L]: copy (s, p) masks position p + 1
        pos = torch.arange(1, length - 1).repeat(len(idx))
        rows = torch.arange(len(copies))
        target = copies[rows, pos].clone()
        copies[rows, pos] = mask_id
        chunk = max(1, max_elements // (length * model.wte.weight.shape[1] + vocab))
        lp = []
        for j in range(0, len(copies), chunk):
            c = copies[j : j + chunk].to(device)
            p = pos[j : j + chunk].to(device)
            sel = torch.zeros(c.shape, dtype=torch.bool, device=device)
            sel[torch.arange(len(c), device=device), p] = True
            logits = logits_at(model, c, sel).float()  # [r, V]: the head at the masked position only
            t = target[j : j + chunk, None].to(device)
            lp.append(logits.log_softmax(-1).gather(1, t).squeeze(1).double().cpu())
        out[idx] = torch.cat(lp).view(len(idx), n_pos).sum(1).numpy()
    return out


@torch.inference_mode()
def holistic_scores(model, seqs: list[list[int]], device, max_elements=MAX_LOGIT_ELEMENTS):
    """BabyBERTa's score: minus the mean cross entropy of every position (specials included) predicting
    its own token from the unmasked sequence. [N] float64."""
    out = np.zeros(len(seqs))
    vocab = _vocab(model)
    for length, idx in _by_length(seqs).items():
        base = torch.tensor([seqs[i] for i in idx], dtype=torch.long)
        chunk = max(1, max_elements // (length * vocab))
        res = []
        for j in range(0, len(base), chunk):
            b = base[j : j + chunk].to(device)
            lp = model(b).float().log_softmax(-1).gather(2, b[..., None]).squeeze(-1)  # [r, L]
            res.append(lp.mean(1).double().cpu())
        out[idx] = torch.cat(res).numpy()
    return out


SCORERS = {"pll": pll_scores, "holistic": holistic_scores}


def binomial(correct: int, n: int) -> dict:
    """Accuracy in % with the binomial standard error and the 95% Wilson interval (inside [0, 100])."""
    p = correct / n if n else float("nan")
    se = math.sqrt(p * (1 - p) / n) if n else float("nan")
    lo, hi = wilson(correct, n)
    return {
        "value": 100 * p,
        "se": 100 * se,
        "ci_low": 100 * lo,
        "ci_high": 100 * hi,
        "n_samples": n,
        "correct": correct,
    }


def accuracy_rows(
    correct: dict[tuple[str, str], np.ndarray], names: dict[str, str], base: dict | None = None
) -> pd.DataFrame:
    """Rows per (paradigm, method) from boolean arrays of right pairs; then per method the mean over
    all paradigms and over the paper's reported ones (se of a mean of independent paradigms)."""
    base = base or {}
    rows = []
    for (paradigm, method), right in correct.items():
        rows.append(
            {
                **base,
                "paradigm": paradigm,
                "paper_name": names.get(paradigm, ""),
                "reported": paradigm in names,
                "method": method,
                "metric": "accuracy",
                **binomial(int(right.sum()), len(right)),
            }
        )
    frame = pd.DataFrame(rows)
    means = []
    for method, part in frame.groupby("method", sort=False):
        for label, sub in (
            (f"mean ({len(part)})", part),
            (f"mean (paper {part.reported.sum()})", part[part.reported]),
        ):
            if not len(sub) or (label.startswith("mean (paper") and len(sub) == len(part)):
                continue
            v, se = sub.value.mean(), math.sqrt((sub.se**2).sum()) / len(sub)
            means.append(
                {
                    **base,
                    "paradigm": label,
                    "paper_name": "",
                    "reported": False,
                    "method": method,
                    "metric": "accuracy",
                    "value": v,
                    "se": se,
                    "ci_low": max(v - 1.96 * se, 0.0),
                    "ci_high": min(v + 1.96 * se, 100.0),
                    "n_samples": int(sub.n_samples.sum()),
                    "correct": int(sub.correct.sum()),
                }
            )
    return pd.concat([frame, pd.DataFrame(means)], ignore_index=True)


def evaluate_zorro(
    model,
    tokenizer,
    zorro_dir: Path,
    device,
    *,
    which: list[str] | None = None,
    n_pairs: int | None = None,
    methods=METHODS,
    lowercase: bool = True,
    base: dict | None = None,
    max_elements: int = MAX_LOGIT_ELEMENTS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Accuracy per paradigm and method (``results``) and both scores of every pair (``pairs``)."""
    zorro_dir = Path(zorro_dir)
    which = list(which) if which else paradigms(zorro_dir)
    names = paper_names(zorro_dir)
    texts, owner = [], []
    for name in which:
        for bad, good in read_pairs(zorro_dir / f"{name}.txt", n_pairs):
            texts += [bad, good]
            owner.append(name)
    seqs = childes.encode(tokenizer, [t.lower() if lowercase else t for t in texts])
    was_training = model.training
    model.eval()
    try:
        pair_frame = pd.DataFrame(
            {"paradigm": owner, "ungrammatical": texts[0::2], "grammatical": texts[1::2]}
        )
        correct = {}
        for method in methods:
            s = SCORERS[method](model, seqs, device, max_elements=max_elements)
            bad, good = s[0::2], s[1::2]
            pair_frame[f"{method}_ungrammatical"] = bad
            pair_frame[f"{method}_grammatical"] = good
            right = good > bad
            for name in which:
                correct[(name, method)] = right[pair_frame.paradigm.values == name]
    finally:
        model.train(was_training)
    return accuracy_rows(correct, names, base), pair_frame.assign(**(base or {}))


def headline(results: pd.DataFrame) -> dict:
    """{"zorro_<method>_mean": %, "zorro_<method>_mean_paper12": %} from a results table."""
    out = {}
    for method, part in results.groupby("method", sort=False):
        means = part[part.paradigm.str.startswith("mean (")]
        for _, row in means.iterrows():
            key = "paper12" if "paper" in row.paradigm else "all"
            out[f"zorro_{method}_mean_{key}"] = float(row.value)
    return out


# ---------------------------------------------------------------- figures
def plot_accuracy(results: pd.DataFrame, title: str, path: Path) -> list[Path]:
    """Horizontal bars per paradigm (one colour per method), the paper's 12 probes in bold with a ★;
    error bars are 95% binomial intervals; the dashed line is chance (50%)."""
    plt = plotting.plt
    per = results[~results.paradigm.str.startswith("mean (")]
    order = sorted(per.paradigm.unique(), key=lambda p: (not per[per.paradigm == p].reported.iloc[0], p))
    methods = list(per.method.unique())
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.32 * len(order) * max(1, len(methods)) ** 0.5))
    height = 0.8 / len(methods)
    colors = plt.get_cmap("tab10")
    handles = []
    for k, method in enumerate(methods):
        part = per[per.method == method].set_index("paradigm").loc[order]
        y = np.arange(len(order)) + (k - (len(methods) - 1) / 2) * height
        alpha = np.where(part.reported.values, 1.0, 0.45)
        for yi, v, lo, hi, a in zip(y, part.value, part.ci_low, part.ci_high, alpha, strict=True):
            ax.barh(yi, v, height=height, color=colors(k), alpha=a)
            ax.plot([lo, hi], [yi, yi], color="black", lw=0.8)
        mean = results[(results.method == method) & results.paradigm.str.startswith("mean (")]
        label = method + "".join(f"; {r.paradigm} {r.value:.1f}" for r in mean.itertuples())
        handles.append(Patch(color=colors(k), label=label))
    labels = []
    for p in order:
        row = per[per.paradigm == p].iloc[0]
        labels.append(f"★ {row.paper_name}" if row.reported else p)
    ax.set_yticks(np.arange(len(order)), labels, fontsize=7)
    for tick, p in zip(ax.get_yticklabels(), order, strict=True):
        if per[per.paradigm == p].reported.iloc[0]:
            tick.set_fontweight("bold")
    ax.axvline(50, color="grey", ls="--", lw=0.8)
    ax.set_xlim(0, 100)
    ax.set_xlabel("accuracy (%): grammatical sentence preferred")
    ax.set_title(title + "\n★ bold: the 12 probes in the paper's table 3", fontsize=9)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.05), frameon=False)
    fig.tight_layout()
    return plotting.save(fig, path)


# ---------------------------------------------------------------- evaluator
@dataclass
class ZorroConfig(EvalConfig):
    """All 23 paradigms, all 2000 pairs each, both scores."""

    name: str = "zorro"
    paradigms: list[str] = field(default_factory=list)  # file stems; empty = every file in zorro_dir
    n_pairs: int | None = None  # pairs per paradigm (null: all 2000; 0: no Zorro, e.g. heldout only)
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    lowercase: bool = True  # lower-case Zorro (the corpus is lower-case; Zorro title-cases names)
    max_logit_elements: int = MAX_LOGIT_ELEMENTS  # logits per forward pass (memory bound)
    heldout: int = 0  # also the masked-LM loss on this many held-out utterances (0: none)


@EVALUATORS.register("zorro", schema=ZorroConfig)
class Zorro(Evaluator):
    """One cell: every paradigm × method (and the held-out masked-LM loss), reused whole when stored."""

    name = "zorro"

    @classmethod
    def applies_to(cls, task) -> bool:
        """Masked language models trained on AO-CHILDES (task=mlm)."""
        return issubclass(task, MLMTask)

    def check(self) -> list[str]:
        run_cfg, cfg, out = self.run_cfg, self.cfg, []
        bad = [m for m in cfg.methods if m not in METHODS]
        if bad or not cfg.methods:
            out.append(f"eval.methods={list(cfg.methods)}: allowed {', '.join(METHODS)} (at least one)")
        if cfg.n_pairs != 0:
            root = run_cfg.data.root  # the run's config over the schema: its default where unset
            zdir = resolve_root(root) / run_cfg.task.zorro_dir
            have = paradigms(zdir) if zdir.is_dir() else []
            if not have:
                out.append(
                    f"no Zorro files in {zdir} (the run's data.root={root}, task.zorro_dir="
                    f"{run_cfg.task.zorro_dir}); edit data.root in the run's config.yaml or set SSA_DATA_ROOT"
                )
            missing = [p for p in cfg.paradigms if have and p not in have]
            if missing:
                out.append(f"eval.paradigms has {missing}; available: {', '.join(have)}")
        if cfg.n_pairs is not None and cfg.n_pairs < 0:
            out.append(f"eval.n_pairs={cfg.n_pairs} must be >= 0 (or null for all)")
        if cfg.max_logit_elements < 1:
            out.append(f"eval.max_logit_elements={cfg.max_logit_elements} must be >= 1")
        if cfg.heldout < 0:
            out.append(f"eval.heldout={cfg.heldout} must be >= 0")
        return out

    def compute(self, run, cells, progress):
        cfg, task = self.cfg, run.task
        rows = []
        tables = {}
        if cfg.heldout:
            held = task.heldout_loss(run.model, run.device, cfg.heldout)
            rows += [
                {**run.labels, "paradigm": "heldout", "method": "mlm", "metric": k, "value": v}
                for k, v in held.items()
            ]
        if cfg.n_pairs != 0:
            which = list(cfg.paradigms) or paradigms(task.zorro_dir())
            log.info(
                "zorro: %d paradigms × %s pairs, methods %s, on %s",
                len(which),
                cfg.n_pairs or "all",
                list(cfg.methods),
                run.device,
            )
            results, pairs = evaluate_zorro(
                run.model,
                task.tokenizer,
                task.zorro_dir(),
                run.device,
                which=which,
                n_pairs=cfg.n_pairs,
                methods=list(cfg.methods),
                lowercase=cfg.lowercase,
                base=run.labels,
                max_elements=cfg.max_logit_elements,
            )
            rows += results.to_dict("records")
            tables["pairs"] = pairs
        progress.update(1)
        yield {"results": pd.DataFrame(rows), **tables}

    def tables(self) -> tuple[str, ...]:
        return ("results", "pairs")

    def covers(self, table: str, cells: list[dict]) -> list[dict]:
        """``pairs``: every cell unless ``n_pairs=0`` (no pairs scored); ``results``: every cell."""
        return list(cells) if table != "pairs" or self.cfg.n_pairs != 0 else []

    def draw(self, frames, title, out_dir: Path) -> list[Path]:
        res = frames["results"]
        acc = res[res.metric == "accuracy"] if len(res) else res
        return plot_accuracy(acc, title, out_dir / "zorro_accuracy") if len(acc) else []

    def summarize(self, frames) -> dict:
        res = frames["results"]
        acc = res[res.metric == "accuracy"]
        held = res[res.paradigm == "heldout"]
        in_dist = {r.metric: float(r.value) for r in held.itertuples()}
        in_dist.update(headline(acc) if len(acc) else {})
        return {
            "metric": "accuracy",
            "headline": headline(acc) if len(acc) else {},
            "in_distribution": in_dist,
        }
