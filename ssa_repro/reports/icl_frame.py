"""The ICL report's vocabulary and how it reads the per-seed frame: the tasks, regions and architectures
it names, the grid's and deviant protocol's points (:func:`axes`), the arms the per-arm sections and
claims are read on (:func:`bases`), and small helpers for seed summaries."""

from __future__ import annotations

import pandas as pd

# icl_cpu's groups, each with its own claims and report section; any other group (icl_scale's ladder)
# gets SSA − softmax per architecture (claims) and a section of its own (reports/kinds/icl.py)
KNOWN_GROUPS = ("core", "architecture", "alternatives", "wide_inputs")

# icl_cpu's reference arm (group, architecture): the per-axis sections and the paper's claims read it; a
# study without it (icl_scale) reads every rung of its other groups instead (:func:`bases`)
BASE = ("core", "preln")

QUANT = ("every_ctx", "every_num", "some_ctx", "some_num")

TASK_TEXT = {
    "linear": "linear a·x + b",
    "every_ctx": "every, labels in context",
    "every_num": "every, numbers only",
    "some_ctx": "some, labels in context",
    "some_num": "some, numbers only",
}

ADVERSE = {"every": "positive", "some": "negative"}  # the insertion sign that makes following it wrong

REGIONS = ("in_distribution", "sigma_shift", "length_shift", "both_shift")

ERRORS = ("sequence_error", "token_error")

ARCH_TEXT = {
    "preln": "pre-LN (GPT-2)",
    "preln_embln": "pre-LN + embedding LN",
    "postln": "post-LN + embedding LN (BERT)",
    "postln_noemb": "post-LN, no embedding LN",
    "attn_only": "attention only (pre-LN)",
    "preln_nofinal": "pre-LN, no final LN",
}

GRID_KINDS = (
    "grid_quantifier",
    "grid_linear",
)  # the grid keys the ICL parts read; other grid_* are length tasks


# ------------------------------------------------------------------ per-seed values
def _g(x) -> str:
    return f"{float(x):g}"


# ------------------------------------------------------------------ the claims
def _levels(frame: pd.DataFrame, prefix: str, key: str) -> list[float]:
    """The values of ``key`` in summaries starting with ``prefix`` (e.g. the grid's σ's)."""
    s = pd.Series(frame.summary.unique())  # a few hundred strings over up to a million rows
    s = s[s.str.startswith(prefix)]
    vals = s.str.extract(rf"{key}=([-\d.e+]+)")[0].dropna().astype(float)
    return sorted(set(vals))


def axes(frame: pd.DataFrame) -> dict:
    """The grid's and deviant protocol's points, read from the per-seed summaries."""
    g = frame[frame.part == "grid"] if "part" in frame else frame
    d = frame[frame.part == "deviant"] if "part" in frame else frame
    sig = _levels(g, "train_lengths", "sigma")
    lengths = _levels(g, "sigma=", "length")
    sf = _levels(g, "sigma_f=", "sigma_f")
    ms = _levels(d, "sign=", "M")
    return {
        "sigma_max": sig[-1] if sig else None,
        "sigma_min": sig[0] if sig else None,
        "length_max": int(lengths[-1]) if lengths else None,
        "sigma_f": sf,
        "M_max": ms[-1] if ms else None,
        "M": ms,
    }


def bases(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The arms (group, architecture) the per-axis sections and the paper's claims are read on:
    :data:`BASE` where the study has it, else every architecture of the groups outside
    :data:`KNOWN_GROUPS` (a scale ladder's rungs) that holds a task these claims and sections read (a
    quantifier or linear: length_cpu's ``mqar_probe`` group is no base, else its arms would repeat the
    ``length`` group's claims under the same keys), in name order."""
    if not len(frame):
        return []
    if ((frame.group == BASE[0]) & (frame.arch == BASE[1])).any():
        return [BASE]
    other = frame[~frame.group.isin(KNOWN_GROUPS) & frame.task.isin([*QUANT, "linear"])]
    return sorted(set(other[["group", "arch"]].drop_duplicates().itertuples(index=False, name=None)))


def tag(base: tuple[str, str]) -> str:
    """A base arm's label in claim keys, table rows and figure names: "" for :data:`BASE`, else its
    architecture (a rung's name)."""
    return "" if tuple(base) == BASE else str(base[1])


# ------------------------------------------------------------------ tables and figures
def _prefix(base: tuple[str, str]) -> str:
    return f"{tag(base)}: " if tag(base) else ""


def _suffix(base: tuple[str, str]) -> str:
    return f"_{tag(base)}" if tag(base) else ""


def over_bases(fn, frame: pd.DataFrame, *args) -> pd.DataFrame:
    """``fn(frame, *args, base)`` on each of :func:`bases`, stacked; with several (a ladder's rungs) an
    ``arch`` column first names the rung of each row."""
    parts = []
    many = len(bases(frame)) > 1
    for base in bases(frame):
        t = fn(frame, *args, base=base)
        if many and len(t):
            t = t.copy()
            t.insert(0, "arch", base[1])
        parts.append(t)
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def seed_stats(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Seed mean, min and max and the seed count of ``value`` per ``by``."""
    g = frame.groupby(by, sort=False).value
    return pd.DataFrame({"mean": g.mean(), "min": g.min(), "max": g.max(), "seeds": g.size()}).reset_index()


def _mmm(r) -> str:
    return f"{r['mean']:.3g} ({r['min']:.2g}–{r['max']:.2g}, n={int(r['seeds'])})"


def _mean_table(frame: pd.DataFrame, rows: list[str], col: str) -> pd.DataFrame:
    """Seed mean (min–max, n) of ``value`` with ``rows`` as rows and ``col`` as columns."""
    if frame.empty:
        return pd.DataFrame()
    s = seed_stats(frame, [*rows, col])
    s["text"] = [_mmm(r) for _, r in s.iterrows()]
    return s.pivot_table(index=rows, columns=col, values="text", aggfunc="first", sort=False).reset_index()
