"""The decision rule's simulated error rates, the bootstrap's coverage and the power for the study's
effect sizes: ``python scripts/stats_table.py [--write docs/statistics.md] [--n-sim 2000]``.

Prints markdown tables computed with ``ssa_repro/stats/`` (simulate_rule,
seed_bootstrap_many, paired_bootstrap, power_paired, seeds_needed, fraction_test); with ``--write``
the tables replace the block between the ``BEGIN``/``END stats_table.py`` markers of that page, so the
numbers in docs/statistics.md are generated, never typed. Everything is seeded: the same command gives
the same numbers. About a minute and a half on one CPU core.
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from ssa_repro.core.atomic import write_text
from ssa_repro.stats import (
    MARGINS,
    METRIC_SCALES,
    expanded_level,
    fraction_test,
    paired_bootstrap,
    power_paired,
    seed_bootstrap_many,
    seeds_needed,
    simulate_rule,
)

BEGIN, END = "<!-- BEGIN stats_table.py -->", "<!-- END stats_table.py -->"

# (seeds, Δ in seed SDs, ρ): the review's §2.3 settings, then the study's 5, 10 and 20 seeds
RULE_CASES = [
    (3, 0, 0.0),
    (3, 2, 0.7),
    (3, 3, 0.7),
    (5, 0, 0.0),
    (5, 2, 0.7),
    (6, 2, 0.7),
    (10, 0, 0.0),
    (10, 0, 0.7),
    (10, 0.5, 0.7),
    (10, 1, 0.0),
    (10, 1, 0.7),
    (20, 0, 0.5),
    (20, 0.5, 0.5),
    (20, 1, 0.0),
]
MARGIN_SD = 0.5  # the equivalence margin of the simulations, in seed SDs

# the review's §2.5 effect sizes (Δ / seed SD, worked back from the old report: rough)
EFFECTS = [
    ("every_num σ = 16 row, SSA − softmax", 1.0),
    ("every_num grid mean, SSA − softmax", 0.75),
    ("some_num grid mean (SSA worse)", 0.67),
    ("linear geometric-mean MSE (−5%)", 0.62),
    ("every_ctx grid mean", 0.57),
]


def table(header: list[str], rows: list[list]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def rule_table(n_sim: int) -> str:
    rows = []
    for n, delta, rho in RULE_CASES:
        r = simulate_rule(n, delta, rho, n_sim=n_sim, margin=MARGIN_SD)
        dz = delta / math.sqrt(2 * (1 - rho))
        rows.append(
            [n, delta, rho, f"{r['yes']:.3f}", f"{r['separated']:.3f}", f"{r['within']:.3f}"]
            + [f"{r['overlap']:.3f}", f"{r['paired_t']:.3f}", f"{power_paired(dz, n):.3f}"]
        )
    return table(
        [
            "seeds",
            "Δ (seed SD)",
            "ρ",
            "new rule: yes",
            "new rule: yes or contradicted",
            f"within ±{MARGIN_SD} SD",
            "old overlap rule",
            "paired t",
            "power_paired",
        ],
        rows,
    )


def coverage_seeds(n_sim: int) -> str:
    rng = np.random.default_rng(1)
    rows = []
    for n in (3, 5, 10, 20):
        d = rng.normal(0.3, 1.0, size=(n_sim, n))  # per-seed differences, true mean 0.3
        cells = [n, f"{expanded_level(0.95, n):.4f}"]
        for expand in (False, True):
            lo, hi = seed_bootstrap_many(d, n_boot=2000, expand=expand, rng=rng)
            cells.append(f"{np.mean((lo <= 0.3) & (0.3 <= hi)):.3f}")
        rows.append(cells)
    return table(["seeds", "expanded level", "plain percentile", "expanded percentile"], rows)


def coverage_prompts(n_sim: int) -> str:
    """d_sp = δ + u_s + v_p + e_sp on [10 seeds, 20 prompts], every seed on the same prompts."""
    rng = np.random.default_rng(2)
    rows = []
    for sd_u, sd_v, sd_e in ((1.0, 0.0, 1.0), (0.2, 1.0, 0.3), (1.0, 0.0, 5.0)):
        hits = {"crossed": 0, "nested": 0}
        for i in range(n_sim):
            a = rng.normal(size=(10, 20))
            b = a + 0.3 + rng.normal(0, sd_u, (10, 1)) + rng.normal(0, sd_v, (1, 20))
            b = b + rng.normal(0, sd_e, (10, 20))
            for design in hits:
                _, lo, hi = paired_bootstrap(a, b, n_boot=1000, seed=i, prompts=design)
                hits[design] += lo <= 0.3 <= hi
        rows.append([sd_u, sd_v, sd_e] + [f"{hits[k] / n_sim:.3f}" for k in ("crossed", "nested")])
    return table(["SD seed u_s", "SD shared prompt v_p", "SD noise e_sp", "crossed", "nested"], rows)


def power_table() -> str:
    rows = []
    for name, d in EFFECTS:
        cells = [name, d]
        for rho in (0.5, 0.8):
            dz = d / math.sqrt(2 * (1 - rho))
            cells += [f"{power_paired(dz, 10):.2f}", seeds_needed(dz)]
        rows.append(cells)
    return table(
        [
            "contrast",
            "Δ / seed SD",
            "power, 10 seeds, ρ = 0.5",
            "seeds for 0.8",
            "power, 10 seeds, ρ = 0.8",
            "seeds for 0.8",
        ],
        rows,
    )


def fisher_table() -> str:
    rows = []
    for n in (5, 8, 10, 20):
        ks = [k for k in range(n + 1) if fraction_test(n, n, k, n).p_value < 0.05]
        rows.append(
            [
                n,
                f"{max(ks)}" if ks else "none",
                f"{fraction_test(n, n, max(ks), n).p_value:.4f}" if ks else "—",
            ]
        )
    return table(["seeds per arm", "largest k of n (vs n of n) with p < 0.05", "its p"], rows)


def margin_table() -> str:
    rows = []
    for metric, m in MARGINS.items():
        scale = METRIC_SCALES.get(metric, "identity")
        shown = f"±{m:.4f} (ratio {math.exp(-m):.3f}–{math.exp(m):.3f})" if scale == "log" else f"±{m:g}"
        rows.append([f"`{metric}`", scale, shown])
    return table(["metric", "scale", "margin m"], rows)


def build(n_sim: int) -> str:
    t = time.time()
    parts = [
        f"Generated by `python scripts/stats_table.py --write docs/statistics.md --n-sim {n_sim}`.",
        "**Equivalence margins** (`MARGINS`, `METRIC_SCALES`):",
        margin_table(),
        f"**The decision rule on simulated seeds** ({n_sim} replications per row; normal seed outcomes, "
        f"claim b > a, α = 0.05; the margin for 'within' is ±{MARGIN_SD} seed SD; 'power_paired' is the "
        "noncentral-t power for d_z = Δ / √(2(1 − ρ)), 0 where the exact test cannot reach α):",
        rule_table(n_sim),
        f"**Coverage of the seed bootstrap** (nominal 0.95; {5 * n_sim} samples of normal per-seed "
        "differences, 2000 resamples each):",
        coverage_seeds(5 * n_sim),
        f"**Coverage with shared prompts** (nominal 0.95; {n_sim // 5} samples of 10 seeds × 20 prompts, "
        "1000 resamples; expanded level):",
        coverage_prompts(n_sim // 5),
        "**Power and seeds needed** for the effect sizes of the review's §2.5 (paired, two-sided α = 0.05):",
        power_table(),
        "**Fisher's test of the fraction of seeds that generalise**: every seed of one arm fails; how many "
        "of the other arm's may fail for p < 0.05 (two-sided):",
        fisher_table(),
    ]
    print(f"[stats_table] {time.time() - t:.0f} s", file=sys.stderr)
    return "\n\n".join(parts)


def run(a: argparse.Namespace) -> int:
    """``ssa-stats-table``'s work on its parsed arguments (ssa_repro/cli/arguments.py ``stats_table``)."""
    text = build(a.n_sim)
    print(text)
    if a.write:
        page = Path(a.write)
        old = page.read_text()
        if BEGIN not in old or END not in old:
            raise SystemExit(f"{page}: no {BEGIN} … {END} block to replace")
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        write_text(page, f"{head}{BEGIN}\n{text}\n{END}{tail}")
    return 0
