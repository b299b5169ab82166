"""The seeds a primary endpoint is declared to run: the study's ``confirmatory_seeds`` (or a
replication's ``seeds``) that the study's matrix runs for every cell of the endpoint's contrast.

A study declares one list of confirmatory seeds for all its endpoints, but its groups may run an
endpoint's cells at fewer of them (relpos_cpu: seeds 100–139 declared, its MQAR endpoint's cells run at
100–129 only). An endpoint's test is complete (not interim, :func:`primary.interim`) once it has every
seed it is declared to have, so its count is

    declared(e) = S ∩ ⋂_{arm x of e} {s : the matrix has a cell (s, …) matching x},

S the declared seeds, the arms the contrast's two filters (a claim's ``a`` and ``b``) or a 2 × 2's four
cells (``both`` ∪ cell ∪ a_i ∪ b_j). The matrix is the study's ``groups`` with their ``seeds`` (else the
study's) and ``more`` sub-matrices (:func:`ssa_repro.core.matrix.group_cells`); a filter on a column the
matrix does not have (metric, summary, evaluation, predictor, step) matches every cell. Without
``groups`` (a setup that gives none) the declared seeds are S.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ssa_repro.core import matrix
from ssa_repro.reports import claims as claims_engine

# the per-seed frame's columns a matrix cell fixes: (group, then matrix.AXES' one value each)
COLUMNS = ("group", "task", "scorer", "arch", "train_sigma")


def cells(setup: Mapping | None) -> list[dict] | None:
    """Every cell the study's matrix runs, as {seed, group, task, scorer, arch, train_sigma}; None where
    ``setup`` has no ``groups``."""
    groups = (setup or {}).get("groups")
    if not groups:
        return None
    out = []
    for name, g in groups.items():
        for seed, *axes in matrix.group_cells(g, (setup or {}).get("seeds") or []):
            out.append({"seed": int(seed), "group": str(name), **dict(zip(COLUMNS[1:], axes, strict=True))})
    return out


def _same(have, want) -> bool:
    """A cell's value against a filter's (a list: any of them); numbers compared as numbers (a
    train_sigma of 1 is 1.0), the rest as text."""
    if isinstance(want, (list, tuple, set)):
        return any(_same(have, w) for w in want)
    try:
        return abs(float(have) - float(want)) < 1e-9
    except (TypeError, ValueError):
        return str(have) == str(want)


def arm_seeds(all_cells: Sequence[Mapping], filters: Mapping) -> set[int]:
    """The seeds of the cells matching ``filters`` on the matrix's columns."""
    on = {k: v for k, v in filters.items() if k in COLUMNS}
    return {c["seed"] for c in all_cells if all(_same(c[k], v) for k, v in on.items())}


def arms(e: Mapping, claims, factorials: Mapping | None, ctx) -> list[Mapping] | None:
    """The filters of every cell an endpoint's contrast compares: its claim contrast's ``a`` and ``b``,
    or its 2 × 2's four cells; None where the claim's contrast or the design is not found."""
    if "claim" in e:
        for c in claims:
            if c.key == e["claim"]:
                hit = [s for s in c.specs if s.label == e["contrast"]]
                return [hit[0].a, hit[0].b] if hit else None
        return None
    design = (factorials or {}).get(e.get("factorial"))
    if not isinstance(design, Mapping) or ctx is None:
        return None
    d = claims_engine.fill(dict(design), ctx)
    where = (d.get("cells") or {}).get(e.get("cell"))
    if where is None:
        return None
    both = d.get("both") or {}
    return [{**both, **where, **la, **lb} for la in d["a"] for lb in d["b"]]


def per_endpoint(
    eps: Mapping[str, Mapping], seeds, setup: Mapping | None, claims, ctx
) -> dict[str, list[int]]:
    """{endpoint: its declared seeds} (the module's formula): ``seeds`` (the confirmatory or a
    replication's) that the matrix runs for every cell the endpoint compares; all of ``seeds`` where
    the matrix or the endpoint's cells are not known."""
    wanted = sorted(int(s) for s in seeds)
    all_cells = cells(setup)
    out = {}
    for name, e in eps.items():
        xs = arms(e, claims, (setup or {}).get("factorials"), ctx) if all_cells is not None else None
        if xs is None:
            out[name] = wanted
            continue
        run = set.intersection(*(arm_seeds(all_cells, x) for x in xs))
        out[name] = [s for s in wanted if s in run]
    return out
