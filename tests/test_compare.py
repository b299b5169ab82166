"""scripts/compare.py and ssa_repro/reports/: numbers checked against hand computations from the runs'
own stored cells, sweeps grouped by their overrides with seed intervals, shared cells, clear errors,
the script and the notebook."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import matplotlib
import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from ssa_repro.evaluation.store import stored
from ssa_repro.jobs.train_job import run_job
from ssa_repro.reports import compare, figures, tables
from ssa_repro.reports.difference import difference, resolve_baseline
from ssa_repro.reports.runs import ReportError
from tests.conftest import ROOT, TINY, make_cfg, run_script

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny linear runs (their end-of-run grid: 2 × 2 σ at one length): softmax and SSA."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for scorer in ("softmax", "ssa"):
        run_job(make_cfg(f"scorer={scorer}", "evaluation.lengths=[5]"), root / scorer)
        out[scorer] = root / scorer
    return out


def cells_by_hand(run) -> pd.DataFrame:
    (store,) = stored(run, "grid")
    g = pd.concat([pd.read_csv(p) for p in store.parts()])
    return g[(g.predictor == "model") & (g.metric == "mse")]


def grid_by_hand(run) -> pd.DataFrame:
    g = cells_by_hand(run)
    return g.pivot(index="sigma_f", columns="sigma_x", values="value").sort_index(ascending=False)


def test_difference_is_the_difference_of_the_grids(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    assert (comp.task, comp.eval, comp.metric, comp.labels) == ("linear", "grid", "mse", ["softmax", "ssa"])
    assert comp.fixed == {"length": 5.0} and resolve_baseline(comp) == "softmax"
    a, b = grid_by_hand(runs["ssa"]), grid_by_hand(runs["softmax"])
    assert a.shape == (2, 2)
    plain = difference(comp, mode="diff")
    assert list(plain) == ["ssa"]
    np.testing.assert_allclose(plain["ssa"].to_numpy(), (a - b).to_numpy(), rtol=1e-12)
    ratio = difference(comp)  # MSE: log10 ratio by default
    np.testing.assert_allclose(ratio["ssa"].to_numpy(), np.log10(a / b).to_numpy(), rtol=1e-12)
    back = difference(comp, baseline="ssa", mode="diff")
    np.testing.assert_allclose(back["softmax"].to_numpy(), (b - a).to_numpy(), rtol=1e-12)


def test_one_shared_colour_scale(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    both = np.concatenate([grid_by_hand(runs[s]).to_numpy().ravel() for s in ("softmax", "ssa")])
    plot = figures.plot_grids(comp)
    assert plot.log and plot.vmin == pytest.approx(both.min()) and plot.vmax == pytest.approx(both.max())
    meshes = [ax.collections[0] for ax in plot.fig.axes if ax.collections]
    panels = [m for m in meshes if m.get_array() is not None and m.get_array().size == 4]
    assert len(panels) == 2
    assert {(m.norm.vmin, m.norm.vmax) for m in panels} == {(plot.vmin, plot.vmax)}
    assert len(plot.fig.axes) == 3  # two panels and ONE colour bar
    diff = figures.plot_difference(comp)
    lim = np.abs(difference(comp)["ssa"].to_numpy()).max()
    assert (diff.vmin, diff.vmax) == pytest.approx((-lim, lim))  # centred on 0
    matplotlib.pyplot.close("all")


def test_summary_numbers_by_hand(runs):
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    table = tables.summary_table(comp).set_index("label")
    for scorer in ("softmax", "ssa"):
        g = grid_by_hand(runs[scorer])
        row = table.loc[scorer]
        # one seed: the geometric "mean over seeds" of one value is that value; no interval
        assert row["mean"] == pytest.approx(g.to_numpy().mean())
        assert row["in_dist"] == pytest.approx(g.loc[1.0, 1.0])  # trained on σ = 1
        assert row["worst"] == pytest.approx(g.to_numpy().max())
        assert np.isnan(row["mean_low"]) and row["seeds"] == 1
        sf, sx = g.stack().idxmax()
        assert row["worst_cell"] == f"σ_F={sf:g}, σ={sx:g}"
        assert row["n_cells"] == 4
    a, b = grid_by_hand(runs["ssa"]).to_numpy(), grid_by_hand(runs["softmax"]).to_numpy()
    assert table.loc["ssa", "beats_baseline"] == pytest.approx((a < b).mean())
    assert table.loc["ssa", "in_dist_vs_baseline"] == "not separated"  # one seed never separates
    assert np.isnan(table.loc["softmax", "beats_baseline"])
    md = tables.markdown_table(table.reset_index())
    assert md.splitlines()[0].startswith("| label | seeds |") and len(md.splitlines()) == 4


def _job(sweep, name, scorer, seed, source, shift=None, steps=6):
    """A fake sweep job copied from ``source``: overrides.yaml, config.yaml, and (unless ``shift`` is
    None) its stored cells with ``shift`` added to every value and summary.json."""
    d = sweep / name
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"scorer={scorer}", f"seed={seed}", "train.steps=6"])
    )
    cfg = yaml.safe_load((source / "config.yaml").read_text())
    cfg["seed"], cfg["scorer"]["label"] = seed, scorer
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    if shift is not None:
        shutil.copytree(source / "eval", d / "eval")
        for part in (d / "eval").rglob("parts/results-*.csv"):
            g = pd.read_csv(part)
            g["value"] = g["value"] + shift
            g.to_csv(part, index=False)
        shutil.copy(source / "summary.json", d / "summary.json")
    return d


def test_sweep_groups_by_overrides_with_seed_intervals(runs, tmp_path):
    sweep = tmp_path / "multirun" / "x"
    _job(sweep, "scorer=softmax,seed=0", "softmax", 0, runs["softmax"], 0.0)
    _job(sweep, "scorer=softmax,seed=1", "softmax", 1, runs["softmax"], 1.0)
    _job(sweep, "scorer=ssa,seed=0", "ssa", 0, runs["ssa"], 0.0)
    _job(sweep, "scorer=ssa,seed=1", "ssa", 1, runs["ssa"], 3.0)
    late = _job(sweep, "scorer=ssa,seed=2", "ssa", 2, runs["ssa"], None)  # started, not finished
    jobs = [[f"scorer={s}", f"seed={k}", "train.steps=6"] for s in ("softmax", "ssa") for k in (0, 1, 2)]
    (sweep / "jobs.yaml").write_text(yaml.safe_dump(jobs))
    comp = compare.collect([sweep])
    assert comp.sweep == sweep and comp.labels == ["scorer=softmax", "scorer=ssa"]
    assert [g.seeds for g in comp.groups] == [[0, 1], [0, 1]]
    assert comp.common_overrides == ["train.steps=6"]
    missing = dict(comp.missing)
    assert missing[str(late)].startswith("training not finished")
    assert missing["(no folder yet) scorer=softmax seed=2 train.steps=6"] == "not started"
    for label, scorer, shift in (("scorer=softmax", "softmax", 1.0), ("scorer=ssa", "ssa", 3.0)):
        base = grid_by_hand(runs[scorer]).to_numpy()
        seeds = np.stack([base, base + shift])
        # MSE across seeds: the geometric mean with a Student-t interval on the log scale
        logs = np.log(seeds)
        mean, half = logs.mean(0), stats.t.ppf(0.975, 1) * logs.std(0, ddof=1) / np.sqrt(2)
        np.testing.assert_allclose(comp.grid(label).to_numpy(), np.exp(mean), rtol=1e-9)
        np.testing.assert_allclose(comp.grid(label, "ci_low").to_numpy(), np.exp(mean - half), rtol=1e-9)
        np.testing.assert_allclose(comp.grid(label, "ci_high").to_numpy(), np.exp(mean + half), rtol=1e-9)
        assert (comp.grid(label, "count").to_numpy() == 2).all()
    assert "seeds 0, 1 (n=2" in comp.groups[0].describe()
    assert resolve_baseline(comp, "ssa") == "scorer=ssa"
    result = compare.write(comp, compare.default_out_dir(comp))
    assert result["out_dir"] == sweep / "compare"
    md = (sweep / "compare" / "summary.md").read_text()
    assert f"`{late.name}`: training not finished" in md and "95% interval over seeds" in md


def test_grids_that_differ_are_compared_on_the_cells_they_share(runs, tmp_path):
    small = tmp_path / "small"
    shutil.copytree(runs["ssa"], small, ignore=shutil.ignore_patterns("checkpoints"))
    for part in small.rglob("parts/results-*.csv"):
        g = pd.read_csv(part)
        g[g.sigma_x == 1.0].to_csv(part, index=False)
    comp = compare.collect([runs["softmax"], small])
    assert sorted(comp.cells.sigma_x.unique()) == [1.0]
    assert comp.left_out == ["σ_F=1, σ=2", "σ_F=2, σ=2"]


def test_errors_before_any_work(runs, tmp_path):
    with pytest.raises(ReportError, match="neither a run folder .* nor a sweep folder"):
        compare.collect([runs["softmax"], tmp_path])
    with pytest.raises(ReportError, match="lies inside the run folder"):
        compare.collect([runs["softmax"], runs["ssa"] / "eval"])
    with pytest.raises(ReportError, match="does not exist"):
        compare.collect([runs["softmax"], tmp_path / "nope"])
    other = tmp_path / "every"
    shutil.copytree(runs["ssa"], other, ignore=shutil.ignore_patterns("checkpoints"))
    cfg = yaml.safe_load((other / "config.yaml").read_text())
    cfg["task"]["name"] = "every"
    (other / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(
        ReportError, match=r"different tasks cannot be compared:\n  - linear: .*\n  - every: "
    ):
        compare.collect([runs["softmax"], other])
    with pytest.raises(ReportError, match="no evaluation protocol matching 'deviant'"):
        compare.collect([runs["softmax"], runs["ssa"]], eval="deviant")
    with pytest.raises(ReportError, match="metric 'token_error' is not in"):
        compare.collect([runs["softmax"], runs["ssa"]], metric="token_error")
    comp = compare.collect([runs["softmax"], runs["ssa"]])
    with pytest.raises(ReportError, match="matches no run or group"):
        resolve_baseline(comp, "cosformer")
    with pytest.raises(ReportError, match="never write into a run"):
        compare.write(comp, runs["ssa"] / "compare")


def _script(*args, real=False, **kw):
    """``python scripts/compare.py ARGS``: in this process (conftest.run_script), or as a real command line."""
    if not real:
        return run_script("scripts/compare.py", *map(str, args))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "compare.py"), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "WANDB_MODE": "disabled"},
        **kw,
    )


@pytest.mark.slow
def test_script_end_to_end(runs, tmp_path):
    proc = _script(runs["softmax"], runs["ssa"], real=True)  # the suite's real compare command line
    assert proc.returncode == 0, proc.stderr
    made = list((runs["softmax"].parent / "compare").iterdir())  # <common parent>/compare/<time>
    assert len(made) == 1
    out = made[0]
    for name in (
        "heatmaps.png",
        "heatmaps.pdf",
        "difference.png",
        "summary.csv",
        "summary.md",
        "cells.csv",
        "compare.json",
    ):
        assert (out / name).is_file(), name
    assert "| softmax |" in proc.stdout and "| ssa |" in proc.stdout
    shutil.rmtree(out.parent)
    bad = _script(runs["softmax"], tmp_path)
    assert bad.returncode == 2 and "Error: cannot read" in bad.stderr and "neither a run folder" in bad.stderr


@pytest.mark.slow
def test_a_length_sweep_is_compared_on_one_fixed_grid(tmp_path):
    """Jobs trained to different lengths are evaluated on the task's fixed quick grid, so compare.py
    puts them side by side (the grids used to differ in length)."""
    proc = run_script(
        "train.py",
        "-m",
        "curriculum.end=5,6",
        *TINY,
        "evaluation.lengths=null",  # the task's quick grid, not debug=tiny's lengths
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _script(tmp_path / "sweep")
    assert proc.returncode == 0, proc.stderr
    assert (
        "curriculum.end=5" in proc.stdout
        and "curriculum.end=6" in proc.stdout
        and "left out" not in proc.stdout
    )


@pytest.mark.slow
def test_notebook_runs_headless(runs, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("SSA_RUNS", os.pathsep.join(str(runs[s]) for s in ("softmax", "ssa")))
    nb = nbformat.read(ROOT / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}
    ).execute()
    outputs = {c["id"]: c.get("outputs", []) for c in nb.cells if c["cell_type"] == "code"}
    assert not [o for outs in outputs.values() for o in outs if o["output_type"] == "error"]
    images = [o for outs in outputs.values() for o in outs if "image/png" in o.get("data", {})]
    assert len(images) >= 3  # heat maps, difference map, custom view
    text = "".join(o.get("text", "") for outs in outputs.values() for o in outs)
    assert "shared scale:" in text and "linear: mse" in text
