"""The rules that turn the public sources of ``lm/train.txt`` into its documents (a Wikipedia sample
and five NLTK corpora); :func:`ssa_repro.data.derive.lm_train` joins them.

Each line is decoded (:func:`decode_line`: UTF-8, else Big5 where that gives plain punctuation, else
cp1252) and cleaned (:func:`clean_line`); a Wikipedia article is cut at its references
(:func:`wiki_article`). The functions take bytes and paths and return text: they know nothing of the
manifest or the download.
"""

from __future__ import annotations

import bz2
import re
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path

# An article is cut at the first heading that is one of these (whole heading, any case)
WIKI_STOP = re.compile(
    r"references|external links|see also|notes|footnotes|bibliography|selected bibliography"
    r"|further reading|publications|filmography",
    re.I,
)
_HEADING = re.compile(r"^\s*(=+)\s*(.*?)\s*\1\s*$")
_GALLERY = re.compile(r"^(?:(?:file|image):|[^|]+\.(?:jpe?g|png|gif|svg|tiff?)(?:\||$))", re.I)
MIN_ARTICLE_WORDS = 20


def _cp1252(raw: bytes) -> str:
    """cp1252, byte by byte; a byte cp1252 leaves undefined is taken as Latin-1."""
    out = []
    for byte in raw:
        try:
            out.append(bytes([byte]).decode("cp1252"))
        except UnicodeDecodeError:
            out.append(chr(byte))
    return "".join(out)


def _punctuation_only(s: str) -> bool:
    return all(ord(c) < 128 or unicodedata.category(c)[0] in "PZ" for c in s)


def decode_line(raw: bytes) -> str:
    """One line's text: UTF-8; else Big5 when that gives ASCII plus punctuation and spaces only (the
    Big5 quotes and dashes of state_union 1970-74 and inaugural 2005); else cp1252/Latin-1."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        text = raw.decode("big5")
        if _punctuation_only(text):
            return text
    except UnicodeDecodeError:
        pass
    return _cp1252(raw)


def clean_line(s: str) -> str:
    """C1 controls (and a double-encoded ``Â\\x85``) to their cp1252 meaning; NFC; tabs to spaces;
    other control characters dropped; whitespace runs to one space; ends stripped."""
    s = s.replace("\u00c2\u0085", "\u0085")
    s = re.sub("[\u0080-\u009f]", lambda m: _cp1252(bytes([ord(m.group())])), s)
    s = unicodedata.normalize("NFC", s).replace("\t", " ")
    s = "".join(c for c in s if unicodedata.category(c) != "Cc")
    return " ".join(s.split())


def text_lines(raw: bytes) -> list[str]:
    return [clean_line(decode_line(line)) for line in raw.replace(b"\r\n", b"\n").split(b"\n")]


def _one_doc(lines: list[str]) -> str:
    return "\n".join(line for line in lines if line)


def _blocks(lines: list[str]) -> list[str]:
    """Documents split at blank lines."""
    out, cur = [], []
    for line in lines:
        if line:
            cur.append(line)
        elif cur:
            out.append("\n".join(cur))
            cur = []
    if cur:
        out.append("\n".join(cur))
    return out


def _zip_texts(zip_path: Path, folder: str) -> list[tuple[str, bytes]]:
    """The ``.txt`` members under ``folder/`` of an NLTK corpus zip, sorted by name."""
    with zipfile.ZipFile(zip_path) as z:
        names = sorted(n for n in z.namelist() if n.startswith(folder + "/") and n.endswith(".txt"))
        return [(n, z.read(n)) for n in names]


def _wiki_pages(xml_bz2: bytes) -> list[tuple[str, str]]:
    """(title, wikitext) of the namespace-0 pages of a MediaWiki XML dump, in file order."""
    out = []
    root = ET.fromstring(bz2.decompress(xml_bz2))
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    for page in root.iter(f"{ns}page"):
        if page.findtext(f"{ns}ns") != "0":
            continue
        text = page.find(f"{ns}revision/{ns}text")
        out.append((page.findtext(f"{ns}title") or "", (text.text if text is not None else None) or ""))
    return out


def wiki_article(title: str, filtered: str) -> list[str]:
    """An article's lines from its ``filter_wiki`` text: the title first, then per line: ``''``/``'''``
    removed; a ``== Heading ==`` line becomes its text, and the article stops at the first heading in
    :data:`WIKI_STOP`; ``|alt=…`` (to the line's end) and ``|thumb`` removed, ``|NNNpx``/``|NNNxNNNpx``
    become a space; :func:`clean_line`; list bullets and indents (``*#:;``) at the start removed;
    ``(``…``)`` holding nothing but one ``,`` or ``;`` and spaces removed with the spaces before it;
    spaces before ``, . ; :`` removed; image/gallery lines (``File:``/``Image:``, or ``name.jpg|…``) and
    template or table remnants (a line starting ``{``, ``|`` or ``}``) dropped; a line that is not a
    heading is dropped when it has fewer than 3 ASCII letters."""
    out = [title]
    for line in filtered.split("\n"):
        line = line.replace("'''", "").replace("''", "")
        m = _HEADING.match(line)
        heading = m is not None
        if m:
            if WIKI_STOP.fullmatch(m.group(2).strip()):
                break
            line = m.group(2)
        line = re.sub(r"\|alt=.*$", "", line)
        line = re.sub(r"\|thumb\b", "", line)
        line = re.sub(r"\|\d+(?:x\d+)?px", " ", line)
        line = clean_line(line)
        line = re.sub(r"^[*#:;]+\s*", "", line)
        line = re.sub(r"\s*\(\s*[,;]?\s*\)", "", line)
        line = re.sub(r"\s+([,.;:])", r"\1", line)
        if _GALLERY.match(line) or line.startswith(("{", "|", "}")):
            continue
        if not heading and len(re.findall("[A-Za-z]", line)) < 3:
            continue
        out.append(line)
    return out


def wikipedia_docs(xml_bz2: bytes, filter_wiki: Callable[[str], str]) -> list[str]:
    """The Wikipedia sample's documents: namespace-0 pages that are not redirects (``#REDIRECT``), each
    :func:`wiki_article` of ``filter_wiki(text)``, kept when it has at least 20 words after its title."""
    docs = []
    for title, text in _wiki_pages(xml_bz2):
        if text.lstrip().lower().startswith("#redirect"):
            continue
        lines = wiki_article(title, filter_wiki(text))
        if sum(len(line.split()) for line in lines[1:]) >= MIN_ARTICLE_WORDS:
            docs.append("\n".join(lines))
    return docs


def nltk_docs(webtext: Path, state_union: Path, inaugural: Path, movie_reviews: Path, abc: Path) -> list[str]:
    """The NLTK corpora's documents, in this order, every line decoded by :func:`decode_line` and
    cleaned by :func:`clean_line` (CRLF read as LF), blank lines dropped inside a document: webtext one
    per file by name, but ``overheard.txt`` one per blank-line block; state_union and inaugural one per
    speech (file name order); movie_reviews one per review, ``neg/`` then ``pos/``; abc ``rural.txt``
    then ``science.txt``, one per blank-line block."""
    docs = []
    for name, raw in _zip_texts(webtext, "webtext"):
        lines = text_lines(raw)
        docs += _blocks(lines) if name.endswith("/overheard.txt") else [_one_doc(lines)]
    for path, folder in ((state_union, "state_union"), (inaugural, "inaugural")):
        docs += [_one_doc(text_lines(raw)) for _, raw in _zip_texts(path, folder)]
    for polarity in ("neg", "pos"):
        docs += [
            _one_doc(text_lines(raw)) for _, raw in _zip_texts(movie_reviews, f"movie_reviews/{polarity}")
        ]
    texts = dict(_zip_texts(abc, "abc"))
    for name in ("abc/rural.txt", "abc/science.txt"):
        docs += _blocks(text_lines(texts[name]))
    return [d for d in docs if d]


def join_docs(docs: list[str]) -> bytes:
    return ("\n\n".join(docs) + "\n").encode("utf-8")
