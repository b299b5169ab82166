"""The derivation functions of ssa_repro/data/derive.py on small fixture inputs written here, each
against output checked by hand: one fixture row per rule of ../shared/data/README.md. (The full files
were checked byte for byte against the offline copy when the rules were written; see
docs/corpus_tasks.md.)"""

from __future__ import annotations

import bz2
import csv
import inspect
import json
import sys
import zipfile

import pytest

from ssa_repro.data import derive as D
from ssa_repro.data import lm_text as T
from ssa_repro.data.download import load_manifest
from tests.conftest import HAVE_SHARED_DATA, SHARED_DATA


def jsonl(*records) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def write_jsonl(path, *records):
    path.write_bytes(jsonl(*records))
    return path


def make_zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


# ----------------------------------------------------------------------------------------- zorro


def test_zorro_names_table():
    lines = D.zorro_names().decode().splitlines()
    assert lines[0] == "paper_name\tfile_stem\tcertainty" and len(lines) == 13
    assert lines[3] == "agr_subj_verb-in_Q+aux\tagreement_subject_verb-in_question_with_aux\tcertain"
    assert all(line.endswith("\tcertain") for line in lines[1:])


@pytest.mark.skipif(not HAVE_SHARED_DATA, reason=f"no offline data at {SHARED_DATA}")
def test_zorro_names_equals_the_offline_copy():
    assert D.zorro_names() == (SHARED_DATA / "zorro/names.tsv").read_bytes()


# --------------------------------------------------------------------------------------- childes

COLUMNS = (
    "id,speaker_id,utterance_order,transcript_id,corpus_id,gloss,num_tokens,stem,part_of_speech,speaker_code,"
    "speaker_name,speaker_role,target_child_id,target_child_age,target_child_name,target_child_sex,type,"
    "media_end,media_start,media_unit,collection_id,collection_name,num_morphemes,language"
).split(",")


def childes_csv(path, rows):
    """rows: (utterance_order, transcript_id, gloss, speaker_code, speaker_role, age, type, collection)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        for i, (order, tid, gloss, code, role, age, kind, coll) in enumerate(rows):
            row = dict.fromkeys(COLUMNS, "NA")
            row.update(id=i, utterance_order=order, transcript_id=tid, gloss=gloss, speaker_code=code,
                       speaker_role=role, target_child_age=age, type=kind, collection_name=coll)  # fmt: skip
            w.writerow(row)
    return path


def test_aochildes_partial_rules(tmp_path):
    a = childes_csv(
        tmp_path / "Zeta.csv",
        [
            (2, 10, "look at the doggie", "MOT", "Mother", "800.5", "declarative", "Eng-NA"),
            (1, 10, "what's that", "MOT", "Mother", "800.5", "question", "Eng-NA"),
            (3, 10, "doggie", "CHI", "Target_Child", "800.5", "declarative", "Eng-NA"),  # the child
            (4, 10, "me do it", "CHI", "Mother", "800.5", "declarative", "Eng-NA"),  # CHI mislabelled
            (5, 10, "go away", "SIS", "Child", "800.5", "declarative", "Eng-NA"),  # role Child
            (6, 10, "clinical", "MOT", "Mother", "800.5", "declarative", "Clinical-MOR"),
            (7, 10, "you are big", "MOT", "Mother", "2191", "declarative", "Eng-NA"),  # over 6 years
            (8, 10, "xxx there", "MOT", "Mother", "800.5", "declarative", "Eng-NA"),
            (9, 10, "Mrs xxx's dog", "MOT", "Mother", "800.5", "declarative", "Eng-NA"),  # a word xxx
            (10, 10, "", "MOT", "Mother", "800.5", "declarative", "Eng-NA"),
            (11, 10, "bad \ufffd", "MOT", "Mother", "800.5", "declarative", "Eng-NA"),
            (12, 10, "pshewwwwww", "FAT", "Father", "800.5", "trail off", "Eng-NA"),  # www inside a word
            (13, 10, "sit down  Chi", "MOT", "Mother", "800.5", "imperative_emphatic", "Eng-NA"),
            (1, 9, "give it to Mot+and+Fat", "FAT", "Father", "2190", "trail off question", "Eng-NA"),
            (1, 11, "teddy_bear", "MOT", "Mother", "NA", "declarative", "Eng-NA"),  # unknown age
        ],
    )
    b = childes_csv(
        tmp_path / "Alpha.csv",
        [
            (1, 3, "Hello There", "INV", "Investigator", "91", "declarative", "Eng-NA"),
            (2, 12, "later one", "MOT", "Mother", "NA", "question", "Eng-NA"),
        ],
    )
    out = D.aochildes_partial(a, b).decode()
    assert out == (
        "hello there .\n"  # age 91
        "what's that ?\n"  # age 800.5, transcript 10, order 1
        "look at the doggie .\n"
        "pshewwwwww .\n"
        "sit down child !\n"
        "give it to mother and father ?\n"  # age 2190: kept
        "later one ?\n"  # unknown age: Alpha before Zeta
        "teddy bear .\n"
    )


# --------------------------------------------------------------------------------------- lm_eval


def test_arc(tmp_path):
    src = write_jsonl(
        tmp_path / "arc.jsonl",
        {"choices": ["41° F", "yes"], "query": "Question: Which is warm?", "gold": 1},
        {"choices": ["a", "b", "c"], "query": "Question: Pick c", "gold": 2},
    )
    assert D.arc_easy(src) == jsonl(
        {"id": "ARC-Easy-test-0000", "question": "Which is warm?",
         "choices": {"text": ["41° F", "yes"], "label": ["A", "B"]}, "answerKey": "B",
         "query": "Question: Which is warm?", "gold": 1},
        {"id": "ARC-Easy-test-0001", "question": "Pick c",
         "choices": {"text": ["a", "b", "c"], "label": ["A", "B", "C"]}, "answerKey": "C",
         "query": "Question: Pick c", "gold": 2},
    )  # fmt: skip
    assert b'"ARC-Challenge-test-0001"' in D.arc_challenge(src)
    assert "41° F".encode() in D.arc_easy(src)  # UTF-8, not \\u escapes


def test_boolq(tmp_path):
    src = write_jsonl(
        tmp_path / "b.jsonl",
        {"query": "Passage: A cat. Is it?\nQuestion: is a cat a cat?", "gold": 1},
        {"query": "Passage: Two\nlines.\nQuestion: does it split at the last one?", "gold": 0},
    )
    assert D.boolq(src) == jsonl(
        {"question": "is a cat a cat", "passage": "A cat. Is it?", "label": 1, "idx": 0},
        {"question": "does it split at the last one", "passage": "Two\nlines.", "label": 0, "idx": 1},
    )
    bad = write_jsonl(tmp_path / "bad.jsonl", {"query": "no passage", "gold": 0})
    with pytest.raises(D.DeriveError, match="line 1"):
        D.boolq(bad)


def test_copa(tmp_path):
    src = write_jsonl(
        tmp_path / "c.jsonl",
        {"query": "The man turned on the faucet, therefore", "gold": 1,
         "choices": ["the toilet filled.", "water flowed."]},
        {"query": "I was tired, so I slept, because", "gold": 0, "choices": ["i ran.", "I sat."]},
    )  # fmt: skip
    assert D.copa(src) == jsonl(
        {"premise": "The man turned on the faucet.", "choice1": "The toilet filled.",
         "choice2": "Water flowed.", "question": "effect", "label": 1, "idx": 0},
        {"premise": "I was tired, so I slept.", "choice1": "I ran.", "choice2": "I sat.",
         "question": "cause", "label": 0, "idx": 1},
    )  # fmt: skip


def test_piqa(tmp_path):
    src = write_jsonl(
        tmp_path / "p.jsonl", {"choices": ["a b", "c  d"], "gold": 1, "query": "Question: dresser\n"}
    )
    assert D.piqa(src) == jsonl({"goal": "dresser", "sol1": "a b", "sol2": "c  d", "label": 1, "idx": 0})


def test_winogrande(tmp_path):
    r1 = {"context_options": ["Sarah beat Maria so Sarah", "Sarah beat Maria so Maria"],
          "continuation": "won.", "gold": 1}  # fmt: skip
    r2 = {"context_options": ["He saw the red car", "He saw the red van"], "continuation": "go.", "gold": 0}
    src = write_jsonl(tmp_path / "w.jsonl", r1, r2)
    assert D.winogrande(src) == jsonl(
        {
            "sentence": "Sarah beat Maria so _ won.",
            "option1": "Sarah",
            "option2": "Maria",
            "answer": "2",
            **r1,
        },
        {"sentence": "He saw the red _ go.", "option1": "car", "option2": "van", "answer": "1", **r2},
    )


def test_rte(tmp_path):
    xml = (
        '<?xml version="1.0" encoding="UTF-8" ?>\n<entailment-corpus challenge="3">\n'
        '\t<pair id="1" entailment="YES" task="IE" length="short" >\n'
        "\t\t<t>Claude  Chabrol is\n a director .</t>\n\t\t<h>Chabrol directs.</h>\n\t</pair>\n"
        '\t<pair id="7" entailment="NO" task="QA" length="long" >\n'
        "\t\t<t>Stéphane sang.</t>\n\t\t<h> He danced. </h>\n\t</pair>\n</entailment-corpus>\n"
    )
    z = make_zip(tmp_path / "rte.zip", {"rte/rte3_test.xml": xml.encode(), "rte/rte3_dev.xml": b"<x/>"})
    assert D.rte(z) == jsonl(
        {"premise": "Claude Chabrol is a director .", "hypothesis": "Chabrol directs.", "label": 0,
         "idx": 0, "pair_id": "1", "task": "IE"},
        {"premise": "Stéphane sang.", "hypothesis": "He danced.", "label": 1, "idx": 1, "pair_id": "7",
         "task": "QA"},
    )  # fmt: skip


def test_hellaswag(tmp_path):
    text = (
        "Clean and jerk: A lady walks. She bends down! the lady\n3\nswings.\npulls.\nruns.\nlifts.\n"
        "Home and Garden: How to dig. Take a spade. Dig\n0\nDig deep.\nStop.\nRest.\nPlant.\n"
        "Canoeing: no boundary here\n1\na\nb\nc\nd\n"
    )
    src = tmp_path / "h.txt.bz2"
    src.write_bytes(bz2.compress(text.encode()))
    common = {"split": "val"}
    assert D.hellaswag(src) == jsonl(
        {"ind": 0, "activity_label": "Clean and jerk", "ctx_a": "A lady walks. She bends down!",
         "ctx_b": "the lady", "ctx": "A lady walks. She bends down! the lady",
         "endings": ["swings.", "pulls.", "runs.", "lifts."], "label": "3", **common, "source": "activitynet"},
        {"ind": 1, "activity_label": "Home and Garden", "ctx_a": "How to dig. Take a spade. Dig", "ctx_b": "",
         "ctx": "How to dig. Take a spade. Dig", "endings": ["Dig deep.", "Stop.", "Rest.", "Plant."],
         "label": "0", **common, "source": "wikihow"},
        {"ind": 2, "activity_label": "Canoeing", "ctx_a": "no boundary here", "ctx_b": "",
         "ctx": "no boundary here", "endings": ["a", "b", "c", "d"], "label": "1", **common,
         "source": "activitynet"},
    )  # fmt: skip
    src.write_bytes(bz2.compress(b"A: b\n1\nx\n"))
    with pytest.raises(D.DeriveError, match="multiple of 6"):
        D.hellaswag(src)


# ---------------------------------------------------------------------------------- lm/train.txt


def test_decode_and_clean_lines():
    assert T.decode_line("café".encode()) == "café"
    # Big5 typographic marks (state_union 1970-74, inaugural 2005) -> punctuation
    assert T.decode_line(b"man\xa1\xa6s genius\xa1Xand \xa1\xa7so\xa1\xa8\xa1K") == "man’s genius—and “so”…"
    # bytes that Big5 reads as a CJK character are cp1252 (state_union 1954's ½¢)
    assert T.decode_line(b"the \xbd\xa2 decrease") == "the ½¢ decrease"
    assert T.decode_line(b"\x93quoted\x94 caf\xe9 \x81") == "“quoted” café \x81"
    assert T.clean_line("  a\tb  \x12c\u0085 \u00c2\u0085d  ") == "a b c… …d"
    assert T.clean_line("\u3000[Moment of silence]") == "[Moment of silence]"
    assert T.clean_line("e\u0301") == "é"  # NFC


def test_wiki_article_rules():
    filtered = "\n".join(
        [
            "",
            "'''Albedo''' () or ''reflection'' (; ) coefficient , from Latin ( ; , albedo) .",
            "==History==",
            "* a bullet point line",
            ": an indented line",
            "File:Foo.jpg|a caption",
            "Moschee Vlora.jpg|Muradie Mosque",
            "Queen Teuta|217x217pxArt has a history.",
            "A cube.|thumb",
            "Grave marker|alt=A twin gravestone",
            "{ ai = '\\n'; }",
            "Hän",
            "== A ==",
            '(after and ), kept (,;; ) and ASCII !"#',
            "== See also ==",
            "After the cut",
        ]
    )
    assert T.wiki_article("Albedo", filtered) == [
        "Albedo",
        "Albedo or reflection coefficient, from Latin (;, albedo).",
        "History",
        "a bullet point line",
        "an indented line",
        "Queen Teuta Art has a history.",
        "A cube.",
        "Grave marker",
        "A",  # a heading is kept whatever its length
        '(after and ), kept (,;; ) and ASCII !"#',
    ]


XML = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<page><title>Alpha</title><ns>0</ns><revision><text>Alpha is a letter of the alphabet with many uses in
science and in mathematics and also in everyday writing of all sorts.
==Notes==
cut</text></revision></page>
<page><title>Beta</title><ns>0</ns><revision><text>#REDIRECT [[Alpha]]</text></revision></page>
<page><title>Talk:Alpha</title><ns>1</ns><revision><text>a talk page that is long enough to count as an article
if it were one, which it is not, since it is in another namespace</text></revision></page>
<page><title>Gamma</title><ns>0</ns><revision><text>Too short.</text></revision></page>
</mediawiki>"""


def nltk_zips(tmp_path):
    webtext = make_zip(
        tmp_path / "webtext.zip",
        {
            "webtext/README": b"not text",
            "webtext/wine.txt": b"Rich red \xa3 5\r\n\r\nBig  white\r\n",
            "webtext/overheard.txt": b"A: hi\nB: yo\n\n\nC: bye\n",
        },
    )
    state_union = make_zip(
        tmp_path / "state_union.zip", {"state_union/1970-Nixon.txt": b"We\xa1\xa6ll see\n\nthe future\n"}
    )
    inaugural = make_zip(tmp_path / "inaugural.zip", {"inaugural/1789-Washington.txt": b"Fellow-Citizens:\n"})
    movie_reviews = make_zip(
        tmp_path / "movie_reviews.zip",
        {
            "movie_reviews/pos/cv000.txt": b"great film .\n",
            "movie_reviews/neg/cv001.txt": b"i won\x12t go .\n",
        },
    )
    abc = make_zip(
        tmp_path / "abc.zip",
        {
            "abc/science.txt": b"Science one\r\n\r\nScience two\r\n",
            "abc/rural.txt": b"Rural one\n\nRural two\n",
        },
    )
    return webtext, state_union, inaugural, movie_reviews, abc


NLTK_DOCS = [
    "A: hi\nB: yo",  # overheard.txt: one document per blank-line block, before wine.txt (name order)
    "C: bye",
    "Rich red £ 5\nBig white",
    "We’ll see\nthe future",
    "Fellow-Citizens:",
    "i wont go .",  # neg before pos; a control character dropped
    "great film .",
    "Rural one",  # rural before science
    "Rural two",
    "Science one",
    "Science two",
]


def test_nltk_docs(tmp_path):
    assert T.nltk_docs(*nltk_zips(tmp_path)) == NLTK_DOCS


def test_lm_train_joins_wikipedia_then_nltk(tmp_path):
    wheel = make_zip(tmp_path / "gensim.whl", {D.WIKI_MEMBER: bz2.compress(XML.encode())})
    out = D.lm_train(wheel, *nltk_zips(tmp_path), filter_wiki=lambda text: text).decode()
    alpha = (
        "Alpha\nAlpha is a letter of the alphabet with many uses in\n"
        "science and in mathematics and also in everyday writing of all sorts."
    )
    assert out == "\n\n".join([alpha, *NLTK_DOCS]) + "\n"


def test_lm_train_without_gensim_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gensim.corpora.wikicorpus", None)  # import fails
    wheel = make_zip(tmp_path / "gensim.whl", {D.WIKI_MEMBER: bz2.compress(XML.encode())})
    with pytest.raises(D.DeriveError, match=r"lm/train.txt .* gensim .* pip install -e '\.\[data\]'"):
        D.lm_train(wheel, *nltk_zips(tmp_path))


# -------------------------------------------------------------------------------------- manifest


def test_every_derived_file_of_the_manifest_has_a_derivation_and_pinned_inputs():
    m = load_manifest()
    derived = [e for e in m.files if e.url is None]
    assert derived and all(e.derive in D.DERIVERS for e in derived), [e.path for e in derived]
    for e in derived:
        params = inspect.signature(D.DERIVERS[e.derive]).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            assert e.inputs, e.path
        else:
            assert len(e.inputs) == sum(p.default is p.empty for p in params), e.path
        for name in e.inputs:
            src = m.inputs[name]
            assert src.url.startswith("https://") and len(src.sha256) == 64 and src.bytes > 0, name
            assert "/raw/" in src.url or src.url.startswith("https://files.pythonhosted.org/"), name
    assert [n.removeprefix("AOCHILDES/").removesuffix(".csv") for n in
            next(e for e in derived if e.derive == "aochildes_partial").inputs] == D.CHILDES_CORPORA  # fmt: skip
    used = {name for e in m.files for name in e.inputs}
    assert used == set(m.inputs), set(m.inputs) - used  # no input listed that nothing uses
