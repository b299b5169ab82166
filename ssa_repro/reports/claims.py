"""Claims as data: a study file's ``claims:`` section turned into :class:`paired.Claim` s.

A study's claims are written in its YAML (``conf/study/*.yaml``, ICL claims shared through
``conf/study/claims/icl.yaml``), not in Python. Each entry of ``claims:`` (a mapping: a child study adds
or replaces entries by name, in order) is a claim or a block of claims:

- a **claim**: ``claim`` (what is tested, the report's words), ``paper`` (the paper's words), ``contrast``
  (what the estimate b − a is, e.g. "SSA − softmax"), ``metric``, ``sign`` (+1: the claim says b > a,
  −1: b < a), ``label`` (one contrast's name), the arms ``a`` and ``b`` (column filters of the per-seed
  frame: each picks one value per seed; ``both`` holds the filters the two share); optional ``key`` (the
  claim's id in the table; default its name in the mapping), ``for`` (one contrast per combination of
  ``{var: list}``, the first variable outermost), ``when`` (skip the claim unless every named value is
  present, or equals the given one: ``{name: value}``), ``judge`` (a report's rule deciding whether a
  contrast is judged, e.g. "neither model learned the task": ``paired.Spec.judged``), ``family`` (the
  Holm family, shared by the claims that name it; default: the claim alone) and ``primary`` (one of at
  most :data:`MOST_PRIMARY` declared primary endpoints of the study, listed first);
- a **block**: ``each`` (``{var: list}``: its ``claims`` repeated per value, in order), ``when`` and
  ``claims`` (a mapping of claims or blocks).

A list is a report's named list (``quant``: the quantifier tasks the frame has), a bound variable's
(``"{m.tasks}"``) or a literal YAML list (its items templates too).
Text and filters are templates: ``{name}`` is a value of the report's context or a bound variable
(``{base.arch}``: a field of a list item that is a mapping); a filter that is one placeholder alone keeps
the value's type (``step: "{zorro_last}"`` stays an integer). What a report can name (its
:class:`Context`: values computed from the frame, e.g. ``sigma_max``, and judges) is fixed by the report
module (``icl.CLAIM_NAMES``, ``early.CLAIM_NAMES``), so :func:`problems` refuses a typo before a study
runs (``studies/schema.py``). Each contrast is a paired test b − a over seeds with the margin of its
metric (``stats.MARGINS``, ``paired.EXTRA_MARGINS``: the margin is the metric's, as the decision rule
states it), Holm-adjusted within its family (``paired.claims_table``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace

from ssa_repro.reports.paired import Claim, Spec

CLAIM_KEYS = ("key", "claim", "paper", "contrast", "metric", "sign", "label", "for", "both", "a", "b")
CLAIM_KEYS += ("when", "judge", "primary", "family")
REQUIRED = ("claim", "paper", "contrast", "metric", "sign", "label", "a", "b")
BLOCK_KEYS = ("each", "when", "claims")
TEXT_KEYS = ("key", "claim", "paper", "contrast", "metric", "label", "family")
FILTER_KEYS = ("both", "a", "b")
MOST_PRIMARY = 4  # issue 38: at most four declared primary endpoints per study
WHOLE = re.compile(r"^\{(\w+(?:\.\w+)*)\}$")  # a filter that is one placeholder alone keeps its type


@dataclass(frozen=True)
class Context:
    """What a study's claims can name: ``values`` (scalars, lists, or callables ``f(bindings) -> list``
    for lists that depend on the variables bound so far) and ``judges`` (``f(a, b) -> bool``: whether a
    contrast with arm filters ``a`` and ``b`` is judged)."""

    values: Mapping[str, object]
    judges: Mapping[str, Callable[[Mapping, Mapping], bool]] = field(default_factory=dict)


def build(entries: Mapping | None, ctx: Context) -> list[Claim]:
    """The claims of a study's ``claims:`` section (:mod:`this module <ssa_repro.reports.claims>`) on
    the frame ``ctx`` was computed from: the primary ones first, each part in the section's order."""
    out: list[Claim] = []
    _walk(entries or {}, ctx, {}, out)
    out = sorted(out, key=lambda c: not c.primary)  # the declared primary endpoints first (stable)
    return once(out)


def once(claims: list[Claim]) -> list[Claim]:
    """Each contrast tested once: a claim's contrast with the same metric and arms as an earlier claim's
    is left out of it (a ladder's ``ssa_<group>`` repeats the cells of the per-rung claims), so that it
    has one Holm p, in the first claim's family; a claim left with no contrast is dropped."""
    seen, kept = set(), []
    for c in claims:
        specs = []
        for s in c.specs:
            key = (s.metric, _frozen(s.a), _frozen(s.b))
            if key not in seen:
                seen.add(key)
                specs.append(s)
        if specs:
            kept.append(replace(c, specs=tuple(specs)))
    return kept


def _frozen(filters: Mapping) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in filters.items()))


def _walk(entries: Mapping, ctx: Context, bound: dict, out: list) -> None:
    for name, entry in entries.items():
        if not _holds(entry.get("when"), ctx, bound):
            continue
        if "claims" in entry:
            for b in _expand(entry.get("each") or {}, ctx, bound):
                _walk(entry["claims"], ctx, b, out)
        else:
            out.append(_claim(str(name), entry, ctx, bound))


def _claim(name: str, e: Mapping, ctx: Context, bound: dict) -> Claim:
    specs = []
    for b in _expand(e.get("for") or {}, ctx, bound):
        ns = _namespace(ctx, b)
        both = _fill(e.get("both") or {}, ns)
        a, bb = {**both, **_fill(e["a"], ns)}, {**both, **_fill(e["b"], ns)}
        judged = bool(ctx.judges[e["judge"]](a, bb)) if e.get("judge") else True
        specs.append(Spec(_fill(e["label"], ns), _fill(e["metric"], ns), a, bb, int(e["sign"]), judged))
    ns = _namespace(ctx, bound)
    return Claim(
        _fill(e.get("key", name), ns),
        _fill(e["claim"], ns),
        _fill(e["paper"], ns),
        tuple(specs),
        _fill(e["contrast"], ns),
        primary=bool(e.get("primary", False)),
        family=_fill(e["family"], ns) if e.get("family") is not None else None,
    )


def fill(x, ctx: Context):
    """``x`` (a template, or a mapping or list of them) with its placeholders filled from the report's
    values (what the study file's other sections, ``factorials:`` and ``primary:``, can name)."""
    ns = _namespace(ctx, {})
    if isinstance(x, (list, tuple)):
        return [fill(v, ctx) for v in x]
    if isinstance(x, Mapping):
        return {(_fill(k, ns) if isinstance(k, str) else k): fill(v, ctx) for k, v in x.items()}
    return _fill(x, ns)


def _expand(each: Mapping, ctx: Context, bound: dict) -> list[dict]:
    """Every combination of ``{var: list}`` over ``bound`` (the first variable outermost; a list may
    depend on the variables before it)."""
    combos = [dict(bound)]
    for var, src in each.items():
        combos = [{**c, var: _item(v)} for c in combos for v in _list(src, ctx, c)]
    return combos


def _list(src, ctx: Context, bound: Mapping) -> Sequence:
    if isinstance(src, str) and WHOLE.match(src):  # a list a bound variable holds: "{m.tasks}"
        return list(_lookup(WHOLE.match(src).group(1), _namespace(ctx, bound)) or [])
    if isinstance(src, str):
        v = ctx.values[src]
        v = v(bound) if callable(v) else v
        return list(v or [])
    ns = _namespace(ctx, bound)  # a literal list's items are templates too
    return [_fill(v, ns) for v in src]


def _item(v):
    return SimpleNamespace(**v) if isinstance(v, Mapping) else v


def _namespace(ctx: Context, bound: Mapping) -> dict:
    return {**{k: v for k, v in ctx.values.items() if not callable(v)}, **bound}


def _lookup(path: str, ns: Mapping):
    head, *rest = path.split(".")
    v = ns[head]
    for r in rest:
        v = getattr(v, r)
    return v


def _fill(x, ns: Mapping):
    """``x`` with its placeholders filled from ``ns`` (a mapping's values, recursively)."""
    if isinstance(x, Mapping):
        return {k: _fill(v, ns) for k, v in x.items()}
    if isinstance(x, str):
        whole = WHOLE.match(x)
        return _lookup(whole.group(1), ns) if whole else x.format_map(ns)
    return x


def _holds(when, ctx: Context, bound: Mapping) -> bool:
    """``when``: every named value present (not None, not empty), or ``{name: value}`` equal."""
    if not when:
        return True
    ns = _namespace(ctx, bound)
    if isinstance(when, Mapping):
        return all(_lookup(k, ns) == v for k, v in when.items())
    for name in when:
        v = _lookup(name, ns)
        if v is None or (isinstance(v, (list, tuple, str, dict)) and not len(v)):
            return False
    return True


# ------------------------------------------------------------------ checking a study file's claims
def problems(entries, file: str, names: Sequence[str], judges: Sequence[str], report: str) -> list[str]:
    """Every problem of a study's ``claims:`` section, one line each naming ``file``, the claim, the key,
    the value and what is allowed: unknown keys, missing ones, a sign other than ±1, a list, value or
    judge the report (``names``, ``judges``) does not provide, a template naming neither a value nor a
    bound variable, more than :data:`MOST_PRIMARY` primary claims."""
    if not isinstance(entries, Mapping):
        return [f"{file}: claims={entries!r} is not a mapping; allowed: {{claim name: {{claim, paper, …}}}}"]
    check = _Checker(file, set(names), set(judges), report)
    check.entries(entries, "claims", set())
    if check.primaries > MOST_PRIMARY:
        check.out.append(
            f"{file}: claims declares {check.primaries} primary claims; allowed: at most {MOST_PRIMARY} "
            "(issue 38)"
        )
    return check.out


class _Checker:
    """Collects ``<file>: <where>.<key>=<value> <what is wrong>; allowed: <what is>`` lines."""

    def __init__(self, file: str, names: set, judges: set, report: str):
        self.file, self.names, self.judges, self.report = file, names, judges, report
        self.out: list[str] = []
        self.primaries = 0

    def bad(self, at: str, key: str, value, why: str) -> None:
        self.out.append(f"{self.file}: {at}.{key}={value!r} {why}")

    def entries(self, entries: Mapping, where: str, bound: set) -> None:
        for name, e in entries.items():
            at = f"{where}.{name}"
            if not isinstance(e, Mapping):
                allowed = f"a claim ({', '.join(REQUIRED)}) or a block ({', '.join(BLOCK_KEYS)})"
                self.out.append(f"{self.file}: {at}={e!r} is not a mapping; allowed: {allowed}")
                continue
            block = "claims" in e
            allowed = BLOCK_KEYS if block else CLAIM_KEYS
            for k in e:
                if k not in allowed:
                    kind = "a block" if block else "a claim"
                    self.bad(at, k, e[k], f"is not a key of {kind}; allowed keys: {', '.join(allowed)}")
            self.when(at, e.get("when"), bound)
            inner = self.loops(at, "each" if block else "for", e.get("each" if block else "for"), bound)
            if not block:
                self.claim(at, e, inner)
            elif isinstance(e["claims"], Mapping):
                self.entries(e["claims"], f"{at}.claims", inner)
            else:
                self.bad(
                    at, "claims", e["claims"], "is not a mapping; allowed: {claim name: {claim, paper, …}}"
                )

    def loops(self, at: str, key: str, loops, bound: set) -> set:
        """Checks ``each``/``for``; returns the variables bound inside."""
        inner = set(bound)
        if loops is not None and not isinstance(loops, Mapping):
            self.bad(at, key, loops, "is not a mapping; allowed: {variable: list}")
            return inner
        for var, src in (loops or {}).items():
            if isinstance(src, str) and not WHOLE.match(src) and src not in self.names:
                allowed = ", ".join(sorted(self.names))
                self.bad(
                    at, f"{key}.{var}", src, f"is not a list of report {self.report!r}; allowed: {allowed}"
                )
            elif not isinstance(src, (str, Sequence)):
                self.bad(at, f"{key}.{var}", src, "is not a list; allowed: a report's list name or a list")
            else:
                self.refs(at, f"{key}.{var}", src, self.names | inner)
            inner.add(str(var))
        return inner

    def when(self, at: str, when, bound: set) -> None:
        if when is not None and not isinstance(when, (Mapping, Sequence)) or isinstance(when, str):
            self.bad(at, "when", when, "is not allowed; allowed: a list of value names, or {name: value}")
            return
        for w in when or []:
            if str(w).split(".")[0] not in self.names | bound:
                allowed = ", ".join(sorted(self.names | bound))
                self.bad(at, "when", w, f"names no value of report {self.report!r}; allowed: {allowed}")

    def claim(self, at: str, e: Mapping, bound: set) -> None:
        for k in REQUIRED:
            if k not in e:
                self.out.append(f"{self.file}: {at}.{k} is missing; a claim needs {', '.join(REQUIRED)}")
        if "sign" in e and e["sign"] not in (1, -1):
            self.bad(at, "sign", e["sign"], "is not allowed; allowed: 1 (b > a) or -1 (b < a)")
        if e.get("judge") is not None and e["judge"] not in self.judges:
            allowed = ", ".join(sorted(self.judges))
            self.bad(at, "judge", e["judge"], f"is not a judge of report {self.report!r}; allowed: {allowed}")
        if "primary" in e and not isinstance(e["primary"], bool):
            self.bad(at, "primary", e["primary"], "is not allowed; allowed: true or false")
        self.primaries += e.get("primary") is True
        for k in FILTER_KEYS:
            if k in e and not isinstance(e[k], Mapping):
                self.bad(
                    at, k, e[k], "is not a mapping; allowed: {column: value} filters of the per-seed frame"
                )
        for k in (*TEXT_KEYS, *FILTER_KEYS):
            if k in e:
                self.refs(at, k, e[k], self.names | bound)

    def refs(self, at: str, key: str, x, known: set) -> None:
        """Every placeholder of the templates in ``x`` names a value or a bound variable."""
        for text in _strings(x):
            for ref in _refs(text):
                if ref not in known:
                    self.bad(
                        at,
                        key,
                        text,
                        f"names {{{ref}}}, which is neither a value of the report nor a variable of the "
                        f"claim; allowed: {', '.join(sorted(known))}",
                    )


def _strings(x) -> list[str]:
    if isinstance(x, Mapping):
        return [s for v in x.values() for s in _strings(v)]
    if isinstance(x, (list, tuple)) or (isinstance(x, Sequence) and not isinstance(x, str)):
        return [s for v in x for s in _strings(v)]
    return [x] if isinstance(x, str) else []


def _refs(text: str) -> list[str]:
    """The root names a template refers to (``{base.arch}`` → ``base``); a malformed one as itself."""
    try:
        return [f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(text) if f]
    except ValueError:
        return [text]
