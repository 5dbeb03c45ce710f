"""The weighted entity graph of SoE (paper 001, SEEDS.md section 3), as pure functions:
which entity pairs to score, how to read a score from a model's answer, which edges to
keep, and the k-tuples that synthesis prompts are written for.

Entities are strings (entity tokens such as ``Person_[...]`` are entities themselves),
given in their article order of importance: most frequent first, then first mention.
Every function is deterministic, so a re-run asks the same questions in the same order
and its cached answers line up.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from itertools import combinations

# "Score: 0.8", "score：0.8" (a full-width colon, as Chinese output writes it),
# "**Score:** 0.8", "Score: 0,8"; the label in the languages the prompt is likely answered in
_LABEL = r"(?:score|分数|得分|评分|分值|puntuaci[oó]n|punteggio|note|pontua[cç][aã]o|bewertung|スコア|점수)"
SCORE_RE = re.compile(_LABEL + r"\s*\**\s*[:：]\s*\**\s*(-?\d+(?:[.,]\d+)?|-?[.,]\d+)(\s*/\s*\d+|\s*%)?",
                      re.IGNORECASE)


@dataclass(frozen=True)
class Score:
    """A parsed association score: ``value`` in [0, 1], or None with ``problem``
    (``missing``: no ``Score:`` line; ``out_of_range``: a number outside [0, 1])."""

    value: float | None
    problem: str | None = None


def parse_score(answer: str) -> Score:
    """The last ``Score: <x>`` of ``answer``. A score that cannot be read, or one outside
    [0, 1] (``8/10`` and ``80%`` are not guessed at either), is a problem, never a number."""
    found = list(SCORE_RE.finditer(answer or ""))
    if not found:
        return Score(None, "missing")
    m = found[-1]
    if m.group(2):
        return Score(None, "out_of_range")
    value = float(m.group(1).replace(",", "."))
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return Score(None, "out_of_range")
    return Score(value)


def rank_entities(mentions: list[str], cap: int | None = None) -> list[str]:
    """Distinct entities, most mentioned first (ties: first mentioned first), at most ``cap``."""
    counts = Counter(mentions)
    first = {}
    for i, e in enumerate(mentions):
        first.setdefault(e, i)
    ranked = sorted(counts, key=lambda e: (-counts[e], first[e]))
    return ranked[:cap] if cap is not None else ranked


def candidate_pairs(entities: list[str], sentences_of: dict[str, set[int]] | None = None,
                    window: int | None = None) -> list[tuple[str, str]]:
    """The pairs to score, in the order of ``entities``: all pairs, or (``window``) only
    pairs mentioned within ``window`` sentences of each other (``sentences_of``: each
    entity's sentence numbers; 0 = the same sentence)."""
    pairs = list(combinations(entities, 2))
    if window is None:
        return pairs
    if sentences_of is None:
        raise ValueError("a sentence window needs each entity's sentence numbers")

    def near(a: str, b: str) -> bool:
        sa, sb = sorted(sentences_of.get(a, ())), sorted(sentences_of.get(b, ()))
        return any(abs(x - y) <= window for x in sa for y in sb)

    return [(a, b) for a, b in pairs if near(a, b)]


def kept_edges(scores: dict[tuple[str, str], float], threshold: float = 0.5) -> dict[tuple[str, str], float]:
    """The edges whose score is at least ``threshold`` (0.5 in the paper)."""
    return {pair: s for pair, s in scores.items() if s >= threshold}


def tuples(entities: list[str], edges: dict[tuple[str, str], float], max_k: int = 10) -> list[tuple[str, ...]]:
    """For each entity with a neighbour, the tuple of itself and its ``max_k - 1``
    strongest neighbours (ties: the neighbour earlier in ``entities``), in the order of
    ``entities``; a tuple with the same members as an earlier one is left out."""
    if max_k < 2:
        raise ValueError("max_k must be at least 2 (an entity and one neighbour)")
    order = {e: i for i, e in enumerate(entities)}
    neighbours: dict[str, list[tuple[float, str]]] = {e: [] for e in entities}
    for (a, b), s in edges.items():
        if a in neighbours and b in neighbours:
            neighbours[a].append((s, b))
            neighbours[b].append((s, a))
    out, seen = [], set()
    for e in entities:
        best = sorted(neighbours[e], key=lambda x: (-x[0], order[x[1]]))[: max_k - 1]
        if not best:
            continue
        t = (e, *(n for _, n in best))
        if frozenset(t) not in seen:
            seen.add(frozenset(t))
            out.append(t)
    return out
