"""Adapt the detector to a tenant's domain: fine-tune the NER on an annotated sample,
with rehearsal, and evaluate it on a slice of the sample it never trained on (issue 51,
item 1). ``privatize train-ner --annotated FILE --output DIR``.

**Input** (``--format``):

* ``jsonl`` (default): one record per line, ``{"text": ..., "spans": [{"start", "end",
  "type"}, ...]}`` (Python string offsets, end exclusive; other keys ignored, the layout
  of the project's development data). Every record needs a ``spans`` list (``[]``: a text
  with nothing to redact, which counts for precision).
  An optional ``neutral`` list (``start``, ``end``) marks text the annotation leaves
  undecided: neither to redact nor counted against the detector (see **Neutral spans**).
* ``tab``: the Text Anonymization Benchmark's JSON lines (``text``, ``entities`` with
  ``start_offset``, ``end_offset``, ``entity_type``, ``identifier_type``): DIRECT and QUASI
  mentions are the spans (typed by ``entity_type``); NO_MASK mentions are not.
* ``multiwoz``: one dialogue per line (``turns``: ``speaker``, ``text``, ``spans`` with
  ``start``, ``end``, ``slot``), turns joined by newlines into one record; the PII-like
  slots (:data:`MULTIWOZ_SLOTS`) are the spans, and so are the other mentions of their
  values in the dialogue (:func:`_other_mentions`); the city slots (:data:`MULTIWOZ_NEUTRAL`)
  and every other whole-word mention of their values in the dialogue, in any case, outside
  those spans, are neutral (as ``experiments/redaction_real.py`` scores the zero-shot
  detector, which takes no other mentions as gold).

A bad record (not JSON, no text, no spans list, a span out of range or with no type)
is an :class:`InputError` naming the file and line: nothing is trained.

**Labels.** A type names the spaCy label it trains: the OntoNotes labels the model has and
Presidio's names for them are aliases (:data:`ALIASES`: PERSON, NAME, LOCATION/GPE, LOC,
FAC, ORGANIZATION/ORG, DATE_TIME/DATE/DATETIME, TIME, NRP/NORP); ``--map TYPE=LABEL``
adds others (``PTName=PERSON``); a type that names one the pattern recognizers report
becomes a new label of Presidio's name for it (:data:`PATTERN_ALIASES`: PHONE/TELEPHONE/FAX ->
PHONE_NUMBER, EMAIL -> EMAIL_ADDRESS, ZIP -> ZIP_CODE, SSN -> US_SSN, AGE, ...), so that the
folder's type is that default type and ``--complete`` keeps its recognizers; any other type
becomes a new label of its own name (upper case, ``[A-Z0-9_]``), which the detector reports
as an entity type of that name, always redacted (the folder's ``detector.json`` lists them
under ``labels``).

**Hold-out.** A record is held out when the first 8 bytes of the SHA-256 of its text,
as a fraction of 2^64, fall below ``holdout`` (default 0.2): the same record is held out
whatever the file's order or the other records. Training never sees those. A ``jsonl``
record may name its ``group`` (a patient, a case, a conversation: a string or an integer):
then the hash is of the group, and a group is held out or trained on as a whole, so that
the evaluation does not meet, in other records of one patient, the names the training saw
(the sample's terms, below, would otherwise look better than they are).

**Rehearsal** (so that types the sample does not annotate do not regress). The sample is
complete for the labels its types map to: the base model's predictions with those labels
that no annotated span supports are taught as *outside*. Its predictions with every
other label (a sample that annotates only record numbers still holds names and dates)
that overlap no annotated span are kept as the training target: the model rehearses
its own behaviour on the tenant's text. Long records are cut into pieces of at most
:data:`MAX_PIECE` characters at line or sentence ends outside spans.

**General rehearsal** (``general_rehearsal``, default :data:`DEFAULT_GENERAL_REHEARSAL`;
``--general-rehearsal R``): sentences of the public-domain stories that ship with the
package, as many characters as R times the sample's (at most
:data:`MAX_GENERAL_REHEARSAL_CHARS`, which bounds the cost on large samples), labelled by the
base model (every label), are trained beside the sample. Without them the sample's negatives (the base
model's unsupported names taught as outside) made the model forget names it never saw in
the sample: on the clinical development notes held out by patient, adapted on 200 notes, it
missed 23 of 297 spans against the default detector's 12 (one relative's name, six
mentions, that the base model found); with R = 0.5, 14 (character precision 0.728 against
0.777 without and 0.688 for the default).

**Complete samples** (``complete``, ``--complete``; the adapt job's ``complete``): the
sample annotates everything the tenant redacts (MultiWOZ annotates addresses, phones,
postcodes, references, train ids and venues; its station names are not personal and never
annotated, its city names are neutral spans, below; a value annotated in a dialogue is a
span at its other mentions there too: :func:`_other_mentions`). Then every base-model prediction that
overlaps no annotated (or neutral) span is taught as outside, whatever its label (no
rehearsal), and ``detector.json`` records ``complete: true`` (and ``provenance.complete``):
the detector redacts only the entity types the sample's types map to
(:class:`privatize.redaction.detect.Detector`), from the NER, the pattern recognizers and
the style's rules alike, and the held-out evaluation measures that detector. Folders without
the key redact every default type, as before. Why: on MultiWOZ's development half, of the
characters a detector adapted (with rehearsal) on 200 dialogues flagged outside the gold
spans of its held-out slice, 63% were of types the sample never annotates (LOCATION 49%:
city and station names, from the NER and the chat style's place rules; PERSON 7%,
ORGANIZATION 5%, DATE_TIME 2%), the pattern recognizers' hits of those types none; the rest
were the sample's own types (VENUE 24%, STREET_ADDRESS 10%: boundaries, station names read
as streets; the other four 3%).

**Neutral spans** (a record's ``neutral``): text the annotation neither asks to redact
nor calls safe, such as MultiWOZ's city names (annotated only as train slots, not
personal, yet among what dialogue redaction removes). Training leaves their tokens without
a label (*missing*: no signal either way; the base model's predictions over them are not
rehearsed either); the evaluation leaves their characters out of precision (a detected
neutral character is neither a hit nor a false positive) and never counts them as gold.
Without them the held-out figures of a MultiWOZ adaptation charged every city name the
detector masks as a false positive, which the zero-shot table does not.

An annotated span that lies inside one token becomes an entity over that token when the
token adds only punctuation (an initial and its full stop, ``B.``; ``Baker-``); one glued to
letters or digits (``DR.GATEMAN``) is marked *missing* (no signal either way).

**Trusted labels.** The detector's filters against false names, places and dates (the
base model's errors; the clinical style's name-evidence rules) would veto what the adapted
NER learnt from the sample: on the clinical notes they dropped the adapted NER's new hits,
so adaptation could not raise recall. Each spaCy label the sample teaches that maps to a
default entity type (PERSON, GPE, DATE, ...) is tried on the held-out slice at threshold 0,
greedily in label order: it is *trusted* (its NER hits skip those filters) when that finds
at least one more gold span and at least :data:`TRUST_MIN_PRECISION` of the characters it
adds are gold. Labels the folder adds are never filtered. ``detector.json`` lists them as
``trusted_labels`` (absent in older folders: none trusted) with ``trust_selection``.

**Titles.** When the sample's name spans leave a title before the name out (``Dr.
[Smith]``; :func:`title_convention`), the folder's ``trim_titles`` makes the detector cut
a leading title (:data:`privatize.redaction.defaults.TITLE_WORDS`) off its name spans: the title is not what the
tenant redacts.

**Training.** As :mod:`privatize.redaction.ner_training`: ``nlp.resume_training()``
and the NER component's own ``update`` (only ``ner`` changes), new labels added first, a seeded shuffle,
``epochs`` epochs (nothing is selected on the held-out slice; default
:data:`DEFAULT_EPOCHS_ADAPT`), fewer for a large sample (:func:`epochs_for`: at most
:data:`DEFAULT_MAX_UPDATES` updates, at least :data:`MIN_EPOCHS_CAPPED` epochs), in batches of
:func:`batch_size_for` pieces unless one is asked.

**Evaluation and pi's threshold**, on the held-out slice with the whole detector (the
trusted labels chosen first) (NER,
patterns, styles, propagation). Spans are untyped for redaction: a gold span is
*detected* when every letter and digit of it (a leading *the* aside: :func:`_covered`) lies
inside pi's spans (of any type), a *miss* otherwise; recall = detected / gold spans; character recall and precision over
the union of gold and of pi's spans; span precision = pi's spans that overlap a gold
span / pi's spans; the same per gold type; ``miss_rate_upper_95`` is the one-sided 95%
Clopper-Pearson upper bound of the miss rate
(:func:`privatize.redaction.calibration.clopper_pearson_upper`). pi's threshold: among
the distinct scores of pi's spans at threshold 0 (and the default 0.3), the largest
whose character recall is within :data:`RECALL_TOLERANCE` of the best, i.e. the most
precision at no recall cost; the figures are then measured again at that threshold, and
for the base model at its default threshold on the same slice.

**pi_c** (the conservative policy's calibrated threshold; CRT's delta_2): the shipped
model's weights (:mod:`privatize.redaction.calibration`) are kept and its threshold is
calibrated on the held-out records that hold a span, each record one unit (a record pi
flags is routed private; else its strongest candidate's score): the largest threshold
whose one-sided 95% Clopper-Pearson bound of the miss rate is at most
:data:`PI_C_TARGET`, or, on a slice too small to show that target, the largest with no
avoidable miss (the bound is then what the slice shows). Written as ``pi_c.json`` in
the folder; the detector uses it for ``pi_c.policy: calibrated`` when no other
calibration file is named. The units are the records as given: calibrate on
sentence-sized records for what CRT routes per sentence.

**Terms** (:mod:`privatize.redaction.terms`): the folder keeps, as keyed digests in
``terms.json``, the terms the training part of the sample teaches (``sample_terms``, on by
default: rare words mostly annotated where they occur) and the tenant's lists (``terms``,
``--terms TYPE=FILE``); the detector redacts them wherever they stand as whole words, in any
case, past the filters. They are in place before the held-out evaluation, which measures them.

**Output**, written to a temporary sibling and renamed: the spaCy pipeline (only ``ner``
changed), ``terms.json`` (when there are terms) and ``detector.json``
(:data:`privatize.redaction.defaults.DETECTOR_FORMAT`): ``score_threshold``, ``labels``,
``trusted_labels``, ``complete`` (only when true), ``terms`` (their count by source),
``evaluation`` (adapted and base), ``pi_c``, ``threshold_grid`` and ``provenance`` (the source
file's SHA-256, format, record and group counts, base model, seed, epochs, ``rehearsal``,
``general_rehearsal``, ``complete``, ``sample_terms``, the term lists' names and SHA-256,
date, seconds).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

import regex as re

from privatize.errors import InputError
from privatize.redaction.defaults import DEFAULT_SCORE_THRESHOLD, DETECTOR_FILE, DETECTOR_FORMAT, TITLE_AT, TITLE_WORDS
from privatize.redaction.engine import DEFAULT_MODEL, ner_mapping, resolve_model
from privatize.redaction.presidio import import_presidio
from privatize.redaction.terms import TERMS_FILE, TermSet, read_term_file
from privatize.redaction.terms import sample_terms as terms_of_sample

log = logging.getLogger(__name__)

FORMATS = ("jsonl", "tab", "multiwoz")
ALIASES: dict[str, str] = {
    "PERSON": "PERSON", "PER": "PERSON", "NAME": "PERSON",
    "LOCATION": "GPE", "GPE": "GPE", "LOC": "LOC", "FAC": "FAC",
    "ORGANIZATION": "ORG", "ORG": "ORG",
    "DATE_TIME": "DATE", "DATE": "DATE", "DATETIME": "DATE", "TIME": "TIME",
    "NRP": "NORP", "NORP": "NORP",
}
"""Annotated type (upper-cased) -> the spaCy label it trains, for the labels the model has."""
PATTERN_ALIASES: dict[str, str] = {
    "PHONE": "PHONE_NUMBER", "PHONE_NUMBER": "PHONE_NUMBER", "TELEPHONE": "PHONE_NUMBER",
    "TELEPHONE_NUMBER": "PHONE_NUMBER", "FAX": "PHONE_NUMBER",
    "EMAIL": "EMAIL_ADDRESS", "E_MAIL": "EMAIL_ADDRESS", "EMAIL_ADDRESS": "EMAIL_ADDRESS",
    "URL": "URL", "WEB": "URL", "IP_ADDRESS": "IP_ADDRESS", "SSN": "US_SSN", "US_SSN": "US_SSN",
    "ZIP": "ZIP_CODE", "ZIP_CODE": "ZIP_CODE", "POSTCODE": "POSTCODE", "STREET_ADDRESS": "STREET_ADDRESS",
    "AGE": "AGE", "CREDIT_CARD": "CREDIT_CARD", "IBAN_CODE": "IBAN_CODE",
}
"""Annotated type (upper-cased, ``[A-Z0-9_]``) -> the new label it trains when it names a
type the detector's pattern recognizers report (Presidio's name: PHONE -> PHONE_NUMBER):
the folder's type is then that default type, so a ``--complete`` folder keeps those
recognizers (a ``Phone`` type trained as its own label ``PHONE`` left them out: the
detector then redacted phone numbers only where the NER had learnt them)."""
MULTIWOZ_SLOTS = {"Phone": "PHONE_NUMBER", "Post": "POSTCODE", "Ref": "REFERENCE_NUMBER", "Id": "ID",
                  "Addr": "STREET_ADDRESS", "Name": "VENUE"}
MULTIWOZ_NEUTRAL = ("Dest", "Depart")
"""MultiWOZ's city slots: neutral spans (see the module docstring), not spans to redact."""
TAB_MASKED = ("DIRECT", "QUASI")
DEFAULT_EPOCHS_ADAPT = 10
"""Epochs of an adaptation. Fewer lost recall where the sample teaches new labels: MultiWOZ,
200 dialogues, held-out recall 0.932 at 5 epochs (batch 16) against 0.935 at 10, and 0.908 at
5 epochs of batch 32 (DIARY, ``redaction_adapt.py``, 2026-11-30)."""
DEFAULT_BATCH_ADAPT = 32
"""Pieces per update, unless the sample is small (:func:`batch_size_for`). 32 against the earlier
16 at 10 epochs, 8-14% less time per epoch: clinical notes held out by patient, 200 notes, the same
recall (0.953) at character precision 0.757 against 0.727 (64: 0.750); MultiWOZ, 200
dialogues, recall 0.932 / precision 0.688 against 0.935 / 0.695."""
MIN_BATCH_ADAPT = 16
MIN_UPDATES_PER_EPOCH = 20
"""A small sample's batch shrinks (down to :data:`MIN_BATCH_ADAPT`) so that an epoch still
makes this many updates: 80 short notes at a batch of 32 made too few to learn a new type."""
MAX_BATCH_ADAPT = 512
DEFAULT_MAX_UPDATES = 600
MIN_EPOCHS_CAPPED = 5
"""A large sample stops after the epoch that reaches :data:`DEFAULT_MAX_UPDATES` updates, but
not before :data:`MIN_EPOCHS_CAPPED` epochs (:func:`epochs_for`): 839 clinical notes make 70
updates an epoch at a batch of 32, so 9 epochs, not 10. Below about 600 updates recall fell
where the sample teaches new labels (MultiWOZ, 200 dialogues: 0.932 at 485 updates, 0.908 at
245); the samples measured before 2026-11-30 (up to 200 notes or dialogues) stay at 10 epochs."""
DEFAULT_HOLDOUT = 0.2
DEFAULT_GENERAL_REHEARSAL = 0.5
MAX_GENERAL_REHEARSAL = 4.0
MAX_GENERAL_REHEARSAL_CHARS = 100_000
MAX_PIECE = 2000
RECALL_TOLERANCE = 0.005
TRUST_MIN_PRECISION = 0.5
PI_C_FILE = "pi_c.json"
PI_C_TARGET = 0.05
_LABEL_OK = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
_CUT = re.compile(r"\n|(?<=[.!?])\s+(?=\p{Lu})")
_STRIP = " \t\r\n"

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------
# reading

def _bad(where: str, msg: str) -> InputError:
    return InputError(f"{where}: {msg}")


def _check_spans(where: str, text: str, spans: Iterable[tuple]) -> list[tuple[int, int, str]]:
    out = []
    for k, (s, e, t) in enumerate(spans):
        if not isinstance(s, int) or not isinstance(e, int) or isinstance(s, bool) or isinstance(e, bool):
            raise _bad(where, f"span {k}: start and end must be integers (got {s!r}, {e!r})")
        if not 0 <= s < e <= len(text):
            raise _bad(where, f"span {k} ({s}..{e}) out of range for a text of {len(text)} characters")
        if not isinstance(t, str) or not t.strip():
            raise _bad(where, f"span {k}: 'type' must be a non-empty string")
        out.append((s, e, t.strip()))
    return out


def _jsonl(obj: dict, where: str) -> dict:
    text = obj.get("text")
    if not isinstance(text, str):
        raise _bad(where, "expected a string 'text'")
    spans = obj.get("spans")
    if not isinstance(spans, list):
        raise _bad(where, "expected a 'spans' list ([] when the text holds nothing to redact)")
    raw = []
    for k, sp in enumerate(spans):
        if not isinstance(sp, dict) or not {"start", "end", "type"} <= sp.keys():
            raise _bad(where, f"span {k}: expected an object with 'start', 'end' and 'type'")
        raw.append((sp["start"], sp["end"], sp["type"]))
    rec = {"text": text, "spans": _check_spans(where, text, raw)}
    neutral = obj.get("neutral")
    if neutral is not None:
        if not isinstance(neutral, list):
            raise _bad(where, "'neutral' must be a list of spans")
        nraw = []
        for k, sp in enumerate(neutral):
            if not isinstance(sp, dict) or not {"start", "end"} <= sp.keys():
                raise _bad(where, f"neutral span {k}: expected an object with 'start' and 'end'")
            nraw.append((sp["start"], sp["end"], "neutral"))
        rec["neutral"] = [(a, b) for a, b, _ in _check_spans(f"{where}: neutral", text, nraw)]
    group = obj.get("group")
    if group is not None:
        if isinstance(group, bool) or not isinstance(group, (str, int)):
            raise _bad(where, f"'group' must be a string or an integer (got {type(group).__name__})")
        rec["group"] = str(group)
    return rec


def _tab(obj: dict, where: str) -> dict:
    text = obj.get("text")
    if not isinstance(text, str):
        raise _bad(where, "expected a string 'text' (TAB format)")
    ents = obj.get("entities", obj.get("annotations"))
    if not isinstance(ents, list):
        raise _bad(where, "expected an 'entities' list (TAB format)")
    raw = []
    for k, en in enumerate(ents):
        if not isinstance(en, dict) or not {"start_offset", "end_offset", "entity_type"} <= en.keys():
            raise _bad(where, f"entity {k}: expected 'start_offset', 'end_offset' and 'entity_type'")
        if en.get("identifier_type") in TAB_MASKED:
            raw.append((en["start_offset"], en["end_offset"], en["entity_type"]))
    return {"text": text, "spans": _check_spans(where, text, raw)}


def _multiwoz(obj: dict, where: str) -> dict:
    turns = obj.get("turns")
    if not isinstance(turns, list):
        raise _bad(where, "expected a 'turns' list (MultiWOZ format)")
    parts, raw, neutral, pos = [], [], [], 0
    for k, turn in enumerate(turns):
        t = turn.get("text") if isinstance(turn, dict) else None
        if not isinstance(t, str):
            raise _bad(where, f"turn {k}: expected a string 'text'")
        for sp in turn.get("spans") or []:
            slot = sp.get("slot")
            typ = MULTIWOZ_SLOTS.get(slot)
            if typ is None and slot not in MULTIWOZ_NEUTRAL:
                continue
            s, e = sp.get("start"), sp.get("end")
            if not isinstance(s, int) or not isinstance(e, int) or not 0 <= s < e <= len(t):
                raise _bad(where, f"turn {k}: span ({s}..{e}) out of range for a turn of {len(t)} characters")
            (raw if typ is not None else neutral).append((pos + s, pos + e, typ or "neutral"))
        parts.append(t)
        pos += len(t) + 1
    text = "\n".join(parts)
    raw += _other_mentions(text, raw, [(s, e) for s, e, _ in neutral])
    rec = {"text": text, "spans": _check_spans(where, text, sorted(raw))}
    # every other mention of a city value is neutral too, where it is not part of a gold span
    cities = {f: "neutral" for f in (" ".join(text[s:e].split()).lower() for s, e, _ in neutral) if len(f) >= 3}
    neutral += _mentions(text, cities, [(s, e) for s, e, _ in raw])
    if neutral:
        rec["neutral"] = _union([(s, e) for s, e, _ in neutral])
    return rec


def _other_mentions(text: str, spans: list[tuple[int, int, str]],
                    slots: list[tuple[int, int]] = ()) -> list[tuple[int, int, str]]:
    """MultiWOZ annotates a slot's value where a dialogue act names it, not at every mention:
    in its validation dialogues 95 mentions of an annotated venue name (and 28 of addresses,
    train ids and references) recur unannotated in the same dialogue (``Can you change the
    Wartworth booking``). Each such whole-word mention, in any case, becomes a span of the
    value's type; longest values first, none over an annotated span, another mention or
    an annotated neutral slot (``slots``: a taxi's ``Dest`` naming a venue stays neutral).
    Values shorter than 3 characters are left alone, and so is a one-word form that is a
    common word (:func:`privatize.redaction.filters.zipf` at least 3.5): a venue annotated as
    ``the place`` would otherwise take every ``place``, and a phone slot that holds ``yes``
    every ``yes``. Words of a value are matched across spaces and tabs, never across a turn's
    end."""
    from privatize.redaction.filters import zipf

    forms: dict[str, str] = {}
    for s, e, typ in spans:
        v = " ".join(text[s:e].split()).lower()
        for f in (v, v[4:] if v.startswith("the ") else None):
            if f and len(f) >= 3 and (" " in f or zipf(f) < 3.5):
                forms.setdefault(f, typ)
    return _mentions(text, forms, [(s, e) for s, e, _ in spans] + list(slots))


def _mentions(text: str, forms: dict[str, str], taken: list[tuple[int, int]]) -> list[tuple[int, int, str]]:
    """Each whole-word mention, in any case, of a form (lower case, its words one space
    apart) as ``(start, end, forms[form])``: longest forms first, a form's words matched
    across spaces and tabs but never a line's end, none overlapping ``taken`` or a mention
    found before it."""
    taken, out = list(taken), []
    for f in sorted(forms, key=len, reverse=True):
        rx = re.compile(r"(?<![\w'])" + r"[^\S\n]+".join(re.escape(w) for w in f.split()) + r"(?![\w'])",
                        re.IGNORECASE)
        for m in rx.finditer(text):
            if not any(s < m.end() and m.start() < e for s, e in taken):
                out.append((m.start(), m.end(), forms[f]))
                taken.append((m.start(), m.end()))
    return out


_READERS = {"jsonl": _jsonl, "tab": _tab, "multiwoz": _multiwoz}


def read_annotated(path: str | Path, fmt: str = "jsonl") -> tuple[list[dict], str]:
    """The records (``text``, ``spans`` as ``(start, end, type)``, ``line``) and the file's
    SHA-256; :class:`InputError` with one line naming the line of the first bad record."""
    if fmt not in _READERS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--annotated {path}: no such file")
    data = p.read_bytes()
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8") from None
    out = []
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            obj = json.loads(line)
        except ValueError:
            raise _bad(where, "not JSON") from None
        if not isinstance(obj, dict):
            raise _bad(where, "expected a JSON object")
        rec = _READERS[fmt](obj, where)
        rec["line"] = no
        out.append(rec)
    if not out:
        raise InputError(f"{path}: no records")
    return out, hashlib.sha256(data).hexdigest()


def holdout_key(record: dict) -> str:
    """What a record's hold-out is decided on: its group when it names one, else its text."""
    return f"group:{record['group']}" if record.get("group") is not None else record["text"]


def held_out(text: str, fraction: float) -> bool:
    """Whether a record is in the held-out slice (a hash of its text, or of its
    :func:`holdout_key`; see the module doc)."""
    h = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64 < fraction


def entity_types(labels: dict[str, str], custom: dict[str, str], presidio_map: dict[str, str]) -> dict[str, str]:
    """Annotated type -> the entity type the detector reports for it (its label's, through the
    folder's own labels or Presidio's table); types whose label maps to none are left out."""
    out = {t: custom.get(lab) or presidio_map.get(lab) for t, lab in labels.items()}
    return {t: e for t, e in out.items() if e}


def folder_labels(types, label_map: dict[str, str] | None,
                  presidio_map: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """A detector folder's ``types`` (sample type -> the label it trains, :func:`label_for`)
    and ``labels`` (each trained label the base model's Presidio mapping lacks, reported
    under its own name), as :func:`adapt` writes them into ``detector.json``."""
    labels = {t: label_for(t, label_map) for t in types}
    return labels, {lab: lab for lab in sorted(set(labels.values())) if lab not in presidio_map}


def label_for(typ: str, label_map: dict[str, str] | None = None) -> str:
    """The spaCy label an annotated type trains (see the module docstring)."""
    if label_map and typ in label_map:
        return label_map[typ]
    up = typ.upper()
    if up in ALIASES:
        return ALIASES[up]
    lab = re.sub(r"[^A-Z0-9_]+", "_", up).strip("_") or "PII"
    if lab in PATTERN_ALIASES:
        return PATTERN_ALIASES[lab]
    if not lab[0].isalpha():
        lab = "T_" + lab
    return lab[:32]


_TITLE_BEFORE = re.compile(rf"(?i)(?<![\w.]){TITLE_WORDS}\.?[ \t]*$")


def title_convention(records: list[dict]) -> dict:
    """Whether the sample's spans leave a title before a name out (``Dr. [Smith]``):
    counts of spans (of any type: what follows a title is a name, whatever the sample calls
    it) right after a title and of those that start with one; ``trim_titles`` when at least
    3 leave it out and more than 3 times as many as take it in."""
    outside = inside = 0
    for r in records:
        t = r["text"]
        for s, e, _typ in r["spans"]:
            if TITLE_AT.match(t[s:e]):
                inside += 1
            elif _TITLE_BEFORE.search(t[max(0, s - 12):s]):
                outside += 1
    return {"title_outside": outside, "title_inside": inside, "trim_titles": outside >= 3 and outside > 3 * inside}


def parse_map(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for it in items or ():
        typ, sep, lab = it.partition("=")
        if not sep or not typ.strip() or not _LABEL_OK.fullmatch(lab.strip()):
            raise InputError(f"--map {it}: expected TYPE=LABEL with LABEL in upper case (letters, digits, _)")
        out[typ.strip()] = lab.strip()
    return out


# ---------------------------------------------------------------------------------------
# training data

def _pieces(text: str, spans: list[tuple[int, int, str]], limit: int = MAX_PIECE,
            neutral: list[tuple[int, int]] = ()):
    """``(offset, piece, spans shifted, neutral spans shifted and clipped)`` cuts of a record
    at line or sentence ends outside spans, each at most ``limit`` characters where such
    cuts allow."""
    if len(text) <= limit:
        return [(0, text, spans, list(neutral))]
    inside = sorted((s, e) for s, e, _ in spans)

    def free(pos: int) -> bool:
        return not any(s < pos < e for s, e in inside)

    cuts = [m.end() for m in _CUT.finditer(text) if free(m.end())]
    out, start, last = [], 0, 0
    for c in cuts + [len(text)]:
        if c - start > limit and last > start:
            out.append((start, last))
            start = last
        last = c
    out.append((start, len(text)))
    res = []
    for a, b in out:
        if not text[a:b].strip():
            continue
        res.append((a, text[a:b], [(s - a, e - a, t) for s, e, t in spans if a <= s and e <= b],
                    [(max(s, a) - a, min(e, b) - a) for s, e in neutral if s < b and a < e]))
    return res


def _trim(text: str, s: int, e: int) -> tuple[int, int]:
    while s < e and text[s] in _STRIP:
        s += 1
    while e > s and text[e - 1] in _STRIP:
        e -= 1
    return s, e


def _punct_expand(doc, text: str, s: int, e: int):
    """The tokens around ``[s, e)`` when what they add is punctuation only (an initial
    and its full stop, ``B.``; ``Baker-``): the span as the NER can emit it, which covers
    every letter and digit of the annotation; None otherwise."""
    x = doc.char_span(s, e, alignment_mode="expand")
    if x is None or not len(x):
        return None
    extra = text[x.start_char:s] + text[e:x.end_char]
    return x if not any(c.isalnum() for c in extra) else None


def reference(nlp, text: str, spans, predicted, covered: frozenset[str], label_map: dict | None,
              neutral: list[tuple[int, int]] = ()):
    """The training target of one piece: annotated spans with their labels, the base
    model's predictions (``predicted``) kept where their label is not ``covered`` and they
    overlap no annotated span, outside elsewhere (see the module docstring). A complete
    sample (or no rehearsal) passes a ``predicted`` with no entities: none is kept. Tokens
    of ``neutral`` spans outside the annotated ones are missing (no label), and no
    prediction over them is kept."""
    from spacy.tokens import Span
    from spacy.util import filter_spans

    ref = nlp.make_doc(text)
    ents, missing = [], []
    for s, e, typ in spans:
        s, e = _trim(text, s, e)
        if s >= e:
            continue
        sp = ref.char_span(s, e) or _punct_expand(ref, text, s, e) or ref.char_span(s, e, alignment_mode="contract")
        if sp is not None and len(sp):
            ents.append(Span(ref, sp.start, sp.end, label=label_for(typ, label_map)))
        else:  # inside one token with letters or digits: no signal either way
            x = ref.char_span(s, e, alignment_mode="expand")
            if x is not None:
                missing.append(x)
    ents = filter_spans(ents)
    for s, e in neutral:
        x = ref.char_span(s, e, alignment_mode="expand")
        if x is not None and len(x):
            missing.append(x)
    taken = {i for sp in ents + missing for i in range(sp.start, sp.end)}
    for p in predicted.ents:
        if p.label_ not in covered and not taken.intersection(range(p.start, p.end)):
            ents.append(Span(ref, p.start, p.end, label=p.label_))
    missing = [m for m in filter_spans(missing) if not any(m.start < x.end and x.start < m.end for x in ents)]
    ref.set_ents(ents, missing=missing, default="outside")
    return ref


# ---------------------------------------------------------------------------------------
# evaluation

def _union(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the disjoint intervals ``a`` outside the disjoint intervals ``b``."""
    out = []
    for s, e in a:
        for s2, e2 in b:
            if s2 < e and s < e2:
                if s < s2:
                    out.append((s, s2))
                s = max(s, e2)
        if s < e:
            out.append((s, e))
    return out


def _overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    n, j = 0, 0
    for s, e in a:
        for s2, e2 in b:
            if s2 < e and s < e2:
                n += min(e, e2) - max(s, s2)
    return n


_LEADING_ARTICLE = re.compile(r"(?i)the\s+(?=\w)")


def _covered(text: str, s: int, e: int, pred: list[tuple[int, int]]) -> bool:
    """Whether every letter and digit of the gold span ``[s, e)`` lies inside ``pred``,
    a leading ``the`` aside: an article identifies no one, and annotators disagree with
    themselves about it (MultiWOZ's venue names hold it 363 times and leave it just outside
    472 times), so a detector that leaves it visible has missed nothing."""
    m = _LEADING_ARTICLE.match(text, s, e)
    if m:
        s = m.end()
    need = [i for i in range(s, e) if text[i].isalnum()] or list(range(s, e))
    return all(any(a <= i < b for a, b in pred) for i in need)


def evaluate(records: list[dict], predictions: list[list[dict]], threshold: float = 0.0) -> dict:
    """Recall, precision (span and character), by type, and the miss rate's 95% upper
    bound of pi's spans (scored at least ``threshold``) against the records' gold spans.
    A record's ``neutral`` characters outside its gold spans count for neither: pi's
    characters there leave precision's numerator and denominator alike, and a pi span
    that lies wholly inside them is not counted in span precision."""
    from privatize.redaction.calibration import clopper_pearson_upper

    n_gold = n_det = gold_chars = hit_chars = pred_chars = n_pred = pred_hit = 0
    by_type: dict[str, dict] = {}
    for rec, spans in zip(records, predictions):
        text = rec["text"]
        pred = _union([(d["start"], d["end"]) for d in spans if d["score"] >= threshold])
        gold = _union([(s, e) for s, e, _ in rec["spans"]])
        void = _minus(_union(rec.get("neutral", [])), gold)  # neutral characters that are not gold
        gold_chars += sum(e - s for s, e in gold)
        pred_chars += sum(e - s for s, e in pred) - _overlap(void, pred)
        hit_chars += _overlap(gold, pred)
        counted = [(s, e) for s, e in pred if _overlap([(s, e)], void) < e - s]
        n_pred += len(counted)
        pred_hit += sum(1 for s, e in counted if any(a < e and s < b for a, b in gold))
        for s, e, typ in rec["spans"]:
            row = by_type.setdefault(typ, {"gold": 0, "detected": 0, "chars": 0, "chars_covered": 0})
            ok = _covered(text, s, e, pred)
            n_gold += 1
            n_det += ok
            row["gold"] += 1
            row["detected"] += ok
            row["chars"] += e - s
            row["chars_covered"] += _overlap([(s, e)], pred)
    for row in by_type.values():
        row["recall"] = round(row["detected"] / row["gold"], 4)
        row["char_recall"] = round(row["chars_covered"] / row["chars"], 4) if row["chars"] else None
    return {
        "records": len(records), "gold_spans": n_gold, "detected": n_det, "misses": n_gold - n_det,
        "recall": round(n_det / n_gold, 4) if n_gold else None,
        "miss_rate_upper_95": round(clopper_pearson_upper(n_gold - n_det, n_gold), 4) if n_gold else None,
        "char_recall": round(hit_chars / gold_chars, 4) if gold_chars else None,
        "char_precision": round(hit_chars / pred_chars, 4) if pred_chars else None,
        "span_precision": round(pred_hit / n_pred, 4) if n_pred else None,
        "pred_spans": n_pred, "gold_chars": gold_chars, "pred_chars": pred_chars, "hit_chars": hit_chars,
        "by_type": dict(sorted(by_type.items())),
    }


def choose_threshold(records: list[dict], predictions: list[list[dict]]) -> tuple[float, list[dict]]:
    """pi's threshold (see the module docstring) and the grid it was chosen on."""
    scores = sorted({round(float(d["score"]), 4) for p in predictions for d in p} | {DEFAULT_SCORE_THRESHOLD})
    grid = []
    for t in scores:
        ev = evaluate(records, predictions, t)
        grid.append({"threshold": t, "char_recall": ev["char_recall"], "char_precision": ev["char_precision"],
                     "recall": ev["recall"]})
    best = max((g["char_recall"] or 0.0) for g in grid)
    ok = [g for g in grid if (g["char_recall"] or 0.0) >= best - RECALL_TOLERANCE]
    return (max(g["threshold"] for g in ok) if ok else DEFAULT_SCORE_THRESHOLD), grid


# ---------------------------------------------------------------------------------------
# the command

def story_sentences(rng: random.Random, chars: float) -> list[str]:
    """Sentences (:func:`~privatize.redaction.ner_training.rehearsal_sentences`) of the
    Project Gutenberg stories that ship with the package (``privatize/data/gutenberg``), in a
    seeded random order, until they hold about ``chars`` characters."""
    import gzip

    from privatize.redaction.ner_training import rehearsal_sentences

    path = Path(__file__).resolve().parent.parent / "data" / "gutenberg" / "stories.jsonl.gz"
    sents = []
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            sents += rehearsal_sentences(json.loads(line)["text"])
    rng.shuffle(sents)
    out, n = [], 0
    for x in sents:
        if n >= chars:
            break
        out.append(x)
        n += len(x)
    return out


def batch_size_for(pieces: int) -> int:
    """The batch an adaptation of ``pieces`` training pieces uses when none is asked:
    :data:`DEFAULT_BATCH_ADAPT`, or less for a small sample so that an epoch makes
    :data:`MIN_UPDATES_PER_EPOCH` updates, never less than :data:`MIN_BATCH_ADAPT`."""
    return max(MIN_BATCH_ADAPT, min(DEFAULT_BATCH_ADAPT, pieces // MIN_UPDATES_PER_EPOCH))


def updates_per_epoch(pieces: int, batch_size: int) -> int:
    """The updates one epoch over ``pieces`` training pieces makes at ``batch_size`` (the last
    batch may be short)."""
    return max(1, -(-pieces // batch_size))


def epochs_for(pieces: int, batch_size: int, epochs: int, max_updates: int | None = DEFAULT_MAX_UPDATES) -> int:
    """The epochs an adaptation runs: ``epochs``, or fewer once ``max_updates`` updates are
    reached at the end of an epoch, but not fewer than :data:`MIN_EPOCHS_CAPPED` (nor than
    ``epochs`` when that is smaller). ``max_updates`` None or 0: ``epochs``."""
    if not max_updates:
        return epochs
    return min(epochs, max(MIN_EPOCHS_CAPPED, -(-max_updates // updates_per_epoch(pieces, batch_size))))


def check_arguments(annotated: str | Path, output: str | Path, *, fmt: str, epochs: int, seed: int,
                    holdout: float, force: bool = False, general_rehearsal: float = DEFAULT_GENERAL_REHEARSAL,
                    batch_size: int | None = None, max_updates: int | None = DEFAULT_MAX_UPDATES) -> Path:
    from privatize.redaction.ner_training import check_output

    out = check_output(output, force)
    if fmt not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    if not 1 <= epochs <= 50:
        raise InputError(f"--epochs must be between 1 and 50 (got {epochs})")
    if batch_size is not None and not 1 <= batch_size <= MAX_BATCH_ADAPT:
        raise InputError(f"--batch-size must be between 1 and {MAX_BATCH_ADAPT} (got {batch_size})")
    if max_updates is not None and max_updates < 0:
        raise InputError(f"--max-updates must be >= 0 (got {max_updates})")
    if seed < 0:
        raise InputError(f"--seed must be >= 0 (got {seed})")
    if not 0.0 < holdout < 1.0:
        raise InputError(f"--holdout must be between 0 and 1, exclusive (got {holdout})")
    if not 0.0 <= general_rehearsal <= MAX_GENERAL_REHEARSAL:
        raise InputError(f"--general-rehearsal must be between 0 and {MAX_GENERAL_REHEARSAL} (got {general_rehearsal})")
    if not Path(annotated).is_file():
        raise InputError(f"--annotated {annotated}: no such file")
    return out


def adapt(annotated: str | Path, output: str | Path, *, fmt: str = "jsonl", base: str = DEFAULT_MODEL,
          epochs: int = DEFAULT_EPOCHS_ADAPT, seed: int = 0, holdout: float = DEFAULT_HOLDOUT,
          label_map: dict[str, str] | None = None, rehearsal: bool = True, complete: bool = False,
          batch_size: int | None = None, dropout: float = 0.2, learn_rate: float = 0.001,
          force: bool = False, terms: list[tuple[str, Path]] | None = None, sample_terms: bool = True,
          general_rehearsal: float = DEFAULT_GENERAL_REHEARSAL, max_updates: int | None = DEFAULT_MAX_UPDATES,
          progress: Progress | None = None) -> dict:
    """Train, evaluate, and write the detector folder ``output``; returns its ``detector.json``.
    ``complete``: the sample annotates everything the tenant redacts (see the module docstring).
    ``terms``: ``(entity type, list file)`` pairs (``--terms TYPE=FILE``); ``sample_terms``: keep
    the terms the sample's training part teaches (:mod:`privatize.redaction.terms`)."""
    out = check_arguments(annotated, output, fmt=fmt, epochs=epochs, seed=seed, holdout=holdout, force=force,
                          general_rehearsal=general_rehearsal, batch_size=batch_size, max_updates=max_updates)
    term_lists = [(etype, Path(f), read_term_file(f, etype)) for etype, f in (terms or [])]
    say = progress or log.info
    t_start = time.perf_counter()
    records, digest = read_annotated(annotated, fmt)
    dev = [r for r in records if held_out(holdout_key(r), holdout)]
    train = [r for r in records if not held_out(holdout_key(r), holdout)]
    if not train or not dev:
        raise InputError(f"--annotated {annotated}: {len(records)} record(s) give {len(train)} to train and "
                         f"{len(dev)} held out at --holdout {holdout}; give more records")
    types = sorted({t for r in records for _, _, t in r["spans"]})
    if not types:
        raise InputError(f"--annotated {annotated}: no span in any record")

    import_presidio()
    import spacy
    from spacy.training import Example
    from spacy.util import fix_random_seed, minibatch

    nlp = spacy.load(resolve_model(base))
    if "ner" not in nlp.pipe_names:
        raise InputError(f"base model {base!r} has no ner component")
    ner = nlp.get_pipe("ner")
    presidio_map, _ = ner_mapping(base)
    labels, custom = folder_labels(types, label_map, presidio_map)
    covered = frozenset(labels.values())
    titles = title_convention(train)
    new_labels = sorted(covered - set(ner.labels))
    say(f"data: {len(records)} records ({len(train)} train, {len(dev)} held out), "
        f"{sum(len(r['spans']) for r in train)} train spans; types -> labels {labels}; new labels {new_labels}")

    pieces = [(p, s, nt) for r in train
              for _, p, s, nt in _pieces(r["text"], r["spans"], neutral=r.get("neutral", ()))]
    other = [p for p in nlp.pipe_names if p != "ner"]
    with nlp.select_pipes(disable=other):
        preds = list(nlp.pipe([p for p, _, _ in pieces], batch_size=32))
    rehearse = rehearsal and not complete  # a complete sample keeps none of the base model's other entities
    examples = [Example(nlp.make_doc(p), reference(nlp, p, s, pred if rehearse else nlp.make_doc(p),
                                                   covered, label_map, nt))
                for (p, s, nt), pred in zip(pieces, preds)]
    if general_rehearsal > 0:  # the base model's own labels on general text: names it must not forget
        from privatize.redaction.ner_training import silver_reference

        sents = story_sentences(random.Random(seed), min(general_rehearsal * sum(len(p) for p, _, _ in pieces),
                                                         MAX_GENERAL_REHEARSAL_CHARS))
        with nlp.select_pipes(disable=other):
            silver = [Example(nlp.make_doc(d.text), silver_reference(nlp, d)) for d in nlp.pipe(sents, batch_size=64)]
        say(f"general rehearsal: {len(silver)} sentences of the package's stories, labelled by the base model "
            f"({sum(len(x) for x in sents)} characters)")
        examples += silver
    kept = sum(1 for pred in preds for e in pred.ents if e.label_ not in covered)
    if batch_size is None:
        batch_size = batch_size_for(len(examples))
    epochs_run = epochs_for(len(examples), batch_size, epochs, max_updates)
    say(f"rehearsal: {'off (complete sample)' if complete else 'on' if rehearsal else 'off'}; the base model's "
        f"entities of uncovered labels in the training text: {kept}"
        f"{' (taught as outside)' if complete else ''}; {len(examples)} pieces, batch {batch_size}, "
        f"{epochs_run} epoch(s){f' (at most {max_updates} updates)' if epochs_run < epochs else ''} "
        f"({time.perf_counter() - t_start:.1f}s)")

    for lab in new_labels:
        ner.add_label(lab)
    fix_random_seed(seed)
    rng = random.Random(seed)
    with nlp.select_pipes(disable=other):
        optimizer = nlp.resume_training()
    optimizer.learn_rate = learn_rate
    history = []
    for epoch in range(1, epochs_run + 1):
        t0 = time.perf_counter()
        rng.shuffle(examples)
        losses: dict[str, float] = {}
        for batch in minibatch(examples, size=batch_size):
            # the component's own update: nlp.update computes the same, after copying every example
            ner.update(batch, drop=dropout, sgd=optimizer, losses=losses)
        history.append({"epoch": epoch, "loss": round(float(losses.get("ner", 0.0)), 2),
                        "seconds": round(time.perf_counter() - t0, 1)})
        say(f"epoch {epoch}/{epochs_run}: loss {history[-1]['loss']:.1f} ({history[-1]['seconds']:.1f}s)")
    train_seconds = round(time.perf_counter() - t_start, 1)

    stamp = f"{os.getpid()}-{time.time_ns()}"  # a fresh path: spaCy models are cached by path
    tmp = out.parent / f".{out.name}.tmp-{stamp}"
    old = out.parent / f".{out.name}.old-{stamp}"
    try:
        nlp.meta["name"] = f"{nlp.meta.get('name', 'model')}_adapted"
        nlp.meta["description"] = f"{base} with ner adapted by privatize train-ner --annotated"
        nlp.to_disk(tmp)
        doc = {"format": DETECTOR_FORMAT, "score_threshold": DEFAULT_SCORE_THRESHOLD, "labels": custom,
               "types": labels, "trim_titles": titles["trim_titles"], "title_convention": titles}
        if complete:  # the detector redacts only the types the sample teaches (older folders: no key)
            doc["complete"] = True
        term_set = TermSet()
        if sample_terms:
            term_set.add(terms_of_sample(train, entity_types(labels, custom, presidio_map).get), "sample")
        for etype, f, pairs in term_lists:
            term_set.add(pairs, f"{etype}={f.name}")
        if len(term_set):
            term_set.save(tmp)
            doc["terms"] = {"file": TERMS_FILE, "terms": len(term_set), "sources": term_set.sources}
        say(f"terms: {len(term_set)} ({', '.join(f'{k} {v}' for k, v in term_set.sources.items()) or 'none'})")
        (tmp / DETECTOR_FILE).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        doc.update(_evaluate(str(tmp), base, dev, say, sorted(lab for lab in covered if lab in presidio_map)))
        doc["provenance"] = {
            "source": str(annotated), "source_sha256": digest, "format": fmt,
            "records": len(records), "train_records": len(train), "held_out_records": len(dev),
            "train_pieces": len(examples), "train_spans": sum(len(r["spans"]) for r in train),
            "held_out_spans": sum(len(r["spans"]) for r in dev), "holdout": holdout,
            "holdout_rule": "sha256(text, or 'group:' + group)[:8] / 2**64 < holdout",
            "groups": len({r["group"] for r in records if r.get("group") is not None}),
            "base_model": base, "seed": seed, "epochs": epochs, "epochs_run": epochs_run,
            "max_updates": max_updates, "updates": epochs_run * updates_per_epoch(len(examples), batch_size),
            "batch_size": batch_size, "dropout": dropout,
            "learn_rate": learn_rate, "rehearsal": rehearsal, "complete": complete, "label_map": label_map or {},
            "sample_terms": sample_terms, "general_rehearsal": general_rehearsal,
            "term_lists": [{"type": etype, "file": f.name, "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
                            "lines": len(pairs)} for etype, f, pairs in term_lists],
            "history": history, "train_seconds": train_seconds,
            "seconds": round(time.perf_counter() - t_start, 1),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / DETECTOR_FILE).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        (tmp / "README.md").write_text(
            f"# {out.name}\n\nA detector folder: `{base}` with its `ner` adapted by `privatize train-ner "
            f"--annotated` on {len(train)} records of `{annotated}` (sha256 {digest[:12]}...), evaluated on "
            f"{len(dev)} held-out records (see `{DETECTOR_FILE}`). Use it as a model: `privatize detect --model "
            f"DIR`, the redact stage's `model: DIR`.\n", encoding="utf-8")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
    finally:
        for p in (tmp, old):
            if p.exists():
                shutil.rmtree(p)
    ev = doc["evaluation"]
    say(f"wrote {out}: threshold {doc['score_threshold']}, held-out recall {ev['recall']}, char precision "
        f"{ev['char_precision']} (base {doc['base_evaluation']['recall']} / "
        f"{doc['base_evaluation']['char_precision']})")
    return doc


def calibrate_pi_c(folder: str, dev: list[dict], detections, target: float = PI_C_TARGET) -> dict:
    """pi_c's threshold calibrated on the held-out records (see the module docstring):
    writes ``pi_c.json`` into ``folder`` and returns its summary."""
    import math

    from privatize.redaction.calibration import PiCModel, calibrate_within, load_model
    from privatize.redaction.spans import inside_any, left_readable

    shipped = load_model(None)
    scores, rest_scores = [], []
    for rec, det in zip(dev, detections):
        if not rec["spans"]:
            continue
        removed = [(sp["start"], sp["end"]) for sp in det.spans]
        if det.spans:
            scores.append(math.inf)
        else:
            cands = [shipped.score(f) for _, _, _, f in det.evidence]
            scores.append(max(cands) if cands else None)
        # pi_c.scope rest: a miss only where a gold span keeps a letter or digit outside pi's spans
        if not left_readable(rec["text"], rec["spans"], removed):
            rest_scores.append(math.inf)
        else:
            cands = [shipped.score(f) for a, b, _, f in det.evidence if not inside_any(a, b, removed)]
            rest_scores.append(max(cands) if cands else None)
    if not scores:
        return {"calibrated": False, "why": "no held-out record holds a span"}

    def _calibrated(sc):
        cal, shown = calibrate_within(sc, target)
        return cal, None if shown else (f"{len(sc)} secret records cannot show the target {target}: no avoidable "
                                        "miss allowed, the bound is what the slice shows")
    cal, note = _calibrated(scores)
    block = {"threshold": cal.threshold, "misses": cal.misses, "n_secret": cal.n_secret, "bound": round(cal.bound, 4),
             "target": target if note is None else round(cal.target, 4), "confidence": cal.confidence,
             "data": [f"held-out records of the annotated sample ({len(dev)}; {len(scores)} hold spans)"],
             "unit": "record"}
    rest, rest_note = _calibrated(rest_scores)
    rest_block = {"threshold": rest.threshold, "calibration": {
        "misses": rest.misses, "n_secret": rest.n_secret, "bound": round(rest.bound, 4),
        "target": target if rest_note is None else round(rest.target, 4), "confidence": rest.confidence,
        "data": block["data"], "unit": "record", "scope": "rest (what pi's spans leave in the clear)"}}
    meta = {**shipped.meta, "calibration": block, "domains": {}, "rest": rest_block, "fit": shipped.meta.get("fit", {}),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "adapted_from": "the shipped pi_c model's weights, threshold recalibrated by train-ner --annotated"}
    PiCModel(weights=dict(shipped.weights), bias=shipped.bias, threshold=cal.threshold, meta=meta).save(
        Path(folder) / PI_C_FILE)
    return {"calibrated": True, "file": PI_C_FILE, "threshold": cal.threshold, "delta_2": round(cal.bound, 4),
            "misses": cal.misses, "secret_records": cal.n_secret, "target": block["target"], "note": note,
            "rest": {"threshold": rest.threshold, "delta_2": round(rest.bound, 4), "misses": rest.misses,
                     "note": rest_note}}


def choose_trusted(dev: list[dict], detect, candidates: list[str]) -> tuple[list[str], list[dict], list]:
    """The NER labels to trust (see the module docstring): ``detect(trusted)`` gives the
    held-out predictions at threshold 0 with those labels trusted. Returns the labels, one
    row per candidate, and the predictions with the labels chosen."""
    trusted: list[str] = []
    cur = detect(trusted)
    ev0 = evaluate(dev, cur)
    rows = []
    for lab in candidates:
        pred = detect(trusted + [lab])
        ev = evaluate(dev, pred)
        gain = ev["detected"] - ev0["detected"]
        added, added_hit = ev["pred_chars"] - ev0["pred_chars"], ev["hit_chars"] - ev0["hit_chars"]
        ok = gain >= 1 and (added <= 0 or added_hit >= TRUST_MIN_PRECISION * added)
        rows.append({"label": lab, "gold_spans_gained": gain, "chars_added": added, "gold_chars_added": added_hit,
                     "trusted": ok})
        if ok:
            trusted, cur, ev0 = trusted + [lab], pred, ev
    return trusted, rows, cur


def _evaluate(folder: str, base: str, dev: list[dict], say: Progress, candidates: list[str] = ()) -> dict:
    from privatize.redaction.detect import Detector

    texts = [r["text"] for r in dev]
    t0 = time.perf_counter()

    def at_zero(trusted: list[str]) -> list[list[dict]]:
        return [d.spans for d in Detector(folder, score_threshold=0.0, trusted_labels=trusted).detect(texts)]

    trusted, trust_rows, at0 = choose_trusted(dev, at_zero, list(candidates))
    threshold, grid = choose_threshold(dev, at0)
    dets = Detector(folder, score_threshold=threshold, trusted_labels=trusted).detect(texts, want_evidence=True)
    adapted = evaluate(dev, [d.spans for d in dets])
    pi_c = calibrate_pi_c(folder, dev, dets)
    base_ev = evaluate(dev, [d.spans for d in Detector(base).detect(texts)])
    say(f"held-out evaluation ({len(dev)} records, {time.perf_counter() - t0:.1f}s): trusted NER labels "
        f"{trusted or 'none'} (of {list(candidates)}); threshold {threshold}; "
        f"pi_c threshold {pi_c.get('threshold')}, delta_2 bound {pi_c.get('delta_2')}")
    return {"score_threshold": threshold, "trusted_labels": trusted, "trust_selection": trust_rows,
            "evaluation": adapted, "base_evaluation": base_ev, "pi_c": pi_c, "threshold_grid": grid,
            "evaluation_rule": "held-out slice; a gold span is detected when every letter and digit of it (a leading "
                               "'the' aside) is inside pi's spans (any type); miss_rate_upper_95: one-sided "
                               "Clopper-Pearson"}
