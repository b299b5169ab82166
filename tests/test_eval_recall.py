"""eval=recall: attention on the queried pair of an MQAR prompt, against loops over plain Python / float64
(the pair's positions read back from the tokens, the statistics from the weights one row at a time)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import runner
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.recall import RecallConfig, pair_stats, uniform_pair_stats
from ssa_repro.evaluation.registry import applicable
from ssa_repro.jobs.train_job import run_job
from ssa_repro.tasks import TASKS
from tests.conftest import make_cfg


def mqar(**kw):
    cfg = OmegaConf.structured(TASKS.schemas["mqar"])
    for k, v in kw.items():
        cfg[k] = v
    return TASKS.get("mqar")(cfg)


@pytest.mark.parametrize("n", [1, 7, 32])
def test_each_querys_pair_positions_hold_its_key_and_its_answer(n):
    """The key position holds the queried token itself, the value position the query's target."""
    t = mqar()
    b = t.sample(8, n, torch.Generator().manual_seed(n), "cpu")
    query_pos, pair_pos = t.recall_positions(b)
    assert query_pos.tolist() == b.pred_idx.tolist()
    for row, tokens in enumerate(b.tokens.tolist()):
        for p, q in enumerate(query_pos.tolist()):
            k, v = pair_pos[row, p].tolist()
            assert tokens[k] == tokens[q]  # the query repeats its pair's key
            assert tokens[v] == int(b.targets[row, p])  # and its answer is the next token


def reference(w, query_pos, pair_pos):
    """The statistics one prompt, head and query row at a time, in float64 Python."""
    out = {"pair_weight": [], "pair_weight_max_head": [], "entropy": []}
    for b in range(w.shape[0]):
        per_head_pair, per_head_ent = [], []
        for h in range(w.shape[1]):
            pairs, ents = [], []
            for p, q in enumerate(query_pos.tolist()):
                row = [abs(float(x)) for x in w[b, h, q]]
                total = sum(row)
                mass = [x / total for x in row]
                pairs.append(sum(mass[int(s)] for s in pair_pos[b, p]))
                ents.append(-sum(m * math.log(m) for m in mass if m > 0))
            per_head_pair.append(sum(pairs) / len(pairs))
            per_head_ent.append(sum(ents) / len(ents))
        out["pair_weight"].append(sum(per_head_pair) / len(per_head_pair))
        out["pair_weight_max_head"].append(max(per_head_pair))
        out["entropy"].append(sum(per_head_ent) / len(per_head_ent))
    return out


def test_pair_statistics_equal_a_row_by_row_reference():
    g = torch.Generator().manual_seed(0)
    b, h, n = 3, 2, 4
    t = 3 * n
    w = torch.rand(b, h, t, t, generator=g) * torch.tril(torch.ones(t, t))  # causal, unnormalised
    w[0, 1] *= -1  # a signed scorer's weights are measured as |w|
    t_ = mqar()
    batch = t_.sample(b, n, g, "cpu")
    query_pos, pair_pos = t_.recall_positions(batch)
    got = pair_stats(w, query_pos, pair_pos)
    want = reference(w, query_pos, pair_pos)
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-12, err_msg=k)


def test_attention_all_on_the_pair_scores_one_and_uniform_scores_two_over_visible():
    n, t = 4, 12
    t_ = mqar()
    batch = t_.sample(2, n, torch.Generator().manual_seed(3), "cpu")
    query_pos, pair_pos = t_.recall_positions(batch)
    w = torch.zeros(2, 1, t, t)
    for b in range(2):
        for p, q in enumerate(query_pos.tolist()):
            k, v = pair_pos[b, p].tolist()
            w[b, 0, q, k] = w[b, 0, q, v] = 0.5
    s = pair_stats(w, query_pos, pair_pos)
    assert torch.allclose(s["pair_weight"], torch.ones(2, dtype=torch.float64))
    assert torch.allclose(s["entropy"], torch.full((2,), math.log(2), dtype=torch.float64))
    u = uniform_pair_stats(query_pos, t, causal=True, batch=2)
    visible = [q + 1 for q in query_pos.tolist()]
    assert u["pair_weight"][0].item() == pytest.approx(np.mean([2 / v for v in visible]))
    assert u["entropy"][0].item() == pytest.approx(np.mean([math.log(v) for v in visible]))


def test_it_applies_to_mqar_and_not_to_the_numeric_tasks():
    assert "recall" in applicable(TASKS.get("mqar"))
    assert "recall" not in applicable(TASKS.get("linear"))


@pytest.mark.slow  # a tiny training run and the evaluation through the runner
def test_a_trained_run_gets_one_row_per_length_layer_and_metric(tmp_path):
    cfg = make_cfg(
        "task=mqar", "model.pos=alibi", "scorer=ssa", "model.n_layer=2", "evaluation.enabled=false"
    )
    run_job(cfg, tmp_path)
    run = load_run(tmp_path, torch.device("cpu"))
    ecfg = OmegaConf.merge(OmegaConf.structured(RecallConfig), {"n_prompts": 6, "batch_size": 4})
    ev, problems = runner.build(ecfg, run.cfg, run.task)
    assert problems == []
    end = int(run.cfg.curriculum.end)
    assert [c["length"] for c in ev.cells()] == [end, 4 * end, 16 * end]
    summary = runner.evaluate(run, ecfg)
    rows = runner.store_of(tmp_path, ev).read("results")
    model = rows[rows.predictor == "model"]
    assert set(zip(model.length, model.layer, model.metric)) == {
        (n, layer, m)
        for n in (end, 4 * end, 16 * end)
        for layer in (0, 1)
        for m in ("pair_weight", "pair_weight_max_head", "entropy")
    }
    assert (model.n_samples == 6).all()
    weights = model[model.metric.str.startswith("pair_weight")].value
    assert ((weights > 0) & (weights <= 1 + 1e-9)).all()
    # uniform attention's pair weight falls with the number of pairs as 2 / #visible
    u = rows[(rows.predictor == "uniform") & (rows.metric == "pair_weight")].sort_values("length")
    expect = [np.mean([2 / (q + 1) for q in range(2 * n, 3 * n)]) for n in (end, 4 * end, 16 * end)]
    np.testing.assert_allclose(u.value.to_numpy(), expect, rtol=1e-12)
    layer0 = summary["pair_weight_max_head"]["layer 0"]
    assert sorted(layer0) == [end, 4 * end, 16 * end]  # the summary holds every length, per layer


def test_the_reports_recall_table_is_the_seed_mean_per_scorer_layer_and_pairs():
    """reports: eval=recall's per-seed rows -> the table of seed means (and uniform attention once)."""
    import pandas as pd

    from ssa_repro.reports.length import recall_table

    rows = []
    for scorer, base in (("softmax", 0.5), ("ssa", 0.9)):
        for seed in (0, 1):
            for n in (8, 32):
                rows.append(
                    dict(group="mqar", task="mqar_w64", scorer=scorer, arch="alibi", train_sigma=1.0, seed=seed,
                         evaluation="recall_mqar", predictor="model", metric="pair_weight",
                         summary=f"pairs={n} layer=1", value=base / (n / 8) + 0.1 * seed)
                )  # fmt: skip
    rows.append({**rows[0], "predictor": "uniform", "summary": "pairs=8 uniform", "value": 0.25})
    t = recall_table(pd.DataFrame(rows))
    ssa = t[(t.scorer == "ssa") & (t.layer == "layer=1")].iloc[0]
    assert (
        ssa["8 pairs"] == pytest.approx(0.95) and ssa["32 pairs"] == pytest.approx(0.275) and ssa.seeds == 2
    )
    uniform = t[t.scorer == "uniform"].iloc[0]
    assert uniform["8 pairs"] == pytest.approx(0.25) and uniform.arch == "—"
