"""README's "Results at a glance" (issue 58): exactly the block scripts/results_table.py generates from
the published docs/results/<study>_primary.csv, which the reports write (their freshness is
tests/test_report_freshness.py's), so a number in README's table is a number of a regenerated report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from ssa_repro.reports import endpoints

ROOT = Path(__file__).resolve().parents[1]


def load_script():
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_holds_exactly_the_generated_block():
    script = load_script()
    text = (ROOT / "README.md").read_text()
    assert endpoints.replace_block(text, script.block()) == text, "stale: python scripts/results_table.py"
    assert script.main(["--check"]) == 0
    assert (ROOT / script.FIGURE).is_file()


def test_every_published_study_with_endpoints_is_in_the_table():
    script = load_script()
    shown = set(endpoints.read_all(script.RESULTS, script.STUDIES).study)
    published = {p.name.removesuffix("_primary.csv") for p in script.RESULTS.glob("*_primary.csv")}
    assert published <= set(script.STUDIES), "a study's endpoints are published but not listed in STUDIES"
    assert shown == published


def test_the_table_says_each_estimates_side_for_and_against_ssa_alike():
    t = pd.DataFrame(
        [
            dict(
                study="s",
                endpoint="e",
                text="SSA − softmax",
                test="confirmatory (1–20)",
                seeds="1–20",
                n_seeds=20,
                estimate=0.2,
                low=0.1,
                high=0.3,
                scale="identity",
                margin=0.05,
                claimed_sign=-1,
                p_holm=0.001,
                family="primary",
                verdict="contradicted",
                about_ssa=True,
            ),
            dict(
                study="s",
                endpoint="f",
                text="SSA / softmax MSE",
                test="confirmatory (1–20)",
                seeds="1–20",
                n_seeds=20,
                estimate=-0.4,
                low=-0.5,
                high=-0.3,
                scale="log",
                margin=0.0953,
                claimed_sign=-1,
                p_holm=0.002,
                family="primary",
                verdict="yes",
                about_ssa=True,
            ),
            dict(
                study="s",
                endpoint="g",
                text="x",
                test="replication (21–50)",
                n_seeds=0,
                verdict=endpoints.NOT_RUN,
            ),
        ]
    )
    md = endpoints.markdown(t).split("\n")
    assert md[2].endswith("| +0.2 [+0.1, +0.3] | 0.001 | contradicted | against SSA |")
    assert "×0.67 [×0.607, ×0.741]" in md[3] and md[3].endswith("| yes | for SSA |")
    assert md[4].endswith("| 0 | — | — | not run yet | — |")


def test_a_readme_without_one_block_is_refused_naming_the_markers():
    with pytest.raises(ValueError, match="results:start"):
        endpoints.replace_block("no block here", "x")


def test_the_forest_plot_puts_the_claimed_direction_to_the_right(tmp_path, monkeypatch):
    seen = {}
    import matplotlib.axes

    real = matplotlib.axes.Axes.scatter

    def spy(self, x, y, *a, **kw):
        seen["x"] = list(x)
        return real(self, x, y, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy)
    t = pd.DataFrame(
        [
            dict(
                study="s",
                endpoint="against",
                test="c",
                estimate=0.2,
                low=0.1,
                high=0.3,
                margin=0.05,
                claimed_sign=-1,
                verdict="contradicted",
                about_ssa=True,
            ),
            dict(
                study="s",
                endpoint="for",
                test="c",
                estimate=-0.1,
                low=-0.15,
                high=-0.05,
                margin=0.05,
                claimed_sign=-1,
                verdict="yes",
                about_ssa=True,
            ),
            dict(
                study="s",
                endpoint="up",
                test="c",
                estimate=1.0,
                low=0.5,
                high=1.5,
                margin=2.0,
                claimed_sign=1,
                verdict="yes",
                about_ssa=False,
            ),
        ]
    )
    assert endpoints.forest(t, tmp_path / "f.png").is_file()
    assert seen["x"] == pytest.approx([-4.0, 2.0, 0.5])  # estimate × claimed sign / margin
