"""task=lm: tokenisers, corpora, data order and resume, loss and perplexity, the multiple-choice scorer."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir

from ssa_repro.cli import evaluate_app
from ssa_repro.core.checkpoint import load as load_ckpt
from ssa_repro.evaluation import multiple_choice as mc
from ssa_repro.evaluation.perplexity import stream_nll, windows
from ssa_repro.jobs.train_job import run_job
from ssa_repro.models import build_model
from ssa_repro.reports.lm_table import lm_table
from ssa_repro.reports.lm_table import main as lm_table_main
from ssa_repro.tasks import Stage, build_task
from ssa_repro.training.trainer import train
from ssa_repro.training.validate import problems
from tests.conftest import CONF, make_cfg, needs_shared
from tests.conftest import SHARED_DATA as SHARED

SENTENCES = [
    "the cat sat on the mat and looked at the dog .",
    "a dog ran in the park with a red ball .",
    "we like to read books about cats and dogs .",
]


def tiny_root(tmp_path: Path, n_docs: int = 60, bad_bytes: bool = True) -> Path:
    root = tmp_path / "data"
    (root / "lm").mkdir(parents=True)
    docs = [" ".join(SENTENCES[(i + j) % 3] for j in range(3)) for i in range(n_docs)]
    body = "\n\n".join(docs).encode()
    if bad_bytes:  # one invalid UTF-8 byte and a run of extra empty lines
        body = body.replace(b"park", b"pa\xffrk", 1) + b"\n\n\n\n" + docs[0].encode() + b"\n"
    (root / "lm" / "train.txt").write_bytes(body)
    for name in ("valid", "test"):
        (root / "lm" / f"{name}.txt").write_text(" \n = Title = \n \n " + " ".join(SENTENCES * 4) + " \n")
    return root


def lm_overrides(root: Path, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "experiment=lm_small",
        f"data.root={root}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "task.context=16",
        "task.bpe_vocab=300",
        "task.heldout_every=10",
        "model.vocab_size=300",
        "model.max_positions=16",
        "model.n_layer=1",
        "model.n_head=2",
        "model.n_embd=32",
        "train.batch_size=8",
        "train.warmup_steps=0",
        "logger.mode=disabled",
        *extra,
    ]


def lm_cfg(root, tmp_path, *extra):
    return make_cfg(*lm_overrides(root, tmp_path, *extra), tiny=False)


# ------------------------------------------------------------------ tokenisers
@needs_shared
def test_gpt2_bpe_known_ids_and_round_trip():
    from ssa_repro.data.tokenizer import GPT2Tokenizer

    tok = GPT2Tokenizer(SHARED)
    assert tok.encode("hello world") == [31373, 995]
    assert (tok.vocab_size, tok.eot_id) == (50257, 50256)
    text = "Naïve café — 3.14 < π; <|endoftext|> is text here\n"
    assert tok.decode(tok.encode(text)) == text


def test_trained_bpe_round_trip(tmp_path):
    cfg = lm_cfg(tiny_root(tmp_path), tmp_path)
    tok = build_task(cfg.task).tokenizer
    assert tok.vocab_size <= 300 and tok.eot_id == 0
    text = "the cat sat on the mat; Ünïcödé and unseen words: zebra!"
    assert tok.decode(tok.encode(text)).strip() == text  # byte-level: nothing is lost
    assert build_task(cfg.task).tokenizer.fingerprint == tok.fingerprint  # cached: same vocabulary


# ------------------------------------------------------------------ corpora and data order
def test_corpus_counts_bad_bytes_and_empty_lines(tmp_path):
    cfg = lm_cfg(tiny_root(tmp_path), tmp_path)
    task = build_task(cfg.task)
    train, held = task.corpus("train"), task.corpus("heldout")
    m = train.meta
    assert m["invalid_utf8"] == 1
    assert m["documents"] == 61 and m["heldout_documents"] == 6  # extra empty lines make no empty document
    assert m["empty_lines"] == 59 + 3  # 59 separators, then a run of 3
    eot = task.tokenizer.eot_id
    assert (
        int((np.asarray(train.tokens) == eot).sum()) == 55
        and int((np.asarray(held.tokens) == eot).sum()) == 6
    )
    assert task.corpus("valid").tokens[0] == eot  # a stream starts with <|endoftext|>


def test_data_position_is_a_pure_function_of_the_index(tmp_path):
    cfg = lm_cfg(tiny_root(tmp_path), tmp_path)
    a, b = build_task(cfg.task), build_task(cfg.task)
    s = a.sequences_per_epoch()
    ctx = cfg.task.context
    # a fresh task (a resumed run) reads exactly what the running one reads, in any order of calls
    for i in (7, 0, 3 * s, 1):
        assert torch.equal(
            a.train_batch(i, 8, Stage(1), None, "cpu").tokens,
            b.train_batch(i, 8, Stage(1), None, "cpu").tokens,
        )
    # one epoch reads each window exactly once, never past the end; epochs differ
    starts, epochs = a.window_starts(0, 2 * s)
    assert (epochs[:s] == 0).all() and (epochs[s:] == 1).all()
    for e in (0, 1):
        st = np.sort(starts[e * s : (e + 1) * s])
        assert len(np.unique(st)) == s and (np.diff(st) == ctx).all()
        assert st.max() + ctx + 1 <= len(a.corpus("train"))
    assert not np.array_equal(starts[:s], starts[s:] - 0)
    batch = a.train_batch(0, 8, Stage(1), None, "cpu")
    assert torch.equal(batch.tokens[:, 1:], batch.targets[:, :-1])  # targets are the shifted inputs


def test_config_checks(tmp_path):
    # task=lm alone brings its token table and LM settings (the lm_small values)
    cfg = make_cfg("task=lm", tiny=False)
    assert cfg.model.vocab_size == 8192 and cfg.train.optimizer.value == "adamw"
    assert make_cfg("task=lm", "model=attn_only", tiny=False).model.vocab_size == 8192
    # without a token table: says what to set
    found = problems(make_cfg("task=lm", "model.vocab_size=0", tiny=False))
    assert any("model.vocab_size=0" in p and "experiment=lm_small" in p for p in found)
    # a missing data folder names the file and the key
    found = problems(make_cfg("experiment=lm_small", f"data.root={tmp_path / 'nowhere'}", tiny=False))
    assert any("lm/train.txt" in p and "data.root" in p for p in found)
    # a corpus too small for the context
    root = tmp_path / "small"
    (root / "lm").mkdir(parents=True)
    for name in ("train", "valid", "test"):
        (root / "lm" / f"{name}.txt").write_text("tiny text\n")
    found = problems(make_cfg("experiment=lm_small", f"data.root={root}", tiny=False))
    assert any("too few for one training sequence" in p for p in found)


@needs_shared
def test_presets_validate():
    assert problems(make_cfg("experiment=lm_small", tiny=False)) == []
    assert problems(make_cfg("task=lm", tiny=False)) == []
    cfg = make_cfg("experiment=paper_lm", "scorer=ssa", tiny=False)
    assert problems(cfg) == []
    m, t = cfg.model, cfg.train
    assert (m.n_layer, m.n_head, m.n_embd, m.max_positions, cfg.task.context) == (12, 12, 768, 1024, 1024)
    assert (t.optimizer.value, t.weight_decay, t.schedule.value, t.precision.value) == (
        "adamw",
        0.1,
        "cosine",
        "bf16",
    )


# ------------------------------------------------------------------ loss and perplexity
def test_untrained_loss_is_log_vocab(tmp_path):
    cfg = lm_cfg(tiny_root(tmp_path), tmp_path)
    task = build_task(cfg.task)
    torch.manual_seed(0)
    model = build_model(cfg.model, cfg.scorer)
    loss = task.training_loss(model, task.train_batch(0, 8, Stage(1), None, "cpu")).item()
    assert abs(loss - math.log(cfg.model.vocab_size)) < 0.05


def test_perplexity_is_exp_mean_nll(tmp_path):
    torch.manual_seed(0)
    cfg = make_cfg(
        "experiment=lm_small", "model.vocab_size=50", "model.n_layer=1", "model.n_embd=16", tiny=False
    )
    model = build_model(cfg.model, cfg.scorer).eval()
    tokens = np.random.default_rng(0).integers(0, 50, size=45)
    ctx = 8
    for stride in (None, 3):
        nll, n = stream_nll(model, tokens, ctx, stride=stride, batch_size=3)
        assert n == len(tokens) - 1
        # independently: each target once, with the context its window gives it
        ref = []
        for b, e, first in windows(len(tokens), ctx, stride):
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor(tokens[b:e])[None])[0], -1)
            for j in range(first, e - b):
                ref.append(-logp[j, tokens[b + j + 1]].item())
        assert len(ref) == len(tokens) - 1
        assert math.exp(nll / n) == pytest.approx(math.exp(np.mean(ref)), rel=1e-5)
    # the windows: every target 1..N-1 scored exactly once, with at least ctx - stride context
    for n_tok, stride in ((45, 8), (45, 3), (9, 8), (2, 8)):
        scored = [b + j + 1 for b, e, first in windows(n_tok, 8, stride) for j in range(first, e - b)]
        assert scored == list(range(1, n_tok))


@pytest.mark.slow
def test_tiny_lm_overfits_and_resumes_exactly(tmp_path):
    root = tiny_root(tmp_path, bad_bytes=False)
    over = lm_overrides(root, tmp_path, "train.lr=3e-3", "train.log_interval=20", "model.n_layer=2")
    # 1) overfit a tiny text: perplexity near 1 (the held-out documents repeat the same sentences)
    cfg = make_cfg(*over, "train.steps=200", "train.ckpt_interval=100", tiny=False)
    summary = run_job(cfg, tmp_path / "fit")
    ppl = summary["evaluations"]["quick"]["in_distribution"]
    assert ppl["heldout_ppl"] < 1.6, ppl
    # 2) a run stopped and resumed mid-epoch equals the uninterrupted one (data position from the index)
    # (constant lr: a cosine schedule depends on train.steps, which the first part changes)
    short = ["train.steps=6", "train.ckpt_interval=3", "train.log_interval=3", "evaluation.enabled=false"]
    over = [*over, "train.schedule=constant"]
    train(make_cfg(*over, *short, tiny=False), tmp_path / "a")
    train(make_cfg(*over, *short[1:], "train.steps=3", tiny=False), tmp_path / "b")
    train(make_cfg(*over, *short, tiny=False), tmp_path / "b")
    sa = load_ckpt(tmp_path / "a" / "checkpoints" / "last.pt")["model"]
    sb = load_ckpt(tmp_path / "b" / "checkpoints" / "last.pt")["model"]
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


# ------------------------------------------------------------------ the multiple-choice scorer
class ByteTokenizer:
    """UTF-8 bytes as ids, <|endoftext|> = 256."""

    vocab_size, eot_id, fingerprint = 257, 256, "bytes"

    def encode(self, text):
        return list(text.encode())

    def decode(self, ids):
        return bytes(i for i in ids if i < 256).decode(errors="replace")


class NextLetter(torch.nn.Module):
    """Predicts, after byte c, the byte c + 1 (log-prob ≈ 0) and everything else at ≈ -20."""

    def forward(self, x):
        logits = torch.full((*x.shape, 257), -20.0)
        logits.scatter_(-1, ((x + 1) % 257)[..., None], 0.0)
        return logits


def test_mc_scorer_picks_the_known_answer():
    lm = mc.TokenLM(NextLetter(), ByteTokenizer(), max_length=32, device="cpu", batch_size=2)
    assert lm.encode_pair("abc ", "d") == (list(b"abc"), list(b" d"))  # trailing space moves
    items = [
        mc.Item(["abc"] * 3, ["dz", "de", "xy"], 1),  # "de" continues a, b, c
        mc.Item(["pq", "ab"], ["c"] * 2, 1),  # partial scoring: the context that "c" follows
        mc.Item(["klm"], ["nop"], 0),  # a LAMBADA-style greedy continuation
    ]
    res = mc.score_task(lm, "wsc273", items[:2])
    assert res["acc"][0] == 1.0 and res["n"] == 2
    lam = mc.score_task(lm, "lambada_openai", items[2:])
    assert lam["acc"][0] == 1.0 and lam["perplexity"][0] == pytest.approx(1.0, abs=1e-4)
    ll = lm.loglikelihood([("abc", "de"), ("abc", "dz")])
    assert ll[0][1] and not ll[1][1] and ll[0][0] > ll[1][0]
    # few-shot prefixes never use the item itself
    assert "klm" not in mc.fewshot_prefix([items[2], items[0]], 0, 1)


@needs_shared
def test_every_task_file_parses():
    for name in mc.TASKS:
        items = mc.load_items(SHARED, name, limit=20)
        assert len(items) == 20
        for it in items:
            assert len(it.contexts) == len(it.continuations) >= 1 and 0 <= it.gold < len(it.continuations)
            assert all(c.startswith(" ") for c in it.continuations)


class RecordingLM(mc.TokenLM):
    """A TokenLM that keeps every (context, continuation) it scores with its (log-likelihood, greedy)."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.scored: dict = {}

    def loglikelihood(self, pairs, groups=None):
        out = super().loglikelihood(pairs, groups)
        self.scored.update(zip(pairs, out))
        return out


@pytest.mark.slow
@needs_shared
def test_lm_eval_adapter_matches_builtin_scorer(tmp_path):
    """Per item, the harness asks the model exactly the questions the built-in scorer asks (the same
    context and continuation strings for every choice) and, for every pair inside the model's window, gets
    the same log-likelihood and greedy flag; and the accuracy agrees: checked per request, not only on the
    accuracy of 4 items."""
    pytest.importorskip("lm_eval")
    from ssa_repro.evaluation.lm_eval_adapter import run_harness

    torch.manual_seed(0)
    cfg = make_cfg(
        "experiment=lm_small",
        "model.vocab_size=257",
        "model.n_layer=1",
        "model.n_embd=16",
        "model.max_positions=512",  # a window that holds every 0-shot item in bytes: nothing is cut
        tiny=False,
    )
    model = build_model(cfg.model, cfg.scorer).eval()
    names = ["arc_easy", "copa", "wsc273", "winogrande", "lambada_openai"]
    harness = RecordingLM(model, ByteTokenizer(), max_length=512, device="cpu", batch_size=8)
    res = run_harness(harness, SHARED, names, num_fewshot=0, limit=4, folder=tmp_path / "tasks")
    for name in names:
        builtin = RecordingLM(model, ByteTokenizer(), max_length=512, device="cpu", batch_size=8)
        items = mc.load_items(SHARED, name, limit=4)
        mine = mc.score_task(builtin, name, items)
        asked = {pair: harness.scored[pair] for pair in builtin.scored if pair in harness.scored}
        assert set(asked) == set(builtin.scored), f"{name}: the harness asked other questions"
        assert len(builtin.scored) == sum(len(it.continuations) for it in items)
        # a pair longer than the window is cut differently on purpose: the built-in scorer cuts an item's
        # choices at one place (multiple_choice.TokenLM.loglikelihood's groups), lm-eval each on its own
        fits = {p for p in builtin.scored if sum(map(len, builtin.encode_pair(*p))) <= builtin.max_length + 1}
        assert fits == set(builtin.scored), f"{name}: a pair longer than the window"
        for pair in fits:
            ll, greedy = builtin.scored[pair]
            assert asked[pair][0] == pytest.approx(ll, rel=1e-5, abs=1e-5) and asked[pair][1] == greedy
        assert res[name]["acc"][0] == pytest.approx(mine["acc"][0]), name
        assert res[name]["n"] == 4


# ------------------------------------------------------------------ eval=lm and the table
@pytest.mark.slow
@needs_shared
def test_eval_lm_end_to_end_and_table(tmp_path):

    root = tiny_root(tmp_path)
    (root / "lm_eval").mkdir()
    for name in ("copa", "arc_easy", "lambada_openai"):
        lines = (SHARED / "lm_eval" / f"{name}.jsonl").read_text().splitlines()[:4]
        (root / "lm_eval" / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    run = tmp_path / "run"
    train(lm_cfg(root, tmp_path, "train.steps=2", "evaluation.enabled=false"), run)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "evaluate",
            overrides=[
                f"run_dir={run}",
                "eval=lm",
                "eval.limit=3",
                "eval.backend=builtin",
                "eval.tasks=[copa,arc_easy,lambada_openai]",
                "eval.num_fewshot=[0,1]",
            ],
        )
    summary = evaluate_app.main(cfg)
    assert set(summary["perplexity"]) == {"heldout", "valid", "test"}
    assert "CB" in summary["unavailable_offline"]
    out = Path(summary["dir"])
    ppl = pd.read_csv(out / "perplexity.csv")
    assert ppl.whole_stream.all() and (ppl.perplexity > 1).all() and ppl.word_perplexity.notna().all()
    res = pd.read_csv(out / "results.csv")
    bench = res[res.benchmark.notna()]
    assert set(bench.benchmark) == {"copa", "arc_easy", "lambada_openai"} and set(bench.shots) == {0, 1}
    assert (bench.n == 3).all()
    table = lm_table([run, run], tmp_path / "t" / "lm_table")
    assert list(table.columns) == [
        "0-shot softmax",
        "0-shot softmax (run)",
        "1-shot softmax",
        "1-shot softmax (run)",
    ]
    assert (tmp_path / "t" / "lm_table.md").exists()
    assert lm_table_main([tmp_path / "nothing_here"]) == 1


class Recorder(NextLetter):
    """NextLetter that keeps every input row it scores (its tokens up to the last one)."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def forward(self, x):
        self.rows += [r.tolist() for r in x]
        return super().forward(x)


def test_an_items_choices_share_their_context_cut_when_the_prompt_is_too_long():
    """A 3-shot prompt longer than the window: per-sequence cutting (lm-eval's rule) leaves the two
    choices (2 and 6 tokens) different context tokens; grouped by item, both keep the same last 10 - 6 + 1
    = 5 tokens, and the log-likelihood is that of the continuation after exactly those tokens."""
    context, short, long_ = "qrstuvwxyz" * 3, " a", " bcdef"
    rec = Recorder()
    lm = mc.TokenLM(rec, ByteTokenizer(), max_length=10, device="cpu", batch_size=1)
    lm.loglikelihood([(context, short), (context, long_)])
    ctx_short, ctx_long = rec.rows[1][: 11 - len(short)], rec.rows[0][: 11 - len(long_)]  # longest first
    assert ctx_short[-5:] == ctx_long and len(ctx_short) != len(ctx_long)  # cut at different places
    rec.rows.clear()
    got = lm.loglikelihood([(context, short), (context, long_)], groups=[0, 0])
    rows = sorted(rec.rows, key=len)
    assert rows[0][:5] == rows[1][:5] == list(context[-5:].encode())
    # against a direct computation: the choice scored after exactly those 5 context tokens
    for (ll, _), cont in zip(got, (short, long_)):
        toks = list((context[-5:] + cont).encode())
        logits = NextLetter()(torch.tensor([toks[:-1]]))[0]
        want = torch.log_softmax(logits, -1)[range(5 - 1, len(toks) - 1), toks[5:]].sum()
        assert ll == pytest.approx(float(want), abs=1e-5)
    with pytest.raises(ValueError, match="groups"):
        lm.loglikelihood([(context, short)], groups=[0, 1])


def test_nothing_scored_is_an_error_not_a_perfect_score():
    from ssa_repro.evaluation import perplexity

    assert perplexity.summarise(math.log(5.0) * 4, 4)["perplexity"] == pytest.approx(5.0)
    with pytest.raises(ValueError, match="no token was scored"):
        perplexity.summarise(0.0, 0)
    lm = mc.TokenLM(NextLetter(), ByteTokenizer(), max_length=8, device="cpu")
    with pytest.raises(ValueError, match="task copa: no items"):
        mc.score_task(lm, "copa", [])


def test_a_continuation_of_no_tokens_is_refused():
    lm = mc.TokenLM(NextLetter(), ByteTokenizer(), max_length=8, device="cpu")
    with pytest.raises(ValueError, match="encodes to no token"):
        lm.loglikelihood([("abc", "")])
