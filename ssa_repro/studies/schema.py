"""The schema of a study file (``conf/study/<name>.yaml``), checked before a study runs or reports.

A study file, after merging over the study it names in ``defaults``, has these keys:

==============  =========================================================================================
``name``        the study's name (its output folder ``outputs/study/<name>``): letters, digits, ``_.-``
``report``      optional: which report writes it (``icl``, ``early``; scripts/study.py checks the name)
``seeds``       a non-empty list of distinct integers ≥ 0 (a group may give its own)
``base``        a list of ``key=value`` overrides every job gets
``tasks``       ``{task name: [override, ...]}``: the task variants groups refer to
``archs``       ``{arch name: [override, ...]}``: the architectures groups refer to
``groups``      ``{group: {tasks, scorers, archs, train_sigma[, seeds][, more]}}``: each axis a non-empty
                list of distinct values; ``tasks`` and ``archs`` name keys above, ``scorers`` name
                ``conf/scorer/*.yaml``, ``train_sigma`` are numbers > 0; ``more``: sub-matrices run at
                more seeds, each ``{seeds[, tasks][, scorers][, archs][, train_sigma]}`` with subsets of
                the group's axes (core/matrix.py: a primary endpoint's cells at the seeds its power
                analysis asks for)
``evaluations`` ``{key: {name: <evaluator>, ...}}``: the evaluator's own keys (its schema) and the
                study's (``tasks``: registered tasks, ``groups``: the study's groups, ``steps``: ints > 0)
``claims``      optional: ``{name: claim or block}``, the claims its report tests (reports/claims.py: the
                grammar; the names a claim may use are its report's, :data:`CLAIM_VOCABULARY`)
``factorials``  optional (ICL report): ``{name: 2 × 2 design}`` decided in the report (reports/factorial.py)
``primary``     optional (ICL and early reports): ``{name: endpoint}``, at most four primary endpoints
                with their planned effects (reports/primary.py); the early report's on claims' contrasts
                only (it has no 2 × 2 designs)
``confirmatory_seeds``
                optional, with ``primary``: a non-empty list of distinct integers ≥ 0, the seeds run
                after the endpoints were declared; the endpoints are decided on these seeds alone (a
                confirmatory test), every seed's estimate shown beside, exploratory. ``null`` (a child
                study) removes its parent's
``replication`` optional, with ``primary``: ``{seeds, endpoints}``, a second confirmatory test on new
                seeds (distinct integers ≥ 0, none of them a confirmatory seed) of some of the endpoints
                (distinct names in ``primary``), declared after the first was read and before its own
                runs; decided on those seeds alone, Holm over its endpoints. A list of such mappings
                declares several, each its own Holm family (``replication``, ``replication 2``, …; a
                later one leaves an earlier's level alone), no seed in two. ``null`` removes a parent's
==============  =========================================================================================

A duplicate in a list is refused: two equal seeds (or scorers, …) would make one job twice, and the
index would repeat it. :func:`problems` returns every problem, one line each, naming the file, the key,
the value and what is allowed; nothing is run or written before the file passes.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ssa_repro.config import CONF_DIR
from ssa_repro.evaluation import EVALUATORS
from ssa_repro.evaluation.choice import study_keys
from ssa_repro.reports import claims, factorial, primary
from ssa_repro.reports import icl_claims as icl
from ssa_repro.reports.kinds import early
from ssa_repro.tasks import TASKS

TOP = {"defaults", "name", "report", "seeds", "base", "tasks", "archs", "groups", "evaluations", "claims"}
TOP |= {"factorials", "primary", "confirmatory_seeds", "replication"}
CLAIM_VOCABULARY = {"icl": (icl.CLAIM_NAMES, icl.JUDGES), "early": (early.CLAIM_NAMES, early.JUDGES)}
"""Per report (a study's ``report`` key; ``icl`` without one): the values and judges its claims may name."""
REQUIRED = ("name", "seeds", "base", "tasks", "archs", "groups", "evaluations")
GROUP_AXES = ("tasks", "scorers", "archs", "train_sigma")  # each group's required keys
GROUP_KEYS = (*GROUP_AXES, "seeds", "more")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # folder names: runs/<group>/<task>-<scorer>-…


def scorer_names(conf_dir: Path = CONF_DIR) -> list[str]:
    """The scorer presets ``scorer=<name>`` accepts: ``conf/scorer/*.yaml``."""
    return sorted(p.stem for p in (Path(conf_dir) / "scorer").glob("*.yaml"))


def _plain(value):
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Check:
    """Collects problems as ``<file>: <key>=<value> <what is wrong>; allowed: <what is>``."""

    def __init__(self, file: str):
        self.file, self.out = file, []

    def bad(self, key: str, value, why: str) -> None:
        self.out.append(f"{self.file}: {key}={_plain(value)!r} {why}")

    def missing(self, key: str, why: str) -> None:
        self.out.append(f"{self.file}: {key} is missing; {why}")

    def mapping(self, key: str, value) -> bool:
        if not isinstance(value, DictConfig) or len(value) == 0:
            self.bad(key, value, "is not a non-empty mapping; allowed: {name: ...} with at least one entry")
            return False
        for name in value:
            if not isinstance(name, str) or not NAME_RE.match(name):
                self.bad(f"{key}.{name}", name, f"is not a usable name; allowed: {NAME_RE.pattern}")
        return True

    def strings(self, key: str, value, empty: bool = True) -> bool:
        """A list of strings (overrides): ``empty`` allows ``[]``."""
        if not isinstance(value, ListConfig) or (not empty and len(value) == 0):
            what = "a list of strings" if empty else "a non-empty list of strings"
            self.bad(key, value, f"is not {what}; allowed: e.g. [model.n_layer=2, train.steps=100]")
            return False
        ok = True
        for i, v in enumerate(value):
            if not isinstance(v, str):
                self.bad(f"{key}[{i}]", v, "is not a string; allowed: a key=value override as a string")
                ok = False
        return ok

    def distinct(self, key: str, value, item_ok, allowed: str) -> list:
        """A non-empty list whose items pass ``item_ok`` and are distinct (equal numbers count as
        equal: 1 and 1.0 would name one job folder twice); returns the good items."""
        if not isinstance(value, ListConfig) or len(value) == 0:
            self.bad(key, value, f"is not a non-empty list; allowed: {allowed}")
            return []
        good, seen = [], {}
        for i, v in enumerate(value):
            if not item_ok(v):
                self.bad(f"{key}[{i}]", v, f"is not allowed; allowed: {allowed}")
                continue
            if v in seen:
                self.bad(
                    f"{key}[{i}]",
                    v,
                    f"repeats {key}[{seen[v]}]: every job would run twice; allowed: distinct values",
                )
                continue
            seen[v] = i
            good.append(v)
        return good


def problems(study: DictConfig, file: str) -> list[str]:
    """Every problem of the merged study ``study`` read from ``file`` (one line each; [] when valid).
    Scorers are checked against the repository's conf/scorer, from which every job is composed."""
    c = _Check(file)
    unknown = [k for k in study if k not in TOP]
    for k in unknown:
        c.bad(
            k,
            study[k],
            f"is not a key of a study file; allowed keys: {', '.join(sorted(TOP - {'defaults'}))}",
        )
    for k in REQUIRED:
        if k not in study or study[k] is None:
            c.missing(k, f"a study file needs {', '.join(REQUIRED)} (studies/schema.py)")
    if c.out:
        return c.out
    if not isinstance(study.name, str) or not NAME_RE.match(study.name):
        c.bad("name", study.name, f"is not a usable folder name; allowed: {NAME_RE.pattern}")
    if "report" in study and not isinstance(study.report, str):
        c.bad("report", study.report, "is not a string; allowed: a report name (icl, early)")
    seeds_allowed = "distinct integers >= 0, e.g. [0, 1, 2]"
    c.distinct("seeds", study.seeds, lambda v: _is_int(v) and v >= 0, seeds_allowed)
    c.strings("base", study.base)
    for part in ("tasks", "archs"):
        if c.mapping(part, study[part]):
            for name, overrides in study[part].items():
                c.strings(f"{part}.{name}", overrides)
    scorers = scorer_names()
    if c.mapping("groups", study.groups):
        for group, g in study.groups.items():
            _group(c, f"groups.{group}", g, study, scorers, seeds_allowed)
    if isinstance(study.evaluations, DictConfig):
        for key, settings in study.evaluations.items():
            _evaluation(c, f"evaluations.{key}", settings, study)
    else:
        c.bad("evaluations", study.evaluations, "is not a mapping; allowed: {key: {name: <evaluator>, ...}}")
    report = str(study.get("report", "icl"))
    if (
        study.get("claims") is not None and report in CLAIM_VOCABULARY
    ):  # (an unknown report: cli/run_study.py)
        names, judges = CLAIM_VOCABULARY[report]
        c.out += claims.problems(_plain(study.claims), file, names, judges, report)
    designs = _plain(study.get("factorials"))
    c.out += factorial.problems(designs, file, CLAIM_VOCABULARY.get(report, ((),))[0])
    c.out += primary.problems(
        _plain(study.get("primary")), file, designs=list(designs) if isinstance(designs, dict) else ()
    )
    if report == "early" and isinstance(study.get("primary"), DictConfig):
        for name, e in study.primary.items():
            if isinstance(e, DictConfig) and "factorial" in e:
                c.bad(
                    f"primary.{name}.factorial",
                    e.factorial,
                    "is not allowed in a study with report: early (it has no 2 × 2 designs); allowed: an "
                    "endpoint on a claim's contrast (claim, contrast)",
                )
    _confirmatory(c, study, seeds_allowed)
    _replication(c, study, seeds_allowed)
    return c.out


def _confirmatory(c: _Check, study: DictConfig, seeds_allowed: str) -> None:
    """``confirmatory_seeds``: distinct seeds ≥ 0, meaningful only beside declared primary endpoints."""
    seeds = study.get("confirmatory_seeds")
    if seeds is None:
        return
    c.distinct("confirmatory_seeds", seeds, lambda v: _is_int(v) and v >= 0, seeds_allowed)
    endpoints = _plain(study.get("primary"))
    if not isinstance(endpoints, dict) or not any(e is not None for e in endpoints.values()):
        c.bad(
            "confirmatory_seeds",
            seeds,
            "is given without primary endpoints (the seeds they are decided on); allowed: with a "
            "`primary:` section, or null",
        )


def _replication(c: _Check, study: DictConfig, seeds_allowed: str) -> None:
    """``replication``: ``{seeds, endpoints}`` or a list of them, new seeds for declared primary endpoints."""
    r = study.get("replication")
    if r is None:
        return
    if study.get("confirmatory_seeds") is None:
        c.bad(
            "replication",
            _plain(r),
            "is given without confirmatory_seeds (a replication repeats a confirmatory test on new "
            "seeds); allowed: with confirmatory_seeds, or null",
        )
    entries = list(enumerate(r)) if isinstance(r, ListConfig) else [(None, r)]
    if isinstance(r, ListConfig) and not len(r):
        c.bad("replication", [], "is an empty list; allowed: {seeds, endpoints}, a list of them, or null")
    taken = {s: "confirmatory_seeds" for s in (_plain(study.get("confirmatory_seeds")) or ())}
    endpoints = _plain(study.get("primary"))
    names = [n for n, e in endpoints.items() if e is not None] if isinstance(endpoints, dict) else []
    for i, e in entries:
        key = "replication" if i is None else f"replication[{i}]"
        if not isinstance(e, DictConfig) or set(e) != {"seeds", "endpoints"}:
            c.bad(
                key,
                _plain(e),
                "is not a mapping with exactly the keys seeds, endpoints; allowed: "
                "{seeds: [distinct integers >= 0], endpoints: [names in primary]}, a list of them, or null",
            )
            continue
        mine = c.distinct(f"{key}.seeds", e.seeds, lambda v: _is_int(v) and v >= 0, seeds_allowed)
        for where in dict.fromkeys(taken[s] for s in mine if s in taken):
            again = sorted(s for s in mine if taken.get(s) == where)
            what = (
                "are confirmatory seeds already"
                if where == "confirmatory_seeds"
                else f"are in {where} already"
            )
            c.bad(
                f"{key}.seeds",
                again,
                f"{what}; allowed: seeds not in confirmatory_seeds nor in another replication "
                "(a replication runs new seeds)",
            )
        taken |= {s: key + ".seeds" for s in mine if s not in taken}
        c.distinct(
            f"{key}.endpoints",
            e.endpoints,
            lambda v: v in names,
            "names of declared primary endpoints: " + (", ".join(names) or "none declared"),
        )


def _group(c: _Check, key: str, g, study: DictConfig, scorers: list[str], seeds_allowed: str) -> None:
    if not isinstance(g, DictConfig):
        c.bad(key, g, f"is not a mapping; allowed: {{{', '.join(GROUP_AXES)}[, seeds]}}")
        return
    for k in g:
        if k not in GROUP_KEYS:
            c.bad(f"{key}.{k}", g[k], f"is not a key of a group; allowed keys: {', '.join(GROUP_KEYS)}")
    for k in GROUP_AXES:
        if k not in g or g[k] is None:
            c.missing(f"{key}.{k}", f"a group needs {', '.join(GROUP_AXES)} (each a non-empty list)")
    known = {
        "tasks": (
            lambda v: isinstance(v, str) and v in study.tasks,
            "the study's tasks: " + ", ".join(study.tasks),
        ),
        "archs": (
            lambda v: isinstance(v, str) and v in study.archs,
            "the study's archs: " + ", ".join(study.archs),
        ),
        "scorers": (
            lambda v: isinstance(v, str) and v in scorers,
            "conf/scorer/*.yaml: " + ", ".join(scorers),
        ),
        "train_sigma": (lambda v: _is_number(v) and v > 0, "numbers > 0, e.g. [1, 5]"),
        "seeds": (lambda v: _is_int(v) and v >= 0, seeds_allowed),
    }
    for k, (ok, allowed) in known.items():
        if k in g and g[k] is not None:
            c.distinct(f"{key}.{k}", g[k], ok, allowed)
    more = g.get("more")
    if more is None:
        return
    if not isinstance(more, ListConfig):
        c.bad(
            f"{key}.more", more, "is not a list; allowed: [{seeds, tasks, scorers, archs, train_sigma}, ...]"
        )
        return
    for i, entry in enumerate(more):
        at = f"{key}.more[{i}]"
        if not isinstance(entry, DictConfig):
            c.bad(at, entry, "is not a mapping; allowed: {seeds[, tasks][, scorers][, archs][, train_sigma]}")
            continue
        for k in entry:
            if k not in ("seeds", *GROUP_AXES):
                c.bad(
                    f"{at}.{k}",
                    entry[k],
                    f"is not a key of a sub-matrix; allowed: seeds, {', '.join(GROUP_AXES)}",
                )
        if entry.get("seeds") is None:
            c.missing(f"{at}.seeds", "a sub-matrix needs its seeds (a non-empty list)")
        else:
            c.distinct(f"{at}.seeds", entry.seeds, known["seeds"][0], seeds_allowed)
        for k in GROUP_AXES:
            if entry.get(k) is not None:
                axis = list(g.get(k) or [])
                c.distinct(f"{at}.{k}", entry[k], lambda v, axis=axis: v in axis, f"the group's {k}: {axis}")


def _evaluation(c: _Check, key: str, settings, study: DictConfig) -> None:
    if not isinstance(settings, DictConfig):
        c.bad(key, settings, "is not a mapping; allowed: {name: <evaluator>, <its keys>...}")
        return
    name = settings.get("name")
    if name not in EVALUATORS.schemas:
        c.bad(f"{key}.name", name, f"is not an evaluator; allowed: {', '.join(sorted(EVALUATORS.schemas))}")
        return
    fields = EVALUATORS.schemas[name].__dataclass_fields__
    mine = study_keys(name)  # the study's keys of it (evaluation/choice.py; eval=lm's `tasks` are its own)
    own = [k for k in settings if k not in mine]
    for k in own:
        if k not in fields:
            c.bad(
                f"{key}.{k}",
                settings[k],
                f"is not a key of evaluator {name!r}; allowed: {', '.join([*fields, *mine])}",
            )
    if "tasks" in mine and settings.get("tasks") is not None:
        c.distinct(
            f"{key}.tasks",
            settings.tasks,
            lambda v: v in TASKS,
            "registered tasks: " + ", ".join(TASKS.names()),
        )
    if settings.get("groups") is not None:
        c.distinct(
            f"{key}.groups",
            settings.groups,
            lambda v: v in study.groups,
            "the study's groups: " + ", ".join(study.groups),
        )
    if settings.get("steps") is not None:
        c.distinct(
            f"{key}.steps",
            settings.steps,
            lambda v: _is_int(v) and v > 0,
            "distinct integers > 0 (kept checkpoints)",
        )
    try:  # the values' types, by the evaluator's schema
        OmegaConf.merge(
            OmegaConf.structured(EVALUATORS.schemas[name]),
            OmegaConf.masked_copy(settings, [k for k in own if k in fields]),
        )
    except OmegaConfBaseException as e:
        where = getattr(e, "full_key", None) or "?"
        c.bad(
            f"{key}.{where}",
            OmegaConf.select(settings, str(where), default=None),
            f"has the wrong type: {str(e).splitlines()[0]}",
        )
