"""An endpoint whose control sits at the floor in its pilot is flagged (issue 58: icl_scale's rung C,
softmax's σ = 16 error 0.0002 against a margin of 0.05, so SSA could only tie or lose). Checked on a
small per-seed frame against the control's mean computed by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ssa_repro.reports import floor, paired
from ssa_repro.reports.paired import Claim, Spec


def _frame() -> pd.DataFrame:
    rows = []
    for seed in range(6):
        for scorer, low, high in (("softmax", 0.0002 * (seed % 2), 0.30 + 0.01 * seed), ("ssa", 0.0, 0.25)):
            for summary, v in (("floor", low), ("room", high)):
                rows.append(
                    dict(
                        group="g",
                        task="t",
                        scorer=scorer,
                        arch="a",
                        train_sigma="1",
                        seed=seed,
                        evaluation="grid",
                        predictor="model",
                        metric="sequence_error",
                        summary=summary,
                        value=v,
                    )
                )
            rows.append(
                dict(
                    group="g",
                    task="t",
                    scorer=scorer,
                    arch="a",
                    train_sigma="1",
                    seed=seed,
                    evaluation="grid",
                    predictor="model",
                    metric="mse",
                    summary="ratio",
                    value=1e-4 + 0.01 * (scorer == "ssa"),
                )
            )
    return pd.DataFrame(rows)


def _claims() -> list[Claim]:
    def spec(label, metric, summary):
        return Spec(
            label,
            metric,
            {"scorer": "softmax", "summary": summary},
            {"scorer": "ssa", "summary": summary},
            -1,
        )

    return [
        Claim(
            "c",
            "SSA lowers the error",
            "p",
            (
                spec("floor", "sequence_error", "floor"),
                spec("room", "sequence_error", "room"),
                spec("ratio", "mse", "ratio"),
            ),
            "SSA − softmax",
        )
    ]


def test_a_control_below_the_margin_on_the_pilot_is_flagged_and_one_above_is_not():
    frame, claims = _frame(), _claims()
    table = paired.claims_table(frame, claims, n_boot=200)
    eps = {n: {"claim": "c", "contrast": n} for n in ("floor", "room", "ratio")}
    pilot = [0, 1, 2, 3]  # seeds 4, 5 confirmatory: not the pilot
    got = floor.floored(eps, claims, frame, table, pilot)
    assert list(got.endpoint) == ["floor"]  # "room": 0.3 > 0.05; "ratio": log scale, no floor
    want = np.mean([0.0002 * (s % 2) for s in pilot])
    assert got.control.iloc[0] == want and got.margin.iloc[0] == 0.05 and got.n_pilot.iloc[0] == 4
    text = "\n".join(floor.lines(got, pilot))
    assert "floor: 0.0001 (sequence_error, 4 seeds) below its margin ±0.05" in text and "0–3" in text
    assert floor.lines(floor.floored(eps, claims, frame, table, []), []) == []  # no pilot: nothing said
