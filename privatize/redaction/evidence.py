"""Evidence for the calibrated conservative policy pi_c (issue 50).

The strict pi_c flags a record on any signal: every NER entity, every recognizer hit,
every digit run, every capitalised word. On clinical notes that is nearly every sentence
(vital signs, doses and times are digit runs; shorthand is upper case). The calibrated
pi_c looks at the same signals as *candidates*, each described by features (what found
it, its shape, its neighbours, how common its words are, the document's style), and
scores each with a logistic model (:mod:`privatize.redaction.calibration`); a record's
score is its strongest candidate's. The model is fitted on labelled sentences and its
threshold chosen on other labelled sentences so that the share of secret-holding
sentences it lets through is bounded with 95% confidence.

Candidate kinds (``beside`` only when pi's spans are given, for ``pi_c.scope: rest``; its
features all start with ``beside`` and are fitted apart, so a record-scope score never
meets them): ``ner`` (a spaCy entity, any label), ``ner_case`` (one found in a
re-cased caseless region), ``rec`` (a pattern recognizer or style rule hit, before pi's
filters, at any score), ``weak`` (a context-dependent pattern without its context word),
``digits`` (a digit run), ``cap`` (a capitalised word that is not a function word) and
``caseless`` (a content word of text written without case).

Features are strings; :func:`candidates` returns them per candidate so that the fitting
script (``experiments/pic_fit.py``) and the detector build them the same way.
"""

from __future__ import annotations

import functools

import regex as re

from privatize.redaction.filters import is_known_name, zipf
from privatize.redaction.spans import _CAP_WORD, _DIGITS, _LETTER_WORD, _PRONOUN_I, _SENT_END, inside_any, is_function_word, \
    is_speaker_label
from privatize.redaction.styles.vocab import CLINICAL_ABBREVIATIONS, city_names, is_clinical_word, is_dictionary_word
from privatize.redaction.words import stop_words

KINDS = ("ner", "ner_case", "rec", "weak", "digits", "cap", "caseless", "beside")
"""Candidate kinds, in the order the stage's ``pi_c_by`` statistics list them."""

BESIDE_REACH = 3
"""``beside`` candidates: the content words up to this many words before and after a span
pi removes, within its clause (a secret pi removed only in part leaves its other words
there: "<MASK> , east road")."""
_CLAUSE_END = re.compile(r"[.!?;:()\[\]\n]")

_TOKEN_AT = re.compile(r"\S+")
_WORD = re.compile(r"[\p{L}][\p{L}'’]*|\d+")
_TITLES = frozenset("dr dr. mr mr. mrs mrs. ms ms. miss prof prof. sir madam mister doctor nurse rn md np pa".split())


def _zipf_bucket(word: str) -> str:
    z = zipf(word.strip(".'’"))
    if z <= 0:
        return "z0"
    if z < 2.5:
        return "z1"
    if z < 3.5:
        return "z2"
    if z < 4.5:
        return "z3"
    return "z4"


def word_shape(token: str) -> str:
    """``Aa``, ``A``, ``9/9``, ``9-9-9``, ``a9``: letters and digits by class, runs collapsed."""
    out = []
    for c in token:
        k = "A" if c.isupper() else "a" if c.isalpha() else "9" if c.isdigit() else c
        if not out or out[-1] != k:
            out.append(k)
    return "".join(out)[:12]


@functools.lru_cache(maxsize=200_000)
def vocab_class(word: str) -> str:
    """What a word is by the domain lexicons (:mod:`privatize.redaction.styles.vocab`,
    the census and GeoNames lists), in this order: ``num`` (no letter), ``title`` (``dr``,
    ``mrs``), ``abbr`` (clinical shorthand: ``hr``, ``peep``, ``fio2``), ``dict`` (a word of
    Webster's Second that is no known name: ``crackles``, ``hospital``), ``dictname`` (a
    known name or city that is also a dictionary word: ``price``, ``bay``,
    ``page``), ``name`` (a known name or a city that is neither: ``thomas``, ``miami``),
    ``clin`` (a drug name or a clinical eponym that is none of these: ``lasix``),
    ``other`` (none of these: a misspelling, a rare name, a code)."""
    w = word.lower().strip(".,;:()[]'’\"!?")
    if not any(c.isalpha() for c in w):
        return "num"
    if w in _TITLES or w + "." in _TITLES:
        return "title"
    if w in CLINICAL_ABBREVIATIONS:
        return "abbr"
    named = is_known_name(w) or w in city_names()
    if is_dictionary_word(w) and not named:
        return "dict"
    if named:
        return "dictname" if is_dictionary_word(w) else "name"
    if is_clinical_word(w):
        return "clin"
    return "other"


def _vocab_feats(text: str, s: int, e: int, kind: str, style: str) -> list[str]:
    """The lexicon classes of a candidate's words (:func:`vocab_class`): which occur, and
    whether all are clinical shorthand or drugs (``LASIX``, ``hep cont``) or all are
    clinical or dictionary words (``LEFT BASILAR CRACKLES``), also crossed with the style."""
    classes = {vocab_class(w) for w in _WORD.findall(text, s, e) if any(c.isalpha() for c in w)}
    if not classes:
        return []
    out = [f"{kind}:has_{c}" for c in sorted(classes)]
    if classes <= {"abbr", "clin"}:
        out += [f"{kind}:all_clin", f"{kind}:all_clin:{style}"]
    elif classes <= {"abbr", "clin", "dict", "title"}:
        out += [f"{kind}:all_dict", f"{kind}:all_dict:{style}"]
    if "name" in classes or "other" in classes:
        out.append(f"{kind}:namelike:{style}")
    return out


def _len_bucket(n: int) -> str:
    return str(n) if n <= 4 else "5-6" if n <= 6 else "7-9" if n <= 9 else "10+"


def _token_around(text: str, s: int, e: int) -> tuple[int, int]:
    a = s
    while a > 0 and not text[a - 1].isspace():
        a -= 1
    b = e
    while b < len(text) and not text[b].isspace():
        b += 1
    while b > e and text[b - 1] in ".,;:)]!?\"'":
        b -= 1
    while a < s and text[a] in "([\"'":
        a += 1
    return a, b


def _neighbour_words(text: str, s: int, e: int) -> tuple[str, str]:
    """The word before ``s`` and the word after ``e`` (lower case; ``^``/``$`` at a
    line's edge), within the same line."""
    line_start = text.rfind("\n", 0, s) + 1
    line_end = text.find("\n", e)
    line_end = len(text) if line_end < 0 else line_end
    before = _WORD.findall(text, line_start, s)
    after = _WORD.findall(text, e, line_end)
    prev = before[-1].lower() if before else "^"
    nxt = after[0].lower() if after else "$"
    return prev, nxt


def _lex(word: str) -> str:
    """A neighbour word as a feature: itself when it is common (a function word, shorthand
    of up to four letters, or a word with Zipf frequency of at least 3: ``to``, ``dr``,
    ``daughter``, ``number``), its digit class when numeric, else its frequency bucket
    (a rare word says how rare, not which)."""
    if word in ("^", "$"):
        return word
    if word.isdigit():
        return "9"
    if len(word) <= 4 or word in stop_words() or zipf(word) >= 3.0:
        return word
    return _zipf_bucket(word)


def _word_feats(text: str, s: int, e: int, prefix: str) -> list[str]:
    piece = text[s:e]
    words = _WORD.findall(piece) or [piece]
    rare = min(words, key=lambda w: zipf(w) if not w.isdigit() else 9.0)
    out = [f"{prefix}:{_zipf_bucket(rare)}", f"{prefix}:n{min(len(words), 4)}", f"w={rare.lower()}"]
    if any(c.isdigit() for c in piece):
        out.append(f"{prefix}:digit")
    letters = [c for c in piece if c.isalpha()]
    if letters and all(c.isupper() for c in letters):
        out.append(f"{prefix}:allcaps{min(len(letters), 5)}")
    if any(is_known_name(w) for w in words if w[:1].isupper()):
        out.append(f"{prefix}:name")
    return out


def _context_feats(text: str, s: int, e: int, prefix: str) -> list[str]:
    prev, nxt = _neighbour_words(text, s, e)
    out = [f"{prefix}:prev={_lex(prev)}", f"{prefix}:next={_lex(nxt)}", f"ctx:prev={_lex(prev)}",
           f"ctx:next={_lex(nxt)}"]
    if prev in _TITLES:
        out.append(f"{prefix}:title")
    return out


_NUMERIC_DATE = re.compile(r"(\d{1,2})[/.-](\d{1,2})(?:[/.-](\d{2}|\d{4}))?")
_CLOCK = re.compile(r"(?:[01]?\d|2[0-3])[:.h][0-5]\d(?:[ap]m?)?|(?:[01]\d|2[0-3])[0-5]\d")
_YEAR = re.compile(r"'?\d{2}|(?:19|20)\d{2}s?")
_RANGE = re.compile(r"\d+(?:\.\d+)?%?[ \t]*-[ \t]*\d+(?:\.\d+)?%?")
_CHAIN = re.compile(r"\d*\.?\d+(?:/\d*\.?\d+){2,}%?")


def _digit_kinds(tok: str) -> list[str]:
    """What a digit token looks like (any that apply): a calendar date (month/day within
    range, ``/`` or ``-``), a ratio of values (``120/80``), a range (``130-140``), a chain
    of three or more values (``7.44/32/166``: blood gases, ventilator settings), a year, a
    clock time, a phone-like run of seven or more digits, a measurement (a unit, a decimal
    point or a percent sign)."""
    core = tok.strip("#~@()[]:;,")
    out = []
    m = _NUMERIC_DATE.fullmatch(core)
    if m and "." not in core and 1 <= int(m.group(1)) <= 12 and 1 <= int(m.group(2)) <= 31:
        out.append("date")
    elif re.fullmatch(r"\d+/\d+", core):
        out.append("ratio")
    if _CLOCK.fullmatch(core.lower()):
        out.append("clock")
    if _YEAR.fullmatch(core) and (len(core) >= 4 or core.startswith("'")):
        out.append("year")
    if sum(c.isdigit() for c in core) >= 7:
        out.append("phone")
    if _RANGE.fullmatch(core):
        out.append("range")
    if _CHAIN.fullmatch(core):
        out.append("chain")
    if "%" in core or re.fullmatch(r"\d+\.\d+", core) or re.fullmatch(r"[x#]?\d+(?:\.\d+)?\p{L}{1,5}(?:/\p{L}+)?", core):
        out.append("measure")
    return out


def _digit_feats(text: str, s: int, e: int, style: str) -> list[str]:
    a, b = _token_around(text, s, e)
    tok = text[a:b]
    shape = word_shape(tok)
    digits = sum(c.isdigit() for c in tok)
    out = ["digits", f"digits:{style}", f"digits:run{_len_bucket(e - s)}", f"digits:tok{_len_bucket(digits)}",
           f"digits:shape={shape}", f"digits:shape={shape}:{style}"]
    out += _context_feats(text, a, b, "digits")
    for kind in _digit_kinds(tok):
        out += [f"digits:{kind}", f"digits:{kind}:{style}"]
    if any(c.isalpha() for c in tok):
        out.append("digits:alnum")
    return out


def iter_beside(text: str, removed: list, style: str):
    """``beside`` candidates: each content word (not a function word) within
    :data:`BESIDE_REACH` words of a span pi removes (``(start, end, type, ...)``), inside
    the clause, not itself inside a removed span. Features: the span's type, the side and
    distance, what lies between (a comma or only spaces), the word's case, frequency and
    lexicon class, the style."""
    stops = stop_words()
    seen = set()
    spans = sorted(removed, key=lambda sp: sp[0])
    for s, e, etype, *_ in spans:
        left_lo = max((m.end() for m in _CLAUSE_END.finditer(text, max(0, s - 200), s)), default=max(0, s - 200))
        right = _CLAUSE_END.search(text, e, min(len(text), e + 200))
        right_hi = right.start() if right else min(len(text), e + 200)
        before = list(_WORD.finditer(text, left_lo, s))[::-1][:BESIDE_REACH]  # nearest first
        after = list(_WORD.finditer(text, e, right_hi))[:BESIDE_REACH]
        for side, words in (("l", before), ("r", after)):
            for dist, m in enumerate(words, start=1):
                a, b = m.span()
                w = m.group(0)
                if (a, b) in seen or w.lower() in stops or inside_any(a, b, spans):
                    continue
                seen.add((a, b))
                gap = text[b:s] if side == "l" else text[e:a]
                f = ["beside", f"beside:{etype}", f"beside:{side}{dist}", f"beside:{etype}:{side}",
                     f"beside:{style}", f"beside:sep={'comma' if ',' in gap else 'space'}",
                     f"beside:case={'cap' if w[:1].isupper() else 'digit' if w[:1].isdigit() else 'low'}",
                     f"beside:{_zipf_bucket(w)}", f"beside:voc={vocab_class(w)}", f"beside:w={_lex(w.lower())}"]
                yield (a, b, "beside", f)


def iter_candidates(text: str, *, style: str, ner: list[tuple[int, int, str]], case_ner: list[tuple[int, int, str]],
                    hits: list, weak: list, upper_regions: list[tuple[int, int]], dropped: dict | None = None,
                    removed: list | None = None):
    """Every pi_c signal in ``text`` as ``(start, end, kind, features)``, lazily, the
    kinds in the order of :data:`KINDS` (so a caller that needs only the first candidate
    over a threshold builds no more features than it must).

    ``ner``/``case_ner``: spaCy entities (from the text and from its re-cased caseless
    regions); ``hits``: pattern and style-rule candidates before pi's filters
    (``Span`` tuples); ``weak``: the hits the balanced profile keeps for pi_c only;
    ``upper_regions``: the text's caseless regions; ``style``: the document's style;
    ``dropped``: why the style's filters dropped a pi candidate (:meth:`DocumentStyle.drop
    <privatize.redaction.styles.base.DocumentStyle.drop>`), by ``(start, end, source)``
    (an NER entity's source is ``spacy`` or ``spacy_case``, a pattern's its recognizer):
    the style's knowledge that a hit is no identifier (a dose, a range, clinical words)
    is a feature, not a verdict; ``removed``: pi's spans, given under ``pi_c.scope: rest``
    (and for fitting): then the ``beside`` candidates (:func:`iter_beside`) come last."""
    dropped = dropped or {}
    for kind, ents in (("ner", ner), ("ner_case", case_ner)):
        for s, e, label in ents:
            if label != "PERSON" and is_speaker_label(text, s, e):
                continue
            f = [kind, f"{kind}:{label}", f"{kind}:{label}:{style}"]
            f += _word_feats(text, s, e, f"{kind}:{label}")
            f += _context_feats(text, s, e, kind)
            f += _vocab_feats(text, s, e, kind, style)
            why = dropped.get((s, e, "spacy" if kind == "ner" else "spacy_case"))
            if why:
                f += [f"{kind}:dropped", f"{kind}:drop={why}"]
            yield ((s, e, kind, f))
    for kind, spans in (("rec", hits), ("weak", weak)):
        for s, e, etype, score, source, ctx in spans:
            f = [kind, f"{kind}:{etype}", f"{kind}:{etype}:{style}", f"{kind}:src={source}",
                 f"{kind}:{etype}:s{min(int(score * 10), 9)}"]
            if ctx:
                f.append(f"{kind}:{etype}:ctx")
            f += _word_feats(text, s, e, kind)
            f += _vocab_feats(text, s, e, kind, style)
            why = dropped.get((s, e, source))
            if why:
                f += [f"{kind}:dropped", f"{kind}:{etype}:dropped", f"{kind}:drop={why}"]
            yield ((s, e, kind, f))
    for m in _DIGITS.finditer(text):
        yield ((m.start(), m.end(), "digits", _digit_feats(text, m.start(), m.end(), style)))
    stops = stop_words()
    for m in _CAP_WORD.finditer(text):
        w = m.group(0).rstrip(".-'’")
        if not w or w in _PRONOUN_I:
            continue
        s = m.start()
        e = s + len(w)
        if is_speaker_label(text, s, e) or any(a <= s < b for a, b in upper_regions):
            continue
        initial = s == 0 or _SENT_END.search(text, max(0, s - 4), s) is not None
        if initial and is_function_word(w, stops):
            continue
        f = ["cap", f"cap:{style}", f"cap:{_zipf_bucket(w)}", f"cap:{_zipf_bucket(w)}:{style}", f"w={w.lower()}",
             f"cap:shape={word_shape(w)}", f"cap:len{_len_bucket(len(w))}"]
        if initial:
            f.append("cap:initial")
        if is_known_name(w):
            f.append("cap:name")
        voc = vocab_class(w)
        f += [f"cap:voc={voc}", f"cap:voc={voc}:{style}"]
        nxt = text[e:e + 2]
        if len(nxt) == 2 and nxt[0] == " " and nxt[1].isupper():
            f.append("cap:next_cap")
        f += _context_feats(text, s, e, "cap")
        yield ((s, e, "cap", f))
    for a, b in upper_regions:
        for m in _LETTER_WORD.finditer(text, a, b):
            w = m.group(0)
            if w.lower() in stops:
                continue
            f = ["caseless", f"caseless:{style}", f"caseless:{_zipf_bucket(w)}", f"caseless:len{_len_bucket(len(w))}",
                 f"w={w.lower()}"]
            if is_known_name(w):
                f.append("caseless:name")
            voc = vocab_class(w)
            f += [f"caseless:voc={voc}", f"caseless:voc={voc}:{style}"]
            f += _context_feats(text, m.start(), m.end(), "caseless")
            yield ((m.start(), m.end(), "caseless", f))
    if removed:
        yield from iter_beside(text, removed, style)


def candidates(text: str, **kw) -> list[tuple[int, int, str, list[str]]]:
    """:func:`iter_candidates` as a list."""
    return list(iter_candidates(text, **kw))
