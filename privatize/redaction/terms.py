"""A tenant's own terms: words and phrases that are always PII in its text (its hospitals'
building names, its staff, its local places), matched case-insensitively as whole words.

The default detector misses such terms because nothing marks them: on the clinical
development notes, 6 of the default detector's 26 misses are the hospital's own building
and site names written in lower case or capitals (``transferred to 209 quartermain``,
``SCREENED BY ... KIMBROUGH``). A detector folder (``privatize train-ner --annotated``) holds
a :class:`TermSet` built from two sources:

* **term lists** the tenant gives (``--terms TYPE=FILE``: one term per line, ``#`` starts a
  comment): every term is kept, typed ``TYPE``;
* **its annotated sample** (:func:`sample_terms`): a term annotated in the training part of
  the sample is kept when it is not a common English word (Zipf frequency below
  :data:`SAMPLE_TERM_MAX_ZIPF`) and at least :data:`SAMPLE_TERM_MIN_PRECISION` of its
  occurrences in that text are annotated (so ``Bay`` annotated once and written ten times
  as a word is not kept). Its type is the entity type the span's annotated type maps to.

**Matching.** Text and terms are cut into the same tokens (maximal runs of letters and
digits); a term matches where its tokens appear in a row, case-folded, whatever separates
them (``Hanley-McCue`` matches ``hanley mccue``); at each position the longest term wins.

**Stored hashed.** A sample's terms are its patients' and staff's names: the folder keeps
only keyed BLAKE2b digests of them (a random 16-byte key per folder, in the same file), so
it lists no name in the clear. Whoever holds the folder can still test a guess (the key is
beside the digests): the folder is tenant data, as its NER weights are.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable, Iterable

import regex as re

from privatize.errors import InputError
from privatize.redaction.filters import zipf
from privatize.redaction.spans import Span

TERMS_FILE = "terms.json"
TERMS_FORMAT = "privatize-terms/1"
TERM_SCORE = 0.85
SAMPLE_TERM_MAX_ZIPF = 4.0
SAMPLE_TERM_MIN_PRECISION = 0.5
MAX_TERM_TOKENS = 8
_TOKEN = re.compile(r"[\p{L}\p{N}]+")
_TYPE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")


def tokens(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, case-folded token)`` for each run of letters and digits."""
    return [(m.start(), m.end(), m.group().casefold()) for m in _TOKEN.finditer(text)]


def term_key(term: str) -> str | None:
    """A term's tokens joined by one space (``None``: no letter, or more than
    :data:`MAX_TERM_TOKENS` tokens, or under 3 characters)."""
    toks = [t for _, _, t in tokens(term)]
    key = " ".join(toks)
    if not toks or len(toks) > MAX_TERM_TOKENS or len(key) < 3 or not re.search(r"\p{L}", key):
        return None
    return key


class TermSet:
    """Keyed digests of terms, each with its entity type; :meth:`find` returns the spans
    where they occur in a text."""

    def __init__(self, key: bytes | None = None, digests: dict[str, str] | None = None,
                 prefixes: Iterable[str] = (), sources: dict[str, int] | None = None):
        self.key = key if key is not None else os.urandom(16)
        self.digests: dict[str, str] = dict(digests or {})  # hex digest of a term -> entity type
        self.prefixes: set[str] = set(prefixes)  # digests of the leading tokens of longer terms
        self.sources: dict[str, int] = dict(sources or {})  # where they came from -> how many

    def _digest(self, key: str) -> str:
        return hashlib.blake2b(key.encode("utf-8"), key=self.key, digest_size=16).hexdigest()

    def add(self, terms: Iterable[tuple[str, str]], source: str) -> int:
        """Adds ``(term, entity type)`` pairs (terms with no key are skipped); returns how many
        new ones. A term already held keeps its first type."""
        n = 0
        for term, etype in terms:
            key = term_key(term)
            if key is None:
                continue
            d = self._digest(key)
            if d not in self.digests:
                self.digests[d] = etype
                n += 1
                parts = key.split(" ")  # find stops at a run of tokens that starts no term
                self.prefixes.update(self._digest(" ".join(parts[:k])) for k in range(1, len(parts)))
        self.sources[source] = self.sources.get(source, 0) + n
        return n

    def __len__(self) -> int:
        return len(self.digests)

    def find(self, text: str) -> list[Span]:
        """Spans ``(start, end, type, TERM_SCORE, "terms", False)``, longest match first at
        each token, no two overlapping."""
        if not self.digests:
            return []
        toks = tokens(text)
        out: list[Span] = []
        i = 0
        while i < len(toks):
            best = None
            key = ""
            for j in range(i, min(len(toks), i + MAX_TERM_TOKENS)):
                key = toks[j][2] if j == i else f"{key} {toks[j][2]}"
                d = self._digest(key)
                etype = self.digests.get(d)
                if etype:
                    best = (j, etype)
                if d not in self.prefixes:
                    break
            if best is None:
                i += 1
                continue
            j, etype = best
            out.append((toks[i][0], toks[j][1], etype, TERM_SCORE, "terms", False))
            i = j + 1
        return out

    def to_json(self) -> dict:
        return {"format": TERMS_FORMAT, "hash": "blake2b-128, keyed", "key": self.key.hex(),
                "terms": len(self), "sources": self.sources, "digests": self.digests,
                "prefixes": sorted(self.prefixes)}

    def save(self, folder: str | Path) -> Path:
        p = Path(folder) / TERMS_FILE
        p.write_text(json.dumps(self.to_json(), sort_keys=True) + "\n", encoding="utf-8")
        return p

    @classmethod
    def load(cls, folder: str | Path) -> "TermSet":
        p = Path(folder) / TERMS_FILE
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            if d.get("format") != TERMS_FORMAT:
                raise ValueError(f"format {d.get('format')!r}")
            return cls(bytes.fromhex(d["key"]), {str(k): str(v) for k, v in d["digests"].items()},
                       [str(x) for x in d.get("prefixes") or ()],
                       {str(k): int(v) for k, v in (d.get("sources") or {}).items()})
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{p}: not a readable terms file ({exc})") from None


def parse_terms_option(values: Iterable[str]) -> list[tuple[str, Path]]:
    """``TYPE=FILE`` pairs (``--terms``), checked: ``TYPE`` upper case ``[A-Z0-9_]``, ``FILE``
    a readable file. :class:`InputError` with one line naming the bad value."""
    out = []
    for v in values:
        etype, sep, path = v.partition("=")
        if not sep or not _TYPE.fullmatch(etype) or not path:
            raise InputError(f"--terms {v!r}: expected TYPE=FILE with TYPE an entity type in upper case "
                             f"(LOCATION=hospitals.txt)")
        if not Path(path).is_file():
            raise InputError(f"--terms {v!r}: no such file {path}")
        out.append((etype, Path(path)))
    return out


def read_term_file(path: str | Path, etype: str) -> list[tuple[str, str]]:
    """The terms of a list file (one per line; blank lines and ``#`` comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--terms {etype}={path}: not a readable UTF-8 text file ({exc})") from None
    return [(ln.strip(), etype) for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def sample_terms(records: list[dict], type_of: Callable[[str], str | None],
                 max_zipf: float = SAMPLE_TERM_MAX_ZIPF,
                 min_precision: float = SAMPLE_TERM_MIN_PRECISION) -> list[tuple[str, str]]:
    """The terms an annotated sample teaches (see the module docstring): ``records`` with
    ``text`` and ``spans`` (``(start, end, type)``); ``type_of`` maps an annotated type to the
    entity type its terms report (``None``: not a term type)."""
    wanted: dict[str, str] = {}
    for r in records:
        t = r["text"]
        for s, e, ty in r["spans"]:
            key = term_key(t[s:e])
            etype = type_of(ty)
            if key is None or etype is None or key in wanted:
                continue
            if zipf(key) >= max_zipf:
                continue
            wanted[key] = etype
    if not wanted:
        return []
    longest = max(k.count(" ") + 1 for k in wanted)
    seen = dict.fromkeys(wanted, 0)
    annotated = dict.fromkeys(wanted, 0)
    for r in records:
        t, spans = r["text"], r["spans"]
        toks = tokens(t)
        for i in range(len(toks)):
            key = ""
            for j in range(i, min(len(toks), i + longest)):
                key = toks[j][2] if j == i else f"{key} {toks[j][2]}"
                if key in seen:
                    seen[key] += 1
                    a, b = toks[i][0], toks[j][1]
                    if any(s <= a and b <= e for s, e, _ in spans):
                        annotated[key] += 1
    return [(k, wanted[k]) for k in wanted if seen[k] and annotated[k] >= min_precision * seen[k]]
