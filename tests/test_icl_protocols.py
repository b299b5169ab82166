"""The protocols that can falsify the paper's ICL claims (issue 21): shifts read apart with the run's
training length, label-rule and linear baselines in every cell, deviant insertions of either sign with
the error at the inserted token vs elsewhere and attention in every layer and head, and the read-out
bound implied by the last LayerNorm. Each metric is checked against a float64 recomputation in numpy
on the same prompts."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ssa_repro.evaluation import boundary as B
from ssa_repro.evaluation import boundary_estimators as BE
from ssa_repro.evaluation import deviant as D
from ssa_repro.evaluation import deviant_cells as DC
from ssa_repro.evaluation.grid import GridConfig, GridEvaluation, region, training_length
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import check, evaluate
from ssa_repro.evaluation.sampling import cell_generator
from ssa_repro.models import build_model
from ssa_repro.studies import study
from ssa_repro.tasks import baselines as BL
from ssa_repro.tasks import build_task
from ssa_repro.training.trainer import train
from tests.conftest import NoProgress, evaluation_run, make_cfg

CPU = torch.device("cpu")


def model_for(*overrides, seed=0, scale=30.0):
    cfg = make_cfg(
        "model.n_layer=2", "model.n_head=2", "model.n_embd=16", "model.max_positions=128", *overrides
    )
    torch.manual_seed(seed)
    model = build_model(cfg.model, cfg.scorer)
    with torch.no_grad():
        model.read_out.weight.mul_(scale)  # outputs far from 0: errors of both signs
    return cfg, model.eval(), build_task(cfg.task)


def run_grid(cfg, model, task, **kw):
    ev = GridEvaluation(OmegaConf.merge(OmegaConf.structured(GridConfig), kw), cfg, task)
    ev.resolve()
    assert ev.problems() == []
    tables = list(ev.compute(evaluation_run(model, task, cfg), ev.cells(), NoProgress()))
    return ev, pd.concat([t["results"] for t in tables], ignore_index=True)


# ----------------------------------------------------------------------------- grid
def _rules_numpy(xs: np.ndarray) -> dict[str, np.ndarray]:
    """Every label rule by explicit loops in float64 (independent of tasks/baselines.py)."""
    out = {k: np.zeros_like(xs) for k in BL.LABEL_RULES}
    for b in range(xs.shape[0]):
        for i in range(xs.shape[1]):
            prefix = xs[b, : i + 1]
            big = max(range(i + 1), key=lambda j: (abs(prefix[j]), -j))  # largest |x|, earliest
            values = {
                "always_true": True,
                "always_false": False,
                "sign_x": prefix[-1] > 0,
                "cumulative_and": all(v > 0 for v in prefix),
                "cumulative_or": any(v > 0 for v in prefix),
                "sign_of_largest": prefix[big] > 0,
            }
            for k, v in values.items():
                out[k][b, i] = 1.0 if v else -1.0
    return out


def test_label_rules_match_loops():
    g = torch.Generator().manual_seed(0)
    xs = torch.randn(16, 12, generator=g)
    xs[0, 1] = xs[0, 1].abs() * 50.0
    xs[0, 3] = -xs[0, 1]  # equal |x|, opposite signs: the earlier one (positive) counts
    want = _rules_numpy(xs.double().numpy())
    for name in BL.LABEL_RULES:
        np.testing.assert_array_equal(BL.BASELINES[name](xs, None).numpy(), want[name], err_msg=name)
    assert want["sign_of_largest"][0, 3] == 1.0


def test_baselines_of_the_wrong_kind_are_refused():
    cfg = make_cfg("task=every", "task.labels_in_context=false")
    found = check(cfg, GridConfig(sigmas=[1.0], lengths=[5], baselines=["zero", "cumulative_and"]))
    assert any("['zero'] do not apply to a classification task" in p for p in found), found
    cfg = make_cfg("task=linear")
    found = check(cfg, GridConfig(sigmas=[1.0], lengths=[5], baselines=["sign_x"]))
    assert any("['sign_x'] do not apply to a regression task" in p for p in found), found


def test_training_length_from_the_curriculum():
    cfg = make_cfg(
        "train.steps=3000",
        "curriculum.inc=2",
        "curriculum.start=5",
        "curriculum.end=21",
        "curriculum.interval=300",
    )
    assert training_length(cfg) == 21  # 5 + 2·⌊2999/300⌋ = 23, capped at 21
    cfg = make_cfg(
        "train.steps=1000",
        "curriculum.inc=2",
        "curriculum.start=5",
        "curriculum.end=21",
        "curriculum.interval=300",
    )
    assert training_length(cfg) == 5 + 2 * (999 // 300)  # 11: the end never reached
    cfg = make_cfg("train.steps=10", "curriculum.enabled=false", "curriculum.end=41")
    assert training_length(cfg) == 41


@pytest.mark.parametrize(
    "cell, want",
    [
        ({"sigma_x": 1.0, "length": 20}, "in_distribution"),
        ({"sigma_x": 1.0, "length": 21}, "in_distribution"),
        ({"sigma_x": 16.0, "length": 10}, "sigma_shift"),
        ({"sigma_x": 1.0, "length": 40}, "length_shift"),
        ({"sigma_x": 2.0, "length": 80}, "both_shift"),
    ],
)
def test_region(cell, want):
    assert region(cell, 21, {"sigma_x": 1.0}) == want
    # linear: every axis must be at its training value
    assert region({"sigma_f": 4.0, "sigma_x": 1.0, "length": 21}, 21, {"sigma_x": 1.0, "sigma_f": 1.0}) == (
        "sigma_shift"
    )


def test_quantifier_grid_stores_label_rules_and_regions():
    cfg, model, task = model_for(
        "task=every", "task.labels_in_context=false", "curriculum.end=8", "train.steps=100"
    )
    rules = list(BL.LABEL_RULES)
    kw = dict(sigmas=[1.0, 8.0], lengths=[6, 12], n_samples=2, batch_size=8, skip_first=2, seed=7)
    _, res = run_grid(cfg, model, task, baselines=rules, **kw)
    assert set(res.predictor) == {"model", *rules}
    assert set(res.metric) == {"sequence_error", "token_error"}
    assert (res.train_length == training_length(cfg)).all()
    want_region = {
        (1.0, 6): "in_distribution",
        (8.0, 6): "sigma_shift",
        (1.0, 12): "length_shift",
        (8.0, 12): "both_shift",
    }
    for _, r in res.iterrows():
        assert r.region == want_region[(r.sigma_x, r.length)]
    # every cell of every rule against numpy on the same prompts (balanced: drawn per cell)
    for (sigma, n), part in res.groupby(["sigma_x", "length"]):
        g = cell_generator(7, sigma, n)
        xs = np.concatenate(
            [task.draw(8, int(n), g, "cpu", {"sigma_x": float(sigma)}).xs.double().numpy() for _ in range(2)]
        )
        truth = _rules_numpy(xs)["cumulative_and"]  # "every"'s labels
        for name, guess in _rules_numpy(xs).items():
            wrong = (guess != truth)[:, 2:]
            for metric, value in (("sequence_error", wrong.any(1).mean()), ("token_error", wrong.mean())):
                got = part[(part.predictor == name) & (part.metric == metric)]["value"].item()
                assert got == pytest.approx(value, abs=1e-6), (sigma, n, name, metric)
    exact = res[res.predictor == "cumulative_and"]
    assert (exact["value"] == 0).all()  # "every"'s own rule is exact


def test_linear_mse_per_sigma_f_with_zero_and_least_squares():
    """The paper's table 1: MSE per σ_F with x ~ N(0, 1), model and baselines on the same prompts."""
    cfg, model, task = model_for("task=linear", "curriculum.enabled=false", "curriculum.end=9")
    sig_f = [1.0, 3.0, 10.0]
    ev, res = run_grid(
        cfg, model, task, sigmas=[1.0], sigmas_f=sig_f, lengths=[9], n_samples=2, batch_size=8, skip_first=3
    )
    assert set(res.sigma_x) == {1.0} and sorted(set(res.sigma_f)) == sig_f
    assert set(res.predictor) == {"model", "least_squares", "averaging", "knn3", "zero"}
    for sf in sig_f:
        g = cell_generator(1234, sf, 1.0, 9)
        ys, preds = [], []
        for _ in range(2):
            p = task.draw(8, 9, g, "cpu", {"sigma_f": sf, "sigma_x": 1.0})
            a, b, x = (t.double().numpy() for t in (p.params["a"], p.params["b"], p.xs))
            ys.append(a * x + b)
            with torch.no_grad():
                preds.append(model(task.build(p).tokens)[:, ::2].double().numpy())
        y, pred = np.concatenate(ys), np.concatenate(preds)
        cell = res[res.sigma_f == sf]
        zero = cell[cell.predictor == "zero"]["value"].item()
        assert zero == pytest.approx(np.mean(np.mean(y[:, 3:] ** 2, 1)), rel=1e-5)
        assert cell[cell.predictor == "least_squares"]["value"].item() < 1e-6 * max(1.0, zero)
        mine = cell[cell.predictor == "model"]["value"].item()
        assert mine == pytest.approx(np.mean((pred[:, 3:] - y[:, 3:]) ** 2), rel=1e-4)
        assert (cell.region == ("in_distribution" if sf == 1.0 else "sigma_shift")).all()


# ----------------------------------------------------------------------------- deviant
def _deviant_batch(task, sign, seed=3, bsz=12, n=10, k=2, m=40.0):
    g = torch.Generator().manual_seed(seed)
    clean = task.sample(bsz, n, g, "cpu")
    positions, values = DC.draw_insertions(g, bsz, n, k, m, sign)
    return DC.insert(task, clean, positions, values), positions, values


def _numpy_detail(model, task, dev, positions, skip_first):
    """Errors apart and every layer's and head's share on inserted keys, by loops in float64."""
    with torch.no_grad():
        out, maps = model(dev.tokens, need_weights=True)
    out = out.double().numpy()
    maps = [w.double().numpy() for w in maps]
    s, (bsz, n) = task.stride(), dev.xs.shape
    labels = dev.ys.double().numpy()
    want: dict = {"error_elsewhere": [], "error_after_inserted": []}
    for i in range(bsz):
        ins = set(positions[i].tolist())
        first = min(ins)
        wrong = [(out[i, j * s] > 0) != (labels[i, j] > 0) for j in range(n)]
        rest = [wrong[j] for j in range(skip_first, n) if j not in ins]
        after = [wrong[j] for j in range(first + 1, n) if j not in ins]
        want["error_elsewhere"].append(np.mean(rest) if rest else np.nan)
        want["error_after_inserted"].append(np.mean(after) if after else np.nan)
        for layer, w in enumerate(maps, start=1):
            heads = w.shape[1]
            per = {h: [] for h in range(heads)}
            for e in range(first + 1, n):
                q = e * s
                for h in range(heads):
                    per[h].append(sum(w[i, h, q, j * s] for j in ins if j * s <= q))
            for h in range(heads):
                want.setdefault((layer, str(h)), []).append(np.mean(per[h]) if per[h] else np.nan)
            rows = np.array([per[h] for h in range(heads)]) if per[0] else np.full((heads, 1), np.nan)
            want.setdefault((layer, "mean"), []).append(rows.mean(0).mean())
            want.setdefault((layer, "max"), []).append(rows.max(0).mean())
    return want


@pytest.mark.parametrize("extra", [["task.labels_in_context=false"], ["task.labels_in_context=true"]])
def test_deviant_detail_against_loops(extra):
    cfg, model, task = model_for("task=every", *extra, scale=30.0)
    with torch.no_grad():  # attention far from uniform
        for block in model.blocks:
            c = block.attn.qkv.weight.shape[1]
            block.attn.qkv.weight[: 2 * c] *= 8.0
    dev, positions, values = _deviant_batch(task, "positive")
    res = DC.deviant_cell(model, task, dev, positions, values, skip_first=2, detail=True)
    want = _numpy_detail(model, task, dev, positions, 2)
    for key in ("error_elsewhere", "error_after_inserted"):
        np.testing.assert_allclose(res[key].numpy(), want[key], rtol=1e-12, equal_nan=True)
    for layer in (1, 2):
        for head in ("mean", "max", "0", "1"):
            got = res[("attention", layer, head, "attention_on_inserted")].numpy()
            np.testing.assert_allclose(got, want[(layer, head)], rtol=1e-5, atol=1e-7, equal_nan=True)
    # the last layer's entries are today's metrics
    np.testing.assert_allclose(
        res[("attention", 2, "mean", "attention_on_inserted")].numpy(), res["attention_on_inserted"].numpy()
    )
    assert not np.allclose(want[(1, "0")], want[(1, "1")], equal_nan=True)  # heads differ: a real test
    plain = DC.deviant_cell(model, task, dev, positions, values, skip_first=2)
    assert "error_elsewhere" not in plain and not any(isinstance(k, tuple) for k in plain)


@pytest.mark.parametrize("name", ["every", "some"])
def test_the_control_sign_makes_following_right_and_the_adverse_sign_wrong(name):
    """Under the control sign the true labels follow the inserted value's label exactly (rate 1), under
    the adverse sign they do not: only the adverse sign can tell following from solving the task."""
    cfg, model, task = model_for(f"task={name}", "task.labels_in_context=false")
    adverse = DC.adverse_sign(task)
    assert adverse == {"every": "positive", "some": "negative"}[name]
    control = "negative" if adverse == "positive" else "positive"
    kw = dict(length=12, n_samples=2, batch_size=32, skip_first=3, seed=5, device=CPU)
    rate = {}
    for sign in (adverse, control):
        tables = DC.deviant_tables(model, task, {"M": 50.0, "k": 1}, sign=sign, detail=True, **kw)
        res = pd.DataFrame(tables["results"])
        rate[sign] = res[(res.predictor == "labels") & (res.metric == "follows_largest")]["value"].item()
        attn = pd.DataFrame(tables["attention"])
        assert set(attn.layer) == {1, 2} and {"mean", "max", "0", "1", "uniform"} == set(attn["head"])
    assert rate[control] == 1.0 and rate[adverse] < 0.9, rate
    assert DC.adverse_sign(build_task(make_cfg("task=linear").task)) is None


def test_deviant_detail_through_the_runner(tmp_path):
    """The evaluator stores the attention table and draws its figures; summary names the sign's role."""
    cfg = make_cfg("task=some", "task.labels_in_context=false", "train.steps=2", "evaluation.enabled=false")
    train(cfg, tmp_path / "run")
    run = load_run(tmp_path / "run", CPU)
    dcfg = D.DeviantConfig(
        magnitudes=[5.0, 50.0], counts=[1], n_samples=1, batch_size=8, sign="negative", detail=True
    )
    summary = evaluate(run, dcfg)
    assert summary["following_is"] == "wrong" and summary["adverse_sign"] == "negative"
    assert set(summary["attention_by_layer"]) == {"layer=1"}
    assert (tmp_path / "run" / "eval" / "deviant" / summary["protocol_id"] / "attention.csv").exists()
    assert "attention_by_layer.png" in summary["figures"] and "errors_apart.png" in summary["figures"]


# ----------------------------------------------------------------------------- boundary
ARCHS = {
    "preln": ["model=gpt2"],
    "preln_embln": ["model=gpt2", "model.emb_ln=true"],
    "postln": ["model=gpt2", "model.post_ln=true"],
    "postln_noemb": ["model=gpt2", "model.post_ln=true", "model.emb_ln=false"],
    "attn_only": ["model=attn_only"],
    "attn_only_postln": ["model=attn_only", "model.post_ln=true"],
}


def _randomised(arch: str, seed: int = 0):
    """A float64 model of ``arch`` with every LayerNorm's γ, β and the read-out randomised (so a bound
    computed from the wrong LayerNorm differs)."""
    cfg, model, task = model_for(
        "task=linear", *ARCHS.get(arch, ["model=gpt2", "model.final_ln=false"]), seed=seed
    )
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.copy_(torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(torch.randn(m.bias.shape, generator=g))
        model.read_out.weight.copy_(torch.randn(model.read_out.weight.shape, generator=g))
        model.read_out.bias.fill_(0.7)
    return model.double().eval()


@pytest.mark.parametrize("arch", [*ARCHS])
def test_readout_bound_holds_and_is_tight(arch):
    model = _randomised(arch)
    bound = BE.readout_bound(model)
    lo, hi = bound["bound_low"], bound["bound_high"]
    # numpy: the looser |ŷ| bound from the chosen LayerNorm's weights, and it contains the tight one
    ln = BE.last_layernorm(model)
    w, gam, beta = (t.detach().double().numpy().ravel() for t in (model.read_out.weight, ln.weight, ln.bias))
    c = w @ beta + model.read_out.bias.item()
    assert bound["bound_abs"] == pytest.approx(np.sqrt(len(w)) * np.linalg.norm(w * gam) + abs(c), rel=1e-12)
    assert bound["bound_abs"] >= max(abs(lo), abs(hi)) - 1e-12 and lo < c < hi
    # the read-out's input is in the image of that LayerNorm: (v − β)/γ has zero mean and norm <= √C
    g = torch.Generator().manual_seed(1)
    tokens = (
        torch.randn(64, 16, 1, generator=g, dtype=torch.float64)
        * 10 ** torch.empty(64, 1, 1).uniform_(-1, 3, generator=g).double()
    )
    with torch.no_grad():
        v, _ = model.hidden(tokens)
        out = model(tokens)
    z = ((v - ln.bias) / ln.weight).detach().numpy()
    np.testing.assert_allclose(z.mean(-1), 0.0, atol=1e-8)
    assert (np.linalg.norm(z, axis=-1) <= np.sqrt(len(w)) + 1e-9).all()
    assert lo <= out.min().item() and out.max().item() <= hi
    # adversarial inputs (gradient ascent and descent on the prompt's numbers) stay inside
    for sign in (1.0, -1.0):
        x = tokens[:8].clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=0.5)
        for _ in range(60):
            opt.zero_grad()
            (-sign * model(x)[:, -1].sum()).backward()
            opt.step()
        with torch.no_grad():
            y = model(x)
        assert lo <= y.min().item() and y.max().item() <= hi, (sign, y.min().item(), y.max().item(), lo, hi)
    # tight: gradient ascent on the LayerNorm's input h gets within 0.1% of each end
    for sign, end in ((1.0, hi), (-1.0, lo)):
        h = torch.randn(4, len(w), generator=g, dtype=torch.float64).requires_grad_(True)
        opt = torch.optim.Adam([h], lr=0.3)
        for _ in range(300):
            opt.zero_grad()
            (-sign * model.read_out(ln(h)).sum()).backward()
            opt.step()
        with torch.no_grad():
            best = (sign * model.read_out(ln(h))).max().item() * sign
        assert abs(best - end) <= 1e-3 * (hi - lo), (sign, best, end)
        assert sign * best <= sign * end + 1e-9


def test_no_bound_without_the_final_layernorm():
    model = _randomised("preln_nofinal")
    assert BE.last_layernorm(model) is None and BE.readout_bound(model) is None
    with torch.no_grad():  # and indeed the output grows without limit with the input
        small, large = (
            model(torch.full((1, 6, 1), v, dtype=torch.float64)).abs().max().item() for v in (1.0, 1e6)
        )
    assert large > 1e3 * small


def test_plateau_against_numpy():
    rng = np.random.default_rng(0)
    y_true = rng.uniform(-30, 30, 4000)
    groups = np.repeat(np.arange(400), 10)
    clipped = np.clip(y_true, -7.0, 9.0) + rng.normal(0, 0.01, len(y_true))
    est = BE.plateau(y_true, clipped, groups, cut=4.2, side=1.0, share=0.1, min_count=20)
    beyond = y_true > 4.2
    assert est["n_beyond"] == beyond.sum()
    slope = np.polyfit(y_true[beyond], clipped[beyond], 1)[0]
    assert est["slope"][0] == pytest.approx(slope, rel=1e-9) and est["slope"][1] < slope < est["slope"][2]
    outer = y_true[beyond] >= np.quantile(y_true[beyond], 0.9)
    level = clipped[beyond][outer].mean()
    assert est["plateau"][0] == pytest.approx(level, rel=1e-12) and est["plateau"][0] == pytest.approx(
        9.0, abs=0.01
    )
    assert est["plateau"][1] < level < est["plateau"][2] and est["plateau"][2] - est["plateau"][1] < 0.01
    neg = BE.plateau(y_true, clipped, groups, cut=-4.2, side=-1.0, share=0.1, min_count=20)
    assert neg["plateau"][0] == pytest.approx(-7.0, abs=0.01)
    # a predictor with no boundary extrapolates: slope 1 beyond the training range
    ident = BE.plateau(y_true, y_true, groups, cut=4.2, side=1.0, share=0.1, min_count=20)
    assert ident["slope"][0] == pytest.approx(1.0, abs=1e-9)
    few = BE.plateau(y_true, y_true, groups, cut=29.99, side=1.0, share=0.1, min_count=20)
    assert math.isnan(few["slope"][0]) and math.isnan(few["plateau"][0])


@pytest.mark.parametrize("arch", ["postln", "preln_nofinal"])
def test_boundary_through_the_runner_stores_the_bound_and_plateau(tmp_path, arch):
    extra = ARCHS.get(arch, ["model=gpt2", "model.final_ln=false"])
    cfg = make_cfg("task=linear", *extra, "train.steps=2", "evaluation.enabled=false")
    train(cfg, tmp_path / "run")
    run = load_run(tmp_path / "run", CPU)
    bcfg = B.BoundaryConfig(
        n_functions=8, n_query=9, n_scaled=32, min_count=4, n_bins=4, n_train_samples=1000
    )
    summary = evaluate(run, bcfg)
    folder = tmp_path / "run" / "eval" / "boundary" / summary["protocol_id"]
    res = pd.read_csv(folder / "results.csv")
    table = pd.read_csv(folder / "boundary.csv")
    assert {"slope_pos", "plateau_neg", "slope_pos_low", "n_beyond_pos"} <= set(table.columns)
    assert {"slope_neg", "slope_pos", "plateau_neg", "plateau_pos"} <= set(res.metric)
    if arch == "preln_nofinal":
        assert summary["readout_bound"] is None and not res.metric.str.startswith("bound_").any()
        return
    want = BE.readout_bound(run.model)
    assert summary["readout_bound"] == pytest.approx(want)
    pred = pd.read_csv(folder / "predictions.csv")
    assert want["bound_low"] <= pred.pred_model.min() and pred.pred_model.max() <= want["bound_high"]
    model_rows = table[table.predictor == "model"]
    np.testing.assert_allclose(model_rows.bound_high, want["bound_high"], rtol=1e-9)
    assert table[table.predictor == "least_squares"].bound_high.isna().all()


# ----------------------------------------------------------------------------- the study's settings
def test_figures_off_writes_tables_only_in_the_same_protocol(tmp_path):
    cfg = make_cfg("task=linear", "train.steps=2", "evaluation.enabled=false")
    train(cfg, tmp_path / "run")
    run = load_run(tmp_path / "run", CPU)
    kw = dict(sigmas=[1.0], sigmas_f=[1.0, 2.0], lengths=[5], n_samples=1, batch_size=4)
    off = evaluate(run, GridConfig(figures=False, **kw))
    folder = tmp_path / "run" / "eval" / "grid" / off["protocol_id"]
    assert off["figures"] == [] and not list(folder.glob("*.png")) and (folder / "results.csv").exists()
    on = evaluate(run, GridConfig(force=True, **kw))  # the same protocol: figures are not part of it
    assert on["protocol_id"] == off["protocol_id"] and on["figures"] and list(folder.glob("*.png"))


def test_study_evaluations_by_task_kind_and_tasks_key():
    icl = study.load("icl_cpu")
    linear, every = study.evaluations(icl, "linear"), study.evaluations(icl, "every")
    assert set(linear) == {"grid_linear", "grid_linear_sigma_f", "deviant", "boundary"}
    assert set(every) == {"grid_quantifier", "deviant", "deviant_negative"}
    assert "tasks" not in every["deviant_negative"] and every["deviant_negative"].sign.value == "negative"
    assert every["deviant"].detail and not every["deviant"].figures
