"""Build the derived data files from their public inputs (``scripts/get_data.py``).

Some files under ``data.root`` have no upstream copy: this project converted or assembled them
(``../shared/data/README.md`` gives the provenance and the rules). ``manifest.yaml`` names, for each such
file, its public inputs (``inputs:``: URLs pinned to a commit or a PyPI wheel, with sha256 and size) and
the function here that builds it (``derive:``). ``get_data`` fetches the inputs into a cache with the
same checked, resumable download as every other file, calls the function, and gives the result its
name only when its sha256 equals the manifest's (the offline copy's): so a derivation that no longer
reproduces the file byte for byte never leaves a file where a task reads.

Each function takes the inputs' paths in the manifest's order and returns the file's bytes; its
docstring is the rule. Output text is UTF-8 with LF line endings; JSONL files are one
``json.dumps(record, ensure_ascii=False)`` per line, keys in the order written here.
"""

from __future__ import annotations

import bz2
import csv
import json
import re
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

from ssa_repro.data.lm_text import join_docs, nltk_docs, wikipedia_docs


class DeriveError(RuntimeError):
    """A derivation could not run (a missing optional package, an input not of the expected form)."""


DERIVERS: dict[str, Callable[..., bytes]] = {}


def deriver(fn: Callable[..., bytes]) -> Callable[..., bytes]:
    """Register ``fn`` under its name (the manifest's ``derive:``)."""
    DERIVERS[fn.__name__] = fn
    return fn


def _jsonl(records: Iterable[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------------------------- zorro

# The SSA paper's 12 reported Zorro probes: its short name -> the paradigm file's stem, all certain.
ZORRO_NAMES = [
    ("agr_subj_verb-across_PP", "agreement_subject_verb-across_prepositional_phrase"),
    ("agr_subj_verb-across_RC", "agreement_subject_verb-across_relative_clause"),
    ("agr_subj_verb-in_Q+aux", "agreement_subject_verb-in_question_with_aux"),
    ("anaphor_agr-pron_gender", "anaphor_agreement-pronoun_gender"),
    ("arg_str-dropped_arg", "argument_structure-dropped_argument"),
    ("arg_str-swapped_args", "argument_structure-swapped_arguments"),
    ("arg_str-transitive", "argument_structure-transitive"),
    ("binding-principle_a", "binding-principle_a"),
    ("case-subjective_pron", "case-subjective_pronoun"),
    ("filler-gap-wh_Q_subject", "filler-gap-wh_question_subject"),
    ("irregular-verb", "irregular-verb"),
    ("quantifiers-superlative", "quantifiers-superlative"),
]


@deriver
def zorro_names() -> bytes:
    """``zorro/names.tsv``: no inputs. A header ``paper_name, file_stem, certainty`` then one row per
    probe of :data:`ZORRO_NAMES` (the paper's order), tab-separated, every row ``certain``."""
    rows = [("paper_name", "file_stem", "certainty")] + [(a, b, "certain") for a, b in ZORRO_NAMES]
    return "".join("\t".join(r) + "\n" for r in rows).encode("utf-8")


# ------------------------------------------------------------------------------------------- childes

CHILDES_CORPORA = (
    "Bates Bernstein Bliss Bloom73 Bohannon Demetras1 Demetras2 Garvey Gathercole Higginson McCune "
    "McMillan Morisset Nelson Rollins Sachs Sawyer Snow Tardif VanHouten Warren"
).split()  # the 21 per-corpus CSVs, in the manifest's input order
MAX_AGE_DAYS = 6 * 365
_UNTRANSCRIBED = re.compile(r"\b(?:xxx|yyy|www)\b")
_PLACEHOLDERS = {"Chi": "child", "Mot": "mother", "Fat": "father"}


@deriver
def aochildes_partial(*csvs: Path) -> bytes:
    """``childes/aochildes_partial.txt`` from childes-db utterance CSVs (AOCHILDES
    ``aochildes/original_transcripts/<corpus>.csv``), one utterance a line:

    1. keep ``collection_name == Eng-NA``;
    2. drop the child's speech: ``speaker_role`` in {Target_Child, Child} or ``speaker_code == CHI``;
    3. drop rows whose ``target_child_age`` (days) is known and above 6 * 365;
    4. drop empty glosses and glosses with a word ``xxx``, ``yyy`` or ``www`` (regex word boundaries, so
       ``xxx's`` counts and ``pshewwwwww`` does not) or U+FFFD;
    5. ``_`` and ``+`` become spaces; the words ``Chi``/``Mot``/``Fat`` become child/mother/father; lower
       case; whitespace runs become one space;
    6. append `` ?`` when ``type`` contains "question", `` !`` for ``imperative_emphatic``, else `` .``;
    7. order by age (ascending), ``transcript_id``, ``utterance_order``; rows of unknown age after them,
       by corpus (the file's stem), ``transcript_id``, ``utterance_order``.
    """
    known, unknown = [], []
    for path in csvs:
        corpus = Path(path).stem
        with open(path, encoding="utf-8", newline="") as f:
            for r in csv.DictReader(f):
                if r["collection_name"] != "Eng-NA":
                    continue
                if r["speaker_role"] in ("Target_Child", "Child") or r["speaker_code"] == "CHI":
                    continue
                age = None if r["target_child_age"] == "NA" else float(r["target_child_age"])
                if age is not None and age > MAX_AGE_DAYS:
                    continue
                gloss = r["gloss"]
                if not gloss.strip() or _UNTRANSCRIBED.search(gloss) or "\ufffd" in gloss:
                    continue
                gloss = gloss.replace("_", " ").replace("+", " ")
                gloss = re.sub(r"\b(Chi|Mot|Fat)\b", lambda m: _PLACEHOLDERS[m.group(1)], gloss).lower()
                kind = r["type"]
                mark = "?" if "question" in kind else "!" if kind == "imperative_emphatic" else "."
                line = " ".join(gloss.split()) + " " + mark
                order = (int(r["transcript_id"]), int(r["utterance_order"]))
                if age is None:
                    unknown.append(((corpus, *order), line))
                else:
                    known.append(((age, *order), line))
    known.sort(key=lambda x: x[0])
    unknown.sort(key=lambda x: x[0])
    return "".join(line + "\n" for _, line in known + unknown).encode("utf-8")


# ------------------------------------------------------------------------------------------- lm_eval


def _arc(src: Path, tag: str) -> bytes:
    out = []
    for i, r in enumerate(_read_jsonl(src)):
        labels = [chr(ord("A") + k) for k in range(len(r["choices"]))]
        out.append(
            {
                "id": f"ARC-{tag}-test-{i:04d}",
                "question": r["query"].removeprefix("Question: "),
                "choices": {"text": r["choices"], "label": labels},
                "answerKey": labels[r["gold"]],
                "query": r["query"],
                "gold": r["gold"],
            }
        )
    return _jsonl(out)


@deriver
def arc_easy(src: Path) -> bytes:
    """``lm_eval/arc_easy.jsonl`` from llm-foundry's ``world_knowledge/arc_easy.jsonl`` (``query``,
    ``choices``, ``gold``): per line ``id`` = ``ARC-Easy-test-NNNN`` (line number from 0),
    ``question`` = ``query`` less its ``Question: `` prefix, ``choices`` = {``text``: the choices,
    ``label``: A, B, …}, ``answerKey`` = the gold label, then ``query`` and ``gold`` as given."""
    return _arc(src, "Easy")


@deriver
def arc_challenge(src: Path) -> bytes:
    """``lm_eval/arc_challenge.jsonl``: as :func:`arc_easy`, ids ``ARC-Challenge-test-NNNN``."""
    return _arc(src, "Challenge")


@deriver
def boolq(src: Path) -> bytes:
    """``lm_eval/boolq.jsonl`` from llm-foundry's ``reading_comprehension/boolq.jsonl``: ``query`` is
    ``Passage: <passage>\\nQuestion: <question>?``; per line {``question`` (without the final ``?``),
    ``passage``, ``label`` = ``gold``, ``idx`` = line number from 0}."""
    out = []
    for i, r in enumerate(_read_jsonl(src)):
        query = r["query"]
        if not query.startswith("Passage: ") or "\nQuestion: " not in query:
            raise DeriveError(f"boolq: line {i + 1} is not 'Passage: …\\nQuestion: …'")
        passage, question = query.removeprefix("Passage: ").rsplit("\nQuestion: ", 1)
        out.append({"question": question.removesuffix("?"), "passage": passage, "label": r["gold"], "idx": i})
    return _jsonl(out)


def _upper_first(s: str) -> str:
    return s[:1].upper() + s[1:]


@deriver
def copa(src: Path) -> bytes:
    """``lm_eval/copa.jsonl`` from llm-foundry's ``commonsense_reasoning/copa.jsonl``: ``query`` is
    ``<premise without its period>, therefore|because``; per line {``premise`` = that text + ``.``,
    ``choice1``, ``choice2`` = the choices with the first letter upper-cased, ``question`` = ``effect``
    (therefore) or ``cause`` (because), ``label`` = ``gold``, ``idx`` = line number from 0}."""
    out = []
    for i, r in enumerate(_read_jsonl(src)):
        text, connective = r["query"].rsplit(", ", 1)
        question = {"therefore": "effect", "because": "cause"}.get(connective)
        if question is None:
            raise DeriveError(f"copa: line {i + 1} ends in {connective!r}, not 'therefore' or 'because'")
        c1, c2 = r["choices"]
        out.append(
            {
                "premise": text + ".",
                "choice1": _upper_first(c1),
                "choice2": _upper_first(c2),
                "question": question,
                "label": r["gold"],
                "idx": i,
            }
        )
    return _jsonl(out)


@deriver
def piqa(src: Path) -> bytes:
    """``lm_eval/piqa.jsonl`` from llm-foundry's ``commonsense_reasoning/piqa.jsonl``: per line
    {``goal`` = ``query`` less ``Question: `` and its final newline, ``sol1``, ``sol2`` = the choices,
    ``label`` = ``gold``, ``idx`` = line number from 0}."""
    out = []
    for i, r in enumerate(_read_jsonl(src)):
        sol1, sol2 = r["choices"]
        goal = r["query"].removeprefix("Question: ").removesuffix("\n")
        out.append({"goal": goal, "sol1": sol1, "sol2": sol2, "label": r["gold"], "idx": i})
    return _jsonl(out)


@deriver
def winogrande(src: Path) -> bytes:
    """``lm_eval/winogrande.jsonl`` from llm-foundry's ``language_understanding/winogrande.jsonl``
    (``context_options`` = [prefix + option1, prefix + option2], ``continuation``, ``gold``): ``prefix``
    is the options' longest common prefix cut back to just after its last space; per line {``sentence``
    = prefix + ``_ `` + continuation, ``option1``, ``option2`` = the remainders, ``answer`` =
    str(gold + 1)}, then the llm-foundry fields as given."""
    out = []
    for r in _read_jsonl(src):
        a, b = r["context_options"]
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        prefix = a[:n][: a[:n].rfind(" ") + 1]
        out.append(
            {
                "sentence": prefix + "_ " + r["continuation"],
                "option1": a[len(prefix) :],
                "option2": b[len(prefix) :],
                "answer": str(r["gold"] + 1),
                **r,
            }
        )
    return _jsonl(out)


@deriver
def rte(zip_path: Path) -> bytes:
    """``lm_eval/rte.jsonl`` from NLTK's ``corpora/rte.zip``, member ``rte/rte3_test.xml`` (RTE-3 test):
    per ``<pair>`` in document order {``premise`` = ``<t>``, ``hypothesis`` = ``<h>`` (whitespace runs
    collapsed to one space, ends stripped), ``label`` = 0 for ``entailment="YES"`` else 1, ``idx`` =
    position from 0, ``pair_id`` = the ``id`` attribute, ``task`` = the ``task`` attribute}."""
    with zipfile.ZipFile(zip_path) as z:
        root = ET.fromstring(z.read("rte/rte3_test.xml"))
    out = []
    for i, p in enumerate(root.iter("pair")):
        out.append(
            {
                "premise": " ".join((p.findtext("t") or "").split()),
                "hypothesis": " ".join((p.findtext("h") or "").split()),
                "label": 0 if p.get("entailment") == "YES" else 1,
                "idx": i,
                "pair_id": p.get("id"),
                "task": p.get("task"),
            }
        )
    return _jsonl(out)


# WikiHow's top-level categories, plus the two catch-alls HellaSwag's WikiHow items use
WIKIHOW_LABELS = frozenset(
    {
        "Arts and Entertainment",
        "Cars & Other Vehicles",
        "Computers and Electronics",
        "Education and Communications",
        "Family Life",
        "Finance and Business",
        "Food and Entertaining",
        "Health",
        "Hobbies and Crafts",
        "Holidays and Traditions",
        "Home and Garden",
        "Personal Care and Style",
        "Pets and Animals",
        "Philosophy and Religion",
        "Relationships",
        "Sports and Fitness",
        "Travel",
        "Work World",
        "Youth",
        "Uncategorized",
        "Home,Categories",
    }
)


@deriver
def hellaswag(bz2_path: Path) -> bytes:
    """``lm_eval/hellaswag.jsonl`` from klosax/hellaswag_text_data's ``hellaswag_val_full.txt.bz2``:
    six lines an item (``<activity_label>: <ctx>``, the gold index, four endings). Per item {``ind`` =
    item number from 0, ``activity_label`` (before the first ``: ``), ``ctx_a``, ``ctx_b``, ``ctx``,
    ``endings``, ``label`` (the gold index as a string), ``split`` = ``val``, ``source``}: an item whose
    label is in :data:`WIKIHOW_LABELS` is ``wikihow`` with ``ctx_a = ctx`` and ``ctx_b = ""``; any other
    is ``activitynet``, its ctx split at the last ``. ``, ``! `` or ``? ``: ``ctx_a`` up to and with
    the mark, ``ctx_b`` after the space (no such mark: ``ctx_a = ctx``, ``ctx_b = ""``)."""
    lines = bz2.decompress(Path(bz2_path).read_bytes()).decode("utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) % 6:
        raise DeriveError(f"hellaswag: {len(lines)} lines, not a multiple of 6 (label: ctx, gold, 4 endings)")
    out = []
    for i in range(len(lines) // 6):
        head, gold, *endings = lines[6 * i : 6 * i + 6]
        label, ctx = head.split(": ", 1)
        if label in WIKIHOW_LABELS:
            a, b, source = ctx, "", "wikihow"
        else:
            cut = max(ctx.rfind(mark) for mark in (". ", "! ", "? "))
            a, b = (ctx[: cut + 1], ctx[cut + 2 :]) if cut >= 0 else (ctx, "")
            source = "activitynet"
        out.append(
            {
                "ind": i,
                "activity_label": label,
                "ctx_a": a,
                "ctx_b": b,
                "ctx": ctx,
                "endings": endings,
                "label": gold,
                "split": "val",
                "source": source,
            }
        )
    return _jsonl(out)


# ------------------------------------------------------------------------------------- lm/train.txt

WIKI_MEMBER = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def _filter_wiki() -> Callable[[str], str]:
    try:
        from gensim.corpora.wikicorpus import filter_wiki
    except ImportError as e:
        raise DeriveError(
            "lm/train.txt strips the Wikipedia markup with gensim's filter_wiki, and gensim is not "
            "installed: pip install -e '.[data]' (gensim 4.4.0, with which the result was verified)"
        ) from e
    return filter_wiki


@deriver
def lm_train(
    gensim_wheel: Path,
    webtext: Path,
    state_union: Path,
    inaugural: Path,
    movie_reviews: Path,
    abc: Path,
    filter_wiki: Callable[[str], str] | None = None,
) -> bytes:
    """``lm/train.txt``: documents separated by one blank line, the file ending in one newline. First
    :func:`wikipedia_docs` of the gensim wheel's ``enwiki-…-shortened.bz2`` test file (markup stripped
    by gensim's ``filter_wiki``), then :func:`nltk_docs` of the five NLTK corpus zips."""
    with zipfile.ZipFile(gensim_wheel) as z:
        xml_bz2 = z.read(WIKI_MEMBER)
    wiki = wikipedia_docs(xml_bz2, filter_wiki or _filter_wiki())
    return join_docs(wiki + nltk_docs(webtext, state_union, inaugural, movie_reviews, abc))


def derive(name: str, inputs: list[Path]) -> bytes:
    """Run the derivation ``name`` (a manifest ``derive:``) on the inputs' paths."""
    if name not in DERIVERS:
        raise DeriveError(f"no derivation {name!r} in ssa_repro/data/derive.py; known: {', '.join(DERIVERS)}")
    return DERIVERS[name](*inputs)
