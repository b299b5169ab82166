"""The deviant and attention evaluations, checked against hand-computed and brute-force values."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import ValidationError
from torch import nn

from ssa_repro.evaluation import attention as A
from ssa_repro.evaluation import attention_maps
from ssa_repro.evaluation import deviant as D
from ssa_repro.evaluation import deviant_cells as DC
from ssa_repro.evaluation.loading import load_run
from ssa_repro.evaluation.runner import check, evaluate
from ssa_repro.models import build_model
from ssa_repro.tasks import TASKS, build_task
from ssa_repro.tasks.base import Prompts
from ssa_repro.training.trainer import train
from tests.conftest import CONF, make_cfg


# ----------------------------------------------------------------------------- helpers
def make_task(name: str, **overrides):
    cfg = OmegaConf.structured(TASKS.schemas[name])
    cfg.name = name
    for key, value in overrides.items():
        cfg[key] = value
    return build_task(cfg)


def brute_force_labels(xs: torch.Tensor, every: bool) -> torch.Tensor:
    rows = []
    for row in xs.tolist():
        acc, labels = every, []
        for x in row:
            acc = (acc and x > 0) if every else (acc or x > 0)
            labels.append(1.0 if acc else -1.0)
        rows.append(labels)
    return torch.tensor(rows)


def deviant_cfg(**overrides):
    return OmegaConf.merge(OmegaConf.structured(D.DeviantConfig), overrides)


def attention_cfg(**overrides):
    return OmegaConf.merge(OmegaConf.structured(A.AttentionConfig), overrides)


def tiny_model(n_layer=2, n_head=2, scale=8.0, scorer="softmax", seed=0):
    """A small decoder whose attention is far from uniform (q, k weights scaled up)."""
    cfg = make_cfg(f"model.n_layer={n_layer}", f"model.n_head={n_head}", f"scorer={scorer}")
    torch.manual_seed(seed)
    model = build_model(cfg.model, cfg.scorer).eval()
    with torch.no_grad():
        for block in model.blocks:
            c = block.attn.qkv.weight.shape[1]
            block.attn.qkv.weight[: 2 * c] *= scale
        model.read_in.weight.mul_(scale)
    return model


class SignStub(nn.Module):
    """Predicts, at every token, the token's own value (so the sign of x at x tokens); no attention."""

    blocks: list = []

    def forward(self, tokens, need_weights=False):
        out = tokens[..., 0].clone()
        return (out, []) if need_weights else out


# ----------------------------------------------------------------------------- inserting
@pytest.mark.parametrize("sign", ["positive", "negative", "random"])
@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("every", {}),
        ("some", {}),
        ("every", {"labels_in_context": False, "supervise": "last"}),
        ("some", {"labels_in_context": False}),
    ],
)
def test_insert_quantifier(name, extra, sign):
    task = make_task(name, **extra)
    bsz, n, k, m = 64, 9, 3, 37.5
    g = torch.Generator().manual_seed(1)
    clean = task.sample(bsz, n, g, "cpu")
    positions, values = DC.draw_insertions(g, bsz, n, k, m, sign)
    dev = DC.insert(task, clean, positions, values)
    for i in range(bsz):
        pos = positions[i].tolist()
        assert len(set(pos)) == k  # distinct
        changed = [j for j in range(n) if dev.xs[i, j] != clean.xs[i, j]]
        assert set(changed) <= set(pos)
        for j in range(n):
            if j in pos:
                assert abs(dev.xs[i, j].item()) == m
                if sign == "positive":
                    assert dev.xs[i, j].item() == m
                if sign == "negative":
                    assert dev.xs[i, j].item() == -m
            else:
                assert dev.xs[i, j] == clean.xs[i, j]
    if sign == "random":  # both signs occur (64 × 3 fair coins)
        assert (values > 0).any() and (values < 0).any()
    labels = brute_force_labels(dev.xs, every=name == "every")
    if task.cfg.labels_in_context:
        assert torch.equal(dev.tokens[:, 0::2, 0], dev.xs)
        assert torch.equal(dev.tokens[:, 1::2, 0], labels)
    else:
        assert torch.equal(dev.tokens[..., 0], dev.xs)
    want = labels[:, -1:] if task.supervise_last else labels
    assert torch.equal(dev.targets, want)
    assert torch.equal(dev.pred_idx, clean.pred_idx)


def test_positions_are_uniform():
    g = torch.Generator().manual_seed(0)
    positions, _ = DC.draw_insertions(g, 20000, 5, 2, 1.0, "positive")
    freq = torch.bincount(positions.flatten(), minlength=5).double() / positions.numel()
    assert torch.allclose(freq, torch.full((5,), 0.2, dtype=torch.float64), atol=0.01)


def test_insert_linear_recomputes_the_line():
    task = make_task("linear")
    bsz, n = 4, 7
    g = torch.Generator().manual_seed(2)
    a = torch.tensor([[2.0], [-0.5], [3.25], [0.1]])
    b = torch.tensor([[1.0], [3.0], [-2.0], [0.0]])
    xs = torch.randn(bsz, n, generator=g)
    clean = task.build(Prompts(xs, {"a": a, "b": b}))
    positions = torch.tensor([[0, 3], [6, 1], [2, 5], [4, 0]])
    values = torch.tensor([[50.0, -50.0], [100.0, 100.0], [-7.0, 20.0], [1e3, -1e3]])
    dev = DC.insert(task, clean, positions, values)
    ys = dev.tokens[:, 1::2, 0]
    assert torch.equal(dev.tokens[:, 0::2, 0], dev.xs) and torch.equal(dev.targets, ys)
    for i in range(bsz):
        for j in range(n):
            if j in positions[i].tolist():
                v = values[i, positions[i].tolist().index(j)].item()
                assert dev.xs[i, j].item() == v
                want = a[i, 0] * torch.tensor(v) + b[i, 0]  # the prompt's own line (float32)
                assert ys[i, j].item() == want.item()
            else:  # untouched examples are kept bit for bit
                assert dev.xs[i, j] == xs[i, j] and ys[i, j] == clean.targets[i, j]


# ----------------------------------------------------------------------------- follows the largest
def test_follows_largest_by_hand():
    signs = torch.tensor(
        [
            [1, -1, 1, 1, -1, 1],  # inserted at 2 (sign +): after it 1, -1, 1 -> 2/3
            [1, 1, -1, 1, 1, 1],  # inserted at 4 (5) and 1 (9): largest at 1 (+), after 1: -1 1 1 1 -> 3/4
            [
                -1,
                1,
                1,
                -1,
                -1,
                -1,
            ],  # equal values at 3 and 0: earliest (0, sign -), after 0: 1 1 -1 -1 -1 -> 3/5
            [
                1,
                1,
                1,
                1,
                1,
                -1,
            ],  # values -9 at 1 and 2 at 4: largest is the 2 at 4 (+); after 1: 1 1 1 -1 -> 3/4
            [1, 1, 1, 1, 1, 1],  # inserted at the last position: nothing follows -> NaN
        ]
    )
    positions = torch.tensor([[2, 2], [4, 1], [3, 0], [1, 4], [5, 5]])
    values = torch.tensor([[5.0, 5.0], [5.0, 9.0], [4.0, 4.0], [-9.0, 2.0], [1.0, 1.0]])
    got = DC.follows_largest(signs, positions, values)
    assert got[:4].tolist() == pytest.approx([2 / 3, 3 / 4, 3 / 5, 3 / 4])
    assert math.isnan(got[4].item())


def test_follows_largest_and_errors_on_a_stub_model():
    """The stub predicts sign(x_i) at x_i: after a positive deviant it 'follows' it exactly where x > 0."""
    task = make_task("every")
    xs = torch.tensor(
        [
            [0.5, -1.0, 0.3, 0.2, -0.4, 0.9],
            [-0.5, 0.2, 0.1, -0.3, 0.7, -0.8],
        ]
    )
    clean = task.build(Prompts(xs))
    positions = torch.tensor([[2], [0]])
    values = torch.tensor([[100.0], [100.0]])
    dev = DC.insert(task, clean, positions, values)
    assert dev.xs[0].tolist() == pytest.approx([0.5, -1.0, 100.0, 0.2, -0.4, 0.9])
    res = DC.deviant_cell(SignStub(), task, dev, positions, values, skip_first=2)
    # row 0: predictions + - + + - +, labels + - - - - -; reference at index 2: model +, labels -
    #   after index 2: model + - + -> 2/3 follow; labels - - - -> 3/3; at the inserted value: wrong
    #   from index 2 on: labels - - - -, predictions + + - + -> 3 of 4 wrong
    # row 1: x = 100 .2 .1 -.3 .7 -.8: predictions + + + - + -, labels + + + - - -
    #   after index 0: model + + - + - -> 3/5; labels + + - - - -> 2/5; at the inserted value: right
    #   from index 2 on: labels + - - -, predictions + - + - -> 1 of 4 wrong (the .7)
    assert res["follows_largest"].tolist() == pytest.approx([2 / 3, 3 / 5])
    assert res["labels:follows_largest"].tolist() == pytest.approx([1.0, 2 / 5])
    assert res["error_at_inserted"].tolist() == [1.0, 0.0]
    assert res["token_error"].tolist() == pytest.approx([3 / 4, 1 / 4])
    assert res["sequence_error"].tolist() == [1.0, 1.0]
    assert "attention_on_inserted" not in res  # the stub has no attention


def test_linear_errors_on_a_stub_model():
    """The stub predicts x at x: squared errors (a x + b - x)^2 with a = 2, b = 1 -> (x + 1)^2."""
    task = make_task("linear")
    xs = torch.tensor([[0.0, 1.0, -1.0, 2.0, 3.0]])
    clean = task.build(Prompts(xs, {"a": torch.tensor([[2.0]]), "b": torch.tensor([[1.0]])}))
    positions, values = torch.tensor([[3]]), torch.tensor([[10.0]])
    dev = DC.insert(task, clean, positions, values)
    res = DC.deviant_cell(SignStub(), task, dev, positions, values, skip_first=1)
    # x = 0 1 -1 10 3 -> errors 1 4 0 121 16; from index 1: (4 + 0 + 121 + 16) / 4
    assert res["mse"].item() == pytest.approx(141 / 4, rel=1e-5)
    assert res["mse_inserted"].item() == pytest.approx(121, rel=1e-5)
    assert res["mse_untouched"].item() == pytest.approx(20 / 3, rel=1e-5)


# ----------------------------------------------------------------------------- attention share
def direct_share(model, batch, positions, stride):
    """Loops over prompts and queries: last layer, x-token queries after the first inserted one."""
    _, maps = model(batch.tokens, need_weights=True)
    w = maps[-1].double()  # [B, H, T, T]
    out = {"mean": [], "max": [], "uniform": []}
    for i in range(w.shape[0]):
        ins = [p * stride for p in positions[i].tolist()]
        first = min(positions[i].tolist())
        per = {"mean": [], "max": [], "uniform": []}
        for e in range(first + 1, batch.xs.shape[1]):
            q = e * stride
            heads = [sum(w[i, h, q, j].item() for j in ins if j <= q) for h in range(w.shape[1])]
            per["mean"].append(sum(heads) / len(heads))
            per["max"].append(max(heads))
            per["uniform"].append(sum(j <= q for j in ins) / (q + 1))
        for key in out:
            out[key].append(np.mean(per[key]) if per[key] else float("nan"))
    return out


@pytest.mark.parametrize(
    ("name", "extra"), [("every", {}), ("every", {"labels_in_context": False}), ("linear", {})]
)
def test_attention_share_matches_a_direct_computation(name, extra, monkeypatch):
    task = make_task(name, **extra)
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    clean = task.sample(6, 8, g, "cpu")
    positions, values = DC.draw_insertions(g, 6, 8, 2, 30.0, "random")
    dev = DC.insert(task, clean, positions, values)
    want = direct_share(model, dev, positions, task.stride())
    with torch.inference_mode():
        res = DC.deviant_cell(model, task, dev, positions, values, skip_first=1)
    for key, mine in (
        ("mean", "attention_on_inserted"),
        ("max", "attention_on_inserted_max_head"),
        ("uniform", "uniform_share"),
    ):
        np.testing.assert_allclose(res[mine].numpy(), want[key], rtol=1e-5, atol=1e-7)
    assert not np.allclose(want["mean"], want["uniform"], atol=1e-3)  # a non-trivial model
    # chunks of one prompt give the same numbers
    monkeypatch.setattr(attention_maps, "MAX_ATTENTION_ELEMENTS", 1)
    again = DC.deviant_cell(model, task, dev, positions, values, skip_first=1)
    for key, v in res.items():
        np.testing.assert_allclose(again[key].numpy(), v.numpy(), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------------------- entropy, max weight
def test_row_stats_against_numpy():
    w = np.zeros((2, 2, 3, 3))
    w[0, 0] = [[1, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]
    w[0, 1] = [[1, 0, 0], [0.9, 0.1, 0], [1 / 3, 1 / 3, 1 / 3]]
    w[1, 0] = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]
    w[1, 1] = [[1, 0, 0], [0.25, 0.75, 0], [0.1, 0.1, 0.8]]
    queries = torch.tensor([[False, True, True], [False, False, True]])
    got = A.row_stats(torch.tensor(w), queries)

    def ent(row):
        p = np.asarray(row)
        p = p[p > 0]
        return float(-(p * np.log(p)).sum())

    want_e, want_m = [], []
    for b in range(2):
        rows = [t for t in range(3) if queries[b, t]]
        want_e.append(np.mean([np.mean([ent(w[b, h, t]) for h in range(2)]) for t in rows]))
        want_m.append(np.mean([np.mean([w[b, h, t].max() for h in range(2)]) for t in rows]))
    np.testing.assert_allclose(got["entropy"].numpy(), want_e, rtol=1e-12)
    np.testing.assert_allclose(got["max_weight"].numpy(), want_m, rtol=1e-12)
    # by hand for prompt 1: row 2 only; heads 0 (one-hot: 0) and 1 (.1 .1 .8)
    assert got["entropy"][1].item() == pytest.approx((0 + ent([0.1, 0.1, 0.8])) / 2)
    assert got["max_weight"][1].item() == pytest.approx((1 + 0.8) / 2)
    uni = A.uniform_stats(queries)
    assert uni["entropy"].tolist() == pytest.approx([(math.log(2) + math.log(3)) / 2, math.log(3)])
    assert uni["max_weight"].tolist() == pytest.approx([(1 / 2 + 1 / 3) / 2, 1 / 3])


def test_layer_stats_match_the_model_maps():
    task = make_task("every")
    model = tiny_model()
    batch = task.sample(5, 6, torch.Generator().manual_seed(4), "cpu")
    queries = torch.ones(5, 12, dtype=torch.bool)
    queries[:, 0] = False
    got = A.layer_stats(model, batch.tokens, queries)
    with torch.inference_mode():
        _, maps = model(batch.tokens, need_weights=True)
    assert len(got) == 2
    for layer, w in enumerate(maps):
        w = w.double().numpy()[:, :, 1:]  # rows 1..T-1
        logw = np.log(np.where(w > 0, w, 1.0))
        np.testing.assert_allclose(
            got[layer]["entropy"].numpy(), (-(w * logw).sum(-1)).mean((1, 2)), rtol=1e-6
        )
        np.testing.assert_allclose(got[layer]["max_weight"].numpy(), w.max(-1).mean((1, 2)), rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "cfg", "tokens"),
    [
        ("every", {"prompt": [0.5, -1.0, 2.0]}, [0.5, 1.0, -1.0, -1.0, 2.0, -1.0]),
        ("some", {"prompt": [-0.5, 3.0]}, [-0.5, -1.0, 3.0, 1.0]),
        ("linear", {"prompt": [1.0, -2.0, 0.5], "a": 2.0, "b": 1.0}, [1.0, 3.0, -2.0, -3.0, 0.5, 2.0]),
    ],
)
def test_given_prompt_tokens_and_maps(name, cfg, tokens):
    task = make_task(name)
    batch, marked = A.one_prompt(task, attention_cfg(**cfg), 10)
    assert marked == -1
    assert batch.tokens[0, :, 0].tolist() == pytest.approx(tokens)
    model = tiny_model()
    maps = A.attention_maps(model, batch.tokens)
    with torch.inference_mode():
        _, direct = model(batch.tokens, need_weights=True)
    for got, want in zip(maps, direct):
        assert torch.equal(got, want)


def test_generated_prompt_with_a_deviant_value():
    task = make_task("every")
    batch, marked = A.one_prompt(task, attention_cfg(deviant_magnitude=-40.0, deviant_position=3), 8)
    assert marked == 6 and batch.xs[0, 3].item() == -40.0 and batch.tokens[0, 6, 0].item() == -40.0
    assert torch.equal(batch.tokens[0, 1::2, 0], brute_force_labels(batch.xs, every=True)[0])
    batch, marked = A.one_prompt(task, attention_cfg(deviant_magnitude=40.0), 8)
    assert marked == 8 and batch.xs[0, 4].item() == 40.0  # the middle by default


# ----------------------------------------------------------------------------- check() and configs
def run_config(*overrides):
    return make_cfg(*overrides)  # TINY: curriculum.end=5, max_positions=64


def test_deviant_check_names_the_keys():
    rc = run_config("task=every")
    assert check(rc, deviant_cfg(counts=[1, 2])) == []
    assert check(run_config("task=linear"), deviant_cfg(counts=[1, 2])) == []
    # counts <= length - skip_first: 5 examples, skip 3 -> at most 2
    assert any("eval.counts=[1, 2, 4]" in p and "[1, 2]" in p for p in check(rc, deviant_cfg()))
    found = check(rc, deviant_cfg(counts=[1, 3], magnitudes=[0.0, 5.0], n_samples=0, batch_size=0))
    text = "\n".join(found)
    for key in ("eval.counts", "eval.magnitudes", "eval.n_samples", "eval.batch_size"):
        assert key in text
    too_long = check(rc, deviant_cfg(length=40, counts=[1]))
    assert any("eval.length=40" in p and "max_positions=64" in p for p in too_long)
    assert any("eval.skip_first" in p for p in check(rc, deviant_cfg(skip_first=5)))
    # linear prompts keep their function, so every example but the skipped ones may be replaced
    assert check(run_config("task=linear"), deviant_cfg(counts=[4], skip_first=1)) == []
    assert any(
        "eval.counts" in p for p in check(run_config("task=linear"), deviant_cfg(counts=[5], skip_first=1))
    )
    # labels out of context: one token per example
    rc1 = run_config("task=every", "task.labels_in_context=false")
    assert check(rc1, deviant_cfg(length=64)) == [] and check(rc, deviant_cfg(length=33)) != []
    assert check(rc, deviant_cfg(length=32)) == []
    bad_sign = OmegaConf.create({**OmegaConf.to_container(deviant_cfg(), enum_to_str=True), "sign": "up"})
    assert any("eval.sign" in p and "positive, negative, random" in p for p in check(rc, bad_sign))
    with pytest.raises(ValidationError, match="positive, negative, random"):
        deviant_cfg(sign="up")


def test_attention_check_names_the_keys():
    rc = run_config("task=every")
    assert check(rc, attention_cfg()) == []
    found = check(
        rc, attention_cfg(sigmas=[0.0], magnitudes=[-1.0], n_prompts=1, batch_size=0, deviant_position=9)
    )
    text = "\n".join(found)
    for key in (
        "eval.sigmas",
        "eval.magnitudes",
        "eval.n_prompts",
        "eval.batch_size",
        "eval.deviant_position",
    ):
        assert key in text
    assert any("eval.prompt" in p for p in check(rc, attention_cfg(prompt=[1.0] * 40)))
    assert any(
        "eval.deviant_magnitude" in p for p in check(rc, attention_cfg(prompt=[1.0], deviant_magnitude=3.0))
    )
    assert any("eval.length" in p for p in check(rc, attention_cfg(length=50)))
    assert any("ff_only" in p for p in check(run_config("model=ff_only"), attention_cfg()))


@pytest.mark.parametrize(("name", "schema"), [("deviant", D.DeviantConfig), ("attention", A.AttentionConfig)])
def test_yaml_composes_to_the_schema_defaults(name, schema):
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("evaluate", overrides=["run_dir=x", f"eval={name}"])
        assert OmegaConf.to_container(cfg.eval, enum_to_str=True) == OmegaConf.to_container(
            OmegaConf.structured(schema), enum_to_str=True
        )
        if name == "deviant":
            with pytest.raises(Exception) as e:  # noqa: PT011  (Hydra wraps the validation error)
                compose("evaluate", overrides=["run_dir=x", "eval=deviant", "eval.sign=sideways"])
            text = str(e.value) + str(e.value.__cause__)
            assert "sideways" in text and "positive, negative, random" in text, text


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for task in ("every", "linear"):
        d = tmp_path_factory.mktemp(task)
        train(make_cfg(f"task={task}", "train.steps=2", "evaluation.enabled=false"), d)
        out[task] = d
    return out


COMMON = ["task", "scorer", "model", "seed", "step", "predictor", "length", "metric", "value", "n_samples"]


@pytest.mark.parametrize("task", ["every", "linear"])
def test_end_to_end(runs, task):
    run = load_run(runs[task], torch.device("cpu"))
    cfg = deviant_cfg(n_samples=1, batch_size=8, magnitudes=[1.0, 100.0], counts=[1, 2], skip_first=1)
    summary = evaluate(run, cfg)
    folder = Path(summary["dir"])
    frame = pd.read_csv(folder / "results.csv")
    assert set([*COMMON, "M", "k", "ci_low", "ci_high"]) <= set(frame.columns)
    metrics = set(frame.metric)
    assert {"attention_on_inserted", "attention_on_inserted_max_head", "uniform_share"} <= metrics
    quant = {"sequence_error", "token_error", "follows_largest", "error_at_inserted"}
    assert (quant if task == "every" else {"mse", "mse_inserted", "mse_untouched"}) <= metrics
    assert set(frame.M) == {1.0, 100.0} and set(frame.k) == {1, 2}
    pngs = [f for f in summary["figures"] if f.endswith(".png")] + ["example_attention.png"]
    assert len(pngs) == (4 if task == "every" else 3)
    for f in pngs:
        img = mpimg.imread(folder / f)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300

    cfg = attention_cfg(
        n_prompts=4, batch_size=3, sigmas=[1.0, 10.0], magnitudes=[0.0, 50.0], deviant_magnitude=20.0
    )
    summary = evaluate(run, cfg)
    out = Path(summary["dir"])
    frame = pd.read_csv(out / "results.csv")
    frame = frame[frame.sweep != "maps"]
    assert set([*COMMON, "layer", "sigma_x", "M", "sweep", "ci_low", "ci_high"]) <= set(frame.columns)
    model_rows = frame[frame.predictor == "model"]
    assert set(model_rows.metric) == {"entropy", "max_weight"} and set(model_rows.layer) == {0}
    assert (model_rows.n_samples == 4).all() and len(model_rows) == 2 * (2 + 2)
    maps = np.load(out / "maps.npz")
    assert maps["maps"].shape == (1, 2, 10, 10) and int(maps["marked"]) == 4  # example 2 of 5, x token 4
    np.testing.assert_allclose(maps["maps"].sum(-1), 1.0, rtol=1e-5)
    for f in [f for f in summary["figures"] if f.endswith(".png")]:
        img = mpimg.imread(out / f)
        assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
