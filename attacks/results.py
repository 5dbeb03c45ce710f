"""Result types of the attacks: plain dataclasses, JSON-serialisable with :func:`to_json`.

One evaluation (``evaluation.json``, beside ``report.html``) is an :class:`Evaluation`:
a list of :class:`ModelResult`, one per attacked model, whose ``attacks`` hold each
attack's result by the attack's name (``attacks.registry``; the papers' typed results are
the dataclasses here, named by their attack's ``Result``); the report renders what is
there. An ``evaluation.json`` written before results were keyed (the papers' results as
fields of the model: ``perplexity``, ``exposure``, ``mia``, ...) reads into the same form.
Secrets (canary digits, member names, identifier terms) are never part of a result:
canaries are named by their index.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

EVALUATION = "evaluation.json"
REPORT = "report.html"
"""An evaluation's result files: the results (what the service reads), and the report's page."""


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
class PerplexityResult:
    """Perplexity on held-out text (the ``perplexity`` attack): ``data`` says what it was
    measured on; ``spans`` splits it by the secrets' spans when the config gives them."""

    perplexity: float
    data: str | None = None
    spans: SpanPerplexity | None = None


@dataclass
class ModelResult:
    name: str
    path: str
    training: TrainingInfo | None = None
    attacks: dict[str, Any] = field(default_factory=dict)  # attack name -> its result (attacks.registry)
    seconds: float = 0.0
    reference: bool = False  # the model the others' cost of protection is measured against

    # the papers' results by their attacks' names, read-only: what the comparison, the plots
    # and scripts read (None when the attack did not run on this model)
    @property
    def perplexity(self) -> float | None:
        p = self.attacks.get("perplexity")
        return None if p is None else p.perplexity

    @property
    def perplexity_data(self) -> str | None:
        p = self.attacks.get("perplexity")
        return None if p is None else p.data

    @property
    def perplexity_spans(self) -> SpanPerplexity | None:
        p = self.attacks.get("perplexity")
        return None if p is None else p.spans

    @property
    def exposure(self) -> ExposureResult | None:
        return self.attacks.get("canaries")

    @property
    def mia(self) -> MiaResult | None:
        return self.attacks.get("mia")

    @property
    def reconstruction(self) -> SuccessRate | None:
        return self.attacks.get("reconstruction")

    @property
    def true_prefix(self) -> TruePrefixResult | None:
        return self.attacks.get("true_prefix")

    @property
    def extraction(self) -> ExtractionResult | None:
        return self.attacks.get("extraction")

    @property
    def cipher_outputs(self) -> CipherOutputs | None:
        return self.attacks.get("cipher_outputs")

    @property
    def identifiers(self) -> IdentifierLeakage | None:
        return self.attacks.get("identifiers")


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


def build(cls, data):
    """A dataclass from its ``asdict`` form: nested dataclasses (``X``, ``X | None``,
    ``list[X]``) rebuilt from their type hints; keys it has no field for ignored."""
    if data is None:
        return None
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _value(hints[f.name], data[f.name]) for f in dataclasses.fields(cls)
                  if f.init and f.name in data})


def _value(tp, v):
    if v is None:
        return None
    if dataclasses.is_dataclass(tp):
        return build(tp, v) if isinstance(v, dict) else v
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        return _value(inner[0], v) if len(inner) == 1 else v
    if origin is list and isinstance(v, list):
        (arg,) = typing.get_args(tp) or (Any,)
        return [_value(arg, x) for x in v]
    return v


_OLD_FIELDS = {"exposure": "canaries", "mia": "mia", "reconstruction": "reconstruction",
               "true_prefix": "true_prefix", "extraction": "extraction", "cipher_outputs": "cipher_outputs",
               "identifiers": "identifiers"}
"""An older ``evaluation.json``'s typed model field -> the attack whose result it is (the
perplexity's three fields are one result)."""


def keyed_results(model: dict) -> dict:
    """A model's results keyed by attack (as JSON), from either form of ``evaluation.json``: what a
    script reading the file as JSON indexes (``keyed_results(m)["canaries"]["max_exposure"]``)."""
    keyed = dict(model.get("attacks") or {})
    if model.get("perplexity") is not None:
        keyed.setdefault("perplexity", {"perplexity": model["perplexity"], "data": model.get("perplexity_data"),
                                        "spans": model.get("perplexity_spans")})
    for old, name in _OLD_FIELDS.items():
        if model.get(old) is not None:
            keyed.setdefault(name, model[old])
    return keyed


def _results(keyed: dict) -> dict[str, Any]:
    """Each result rebuilt as its attack's ``Result`` (an attack not registered here: as stored)."""
    from attacks.registry import ATTACKS

    out = {}
    for name, value in keyed.items():
        cls = ATTACKS.get(name).Result if name in ATTACKS else None
        out[name] = build(cls, value) if cls is not None and isinstance(value, dict) else value
    return out


def from_dict(data: dict) -> Evaluation:
    """An :class:`Evaluation` from ``evaluation.json``'s content (either form)."""
    ev = build(Evaluation, {**data, "models": []})
    for m in data.get("models") or []:
        model = build(ModelResult, {**m, "attacks": {}})
        model.attacks = _results(keyed_results(m))
        ev.models.append(model)
    return ev


# ---- what a training run says about itself ------------------------------------------------

def kind_protection(kind: str) -> str:
    """The protection the report shows for a run of training kind ``kind`` when the config
    names none: the kind's own label (``train.kinds.TrainKind.protection``), or the kind's
    name for one not registered here (a plugin's run read elsewhere)."""
    from privatize.registry import UnknownName
    from train.kinds import train_kind

    try:
        return train_kind(kind).protection or kind
    except UnknownName:
        return kind

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
    from train.progress import METRICS, SUMMARY

    summ = run / SUMMARY
    if not summ.is_file():
        return TrainingInfo(kind="unknown", protection=protection or "unknown") if protection else None
    s = json.loads(summ.read_text())
    curve = []
    metrics = run / METRICS
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
    default = kind_protection(kind)
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
