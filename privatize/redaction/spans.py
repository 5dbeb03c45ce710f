"""Span arithmetic for the detector (:mod:`privatize.redaction.detect`): cutting hits
back to the text outside reserved tokens, merging overlapping spans, the caseless regions
that go through NER a second time in title case, and the word signals of pi_c."""

from __future__ import annotations

import regex as re

from privatize.redaction.words import stop_words

Span = tuple[int, int, str, float, str, bool]  # start, end, entity_type, score, source, context word seen
CONFIDENT_SCORE = 0.7  # a pattern hit this strong (validated or with context) names a merged span's type

# ---------------------------------------------------------------------------------------
# span arithmetic

def _cut_reserved(spans: list[Span], reserved: list[tuple[int, int]], text: str) -> list[Span]:
    """Remove the parts of spans that overlap reserved tokens; keep pieces with a letter
    or digit."""
    if not reserved:
        return spans
    out = []
    for s, e, t, sc, src, ctx in spans:
        pieces = [(s, e)]
        for rs, re_ in reserved:
            nxt = []
            for a, b in pieces:
                if re_ <= a or rs >= b:
                    nxt.append((a, b))
                    continue
                if a < rs:
                    nxt.append((a, rs))
                if re_ < b:
                    nxt.append((re_, b))
            pieces = nxt
        for a, b in pieces:
            seg = text[a:b]
            stripped = seg.strip()
            if stripped and any(c.isalnum() for c in stripped):
                lead = len(seg) - len(seg.lstrip())
                a2 = a + lead
                out.append((a2, a2 + len(stripped), t, sc, src, ctx))
    return out


_NER_SOURCES = frozenset({"spacy", "spacy_case"})


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


def _best(members: list[Span], start: int, end: int) -> Span:
    """The member whose type describes a merged span: a confident pattern hit (score
    at least 0.7: validated, or raised by context) first; then, among members covering
    at least half of the merged span, the highest score; then a hit with context words
    around it; then the longest."""
    length = end - start

    def rank(sp: Span):
        confident = sp[4] not in _NER_SOURCES and sp[3] >= CONFIDENT_SCORE
        return (confident, 2 * (sp[1] - sp[0]) >= length, sp[3], sp[5], sp[1] - sp[0])

    return max(members, key=rank)


def merge_spans(spans: list[Span]) -> list[Span]:
    """Overlapping spans (sharing at least one character) become one span covering
    them all; its type, score and source are those of the member :func:`_best` picks
    (``12 Main Street, Springfield`` stays a street address though NER found
    ``Springfield``; a validated phone number beats an NER date)."""
    if not spans:
        return []
    spans = sorted(spans, key=lambda x: (x[0], -x[1]))
    out: list[Span] = []
    cs, ce, members = spans[0][0], spans[0][1], [spans[0]]
    for sp in spans[1:]:
        if sp[0] < ce:
            ce = max(ce, sp[1])
            members.append(sp)
        else:
            b = _best(members, cs, ce)
            out.append((cs, ce, b[2], b[3], b[4], b[5]))
            cs, ce, members = sp[0], sp[1], [sp]
    b = _best(members, cs, ce)
    out.append((cs, ce, b[2], b[3], b[4], b[5]))
    return out


def replace_spans(text: str, spans: list[dict], replacement) -> str:
    """``text`` with each (sorted, non-overlapping) span replaced by ``replacement(span)``."""
    out, pos = [], 0
    for sp in spans:
        s, e = sp["start"], sp["end"]
        if s < pos or e > len(text) or s >= e:
            raise ValueError(f"span {s}..{e} overlaps or leaves the text")
        out.append(text[pos:s])
        out.append(replacement(sp))
        pos = e
    out.append(text[pos:])
    return "".join(out)


def inside_any(s: int, e: int, spans) -> bool:
    """Whether ``[s, e)`` lies wholly inside one of ``spans`` (``(start, end, ...)``)."""
    return any(a <= s and e <= b for a, b, *_ in spans)


def left_readable(text: str, secrets, removed) -> bool:
    """Whether a secret (``(start, end, ...)`` in ``text``) keeps a letter or digit outside
    every ``removed`` span ``(start, end)``: redaction missed it, at least in part (what
    ``pi_c.scope: rest`` must still catch)."""
    return any(any(c.isalnum() and not any(x <= k < y for x, y in removed) for k, c in enumerate(text[a:b], start=a))
               for a, b, *_ in secrets)


def merge_intervals(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if not iv:
        return []
    iv = sorted(iv)
    out = [list(iv[0])]
    for s, e in iv[1:]:
        if s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


# ---------------------------------------------------------------------------------------
# names: upper-case lines, coordinated lists, name parts

_SPEAKER_PREFIX = re.compile(r"[ \t]*[A-Z]{2,5}:[ \t]*")
_SEGMENT = re.compile(r"[^\n.!?]+[.!?]*")
_NAME_ITEM = r"\p{Lu}[\p{Ll}'’-]+(?:[ \t]\p{Lu}[\p{Ll}'’-]+)?"
_NAME_LIST = re.compile(rf"{_NAME_ITEM}(?:[ \t]*,[ \t]*{_NAME_ITEM})*(?:[ \t]*,?[ \t]+(?:and|or|&)[ \t]+{_NAME_ITEM})"
                        rf"|{_NAME_ITEM}(?:[ \t]*,[ \t]*{_NAME_ITEM}){{2,}}")
_ITEM_RE = re.compile(_NAME_ITEM)
_LETTER_WORD = re.compile(r"[^\W\d_][\w'’]*")


def caseless_regions(text: str) -> list[tuple[int, int]]:
    """Sentences or lines written without case information: all lower case (three words
    or more), or mostly upper case (two upper-case words or more). Capital letters are
    the strongest name signal NER has; here it has none."""
    out = []
    for m in _SEGMENT.finditer(text):
        seg = m.group(0)
        label = _SPEAKER_PREFIX.match(seg)
        start = m.start()
        if label:  # "USR: i need a taxi": the turn's text, not its speaker label
            seg = seg[label.end():]
            start += label.end()
        words = _LETTER_WORD.findall(seg)
        if len(words) < 2:
            continue
        letters = sum(len(w) for w in words)
        upper = sum(1 for w in words for c in w if c.isupper())
        if upper == 0 and len(words) >= 3:
            out.append((start, m.end()))
        elif upper / max(letters, 1) >= 0.8 and sum(1 for w in words if len(w) >= 2 and w.isupper()) >= 2:
            out.append((start, m.end()))
    return out


def recase(text: str, regions: list[tuple[int, int]]) -> str:
    """``text`` with each caseless region re-cased for NER: words lower case, with the
    first letter of every word that is not a common function word in upper case. The
    length never changes (characters whose case mapping changes length stay as they
    are)."""
    stops = stop_words()
    chars = list(text)
    for s, e in regions:
        for m in _LETTER_WORD.finditer(text, s, e):
            w = m.group(0)
            cap = w.lower() not in stops
            for k, c in enumerate(w):
                c2 = c.upper() if (k == 0 and cap) else c.lower()
                if len(c2) == 1:
                    chars[m.start() + k] = c2
    return "".join(chars)


# ---------------------------------------------------------------------------------------
# pi_c signals

_DIGITS = re.compile(r"\d+")
# a capitalised word (or all-caps token) with the character before it
_CAP_WORD = re.compile(r"(?<![\w])\p{Lu}[\w'’.-]*")
_SENT_END = re.compile(r"[.!?:;\n\"“”()\[\]>*-]\s*$|^\s*$")
_PRONOUN_I = frozenset({"I", "I'm", "I’m", "I'll", "I've", "I'd", "I’ll", "I’ve", "I’d"})


_CONTRACTION = re.compile(r"(?i)^(\p{L}+?)(?:n['’]t|['’](?:s|d|ll|m|re|ve))$")
_CONTRACTED_BASES = frozenset({"wo", "sha", "ai"})  # won't, shan't, ain't


def is_function_word(word: str, stops: frozenset[str]) -> bool:
    """A common function word, also in contracted form ("It's", "That's", "Don't",
    "Can't", "We'll"): the base before the clitic is one."""
    w = word.lower()
    if w in stops:
        return True
    m = _CONTRACTION.match(w)
    return m is not None and (m.group(1) in stops or m.group(1) in _CONTRACTED_BASES)


def is_speaker_label(text: str, s: int, e: int) -> bool:
    """``text[s:e]`` is a dialogue speaker label: 2 to 5 upper-case ASCII letters that
    open a line (only spaces or tabs before them) and are followed by ``:`` (``SYS:``,
    ``USR:``)."""
    if not 2 <= e - s <= 5 or not _SPEAKER_WORD.fullmatch(text, s, e) or not text.startswith(":", e):
        return False
    line_start = text.rfind("\n", 0, s) + 1
    return not text[line_start:s].strip(" \t")


_SPEAKER_WORD = re.compile(r"[A-Z]{2,5}")


def _pi_c_word_signals(text: str, *, capitalized: bool = True, digits: bool = True, sentence_initial: bool = True,
                       speaker_labels: bool = True, digit_min_length: int = 1) -> list[tuple[int, int]]:
    """The word signals of pi_c: capitalised words (``capitalized``; sentence-initial
    ones that are not function words only with ``sentence_initial``, dialogue speaker
    labels only with ``speaker_labels``) and runs of at least ``digit_min_length``
    digits (``digits``)."""
    out = []
    stops = stop_words()
    for m in _CAP_WORD.finditer(text) if capitalized else ():
        w = m.group(0).rstrip(".-'’")
        if not w or w in _PRONOUN_I:
            continue
        s = m.start()
        initial = _SENT_END.search(text, max(0, s - 4), s) is not None or s == 0
        if initial and (not sentence_initial or is_function_word(w, stops)):
            continue
        if not speaker_labels and is_speaker_label(text, s, s + len(w)):
            continue
        out.append((s, s + len(w)))
    for m in _DIGITS.finditer(text) if digits else ():
        if m.end() - m.start() >= digit_min_length:
            out.append(m.span())
    return out
