"""The length-generalisation token tasks: invariants of the generated data, labels against plain-Python
recomputations, their declared grids (8-16x the training length), and the CLI end to end."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.jobs.train_job import run_job
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports import paired
from ssa_repro.reports.kinds import icl as report
from ssa_repro.studies import engine, study
from ssa_repro.tasks import TASKS
from ssa_repro.tasks.flip_flop import BIT0, READ, WRITE, p_ignore_at
from ssa_repro.tasks.tokens import IGNORE
from ssa_repro.training.validate import problems
from tests.conftest import make_cfg

NEW = ["mqar", "flip_flop", "copy", "counting"]


def task(name: str, **kw):
    cfg = OmegaConf.structured(TASKS.schemas[name])
    for k, v in kw.items():
        cfg[k] = v
    return TASKS.get(name)(cfg)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ MQAR
@pytest.mark.parametrize("n", [1, 5, 64, 128])
def test_mqar_every_query_is_a_key_seen_once_and_its_target_is_that_pairs_value(n):
    t = task("mqar")
    b = t.sample(16, n, gen(n), "cpu")
    nk = t.cfg.n_keys
    assert b.tokens.shape == (16, 3 * n) and b.pred_idx.tolist() == list(range(2 * n, 3 * n))
    for row, targets in zip(b.tokens.tolist(), b.targets.tolist()):
        keys, values, queries = row[0 : 2 * n : 2], row[1 : 2 * n : 2], row[2 * n :]
        assert all(k < nk for k in keys) and all(v >= nk for v in values)  # disjoint id ranges
        assert len(set(keys)) == n  # no key repeated: no pair overwritten (zoology issue #29)
        assert sorted(queries) == sorted(keys)  # each key queried exactly once, no filler
        pairs = dict(zip(keys, values))
        assert targets == [pairs[q] for q in queries]  # recomputed from the prompt itself


def test_mqar_refuses_more_pairs_than_keys():
    t = task("mqar", n_keys=4)
    with pytest.raises(ValueError, match="task.n_keys=4"):
        t.sample(2, 5, gen(), "cpu")


# ------------------------------------------------------------------ flip-flop
def flip_flop_reference(tokens: list[int]) -> list[int]:
    """Targets at the instruction tokens: the last written bit at a read, IGNORE elsewhere."""
    out, mem = [], None
    for i in range(0, len(tokens), 2):
        op, bit = tokens[i], tokens[i + 1]
        if op == WRITE:
            mem = bit
        out.append(mem if op == READ else IGNORE)
    return out


@pytest.mark.parametrize("sigma", [0.25, 1.0, 5.0])
def test_flip_flop_reads_return_the_last_written_bit(sigma):
    t = task("flip_flop")
    n = 40
    b = t.build(t.draw(32, n, gen(3), "cpu", {"sigma_x": sigma}))
    ops = b.tokens[:, 0::2]
    assert (ops[:, 0] == WRITE).all() and (ops[:, -1] == READ).all()
    assert ((b.tokens[:, 1::2] == BIT0) | (b.tokens[:, 1::2] == BIT0 + 1)).all()
    for row, targets in zip(b.tokens.tolist(), b.targets.tolist()):
        assert targets == flip_flop_reference(row)
        assert all(row[2 * i + 1] == targets[i] for i in range(n) if targets[i] != IGNORE)  # shown = answer


def test_flip_flop_setting_sets_the_ignore_rate():
    t = task("flip_flop")
    for sigma, p in ((1.0, 0.8), (0.25, 0.2), (10.0, 0.98)):
        assert p_ignore_at(0.8, sigma) == pytest.approx(p)
        ops = t.draw(256, 200, gen(4), "cpu", {"sigma_x": sigma}).xs[:, 1:-1]
        assert (ops == 2).float().mean().item() == pytest.approx(p, abs=0.01)
    with pytest.raises(ValueError, match="σ must be >= 1 − task.p_ignore"):
        t.draw(2, 5, gen(), "cpu", {"sigma_x": 0.1})


# ------------------------------------------------------------------ copy / reverse
@pytest.mark.parametrize("reverse", [False, True])
def test_copy_and_reverse_targets(reverse):
    t = task("copy", reverse=reverse)
    n = 7
    b = t.sample(8, n, gen(5), "cpu")
    for row, targets in zip(b.tokens.tolist(), b.targets.tolist()):
        src = row[:n]
        want = src[::-1] if reverse else src
        assert row[n] == t.cfg.alphabet and targets == want
        assert row[n + 1 :] == want[:-1]  # teacher forcing: the answers so far are in the context
    assert b.pred_idx.tolist() == list(range(n, 2 * n))


# ------------------------------------------------------------------ counting
@pytest.mark.parametrize("n", [1, 3, 16, 256])
def test_counting_targets_are_the_query_counts_and_do_not_grow_with_length(n):
    t = task("counting")
    b = t.sample(64, n, gen(n), "cpu")
    a = t.cfg.alphabet
    counts = []
    for row, target in zip(b.tokens.tolist(), b.targets.tolist()):
        xs, sep, q = row[:n], row[n], row[n + 1]
        assert sep == a and 0 <= q < a and all(0 <= x < a for x in xs)
        counts.append(sum(x == q for x in xs))
        assert target == [a + 1 + counts[-1]]
    assert max(counts) <= min(t.cfg.max_count, n)


# ------------------------------------------------------------------ declarations, checks, metrics
@pytest.mark.parametrize("name", NEW)
def test_grids_reach_8_to_16_times_the_training_length(name):
    cfg = make_cfg(f"task={name}", tiny=False)
    t = TASKS.get(name)(cfg.task)
    lengths = t.evaluation.grid.quick["lengths"]
    assert min(lengths) == cfg.curriculum.end and 8 <= max(lengths) / cfg.curriculum.end <= 16
    assert t.n_tokens(max(lengths)) <= cfg.model.max_positions  # a learned table still covers the grid
    assert problems(cfg) == []


@pytest.mark.parametrize("name", NEW)
def test_a_too_small_vocabulary_is_refused(name):
    found = problems(make_cfg(f"task={name}", "model.vocab_size=3"))
    assert any("model.vocab_size=3" in p and f"task={name}" in p for p in found), found


def test_metrics_skip_ignored_targets():
    t = task("flip_flop")
    targets = torch.tensor([[IGNORE, BIT0, IGNORE, BIT0 + 1]])
    pred = torch.zeros(1, 4, 5)
    pred[0, :, BIT0] = 1.0  # always predicts bit 0: right at the first read, wrong at the second
    b = t.batch(
        torch.zeros(1, 8, dtype=torch.long), targets, torch.arange(0, 8, 2), t.draw(1, 4, gen(), "cpu")
    )
    m = t.prompt_metrics(pred, b, 0)
    assert m["token_error"].item() == 0.5 and m["sequence_error"].item() == 1.0


def test_a_prompt_with_no_scored_token_is_an_error_not_a_zero():
    """Counting scores one token a prompt: a grid that skipped the first 3 predictions scored none and read
    every error as 0 (found in the length study); now that is refused where it would happen."""
    t = task("counting")
    b = t.sample(4, 16, gen(), "cpu")
    pred = torch.zeros(4, 1, t.vocab_size())
    assert t.prompt_metrics(pred, b, 0)["token_error"].shape == (4,)
    with pytest.raises(ValueError, match="no scored token.*eval.skip_first"):
        t.prompt_metrics(pred, b, 3)


@pytest.mark.parametrize("name", NEW)
def test_a_token_task_grid_refuses_skipping_predictions(name):
    from ssa_repro.jobs.prepared import problems as run_problems  # with the end-of-run evaluation's

    found = run_problems(make_cfg(f"task={name}", "evaluation.skip_first=3"))
    assert any("evaluation.skip_first=3" in p and "use evaluation.skip_first=0" in p for p in found), found
    assert run_problems(make_cfg(f"task={name}", "evaluation.skip_first=0")) == []
    assert run_problems(make_cfg(f"task={name}")) == []  # null: the token grid's own 0


@pytest.mark.parametrize("name", NEW)
def test_a_token_task_grid_scores_every_determined_token(name, tmp_path):
    """An untrained model and the uniform guess are wrong on most scored tokens at every grid length (each
    task has at least 2 answers a token): a grid that scored nothing would read 0 here."""
    summary = run_job(make_cfg(f"task={name}"), tmp_path)
    quick = summary["evaluations"]["quick"]
    assert quick["in_distribution"]["random_token"] > 0.3, quick["in_distribution"]
    assert quick["worst"] > 0.3, quick


# ------------------------------------------------------------------ the CLI path
@pytest.mark.slow
def test_mqar_with_alibi_and_ssa_trains_and_evaluates(tmp_path):
    """python train.py task=mqar model.pos=alibi scorer=ssa debug=tiny (in process)."""
    cfg = make_cfg("task=mqar", "model.pos=alibi", "scorer=ssa")
    summary = run_job(cfg, tmp_path)
    quick = summary["evaluations"]["quick"]
    assert quick["evaluation"] == "grid" and quick["metric"] == "token_error"
    assert 0.0 <= quick["in_distribution"]["model"] <= 1.0
    # the floors: guessing a value token (128 of them) is wrong about 127/128 of the time
    floors = quick["in_distribution"]
    assert floors["random_token"] > 0.9 and floors["majority_token"] > 0.9, floors


@pytest.mark.slow
def test_the_length_quick_study_runs_end_to_end(tmp_path):
    """conf/study/length_quick.yaml through the study pipeline: every job trains and gets its task's grid."""
    root = engine.run("length_quick", tmp_path / "length_quick", n_jobs=1)
    index = pd.read_csv(root / "index.csv")
    assert len(index.job.unique()) == len(study.jobs(study.load("length_quick")))
    assert set(zip(index.task, index.evaluation)) == {("every_num", "grid_quantifier"), ("mqar", "grid_mqar")}
    assert set(index.arch) == {"learned", "alibi"}
    # the report: the paper's one-arm claims per position scheme, and the length curves read back from
    # the stored cells, as multiples of each run's own training length
    out = tmp_path / "report"
    setup = OmegaConf.to_container(study.load("length_quick"))
    text = report.write(root, out, "length_quick", "pytest", setup).read_text()
    assert "length claims under 2 position schemes (learned, alibi)" in text.splitlines()[0]
    curves_section = text.split("## Length extrapolation at σ = 1")[1].split("\n## ")[0]
    assert (
        "| mqar | alibi | ssa |" in curves_section and "| every_num | learned | softmax |" in curves_section
    )
    claims = pd.read_csv(out / "length_quick_claims.csv")
    run = index[(index.task == "mqar") & (index.arch == "alibi") & (index.scorer == "ssa")].run_dir.iloc[0]
    cells = pd.concat(pd.read_csv(f) for f in Path(run).glob("eval/grid/*/results.csv"))
    top = (
        32 / cells.train_length.iloc[0]
    )  # the run's own training length (20 steps stop the curriculum short)
    ssa = claims[claims.claim == "ssa_length"]  # SSA − softmax per position scheme at the longest length
    assert {f"alibi, mqar, length 32 (×{top:.3g})", f"learned, mqar, length 32 (×{top:.3g})"} <= set(
        ssa.contrast
    )
    frame = paired.read_back({"grid": out / "length_quick" / "per_seed_grid.csv"})
    curves = icl.length_curves(frame)
    mq = curves[(curves.task == "mqar") & (curves.predictor == "model")]
    assert sorted(set(mq.ratio)) == pytest.approx([top / 4, top], rel=5e-3)  # 8, 32 pairs / training length
    row = mq[(mq.arch == "alibi") & (mq.scorer == "ssa") & (mq.length == 32)].iloc[0]
    want = cells[(cells.predictor == "model") & (cells.metric == "token_error") & (cells.length == 32)]
    assert row.value == pytest.approx(want.value.item())
    every = curves[(curves.task == "every_num") & (curves.predictor == "model")]
    run = index[index.task == "every_num"].run_dir.iloc[0]
    trained = pd.concat(pd.read_csv(f) for f in Path(run).glob("eval/grid/*/results.csv")).train_length.iloc[
        0
    ]
    assert sorted(set(every.ratio)) == pytest.approx([10 / trained, 40 / trained], rel=5e-3)
    assert (out / "length_quick" / "length_mqar.png").exists()


# ------------------------------------------------------------------ guesses (the token tasks' baselines)
def test_majority_and_random_token_guesses_against_a_direct_count():
    from ssa_repro.tasks.baselines import majority_token, random_token

    tokens = torch.tensor([[5, 6, 7, 8], [9, 9, 9, 9]])
    targets = torch.tensor([[3, IGNORE, 3, 4], [4, 3, IGNORE, IGNORE]])  # scored: 3, 3, 4, 4, 3
    maj = majority_token(tokens, targets)
    assert maj.shape[:2] == tokens.shape and (maj.argmax(-1) == 3).all()
    guess = random_token(tokens, targets).argmax(-1)
    assert set(guess.flatten().tolist()) <= {3, 4}
    assert torch.equal(guess, random_token(tokens, targets).argmax(-1))  # seeded: the same guesses
    # over many positions each distinct answer is drawn about equally often (chance = 1 − 1/K)
    many = torch.zeros(64, 500, dtype=torch.long)
    t = torch.arange(64 * 500).remainder(10).view(64, 500)  # 10 answers, equally often
    share = (random_token(many, t).argmax(-1) == t).float().mean().item()
    assert abs(share - 0.1) < 0.01, share


def test_the_context_guess_names_an_answer_of_the_prompt_so_far():
    """On MQAR it picks one of the prompt's values (never a key, never one not yet shown) uniformly: token
    error 1 − 1/(distinct values) on average, recomputed here prompt by prompt; where no answer has
    occurred it falls back to the majority answer."""
    from ssa_repro.tasks.baselines import context_token

    t, n = task("mqar"), 4
    b = t.sample(512, n, gen(3), "cpu")
    guess = context_token(b.tokens, b.targets).argmax(-1)  # [B, T]
    at_queries = guess[:, b.pred_idx]  # [B, n]
    expected_right = 0.0
    for row, g in zip(b.tokens.tolist(), at_queries.tolist()):
        values = set(row[1 : 2 * n : 2])
        assert set(g) <= values  # a value of this prompt
        expected_right += n / len(values)  # each query: right with probability 1 / (distinct values)
    err = (at_queries != b.targets).float().mean().item()
    want = 1 - expected_right / (512 * n)
    assert abs(err - want) < 0.03, (err, want)
    # before any answer has occurred (a key at position 0): the majority answer
    maj = torch.bincount(b.targets.flatten()).argmax()
    assert (guess[:, 0] == maj).all()


@pytest.mark.parametrize("name", NEW)
def test_token_tasks_declare_the_guesses_and_other_kinds_are_refused(name):
    from ssa_repro.tasks.baselines import problems as baseline_problems

    grid = TASKS.get(name).evaluation.grid
    assert grid.baselines == ("majority_token", "random_token", "context_token")
    assert baseline_problems(grid.baselines, False, tokens=True) == []
    [msg] = baseline_problems(["least_squares"], False, tokens=True)
    assert "do not apply to a token task" in msg and "majority_token" in msg
    assert baseline_problems(["random_token"], False) != []  # not a regressor
