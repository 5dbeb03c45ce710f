"""Paper 003's privacy metrics (SEEDS.md section 5), over the model adapter: what a causal
LM predicts or regurgitates of the identifiers the ``identifiers`` stage found.

* :func:`leaks`: for one model and the records it is asked about, which identifier
  occurrences it *predicts* (each of the occurrence's tokens is the model's top choice
  given the real text before it, so the model would write the identifier there) and
  which identifier terms it *regurgitates* (they appear in its free generations).
* :func:`privacy`: Privacy = 1 - (distinct identifiers predicted or regurgitated /
  distinct identifiers), overall and split into direct and indirect.
* :func:`low_cost_mia`: "an individual is a member if any of their indirect identifiers
  is predicted", against the truth: precision, recall, F1.
* :func:`loss_mia`: the loss attack per individual (their records' mean token loss),
  ROC AUC and TPR at 1% FPR through :mod:`attacks.metrics`.

:mod:`experiments.identifier_eval` trains the models these are asked about.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from attacks.metrics import roc_result
from attacks.results import RocResult
from privatize.stages.identifiers import IdentifiersSettings, sentences, term_strings

KINDS = ("direct", "indirect")


@dataclass
class Record:
    """One record the model is asked about: its text, individual and identifier spans
    (the ``identifier_spans`` column)."""

    doc_id: str
    individual: str
    text: str
    spans: list[dict]


@dataclass
class Leaks:
    """What one model gives away: per record, which of its spans (by position in
    ``Record.spans``) it predicts; the terms it regurgitates, per kind; each record's mean
    token loss."""

    predicted: dict[str, set[int]] = field(default_factory=dict)
    regurgitated: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in KINDS})
    loss: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)


LONGEST = 16
"""Generations are searched for terms of up to this many words (direct identifiers such
as addresses run longer than ``max_n``)."""


def _normal(term: str, settings: IdentifiersSettings) -> str:
    """A detected (direct) identifier written as the stage writes indirect terms: its
    words normalised, space-joined."""
    return " ".join(w for s in sentences(term, settings) for w in s)


def leaks(adapter, records: list[Record], settings: IdentifiersSettings, *, samples: int = 2,
          prompt_chars: int = 24, max_new_tokens: int = 48, seed: int = 0) -> Leaks:
    """Ask ``adapter`` about ``records``: teacher-forced predictions over every record,
    and ``samples`` generations from the first ``prompt_chars`` characters of each."""
    out = Leaks()
    texts = [r.text for r in records]
    scores = adapter.token_scores(texts, greedy=True)
    offsets = adapter.offsets(texts)
    for r, s, off in zip(records, scores, offsets):
        out.loss[r.doc_id] = -float(s.logprobs.mean()) if len(s.logprobs) else float("nan")
        out.tokens[r.doc_id] = len(s.logprobs)
        hit = set()
        for j, sp in enumerate(r.spans):
            at = np.flatnonzero((off[:, 0] < sp["end"]) & (off[:, 1] > sp["start"]))
            if len(at) and bool(s.greedy[at].all()):
                hit.add(j)
        out.predicted[r.doc_id] = hit
    if samples:
        gens = adapter.generate([t[:prompt_chars] for t in texts], samples=samples, max_new_tokens=max_new_tokens,
                                seed=seed)
        seen: set[str] = set()
        for g in gens:
            for text in g:
                seen |= term_strings(text, settings, max_n=LONGEST)
        for kind in KINDS:
            terms = {_term(sp, settings) for r in records for sp in r.spans if sp["kind"] == kind}
            out.regurgitated[kind] = {t for t in terms if t and t in seen}
    return out


def _term(span: dict, settings: IdentifiersSettings) -> str:
    return span["term"] if span["kind"] == "indirect" else _normal(span["term"], settings)


def privacy(records: list[Record], found: Leaks, settings: IdentifiersSettings) -> dict:
    """Privacy = 1 - leaked / identifiers over distinct terms, per kind and overall, with
    the counts behind each figure."""
    terms: dict[str, set[str]] = {k: set() for k in KINDS}
    predicted: dict[str, set[str]] = {k: set() for k in KINDS}
    for r in records:
        hit = found.predicted.get(r.doc_id, set())
        for j, sp in enumerate(r.spans):
            t = _term(sp, settings)
            if not t:
                continue
            terms[sp["kind"]].add(t)
            if j in hit:
                predicted[sp["kind"]].add(t)
    out: dict = {}
    for kind in KINDS:
        leaked = predicted[kind] | (found.regurgitated[kind] & terms[kind])
        out[kind] = {"identifiers": len(terms[kind]), "predicted": len(predicted[kind]),
                     "regurgitated": len(found.regurgitated[kind] & terms[kind]), "leaked": len(leaked),
                     "privacy": 1.0 - len(leaked) / len(terms[kind]) if terms[kind] else 1.0}
    total = sum(out[k]["identifiers"] for k in KINDS)
    leaked = sum(out[k]["leaked"] for k in KINDS)
    out["all"] = {"identifiers": total, "leaked": leaked, "privacy": 1.0 - leaked / total if total else 1.0}
    return out


def low_cost_mia(records: list[Record], found: Leaks, members: set[str]) -> dict:
    """Member if any of the individual's indirect identifier occurrences is predicted
    (paper 003, section 6.4), scored against ``members``: precision, recall, F1."""
    guessed: dict[str, bool] = defaultdict(bool)
    for r in records:
        hit = found.predicted.get(r.doc_id, set())
        guessed[r.individual] |= any(j in hit for j, sp in enumerate(r.spans) if sp["kind"] == "indirect")
    tp = sum(1 for who, g in guessed.items() if g and who in members)
    fp = sum(1 for who, g in guessed.items() if g and who not in members)
    fn = sum(1 for who, g in guessed.items() if not g and who in members)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"individuals": len(guessed), "members": sum(1 for w in guessed if w in members),
            "guessed_members": tp + fp, "precision": precision, "recall": recall, "f1": f1}


def loss_mia(records: list[Record], found: Leaks, members: set[str]) -> RocResult:
    """The loss attack per individual: minus the token-weighted mean loss of their
    records (higher = member)."""
    nll: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for r in records:
        n = found.tokens.get(r.doc_id, 0)
        if n:
            nll[r.individual] += found.loss[r.doc_id] * n
            count[r.individual] += n
    score = {w: -nll[w] / count[w] for w in count}
    m = [v for w, v in score.items() if w in members]
    n = [v for w, v in score.items() if w not in members]
    return roc_result("loss (per individual)", m, n)
