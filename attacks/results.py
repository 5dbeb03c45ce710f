"""Result types of the attacks: plain dataclasses, JSON-serialisable with :func:`to_json`.

One evaluation (``evaluation.json``, beside ``report.html``) is an :class:`Evaluation`:
a list of :class:`ModelResult`, one per attacked model. Every attack's part of a model
result is optional (``None`` when the attack was not run); the report renders what is
there. Secrets (canary digits, member names, identifier terms) are never part of a result:
canaries are named by their index.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TprAtFpr:
    """The largest TPR over thresholds whose FPR <= ``max_fpr``."""

    max_fpr: float
    tpr: float
    fpr: float  # the FPR actually reached at that threshold (<= max_fpr)
    threshold: float | None  # None when no threshold reaches FPR <= max_fpr except "reject all"
    negatives: int  # how many negatives back the figure (max_fpr * negatives < 1: not resolvable)


@dataclass
class RocResult:
    """One score's membership-inference result. Higher score = "member"."""

    score: str  # loss | zlib | min_k | min_k_pp | reference
    auc: float
    tpr_at: list[TprAtFpr]  # at 1% and 0.1% FPR
    fpr: list[float]  # the ROC curve, thinned to at most a few hundred points for plots
    tpr: list[float]


@dataclass
class MiaResult:
    members: int
    non_members: int
    context: str  # how an example is scored, e.g. "whole record" or "USR: My name is {name}."
    scores: list[RocResult]
    group: RocResult | None = None  # group inference: summed loss scores over groups
    group_size: int | None = None


@dataclass
class CanaryExposure:
    index: int  # the canary's index in its set (never its digits)
    repeats: int  # times inserted in the training data (0: never inserted, a reference)
    rank: int  # 1 = the model's most likely candidate
    exposure: float  # log2 |R| - log2 rank (exact) or the extrapolated figure


@dataclass
class ExposureResult:
    format: str  # e.g. "My ID is: {secret}"
    digits: int
    candidates: int  # |R|
    method: str  # exact | extrapolated
    scored: str  # what the score covers, e.g. "log P(digits | prefix)"
    canaries: list[CanaryExposure]
    max_exposure: float  # over inserted canaries
    mean_exposure: float  # over inserted canaries
    max_reference_exposure: float | None  # over never-inserted canaries
    seconds: float = 0.0


@dataclass
class SuccessRate:
    """Name reconstruction: pick the lowest-perplexity candidate in context."""

    trials: int
    candidates: int
    successes: int
    rate: float


@dataclass
class TruePrefixResult:
    trials: int
    samples: int
    mean_best_distance: float  # normalised Levenshtein over content words; higher = more private
    distances: list[float]


@dataclass
class ExtractionResult:
    prompts: int
    min_words: int
    zlib_threshold: float
    extracted: int  # generations sharing a run of >= min_words words with the training data
    dropped_low_zlib: int
    unique_extracted: int
    examples: list[str] = field(default_factory=list)  # a few, truncated


@dataclass
class CipherOutputs:
    """Entity tokens in generations (SoE Table 5)."""

    total_tokens: int
    unique_tokens: int
    invalid_tokens: int
    unique_invalid: int
    failure_ratio: float
    resurfaced_plaintext: int  # training-set PII values found in plain text in generations


@dataclass
class IdentifierLeakage:
    """Paper 003's identifier metrics for one model (:mod:`attacks.identifiers`). Only
    counts and rates: identifier terms are personal data and never part of a result."""

    records: int  # member records asked about
    individuals: int  # their distinct individuals
    samples: int  # generations per member record (0: predictions only)
    # "direct", "indirect": {identifiers, predicted, regurgitated, leaked, privacy};
    # "all": {identifiers, leaked, privacy}. Privacy = 1 - leaked / identifiers (distinct terms)
    privacy: dict[str, dict[str, float]]
    non_member_records: int = 0
    non_member_individuals: int = 0
    # "member if any indirect identifier is predicted", per individual: {individuals, members,
    # guessed_members, precision, recall, f1}; None without non-members
    low_cost_mia: dict[str, float] | None = None
    loss_mia: RocResult | None = None  # the loss attack per individual; None without non-members


@dataclass
class TrainingInfo:
    kind: str  # pretrain | continue | dp | crt
    protection: str  # what the data went through, e.g. "none", "redacted", "CRT (dedup+redact+DP on private)"
    epsilon: float | None = None
    delta: float | None = None
    confidentiality_epsilon: float | None = None  # CRT's Bayesian confidentiality
    confidentiality_delta: float | None = None
    confidentiality_basis: str | None = None  # where gamma and delta_2 came from: claimed or measured
    crt_split: str | None = None  # CRT: the public share of its examples and delta_2's bound, in words
    # the one-run audit (train.dp.audit): the audited lower bound, its confidence, the guesses
    audit_epsilon: float | None = None
    audit_confidence: float | None = None
    audit_guesses: str | None = None  # "v of r right on m canaries"
    unit: str | None = None  # what one epsilon protects, in words
    base: str | None = None  # the model it was fine-tuned from and what that was trained on
    lora: str | None = None  # the adapters it was fine-tuned with (merged into the model)
    # its data's privacy ledger when it finished (the service's ledger.json): every training on it, composed
    data_epsilon: float | None = None
    data_delta: float | None = None
    data_trainings: int | None = None
    data_note: str | None = None
    loss_curve: list[list[float]] = field(default_factory=list)  # [[step, loss], ...]


@dataclass
class SpanPerplexity:
    """Perplexity on held-out text split by its secrets' spans (``perplexity.spans_column``):
    ``outside`` over the tokens that overlap no span, ``inside`` over those that overlap one
    (None when none does). A protected model is meant to lose on the secrets; what it loses
    outside them is the cost of its protection to everything else."""

    outside: float
    inside: float | None
    inside_tokens: int
    tokens: int


@dataclass
class ModelResult:
    name: str
    path: str
    training: TrainingInfo | None = None
    perplexity: float | None = None
    perplexity_data: str | None = None  # what perplexity was measured on
    perplexity_spans: SpanPerplexity | None = None
    exposure: ExposureResult | None = None
    mia: MiaResult | None = None
    reconstruction: SuccessRate | None = None
    true_prefix: TruePrefixResult | None = None
    extraction: ExtractionResult | None = None
    cipher_outputs: CipherOutputs | None = None
    identifiers: IdentifierLeakage | None = None
    attacks: dict[str, Any] = field(default_factory=dict)  # registered attacks' results (attacks.registry)
    seconds: float = 0.0
    reference: bool = False  # the model the others' cost of protection is measured against


@dataclass
class Evaluation:
    id: str
    created: str  # ISO 8601 UTC
    models: list[ModelResult]
    corpus_stats: dict[str, Any] | None = None  # name -> {"unigram": H1, "2": H2|1, ...}
    notes: list[str] = field(default_factory=list)


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj


def to_json(obj: Any) -> str:
    return json.dumps(to_dict(obj), indent=2, sort_keys=False)


def _build(cls, data):
    if data is None:
        return None
    kwargs = {}
    hints = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in data.items():
        if name not in hints:
            continue
        kwargs[name] = _NESTED.get((cls, name), lambda v: v)(value)
    return cls(**kwargs)


def _list_of(cls):
    return lambda v: [_build(cls, x) for x in v] if v is not None else None


_NESTED = {}


def from_dict(data: dict) -> Evaluation:
    """An :class:`Evaluation` from ``evaluation.json``'s content."""
    return _build(Evaluation, data)


_NESTED.update({
    (RocResult, "tpr_at"): _list_of(TprAtFpr),
    (MiaResult, "scores"): _list_of(RocResult),
    (MiaResult, "group"): lambda v: _build(RocResult, v),
    (ExposureResult, "canaries"): _list_of(CanaryExposure),
    (ModelResult, "training"): lambda v: _build(TrainingInfo, v),
    (ModelResult, "perplexity_spans"): lambda v: _build(SpanPerplexity, v),
    (ModelResult, "exposure"): lambda v: _build(ExposureResult, v),
    (ModelResult, "mia"): lambda v: _build(MiaResult, v),
    (ModelResult, "reconstruction"): lambda v: _build(SuccessRate, v),
    (ModelResult, "true_prefix"): lambda v: _build(TruePrefixResult, v),
    (ModelResult, "extraction"): lambda v: _build(ExtractionResult, v),
    (ModelResult, "cipher_outputs"): lambda v: _build(CipherOutputs, v),
    (ModelResult, "identifiers"): lambda v: _build(IdentifierLeakage, v),
    (IdentifierLeakage, "loss_mia"): lambda v: _build(RocResult, v),
    (Evaluation, "models"): _list_of(ModelResult),
})


# ---- what a training run says about itself ------------------------------------------------

PROTECTION = {"pretrain": "none (plain training)", "continue": "none (continual pre-training)",
              "dp": "DP-SGD", "crt": "CRT: public split plain, private split DP-SGD"}
"""A run's ``kind`` -> the protection the report shows when the config names none."""

UNIT_TEXT = {
    "record": ("one record ({units} in the DP split, up to {blocks_per_unit_max} blocks of {block_tokens} tokens "
               "each; group privacy)"),
    "individual": ("one individual: all the records of one individual_id ({units} in the DP split; each step "
                   "samples individuals and clips an individual's gradient, the mean over up to "
                   "{blocks_per_step_max} of its blocks, as one)"),
    "sequence": ("one packed block of {block_tokens} tokens ({units} in the DP split; a record spread over k "
                 "blocks has up to k times epsilon)"),
}
"""The summary's ``unit.name`` -> what the report says one protected unit is."""


class _Blank(dict):
    def __missing__(self, key):
        return "None"


def training_info(path: str, protection: str | None) -> TrainingInfo | None:
    """What the run's ``summary.json`` and ``metrics.jsonl`` say (None for a bare checkpoint)."""
    run = Path(path)
    summ = run / "summary.json"
    if not summ.is_file():
        return TrainingInfo(kind="unknown", protection=protection or "unknown") if protection else None
    s = json.loads(summ.read_text())
    curve = []
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "step" in m and "loss" in m and m["loss"] is not None:
                curve.append([float(m["step"]), float(m["loss"])])
    conf = s.get("confidentiality") or {}
    kind = s.get("kind", "unknown")
    default = PROTECTION.get(kind, kind)
    audit = s.get("audit") or {}
    basis = None
    prov = conf.get("provenance") or {}
    if prov:
        parts = []
        for name in ("gamma", "delta_2"):
            pv = prov.get(name) or {}
            parts.append(f"{name} {pv.get('origin', 'of unknown origin')}"
                         + (f" ({pv['source']})" if pv.get("source") else ""))
        basis = "; ".join(parts)
    crt_split = None
    if conf.get("public_examples") is not None and conf.get("private_examples") is not None:
        pub, priv = int(conf["public_examples"]), int(conf["private_examples"])
        share = pub / (pub + priv) if pub + priv else 0.0
        d2 = prov.get("delta_2") or {}
        crt_split = (f"{share:.1%} of examples public ({pub:,} public, {priv:,} private, DP-SGD); "
                     f"delta_2 (secrets the split lets through) {conf.get('delta_2'):.4g}, "
                     f"{d2.get('origin', 'of unknown origin')}" + (f": {d2['source']}" if d2.get("source") else ""))
    u = s.get("unit") or {}
    unit = UNIT_TEXT[u["name"]].format_map(_Blank(u)) if u.get("name") in UNIT_TEXT else None
    guesses = (f"{audit['correct']} of {audit['guesses']} guesses right on {audit['canaries']} canaries"
               if audit else None)
    b, lo = s.get("base") or {}, s.get("lora") or {}
    base = (f"{b.get('checkpoint')} ({b.get('kind', 'a model')}"
            + (f" of preset {b['preset']}" if b.get("preset") else "") + f"), trained on {b.get('trained_on')}"
            if b else None)
    lora = (f"LoRA r = {lo.get('r')}, alpha = {lo.get('alpha')} on {', '.join(lo.get('target_modules') or [])} "
            "(merged into the model)" if lo else None)
    led = {}
    if (run / "ledger.json").is_file():
        try:
            led = json.loads((run / "ledger.json").read_text())
        except ValueError:
            led = {}
    return TrainingInfo(data_epsilon=led.get("epsilon"), data_delta=led.get("delta"),
                        data_trainings=led.get("trainings"), data_note=led.get("note") if led else None,
                        kind=kind, protection=protection or default, epsilon=s.get("epsilon"), delta=s.get("delta"),
                        confidentiality_epsilon=conf.get("epsilon"), confidentiality_delta=conf.get("delta"),
                        audit_epsilon=audit.get("epsilon_lower_bound"), audit_confidence=audit.get("confidence"),
                        audit_guesses=guesses, unit=unit, confidentiality_basis=basis, crt_split=crt_split, loss_curve=curve,
                        base=base, lora=lora)
