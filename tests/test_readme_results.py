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


def _interim_rows() -> pd.DataFrame:
    """relpos_cpu's interim look as its CSV has it: MQAR at 4 of its 30 declared seeds, linear decided."""
    common = dict(study="relpos_cpu", scale="identity", margin=0.02, claimed_sign=-1, p_holm=0.15)
    common.update(family="primary", about_ssa=True, low=-0.64, high=-0.36, seeds="100–114")
    return pd.DataFrame(
        [
            dict(common, endpoint="alibi_mqar", text="MQAR", test="confirmatory (100–129)", n_seeds=4)
            | dict(estimate=-0.525, verdict="interim, 4 of 30 declared seeds: not decided"),
            dict(common, endpoint="alibi_linear", text="linear", test="confirmatory (100–139)", n_seeds=40)
            | dict(estimate=-0.5, verdict="yes"),
        ]
    )


def test_an_interim_test_is_hollow_and_labelled_with_its_counts_in_the_forest_data():
    d = endpoints.forest_data(_interim_rows())
    assert list(d.interim) == [True, False]
    assert d.label[0] == "relpos_cpu: alibi_mqar, confirmatory (interim 4/30)"
    assert d.label[1] == "relpos_cpu: alibi_linear, confirmatory"  # decided: no mark
    assert d.x.tolist() == pytest.approx([0.525 / 0.02, 0.5 / 0.02])


def test_the_readme_row_of_an_interim_test_says_interim_with_its_counts():
    md = endpoints.markdown(_interim_rows()).split("\n")
    assert "| confirmatory (100–129) | 4 of 30 (interim) |" in md[2]
    assert md[2].endswith("| interim, 4 of 30 declared seeds: not decided | for SSA |")
    assert "| confirmatory (100–139) | 40 |" in md[3]


def test_the_forest_plot_draws_an_interim_estimate_hollow(tmp_path, monkeypatch):
    seen = {}
    import matplotlib.axes

    real = matplotlib.axes.Axes.scatter

    def spy(self, x, y, *a, **kw):
        seen["faces"] = list(kw["facecolors"])
        return real(self, x, y, *a, **kw)

    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy)
    assert endpoints.forest(_interim_rows(), tmp_path / "f.png").is_file()
    assert seen["faces"] == ["white", "tab:blue"]
