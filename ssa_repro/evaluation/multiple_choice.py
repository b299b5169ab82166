"""A small, self-contained scorer for the LM-eval tasks on the shared JSONL files (no ``lm_eval`` needed).

Prompts, choices and targets follow the stock lm-eval 0.4 task definitions (the YAML fields and
``utils`` functions of ``arc_easy``, ``hellaswag``, ``lambada_openai``, ``boolq``, ``copa``,
``sglue_rte``, ``wsc273``, ``piqa``, ``winogrande``), re-written here; a choice is scored by the
summed log-likelihood of ``" " + choice`` (lm-eval's target delimiter) after its context, exactly as
lm-eval's ``loglikelihood`` requests are, through :class:`TokenLM` (which the ``lm_eval`` adapter
uses too). Metrics: ``acc`` (highest log-likelihood), ``acc_norm`` (log-likelihood / characters of
the choice, as lm-eval; the tasks lm-eval reports it for), LAMBADA's ``acc`` (the whole last word is the
greedy continuation) and ``perplexity``. Standard errors are the sample standard deviation / √n, as
lm-eval's. Few-shot: k other items of the same file, rendered as context + gold continuation and
joined by blank lines (lm-eval's format); which items are drawn differs from lm-eval's sampler, so
few-shot numbers of the two back ends differ a little (zero-shot ones agree up to batching round-off).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ssa_repro.data.paths import data_file
from ssa_repro.evaluation.perplexity import windows


# --------------------------------------------------------------------------- the model side
class TokenLM:
    """Log-likelihoods of text continuations under a token-level causal LM (our decoder)."""

    def __init__(self, model, tokenizer, max_length: int, device, batch_size: int = 16):
        self.model, self.tok, self.max_length = model, tokenizer, int(max_length)
        self.device, self.batch_size = torch.device(device), int(batch_size)

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's HFLM split: trailing spaces of the context move to the continuation; the
        continuation's tokens are those of context+continuation after the context's. An empty context
        is ``<|endoftext|>`` (lm-eval's prefix token)."""
        if not context:
            return [self.tok.eot_id], self.tok.encode(continuation)
        n = len(context) - len(context.rstrip(" "))
        if n:
            context, continuation = context[:-n], context[-n:] + continuation
        whole = self.tok.encode(context + continuation)
        ctx = self.tok.encode(context)
        return ctx, whole[len(ctx) :]

    @torch.no_grad()
    def _score(self, seqs: list[tuple[list[int], int]]) -> list[tuple[float, bool]]:
        """For each (tokens, n_cont): (sum log p of the last n_cont tokens, whether each is the argmax)."""
        out: list = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i][0]))
        was_training = self.model.training
        self.model.eval()
        try:
            for s in range(0, len(order), self.batch_size):
                idx = order[s : s + self.batch_size]
                toks = [seqs[i][0][-(self.max_length + 1) :] for i in idx]
                width = max(len(t) for t in toks) - 1
                inp = torch.zeros(len(idx), width, dtype=torch.long)
                for r, t in enumerate(toks):
                    inp[r, : len(t) - 1] = torch.tensor(t[:-1])
                logits = self.model(inp.to(self.device))  # [b, width, V]
                # log-softmax only at the continuation positions (not over all b × width × V)
                rows, pos, target, lens = [], [], [], []
                for r, (i, t) in enumerate(zip(idx, toks)):
                    n = min(seqs[i][1], len(t) - 1)
                    rows += [r] * n
                    pos += range(len(t) - 1 - n, len(t) - 1)
                    target += t[-n:]
                    lens.append(n)
                sel = logits[torch.tensor(rows), torch.tensor(pos)].float().cpu()  # [sum n, V]
                lp = torch.log_softmax(sel, -1)
                target = torch.tensor(target)
                tok_lp = lp.gather(1, target[:, None])[:, 0]
                hit = lp.argmax(-1) == target
                start = 0
                for i, n in zip(idx, lens):
                    out[i] = (float(tok_lp[start : start + n].sum()), bool(hit[start : start + n].all()))
                    start += n
        finally:
            self.model.train(was_training)
        return out

    def loglikelihood(
        self, pairs: list[tuple[str, str]], groups: list | None = None
    ) -> list[tuple[float, bool]]:
        """(sum log p(continuation | context), whether every continuation token is the argmax) per pair.
        A sequence longer than the model's window loses context tokens from the left (lm-eval's rule). With
        ``groups`` (one id per pair: the item a choice belongs to), the choices of a group keep the same
        number of context tokens, max_length + 1 − its longest continuation: otherwise a long few-shot
        prompt is cut at a different place for each choice and the choices are scored under different
        contexts (at a 128-token window, most 3-shot items)."""
        enc = [self.encode_pair(ctx, cont) for ctx, cont in pairs]
        empty = [i for i, (_, k) in enumerate(enc) if not k]
        if empty:  # nothing to score (and t[-0:] would select the whole sequence)
            raise ValueError(f"continuation {pairs[empty[0]][1]!r} (pair {empty[0]}) encodes to no token")
        if groups is not None:
            if len(groups) != len(pairs):
                raise ValueError(f"groups: {len(groups)} ids for {len(pairs)} pairs (one per pair)")
            longest: dict = {}
            for g, (_, k) in zip(groups, enc):
                longest[g] = max(longest.get(g, 0), len(k))
            keep = {g: max(self.max_length + 1 - n, 1) for g, n in longest.items()}
            enc = [(c[-keep[g] :], k) for g, (c, k) in zip(groups, enc)]
        return self._score([(c + k, len(k)) for c, k in enc])

    def loglikelihood_rolling(self, texts: list[str]) -> list[float]:
        """Log-likelihood of each whole text: ``<|endoftext|>`` + tokens, disjoint windows of
        ``max_length`` predictions (lm-eval's rolling windows with a context length of 1)."""

        out = []
        for text in texts:
            toks = [self.tok.eot_id, *self.tok.encode(text)]
            seqs = [(toks[b : e + 1], e - b - first) for b, e, first in windows(len(toks), self.max_length)]
            out.append(sum(lp for lp, _ in self._score(seqs)))
        return out

    @torch.no_grad()
    def greedy(self, context: str, until: list[str], max_tokens: int = 64) -> str:
        toks = [self.tok.eot_id, *self.tok.encode(context)] if context else [self.tok.eot_id]
        new: list[int] = []
        for _ in range(max_tokens):
            x = torch.tensor([(toks + new)[-self.max_length :]], device=self.device)
            nxt = int(self.model(x)[0, -1].argmax())
            if nxt == self.tok.eot_id:
                break
            new.append(nxt)
            text = self.tok.decode(new)
            if any(u in text for u in until):
                return text[: min(text.index(u) for u in until if u in text)]
        return self.tok.decode(new)


# --------------------------------------------------------------------------- the tasks
@dataclass
class Item:
    """One scored question: a context per choice (lm-eval's partial scoring) or one for all, the
    continuations (delimiter included), and the gold index. LAMBADA: one choice, the last word."""

    contexts: list[str]
    continuations: list[str]
    gold: int

    def gold_text(self) -> str:
        return self.contexts[self.gold] + self.continuations[self.gold]


def _hellaswag_pre(text: str) -> str:
    import re

    text = text.strip().replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def _copa_choice(c: str) -> str:
    return c[0].lower() + c[1:]


def _mc(ctx: str, choices: list[str], gold: int) -> Item:
    return Item([ctx] * len(choices), [" " + c for c in choices], int(gold))


def _arc(d):
    return _mc(
        f"Question: {d['question']}\nAnswer:",
        d["choices"]["text"],
        d["choices"]["label"].index(d["answerKey"]),
    )


def _hellaswag(d):
    ctx = d["ctx_a"] + " " + d["ctx_b"].capitalize()
    return _mc(
        _hellaswag_pre(d["activity_label"] + ": " + ctx),
        [_hellaswag_pre(e) for e in d["endings"]],
        int(d["label"]),
    )


def _lambada(d):
    words = d["text"].split(" ")
    return Item([" ".join(words[:-1])], [" " + words[-1]], 0)


def _boolq(d):
    return _mc(f"{d['passage']}\nQuestion: {d['question']}?\nAnswer:", ["no", "yes"], d["label"])


def _copa(d):
    conn = {"cause": "because", "effect": "therefore"}[d["question"]]
    ctx = d["premise"].strip()[:-1] + f" {conn}"
    # lm-eval's choices already start with a space, and it adds its " " delimiter: two spaces
    return _mc(ctx, [" " + _copa_choice(d["choice1"]), " " + _copa_choice(d["choice2"])], d["label"])


def _rte(d):
    return _mc(
        f"{d['premise']}\nQuestion: {d['hypothesis']} True or False?\nAnswer:", ["True", "False"], d["label"]
    )


def _wsc273(d):
    return Item(list(d["context_options"]), [" " + d["continuation"]] * 2, int(d["gold"]))


def _piqa(d):
    return _mc(f"Question: {d['goal']}\nAnswer:", [d["sol1"], d["sol2"]], d["label"])


def _winogrande(d):
    i = d["sentence"].index("_")
    target = d["sentence"][i + 1 :].strip()
    return Item(
        [d["sentence"][:i] + o for o in (d["option1"], d["option2"])],
        [" " + target] * 2,
        {"1": 0, "2": 1}[d["answer"]],
    )


@dataclass(frozen=True)
class TaskSpec:
    file: str  # under data.root
    build: object  # doc -> Item
    acc_norm: bool  # lm-eval also reports acc_norm for it
    paper: str  # the paper's row (table 2) it stands for, or "extra"


TASKS: dict[str, TaskSpec] = {
    "arc_challenge": TaskSpec("lm_eval/arc_challenge.jsonl", _arc, True, "ARC-Challenge"),
    "arc_easy": TaskSpec("lm_eval/arc_easy.jsonl", _arc, True, "ARC-Easy"),
    "hellaswag": TaskSpec("lm_eval/hellaswag.jsonl", _hellaswag, True, "HellaSwag"),
    "lambada_openai": TaskSpec("lm_eval/lambada_openai.jsonl", _lambada, False, "LAMBADA"),
    "boolq": TaskSpec("lm_eval/boolq.jsonl", _boolq, False, "BoolQ"),
    "copa": TaskSpec("lm_eval/copa.jsonl", _copa, False, "COPA"),
    "rte": TaskSpec("lm_eval/rte.jsonl", _rte, False, "RTE (RTE-3 test, stand-in)"),
    "wsc273": TaskSpec("lm_eval/wsc273.jsonl", _wsc273, False, "WSC (WSC273, stand-in)"),
    "piqa": TaskSpec("lm_eval/piqa.jsonl", _piqa, True, "extra"),
    "winogrande": TaskSpec("lm_eval/winogrande.jsonl", _winogrande, False, "extra"),
}
PAPER_MISSING = ("CB", "MultiRC", "WiC")  # and SuperGLUE's WSC split: not available offline


def load_items(root, name: str, limit: int | None = None) -> list[Item]:
    spec = TASKS[name]
    path = data_file(root, spec.file)
    with open(path, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return [spec.build(d) for d in docs[:limit]]


def fewshot_prefix(items: list[Item], i: int, k: int, seed: int = 1234) -> str:
    """k gold-completed examples other than item i, each followed by a blank line."""
    if k == 0:
        return ""
    rng = np.random.default_rng([seed, i])
    pool = [j for j in rng.permutation(len(items))[: k + 1].tolist() if j != i][:k]
    return "".join(items[j].gold_text() + "\n\n" for j in pool)


def _stderr(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1) / math.sqrt(len(x))) if len(x) > 1 else float("nan")


def score_task(
    lm: TokenLM, name: str, items: list[Item], num_fewshot: int = 0, pool: list[Item] | None = None
) -> dict:
    """{metric: (value, stderr)} for one task; ``pool`` (default: the items) supplies few-shot examples."""
    if not items:
        raise ValueError(f"task {name}: no items to score (check its file and eval.limit)")
    pool = pool if pool is not None else items
    pairs, owner = [], []
    for i, it in enumerate(items):
        prefix = fewshot_prefix(pool, i, num_fewshot)
        for c, (ctx, cont) in enumerate(zip(it.contexts, it.continuations)):
            pairs.append((prefix + ctx, cont))
            owner.append((i, c))
    res = lm.loglikelihood(pairs, groups=[i for i, _ in owner])  # an item's choices share their context cut
    n = len(items)
    lls = [[0.0] * len(it.continuations) for it in items]
    greedy = [True] * n
    for (i, c), (ll, is_greedy) in zip(owner, res):
        lls[i][c] = ll
        greedy[i] = greedy[i] and is_greedy
    out: dict = {"n": n}
    if name == "lambada_openai":
        acc = np.array(greedy, dtype=float)
        ll = np.array([x[0] for x in lls])
        out["acc"] = (float(acc.mean()), _stderr(acc))
        out["perplexity"] = (math.exp(-ll.mean()), float("nan"))
        return out
    acc = np.array([float(np.argmax(x) == it.gold) for x, it in zip(lls, items)])
    out["acc"] = (float(acc.mean()), _stderr(acc))
    if TASKS[name].acc_norm:
        norm = np.array(
            [
                float(np.argmax([v / max(len(k[1:]), 1) for v, k in zip(x, it.continuations)]) == it.gold)
                for x, it in zip(lls, items)
            ]
        )
        out["acc_norm"] = (float(norm.mean()), _stderr(norm))
    return out


def item_path(root, name: str) -> Path:
    return data_file(root, TASKS[name].file)
