"""The batch PII detector and the two policies of confidentially redacted training.

:class:`Detector` runs, over a list of texts:

1. spaCy NER through ``nlp.pipe`` with only the ``ner`` component loaded (the
   ``en_core_web_*`` NER has its own ``tok2vec``); spaCy labels map to Presidio entity
   types with Presidio's own table (``conf/default.yaml``), except that ORGANIZATION is
   kept (Presidio ignores it) at a lower score. Sentences and lines written without case
   information (upper case: ``JOHN SMITH``; lower case: ``i'm robert matthews``) are
   re-cased before the one NER pass (capitalised words that are not function words), and
   only name, place and case-independent labels are taken from them.
2. the pattern recognizers (Presidio's predefined ones and
   :mod:`privatize.redaction.recognizers`), compiled once, run directly (no per-document
   ``AnalyzerEngine.analyze`` overhead), with Presidio's ``validate_result`` /
   ``invalidate_result`` semantics and a cheap context enhancement: a context word among
   the few words around a hit raises its score by 0.35 to at least 0.4, as Presidio's
   ``LemmaContextAwareEnhancer`` does (whole words, plural ``s`` ignored, instead of
   lemmas).
3. names in coordinated lists: when one item of ``A, B and C`` is a PERSON, the other
   single capitalised items are too.

An adapted detector folder (``privatize train-ner --annotated``) may name
``trusted_labels`` in its ``detector.json``: NER labels its sample taught, whose hits skip
the false-positive filters (the filters and the style's drop rules, written for the base
model's errors) because the folder's held-out slice showed they gain recall. A folder
written with ``--complete`` (``complete: true``: its sample annotates everything its
tenant redacts) redacts only the entity types its sample teaches: those its ``types``
map to through the NER labels (``PTName`` -> PERSON -> PERSON; a label the folder added
reports its own name, which is also the type of the pattern recognizers of that name,
``PHONE_NUMBER``, ``POSTCODE``), from every source (NER, patterns, the style's rules);
``entities`` is narrowed to them. A folder's ``terms.json`` (its sample's terms and the
tenant's lists, :mod:`privatize.redaction.terms`) adds their hits, whole words in any case,
of their own types (always detected), past the filters. pi_c is unchanged.

**pi** (the redaction policy) keeps the hits whose type is among ``entities`` and whose
score reaches ``score_threshold``; overlapping hits merge into one span (type and score
of the strongest); with ``propagate="document"`` every other occurrence of a detected
string in the same text is added (and, for PERSON, every capitalised part of a detected
name).

**pi_c** (the conservative policy, near-perfect recall) flags what pi flags and, from
different signals: every entity spaCy emits (any label, ``CARDINAL`` and ``PRODUCT``
included), every recognizer hit at any score, digit runs, capitalised words that do not
start a sentence, and sentence-initial capitalised words that are not common function
words. Presidio gives every spaCy entity the same score (0.85), so a score threshold
cannot separate the two policies. :class:`PiCOptions` turns signals off or narrows them
(sentence-initial words, dialogue speaker labels, relative dates, short digit runs):
the settings that trade pi_c's recall against the size of CRT's public split
(``benchmarks/pi_c_curve.py`` measures that curve).

Reserved tokens (``<MASK>`` from dedup, tags, entity tokens) are never searched: any
hit or signal is cut back to the text outside them.

``detect_spans(texts)`` is the module-level entry point ``privatize encrypt`` calls,
with a cached default detector.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

import regex as re
from pydantic import BaseModel, ConfigDict, Field

from privatize.ciphers.tokens import reserved_spans
from privatize.redaction.compiled import (CompiledRecognizer, default_pattern_recognizers, has_context, line_parts,
                                          split_caseless)
from privatize.redaction.defaults import DEFAULT_SCORE_THRESHOLD, TITLE_AT, detector_file, pi_c_model_file
from privatize.redaction.engine import DEFAULT_MODEL, load_spacy, ner_mapping
from privatize.redaction.evidence import iter_candidates
from privatize.redaction.filters import (NER_NAME_TYPES, TextCase, is_common_word, ner_date_filter, ner_name_filter,
                                         url_span, warm_word_lists)
from privatize.redaction.styles import AUTO, get_style, style_names, style_picker, trim_article, trim_place_head
from privatize.redaction.spans import (_DIGITS, _ITEM_RE, _LETTER_WORD, _NAME_LIST, _NER_SOURCES, Span,
                                       _cut_reserved, _is_word_char, _pi_c_word_signals, caseless_regions,
                                       inside_any, is_speaker_label, merge_intervals, merge_spans, recase)
from privatize.redaction.terms import TermSet
from privatize.redaction.words import stop_words
from privatize.refs import model_folder

log = logging.getLogger(__name__)

DEFAULT_ENTITIES: tuple[str, ...] = (
    "PERSON", "LOCATION", "ORGANIZATION", "NRP", "DATE_TIME", "AGE",
    "PHONE_NUMBER", "EMAIL_ADDRESS", "URL", "IP_ADDRESS", "MAC_ADDRESS",
    "CREDIT_CARD", "IBAN_CODE", "US_BANK_NUMBER", "CRYPTO",
    "US_SSN", "US_ITIN", "US_PASSPORT", "US_DRIVER_LICENSE", "UK_NHS", "MEDICAL_LICENSE",
    "STREET_ADDRESS", "ZIP_CODE", "POSTCODE", "REFERENCE_NUMBER", "UUID",
)
"""The entity types the redact stage removes by default."""

KNOWN_ENTITIES: frozenset[str] = frozenset(DEFAULT_ENTITIES) | {"TITLE"}
"""Every type the detector can report (TITLE, job titles, is off by default: weak)."""

PROFILES = ("balanced", "high_recall")
"""``balanced`` (the default) runs the false-positive filters of
:mod:`privatize.redaction.filters` on pi's hits and keeps context-dependent patterns
(US driver licence, bank and passport numbers) only with a context word; ``high_recall``
keeps every NER entity and pattern hit above the threshold (more recall on unusual text,
about twice the characters flagged on clinical notes). pi_c is the same under both."""
CONTEXT_REQUIRED = frozenset({"US_DRIVER_LICENSE", "US_BANK_NUMBER", "US_PASSPORT"})
"""Entity types whose bare patterns match ordinary tokens (``x2``, ``A1``, any 8-17
digits): under ``balanced`` a hit counts for pi only with a context word near it."""
NER_SCORE = 0.85  # Presidio's SpacyRecognizer score for every entity
ORG_SCORE = 0.5  # Presidio ignores ORGANIZATION (false positives); we keep it, lower
CONTEXT_FACTOR = 0.35  # Presidio's LemmaContextAwareEnhancer defaults
CONTEXT_MIN_SCORE = 0.4
MAX_CHUNK = 100_000  # characters per spaCy call; longer texts are cut at whitespace


# NER DATE/TIME entities that name no date: relative expressions without digits,
# month or day names
_RELATIVE_DATE = re.compile(
    r"(?i)(?:(?:a|an|the|this|that|these|those|last|next|past|previous|coming|following|few|several|some|many|"
    r"couple|of|one|two|three|four|five|six|seven|eight|nine|ten|a\s+few|recent|recently|ago|later|earlier|"
    r"now|today|tonight|tomorrow|yesterday|day|days|daily|week|weeks|weekly|weekend|weekends|month|months|"
    r"monthly|year|years|yearly|annual|annually|hour|hours|minute|minutes|second|seconds|moment|morning|"
    r"mornings|afternoon|evening|evenings|night|nights|noon|midnight|time|times|decade|decades|century|"
    r"season|quarter|half|long|short|same|other|each|every|all|before|after|ahead|within|about|around|"
    r"almost|nearly|over|under|just|soon|once|twice|dawn|dusk|overnight|currently|present|future|"
    r"and|or|to|in|on|at|for)[\s,'’-]*)+")
_SPEAKER_LABEL = re.compile(r"(?<=^|\n)[ \t]*[A-Z]{2,5}(?=:)")



class PiCOptions(BaseModel):
    """Signals of the conservative policy. The defaults (issue 17, measured with
    ``benchmarks/pi_c_curve.py``): every signal, except that dialogue speaker labels and
    NER dates that name no date do not count.

    The one declaration of pi_c's fields: the redact stage's settings
    (:class:`privatize.stages.redact.PiCSettings`) are this class with the stage's
    default policy (``calibrated``), policy markers and the spec's checks added."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    all_ner_labels: bool = True
    """Every entity spaCy emits, whatever its label (CARDINAL, PRODUCT, EVENT… too)."""
    recognizer_hits: bool = True
    """Every pattern recognizer hit, whatever its score and type."""
    digits: bool = True
    """Every run of digits."""
    capitalized: bool = True
    """Capitalised words not starting a sentence, sentence-initial capitalised words
    that are not function words, and every content word of caseless text."""
    min_score: float = Field(0.0, ge=0.0, le=1.0)
    """Recognizer hits at or above this score count."""
    sentence_initial: bool = True
    """With ``capitalized``: sentence-initial capitalised words that are not function
    words count too (off: a name opening a sentence is left to NER and the recognizers)."""
    speaker_labels: bool = False
    """Dialogue speaker labels (2 to 5 upper-case letters opening a line, then ``:``:
    ``SYS:``, ``USR:``) count, as capitalised words and as NER entities other than
    PERSON. Off, a tag that is a name (``ANNA:``) counts only when NER reads it as a
    PERSON (an NER PERSON always counts)."""
    relative_dates: bool = False
    """With ``all_ner_labels``: NER DATE and TIME entities that name no date (relative
    expressions without digits, month or day names, which pi drops too: "several days
    ago") count."""
    digit_min_length: int = Field(1, ge=1, le=100)
    """With ``digits``: runs of at least this many digits count."""
    policy: Literal["calibrated", "strict"] = "strict"
    """``strict`` (this class's default, so that a detector built with signal switches
    keeps their meaning): every signal the switches leave on flags its record (the
    paper's policy). ``calibrated`` (the redact stage's default, ``RedactSettings.pi_c``):
    every signal is a candidate scored by the calibrated model
    (:mod:`privatize.redaction.calibration`) and flags its record only at or above the
    model's threshold; the signal switches do not apply."""
    calibration: str | None = Field(None, min_length=1, max_length=4096)
    """With ``calibrated``: the model file (``None``: the shipped one)."""
    scope: Literal["record", "rest"] = "record"
    """What pi_c judges. ``record`` (the CRT paper's routing): the whole record, and a
    record pi removed something from is always flagged, so a sentence holding a
    ``<MASK>`` is private. ``rest``: only what pi's spans leave in the clear (a signal
    wholly inside a removed span no longer counts; pi's hits do not flag by themselves),
    with the calibrated model's threshold for that scope, chosen so that the share of
    secret sentences that keep a readable secret *and* are left unflagged is bounded
    (``experiments/pic_fit.py --rest``). CRT's ``split_private`` can then route a masked
    record public (the recipe's ``masked: public``): with a value-free replacement (the
    redact stage refuses ``encrypt`` here) what the model sees of it is the redacted text
    either way. The strict policy under ``rest`` drops the signals inside pi's spans but
    has no calibration, so no delta_2."""
    domain: str | None = Field(None, min_length=1, max_length=64)
    """With ``calibrated``: the domain whose own calibration applies (the shipped model:
    ``clinical`` notes, ``booking`` dialogues, customer ``support`` chats); ``None``: the
    model's default threshold, the smallest of its domains' (for text of unknown kind). A
    domain's threshold bounds the misses of the kinds of secret its calibration corpus
    holds; a secret of another shape may pass it (``My ID is: 0603`` under ``support``)."""


@dataclass
class Detection:
    spans: list[dict] = field(default_factory=list)
    """pi: merged, non-overlapping, sorted ``{start, end, entity_type, score, source}``."""
    pi_c_hit: bool = False
    """The conservative policy flagged the record (``scope: rest``: flagged something
    pi's spans leave in the clear)."""
    pi_c_intervals: list[tuple[int, int]] = field(default_factory=list)
    """Merged character intervals the conservative policy flags (pi's spans included,
    except under ``scope: rest``)."""
    style: str = "general"
    """The document style whose rules were used (:mod:`privatize.redaction.styles`)."""
    pi_c_by: str | None = None
    """What flagged the record for pi_c: ``pi`` (pi's own hits), a candidate kind of
    :mod:`privatize.redaction.evidence` (calibrated policy), ``signal`` (strict policy),
    ``None`` when nothing did."""
    pi_c_score: float = 0.0
    """Calibrated policy: the strongest candidate's score among those scored (0 without
    candidates). Unless intervals or evidence are asked for, scoring stops at the first
    candidate over the threshold, and a record pi flags is not scored at all."""
    evidence: list = field(default_factory=list)
    """With ``want_evidence``: every pi_c candidate ``(start, end, kind, features)``."""


# ---------------------------------------------------------------------------------------
# the detector

class Detector:
    """Detects PII spans in batches of texts; build once per process (loads spaCy)."""

    def __init__(self, model: str = DEFAULT_MODEL, *, entities: Iterable[str] | None = None,
                 score_threshold: float | None = None, propagate: str = "document",
                 pi_c: PiCOptions | None = None, batch_size: int = 32, upper_case_names: bool = True,
                 profile: str = "balanced", style: str = AUTO, trusted_labels: Iterable[str] | None = None):
        if propagate not in ("document", "none"):
            raise ValueError("propagate must be 'document' or 'none'")
        if profile not in PROFILES:
            raise ValueError(f"profile must be one of {', '.join(PROFILES)} (got {profile!r})")
        # the service's detector:<id>: the run's copy of the folder its job wrote
        model = model_folder(model, "redact.model")
        # an adapted detector folder (privatize train-ner --annotated): its threshold is the
        # default, and the entity types of the NER labels it added are always detected
        folder = detector_file(model) or {}
        self.adapted_labels = {str(k): str(v) for k, v in (folder.get("labels") or {}).items()}
        custom = frozenset(self.adapted_labels.values())
        # the NER labels the folder's sample taught (chosen on its held-out slice): their hits
        # skip the filters written for the base model's errors (see ``trusted_labels``)
        self.trusted_labels = frozenset(str(x) for x in (
            trusted_labels if trusted_labels is not None else folder.get("trusted_labels") or ()))
        # the folder's sample leaves titles out of its names (``Dr. [Smith]``)
        self.trim_titles = bool(folder.get("trim_titles"))
        # the folder's sample annotates everything its tenant redacts (``--complete``): only
        # the entity types its spans teach are redacted (set below, once the labels map)
        self.complete = bool(folder.get("complete"))
        if score_threshold is None:
            score_threshold = folder.get("score_threshold", DEFAULT_SCORE_THRESHOLD)
        if not 0.0 <= float(score_threshold) <= 1.0:
            raise ValueError(f"score_threshold must be between 0 and 1 (got {score_threshold})")
        unknown = set(entities or ()) - KNOWN_ENTITIES - custom
        if unknown:
            raise ValueError(f"unknown entity type(s) {sorted(unknown)}")
        self.model = model
        self.entities = frozenset(entities if entities is not None else DEFAULT_ENTITIES) | custom
        self.score_threshold = float(score_threshold)
        self.propagate = propagate
        self.profile = profile
        self.filtered = profile == "balanced"
        self.pi_c = pi_c or PiCOptions()
        if self.pi_c.policy not in ("calibrated", "strict"):
            raise ValueError(f"pi_c policy must be 'calibrated' or 'strict' (got {self.pi_c.policy!r})")
        self.pic_model = None
        if self.pi_c.policy == "calibrated":
            from privatize.redaction.calibration import load_model

            self.pic_model = load_model(pi_c_model_file(model, self.pi_c.calibration))  # or the adapted folder's own
            self.pic_threshold = self.pic_model.threshold_for(self.pi_c.domain, self.pi_c.scope)
        self.style = style
        self._pick_style = style_picker(style)
        self._style_names = frozenset(n for n in style_names() if n != AUTO)
        self.batch_size = batch_size
        self.upper_case_names = upper_case_names
        self.nlp = load_spacy(model, ("ner",))
        mapping, ignored = ner_mapping(model)
        self.ner_map = {k: v for k, v in mapping.items()}
        self.ner_map.update(self.adapted_labels)
        if self.complete:
            taught = frozenset(self.ner_map.get(lab, lab) for lab in (folder.get("types") or {}).values())
            self.entities = (self.entities & taught) | custom
        self.ner_ignored = frozenset(ignored) - {"ORGANIZATION"} - custom
        # the folder's own terms (its sample's recurring names and places, the tenant's lists):
        # always detected, as the labels it added are, and not second-guessed by the filters
        self.terms = TermSet.load(model) if folder.get("terms") else None
        if self.terms is not None:
            self.entities |= frozenset(self.terms.digests.values())
        self.recognizers = [CompiledRecognizer(r) for r in default_pattern_recognizers()]
        warm_word_lists()  # wordfreq and the census names load here, not inside the first batch

    # ---- NER ----------------------------------------------------------------------
    def _chunks(self, text: str) -> list[tuple[int, str]]:
        if len(text) <= MAX_CHUNK:
            return [(0, text)]
        out, pos = [], 0
        while pos < len(text):
            end = min(len(text), pos + MAX_CHUNK)
            if end < len(text):
                cut = max(text.rfind("\n", pos, end), text.rfind(" ", pos, end))
                if cut > pos:
                    end = cut + 1
            out.append((pos, text[pos:end]))
            pos = end
        return out

    def _ner(self, texts: list[str]) -> list[list[tuple[int, int, str]]]:
        """(start, end, spaCy label) per text."""
        jobs: list[tuple[int, int, str]] = []  # text index, offset, chunk
        for i, t in enumerate(texts):
            for off, chunk in self._chunks(t):
                jobs.append((i, off, chunk))
        out: list[list[tuple[int, int, str]]] = [[] for _ in texts]
        docs = self.nlp.pipe((c for _, _, c in jobs), batch_size=self.batch_size)
        for (i, off, _), doc in zip(jobs, docs):
            out[i].extend((off + e.start_char, off + e.end_char, e.label_) for e in doc.ents)
        return out

    def _map_ner(self, ents: list[tuple[int, int, str]], source: str, text: str,
                 case: TextCase | None = None, trusted: set | None = None) -> list[Span]:
        """NER entities as candidate spans; with ``trusted`` (a set), the hits of the
        folder's trusted labels skip the filters and their ``(start, end, source)`` keys are
        added to it (the style's filters skip them too)."""
        out = []
        for s, e, label in ents:
            etype = self.ner_map.get(label)
            if etype is None or etype in self.ner_ignored:
                continue
            if etype == "DATE_TIME" and _RELATIVE_DATE.fullmatch(text[s:e]):
                continue  # "several days ago", "this morning": no date in it
            if e - s <= 6 and _SPEAKER_LABEL.match(text, s) and text.startswith(":", e):
                continue  # "USR:", "SYS:" starting a dialogue turn
            score = ORG_SCORE if etype == "ORGANIZATION" else NER_SCORE
            if trusted is not None and label in self.trusted_labels:
                a, b = _trim_ws(text, s, e)
                if a < b:
                    out.append((a, b, etype, score, source, False))
                    trusted.add((a, b, source))
                continue
            if not self.filtered:
                out.append((s, e, etype, score, source, False))
                continue
            if etype == "DATE_TIME":
                if not ner_date_filter(text, s, e):
                    out.append((s, e, etype, score, source, False))
                continue
            if etype not in NER_NAME_TYPES:
                out.append((s, e, etype, score, source, False))
                continue
            # a name ends its line: "James\n\nSent from my iPhone", "Paula Bjelajac\nDemystdata"
            # are a name and what follows it; each line is judged on its own, and a later
            # line only counts when it is not made of common words ("Marketing Director")
            for k, (a, b) in enumerate(line_parts(text, s, e)):
                if ner_name_filter(text, a, b, etype, source, case):
                    continue
                if k and all(is_common_word(w) or w.lower() in stop_words() for w in text[a:b].split()):
                    continue
                out.append((a, b, etype, score, source, False))
        return out

    # ---- patterns -----------------------------------------------------------------
    def _patterns(self, text: str, wanted: frozenset[str] | None) -> tuple[list[Span], list[Span]]:
        """Pattern hits: (candidates for pi, hits the balanced filters keep for pi_c only)."""
        has_digit = _DIGITS.search(text) is not None
        out: list[Span] = []
        weak: list[Span] = []
        for cr in self.recognizers:
            if wanted is not None and cr.entity not in wanted:
                continue
            if cr.needs_digit and not has_digit:
                continue
            if cr.needs is not None and cr.needs not in text:
                continue
            if cr.min_newlines and text.count("\n") < cr.min_newlines:
                continue
            for s, e, t, sc, src in cr.run(text):
                ctx = bool(cr.context) and has_context(text, s, e, cr.context)
                if ctx and sc < 1.0:
                    sc = max(min(1.0, sc + CONTEXT_FACTOR), CONTEXT_MIN_SCORE)
                if self.filtered and t == "URL":
                    fixed = url_span(text, s, e)
                    if fixed is None:
                        weak.append((s, e, t, sc, src, ctx))
                        continue
                    s, e = fixed
                if self.filtered and t in CONTEXT_REQUIRED and not ctx:
                    weak.append((s, e, t, sc, src, ctx))
                    continue
                out.append((s, e, t, sc, src, ctx))
        return out, weak

    def _name_lists(self, text: str, persons: list[Span]) -> list[Span]:
        if not persons or ("," not in text and " and " not in text):
            return []
        out = []
        for m in _NAME_LIST.finditer(text):
            ls, le = m.span()
            if not any(p[0] < le and ls < p[1] for p in persons):
                continue
            for it in _ITEM_RE.finditer(text, ls, le):
                item = it.group(0)
                if item in ("And", "Or") or all(w.lower() in stop_words() for w in item.split()):
                    continue  # "Thanks", "Dear Sir"
                if self.filtered and " " not in item and is_common_word(item):
                    continue  # "Appellant, Respondent and John Smith"
                out.append((it.start(), it.end(), "PERSON", 0.6, "name_list", False))
        return out

    # ---- propagation --------------------------------------------------------------
    @staticmethod
    def _propagate(text: str, spans: list[Span], caseless: bool = False) -> list[Span]:
        """Every other occurrence of a detected string (and of each capitalised part of
        a detected name) in ``text``, as new spans of the same type and score; with
        ``caseless`` (the chat style) in any case."""
        if not spans:
            return spans
        hay = text
        if caseless:
            low = text.lower()
            if len(low) == len(text):  # lower-casing kept every offset
                hay = low
        targets: dict[str, tuple[str, float]] = {}
        stops = stop_words()
        for s, e, t, sc, _src, _ctx in spans:
            piece = text[s:e].strip()
            if len(piece) >= 2 and any(c.isalnum() for c in piece):
                targets.setdefault(piece, (t, sc))
            if t == "PERSON":
                for w in re.findall(r"\p{Lu}[\p{Ll}'’-]{2,}", piece):
                    if w.lower() not in stops:
                        targets.setdefault(w, (t, sc))
        if not targets:
            return spans
        covered = sorted((s, e) for s, e, *_ in spans)
        extra = []
        n = len(text)
        if hay is not text:
            low_targets: dict[str, tuple[str, float]] = {}
            for key, val in targets.items():
                low_targets.setdefault(key.lower(), val)
            targets = low_targets
        for key in sorted(targets, key=len, reverse=True):
            t, sc = targets[key]
            pos = hay.find(key)
            while pos >= 0:
                a, b = pos, pos + len(key)
                pos = hay.find(key, pos + 1)
                if (a > 0 and _is_word_char(text[a - 1])) or (b < n and _is_word_char(text[b])):
                    continue
                if any(s <= a and b <= e for s, e in covered):
                    continue  # already inside a detected (or longer propagated) span
                extra.append((a, b, t, sc, "propagation", False))
                covered.append((a, b))
        return spans + extra

    def _pi_c_entity(self, text: str, s: int, e: int, label: str) -> bool:
        """Whether an NER entity (any label) is a pi_c signal under the settings."""
        if not self.pi_c.relative_dates and label in ("DATE", "TIME") and _RELATIVE_DATE.fullmatch(text[s:e]):
            return False
        if not self.pi_c.speaker_labels and label != "PERSON" and is_speaker_label(text, s, e):
            return False  # "USR" read as an ORG; a tag NER reads as a name ("ANNA:") still counts
        return True

    def _strict_intervals(self, text, i, pi, cands, raw, weak, ner, case_ner, upper_regions):
        """The strict policy: every signal its switches leave on."""
        pi_c = self.pi_c
        iv = [(sp[0], sp[1]) for sp in pi]
        by = "pi" if iv else None
        if pi_c.recognizer_hits:
            iv += [(c[0], c[1]) for c in [*cands, *raw, *weak] if c[3] >= pi_c.min_score]
        if pi_c.all_ner_labels:
            iv += [(s, e) for s, e, lab in [*ner[i], *case_ner.get(i, ())] if self._pi_c_entity(text, s, e, lab)]
        if pi_c.digits or pi_c.capitalized:
            iv += _pi_c_word_signals(text, capitalized=pi_c.capitalized, digits=pi_c.digits,
                                     sentence_initial=pi_c.sentence_initial, speaker_labels=pi_c.speaker_labels,
                                     digit_min_length=pi_c.digit_min_length)
        if pi_c.capitalized:
            # text without case information: every word that is not a function word
            stops = stop_words()
            for a, b in upper_regions[i]:
                iv += [m.span() for m in _LETTER_WORD.finditer(text, a, b) if m.group(0).lower() not in stops]
        return iv, by or ("signal" if iv else None)

    # ---- the batch ----------------------------------------------------------------
    def detect(self, texts: list[str], *, want_intervals: bool = False, want_evidence: bool = False,
               styles: list[str | None] | None = None) -> list[Detection]:
        """One :class:`Detection` per text (``None`` texts are not allowed). ``styles``:
        per text, the style its document was judged to have (the split stage's
        ``doc_style``), used where the detector's style is ``auto``; ``None`` entries are
        judged from the text itself."""
        texts = list(texts)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError("detect needs str texts (quarantine null records before)")
        if styles is not None and len(styles) != len(texts):
            raise ValueError("styles must give one entry per text")
        given = styles if (styles is not None and self.style == AUTO) else [None] * len(texts)
        doc_styles = [get_style(g if g in self._style_names else self._pick_style(t)) for t, g in zip(texts, given)]
        upper_regions = [caseless_regions(t) if self.upper_case_names else [] for t in texts]
        recased = [r if st.recase else [] for r, st in zip(upper_regions, doc_styles)]
        # one NER pass per text, over the text with its caseless regions re-cased (where
        # the text's style allows it: clinical capitals are shorthand, not caseless chat)
        ner = self._ner([recase(t, r) if r else t for t, r in zip(texts, recased)])
        case_ner = {}
        for i, regions in enumerate(recased):
            if regions:
                ner[i], case_ner[i] = split_caseless(ner[i], regions)
        results = []
        pi_c = self.pi_c
        calibrated = self.pic_model is not None
        for i, text in enumerate(texts):
            reserved = reserved_spans(text)
            # one look at the whole text's case for the name filters of both NER sources
            case = TextCase(text) if self.filtered and ner[i] else None
            trusted: set = set()
            cands = self._map_ner(ner[i], "spacy", text, case, trusted)
            if i in case_ner:
                cands += self._map_ner(case_ner[i], "spacy_case", text, case, trusted)
            if self.terms is not None:
                found = self.terms.find(text)
                cands += found
                trusted.update((c[0], c[1], c[4]) for c in found)
            hits, weak = self._patterns(text, None if (pi_c.recognizer_hits or calibrated) else self.entities)
            cands += hits
            style = doc_styles[i]
            extra = style.extra(text)
            cands += extra
            raw = cands
            dropped = {}  # why the style dropped a candidate: a pi_c feature
            if self.filtered:  # the style's filters (pi_c below still sees every raw hit)
                kept = []
                for c in cands:
                    why = None if (c[0], c[1], c[4]) in trusted else style.drop(text, c)
                    if why is None:
                        kept.append(c)
                    else:
                        dropped[(c[0], c[1], c[4])] = why
                cands = kept
            cands += self._name_lists(text, [c for c in cands if c[2] == "PERSON" and c[3] >= self.score_threshold])
            cands = _cut_reserved(cands, reserved, text)
            cands = _cut_ner_at_checksums(cands, text)
            if style.trim_articles:
                cands = [trim_article(text, c) for c in cands]
            if style.trim_place_heads:
                cands = [trim_place_head(text, c) for c in cands]
            if self.trim_titles or style.trim_titles:
                cands = [_trim_title(text, c) for c in cands]
            pi = [c for c in cands if c[2] in self.entities and c[3] >= self.score_threshold]
            pi = merge_spans(pi)
            if pi:
                inferred = [c for c in style.complete(text, pi) if c[2] in self.entities]
                pi = merge_spans(pi + _cut_reserved(inferred, reserved, text))
            if self.propagate == "document" and pi:
                caseless = style.propagate_key("x") is not None
                spread = self._propagate(text, pi, caseless)
                if self.filtered:  # a propagated copy meets the style's filters where it stands
                    spread = [c for c in spread if c[4] != "propagation" or style.drop(text, c) is None]
                pi = merge_spans(_cut_reserved(spread, reserved, text))
            # pi_c
            ev = []
            full = want_intervals or want_evidence  # else the first candidate over the threshold decides
            rest = pi_c.scope == "rest"  # judge only what pi's spans leave in the clear
            if want_evidence or (calibrated and (rest or full or not pi)):
                found = iter_candidates(text, style=style.name, ner=ner[i], case_ner=case_ner.get(i, []),
                                        hits=hits + extra, weak=weak, upper_regions=upper_regions[i],
                                        dropped=dropped, removed=pi if (rest or want_evidence) else None)
                if reserved:
                    found = (c for c in found if not any(a < c[1] and c[0] < b for a, b in reserved))
                ev = found if (calibrated and not want_evidence) else list(found)
            if calibrated:
                by, best, iv = ("pi" if pi and not rest else None), 0.0, ([] if rest else [(sp[0], sp[1]) for sp in pi])
                top = None
                for s, e, kind, feats in ev:
                    if (inside_any(s, e, pi) if rest else kind == "beside"):
                        continue  # rest: inside a removed span; record: beside candidates are rest's alone
                    sc = self.pic_model.score(feats)
                    if sc > best:
                        best, top = sc, kind
                    if sc >= self.pic_threshold:
                        iv.append((s, e))
                        if not full:
                            break
                if by is None and best >= self.pic_threshold and top is not None:
                    by = top
            else:
                best = 0.0
                iv, by = self._strict_intervals(text, i, pi, cands, raw, weak, ner, case_ner, upper_regions)
                if rest:
                    iv = [x for x in iv if not inside_any(x[0], x[1], pi)]
                    by = "signal" if iv else None
            if reserved and iv:
                iv = [(x[0], x[1]) for x in _cut_reserved([(a, b, "", 0.0, "", False) for a, b in iv], reserved, text)]
            if not iv:
                by = None
            det = Detection(
                spans=[{"start": s, "end": e, "entity_type": t, "score": float(sc), "source": src}
                       for s, e, t, sc, src, _ctx in pi],
                pi_c_hit=bool(iv),
                pi_c_intervals=merge_intervals(iv) if want_intervals else [],
                style=style.name,
                pi_c_by=by,
                pi_c_score=best,
                evidence=ev if want_evidence else [],
            )
            results.append(det)
        return results


def _trim_title(text: str, span: Span) -> Span:
    """A PERSON span without a leading title (``Dr. Smith`` -> ``Smith``) when a name follows."""
    s, e, etype, sc, src, ctx = span
    if etype == "PERSON":
        m = TITLE_AT.match(text[s:e])
        if m and s + m.end() < e:
            return (s + m.end(), e, etype, sc, src, ctx)
    return span


def _trim_ws(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s].isspace():
        s += 1
    while e > s and text[e - 1].isspace():
        e -= 1
    return s, e


_CHECKSUMMED = frozenset({"CREDIT_CARD", "IBAN_CODE"})


def _cut_ner_at_checksums(cands: list[Span], text: str) -> list[Span]:
    """NER hits cut back to the text outside card numbers and IBANs whose checksum held
    (pattern hits of score 1.0): an NER date over ``1111 5500 0000 0000 0004`` would
    otherwise join two cards written one after another into one span, or stretch an
    IBAN over the word after it (``00 please``)."""
    sure = [(c[0], c[1]) for c in cands if c[2] in _CHECKSUMMED and c[3] >= 1.0 and c[4] not in _NER_SOURCES]
    if not sure:
        return cands
    ner = [c for c in cands if c[4] in _NER_SOURCES]
    return [c for c in cands if c[4] not in _NER_SOURCES] + _cut_reserved(ner, sure, text)


# ---------------------------------------------------------------------------------------
# module-level default (``privatize encrypt`` with an AES key calls detect_spans)

_default_lock = threading.Lock()


@functools.lru_cache(maxsize=4)
def _cached_detector(model: str) -> Detector:
    return Detector(model)


def default_detector(model: str = DEFAULT_MODEL) -> Detector:
    with _default_lock:
        return _cached_detector(model)


def detect_spans(texts: list[str], settings=None) -> list[list[dict]]:
    """pi spans per text: ``{start, end, entity_type, score, source}``, sorted,
    non-overlapping, offsets into each text. ``settings`` may be a ``RedactSettings``
    (model, entities, threshold, propagation) or ``None`` for the defaults."""
    if settings is None:
        det = default_detector()
    else:
        det = detector_for(settings)
    return [d.spans for d in det.detect(list(texts))]


def detector_for(settings) -> Detector:
    """A detector configured like a ``RedactSettings`` (cached per distinct settings)."""
    pic = settings.pi_c
    if hasattr(pic, "model_dump"):
        pic = PiCOptions(**pic.model_dump())
    # an unset threshold is the model's: an adapted detector folder's own, else the default
    explicit = "score_threshold" in getattr(settings, "model_fields_set", {"score_threshold"})
    threshold = float(settings.score_threshold) if explicit else None
    key = (settings.model, tuple(settings.entities), threshold, settings.propagate, pic,
           int(getattr(settings, "batch_size", 32)), getattr(settings, "profile", "balanced"),
           getattr(settings, "style", AUTO))
    with _default_lock:
        return _detector_by_key(key)


@functools.lru_cache(maxsize=8)
def _detector_by_key(key) -> Detector:
    model, entities, threshold, propagate, pic, batch_size, profile, style = key
    return Detector(model, entities=entities, score_threshold=threshold, propagate=propagate, pi_c=pic,
                    batch_size=batch_size, profile=profile, style=style)
