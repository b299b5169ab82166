"""task=mlm (BabyBERTa-style masked LM): masking, data order, the bidirectional encoder, checks, and a
tiny end-to-end run on a constructed corpus (no dependence on ../shared/data)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ssa_repro.data import childes
from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.zorro import ZorroConfig
from ssa_repro.jobs.train_job import run_job
from ssa_repro.models import build_model
from ssa_repro.scorers import SCORERS
from ssa_repro.tasks import Stage, build_task
from ssa_repro.tasks.mlm import logits_at, mask_tokens
from ssa_repro.training import validate
from ssa_repro.training.trainer import train
from tests.conftest import CONF, make_cfg

WORDS = "the a dog cat ball mommy daddy sees wants likes big red is are you we look here there".split()
ZORRO_STEM = "agreement_subject_verb-across_prepositional_phrase"
VOCAB = 300


def make_data(root, n_lines: int = 400, seed: int = 0):
    """A small corpus (one utterance a line, 1-9 words) and a two-paradigm Zorro folder."""
    rng = random.Random(seed)
    (root / "childes").mkdir(parents=True, exist_ok=True)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(1, 9))) + " ." for _ in range(n_lines)]
    (root / "childes" / "small.txt").write_text("\n".join(lines) + "\n")
    z = root / "zorro"
    z.mkdir(exist_ok=True)
    for stem in (ZORRO_STEM, "quantifiers-existential_there"):
        pairs = [(f"the dog are here {i} .", f"the dog is here {i} .") for i in range(4)]
        (z / f"{stem}.txt").write_text("".join(f"{bad}\n{good}\n" for bad, good in pairs))
    (z / "names.tsv").write_text(
        f"paper_name\tfile_stem\tcertainty\nagr_subj_verb-across_PP\t{ZORRO_STEM}\tcertain\n"
    )
    return root


def mlm_cfg(root, *extra):
    return make_cfg(
        "task=mlm",
        "model=encoder",
        f"data.root={root}",
        f"data.cache_dir={root / 'cache'}",
        "task.corpus=childes/small.txt",
        "task.max_lines=null",
        f"task.vocab_size={VOCAB}",
        f"model.vocab_size={VOCAB}",
        "task.max_length=16",
        "model.max_positions=16",
        "task.heldout_every=10",
        "task.quick_zorro_pairs=3",
        "task.quick_heldout=20",
        *extra,
    )


@pytest.fixture
def data_root(tmp_path):
    return make_data(tmp_path / "data")


# ------------------------------------------------------------------ masking
def test_masking_rates_and_special_tokens():
    g = torch.Generator().manual_seed(0)
    vocab = 5000
    tokens = torch.randint(childes.N_SPECIAL, vocab, (4000, 40), generator=g)
    tokens[:, 0], tokens[:, 39] = childes.BOS, childes.EOS
    tokens[:, 30:39] = childes.PAD  # padding is never selected either
    inputs, targets = mask_tokens(
        tokens, g, mask_prob=0.15, random_token_prob=0.1, leave_unmasked_prob=0.0, vocab_size=vocab
    )
    sel = targets != -100
    ordinary = tokens >= childes.N_SPECIAL
    assert not sel[~ordinary].any()  # <s>, </s>, <pad> never selected ...
    assert torch.equal(inputs[~ordinary], tokens[~ordinary])  # ... nor changed
    assert torch.equal(inputs[~sel], tokens[~sel])  # unselected tokens are untouched
    assert torch.equal(targets[sel], tokens[sel])
    assert abs(sel[ordinary].float().mean().item() - 0.15) < 0.005
    masked = (inputs[sel] == childes.MASK).float().mean().item()
    unchanged = (inputs[sel] == tokens[sel]).float().mean().item()
    assert abs(masked - 0.9) < 0.01  # no "leave unmasked" share: 90% <mask>, 10% random
    assert unchanged < 0.002  # only random draws that hit the original token
    rand = sel & (inputs != childes.MASK)
    assert (inputs[rand] >= childes.N_SPECIAL).all()


def test_masking_leave_unmasked_share_and_nonempty_rows():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(childes.N_SPECIAL, 5000, (4000, 30), generator=g)
    inputs, targets = mask_tokens(
        tokens, g, mask_prob=0.15, random_token_prob=0.1, leave_unmasked_prob=0.1, vocab_size=5000
    )
    sel = targets != -100
    assert abs((inputs[sel] == tokens[sel]).float().mean().item() - 0.1) < 0.015  # RoBERTa's 80/10/10
    # a one-word utterance always gets its word selected (an empty pattern is redrawn)
    short = torch.tensor([[childes.BOS, 7, childes.EOS]]).repeat(200, 1)
    _, t = mask_tokens(
        short, g, mask_prob=0.15, random_token_prob=0.1, leave_unmasked_prob=0.0, vocab_size=50
    )
    assert (t[:, 1] == 7).all() and (t[:, [0, 2]] == -100).all()


# ------------------------------------------------------------------ data order
def test_train_batches_are_a_pure_function_of_index_and_cover_the_epoch(data_root):
    cfg = mlm_cfg(data_root, "task.num_mask_patterns=3")
    a, b = build_task(cfg.task), build_task(cfg.task)
    gen = torch.Generator()
    for i in (0, 5, 3):
        x, y = a.train_batch(i, 8, Stage(0), gen, "cpu"), b.train_batch(i, 8, Stage(0), gen, "cpu")
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.targets, y.targets)
    n = a.batches_per_epoch(8)
    batches = a.epoch_batches(0, 8)
    assert len(batches) == n
    lengths = a.corpus.lengths
    assert all(len(set(lengths[rows])) == 1 for rows in batches)  # no padding: one length per batch
    seen = np.bincount(np.concatenate(batches), minlength=len(a.corpus))
    train, held = a._load()["train"], a._load()["heldout"]
    assert (seen[train] == 3).all() and (seen[held] == 0).all()
    assert len(held) == len(a.corpus) // 10
    assert [list(r) for r in a.epoch_batches(1, 8)] != [list(r) for r in batches]  # a new order per epoch
    other = build_task(mlm_cfg(data_root, "seed=1").task)
    assert not torch.equal(
        other.train_batch(0, 8, Stage(0), gen, "cpu").tokens, a.train_batch(0, 8, Stage(0), gen, "cpu").tokens
    )


def test_check_names_the_keys_to_set(data_root):
    found = validate.problems(
        mlm_cfg(data_root, "model=gpt2", "model.max_positions=16", "model.vocab_size=0")
    )
    text = "\n".join(found)
    assert f"model.vocab_size=0 must equal task.vocab_size={VOCAB}" in text
    assert "model.causal=true" in text
    assert validate.problems(mlm_cfg(data_root)) == []
    found = validate.problems(mlm_cfg(data_root, "task.corpus=childes/nope.txt", "task.mask_prob=0"))
    assert any("data file not found" in f for f in found) and any("task.mask_prob=0" in f for f in found)


def test_presets_compose_and_pass_validation():
    for preset in ("paper_babyberta", "babyberta_cpu"):
        cfg = make_cfg(f"experiment={preset}", tiny=False)
        assert cfg.model.causal is False and cfg.model.post_ln and cfg.model.vocab_size == cfg.task.vocab_size
        assert cfg.task.max_length <= cfg.model.max_positions
        assert not [p for p in validate.problems(cfg) if "data" not in p]  # data may be elsewhere in CI
    paper = make_cfg("experiment=paper_babyberta", tiny=False)
    assert (paper.model.n_layer, paper.model.n_head, paper.model.n_embd) == (8, 8, 256)
    assert paper.model.n_embd * paper.model.mlp_ratio == 1024
    assert (paper.train.batch_size, paper.train.lr, paper.train.warmup_steps) == (16, 1e-4, 24000)
    assert (CONF / "model" / "encoder.yaml").exists()


# ------------------------------------------------------------------ the encoder
def _model(*overrides, scorer="softmax"):
    cfg = make_cfg("task=mlm", "model=encoder", f"scorer={scorer}", "model.vocab_size=64", *overrides)
    torch.manual_seed(0)
    return build_model(cfg.model, cfg.scorer).eval()


SCORER_OPTIONS = sorted(p.stem for p in (CONF / "scorer").glob("*.yaml"))


def test_every_scorer_runs_bidirectionally():
    """Each scorer option as an encoder: the first position's output depends on the last token, and a
    backward pass through the MLM head gives finite gradients."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):  # one context: fast
        cfgs = {
            s: compose(
                "train",
                overrides=[
                    "task=mlm",
                    "model=encoder",
                    f"scorer={s}",
                    "model.vocab_size=64",
                    "model.n_layer=1",
                    "model.n_head=2",
                    "model.n_embd=16",
                ],
            )
            for s in SCORER_OPTIONS
        }
    g = torch.Generator().manual_seed(0)
    x = torch.randint(5, 64, (2, 9), generator=g)
    y = x.clone()
    y[:, -1] = (x[:, -1] + 1 - 5) % 59 + 5  # change only the last token
    sel = torch.zeros_like(x, dtype=torch.bool)
    sel[:, 3] = True
    for name, cfg in cfgs.items():
        if SCORERS.get(cfg.scorer.name).causal_only:  # stick-breaking: no encoder (validation refuses it)
            continue
        torch.manual_seed(0)
        model = build_model(cfg.model, cfg.scorer).eval()
        out_x, out_y = model(x), model(y)
        assert torch.isfinite(out_x).all(), name
        assert not torch.allclose(out_x[:, 0], out_y[:, 0]), name  # the first position sees the last token
        model.train()
        logits_at(model, x, sel).logsumexp(-1).sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None), name


def test_decoder_does_not_see_later_tokens():
    model = _model("model.causal=true", "model.post_ln=false")
    x = torch.randint(5, 64, (2, 9))
    y = x.clone()
    y[:, -1] = (x[:, -1] + 1 - 5) % 59 + 5
    assert torch.allclose(model(x)[:, :-1], model(y)[:, :-1])


@pytest.mark.parametrize("post_ln", [True, False])
def test_head_at_selected_positions_equals_the_full_forward(post_ln):
    model = _model(f"model.post_ln={post_ln}")
    x = torch.randint(5, 64, (3, 11))
    sel = torch.rand(3, 11) < 0.3
    full = model(x)
    assert torch.allclose(model.hidden(x)[0] @ model.wte.weight.T, full, atol=1e-6)
    assert torch.allclose(logits_at(model, x, sel), full[sel], atol=1e-6)


# ------------------------------------------------------------------ end to end
def test_tiny_run_resumes_exactly_and_evaluates_zorro(data_root, tmp_path):
    over = ("train.batch_size=8", "model.n_embd=16", "model.n_layer=1", "model.n_head=2")
    full = run_job(mlm_cfg(data_root, *over, "evaluation.figures=true"), tmp_path / "full")  # its figure too
    train(mlm_cfg(data_root, *over, "train.steps=3"), tmp_path / "part")
    train(mlm_cfg(data_root, *over), tmp_path / "part")  # resumes at step 3
    a = torch.load(tmp_path / "full/checkpoints/last.pt", weights_only=False)["model"]
    b = torch.load(tmp_path / "part/checkpoints/last.pt", weights_only=False)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)

    ev = full["evaluations"]["quick"]  # the end-of-run evaluation: held-out loss and a Zorro subset
    assert ev["evaluation"] == "zorro"
    assert {"heldout_mlm_loss", "zorro_pll_mean_all", "zorro_holistic_mean_paper12"} <= set(
        ev["in_distribution"]
    )
    assert (Path(ev["dir"]) / "zorro_accuracy.png").exists()

    run = load_run(tmp_path / "full", torch.device("cpu"))
    ecfg = OmegaConf.merge(OmegaConf.structured(ZorroConfig), {"n_pairs": 2})
    assert runner.check(run.cfg, ecfg) == []
    summary = runner.evaluate(run, ecfg)
    res = pd.read_csv(Path(summary["dir"]) / "results.csv")
    per = res[~res.paradigm.str.startswith("mean")]
    assert len(per) == 2 * 2 and set(per.n_samples) == {2}
    assert per[per.reported].paper_name.tolist() == ["agr_subj_verb-across_PP"] * 2
    assert (Path(summary["dir"]) / "zorro_accuracy.png").exists() and "zorro_pll_mean_all" in summary[
        "headline"
    ]
    # eval=default on an mlm run means Zorro
    ev, found = runner.build(OmegaConf.structured(runner.DefaultConfig), run.cfg)
    assert ev.name == "zorro"
