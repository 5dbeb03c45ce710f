"""Name reconstruction and true-prefix attacks (Crypto-LLM section 5, after Lukas et al.
2023) over texts with gold entity spans.

A trial is one occurrence of a name in a record: ``S0 + name + S1``. S0 is what precedes
the name in its line, or with ``context="dialogue"`` all the preceding text, cut to
``max_context_chars`` at a line start. S1 is the rest of the name's line, plus
``following_turns`` more lines. A line is a turn in dialogue data such as CustomerSim
(``SYS:``/``USR:`` turns, one per line) and a paragraph in prose.

A trial whose S0 or S1 already contains the name is skipped: the attacker would read the
answer (CustomerSim users often repeat their name in a later turn).

* Reconstruction: the true name and ``n_candidates - 1`` others, each put in its place;
  the attacker picks the string of lowest perplexity. A tie with the true name counts as
  a failure (the attacker could not single it out).
* True-prefix: prompt with ``S0 + name``, sample continuations, keep the one closest to
  S1 in content words (:mod:`attacks.similarity`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from attacks.results import SuccessRate, TruePrefixResult
from privatize.errors import SpecError

WORD_RE = re.compile(r"\w+")


@dataclass(frozen=True)
class NameTrial:
    s0: str
    name: str
    s1: str


def read_records(source: str, *, text_column: str = "text", what: str = "data") -> list[dict]:
    """Records with gold spans from a ``.jsonl`` file or a folder of them (the CustomerSim
    format: ``{"text": ..., "spans": [{"start", "end", "type"}, ...]}``). Every span is
    checked against its text, so a trial never cuts a name in the wrong place."""
    p = Path(source)
    if not p.exists():
        raise SpecError(f"{what}: {source} does not exist")
    files = sorted(p.glob("*.jsonl")) if p.is_dir() else [p]
    if not files or any(f.suffix != ".jsonl" for f in files):
        raise SpecError(f"{what}: {source} is not a .jsonl file or a folder of them (records with gold spans)")
    records = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    text, spans = r[text_column], r.get("spans") or []
                    for s in spans:
                        start, end = int(s["start"]), int(s["end"])
                        if not (0 <= start < end <= len(text)) or ("text" in s and text[start:end] != s["text"]):
                            raise ValueError(f"span {start}:{end} does not match its text")
                except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                    raise SpecError(f"{what}: {f}:{n}: not a record with {text_column!r} and valid spans "
                                    f"({type(exc).__name__}: {exc})") from None
                records.append({"text": text, "spans": spans})
    if not records:
        raise SpecError(f"{what}: {source} has no records")
    return records


def _s0_start(text: str, start: int, context: str, max_chars: int) -> int:
    line = text.rfind("\n", 0, start) + 1
    lo = line if context == "turn" else 0
    if start - lo <= max_chars:
        return lo
    # whole lines where possible: the first line start in the window; mid-line only when
    # the name's own line is longer than the window
    cut = start - max_chars
    nl = text.find("\n", cut, line)
    return nl + 1 if nl != -1 else cut


def _s1_end(text: str, end: int, following_turns: int) -> int:
    stop = end
    for _ in range(following_turns + 1):
        nl = text.find("\n", stop)
        if nl == -1:
            return len(text)
        stop = nl + 1
    return stop - 1


def name_trials(records: Iterable[dict], n_trials: int, seed: int = 0, *, entity_type: str = "NAME",
                context: Literal["turn", "dialogue"] = "turn", max_context_chars: int = 512,
                following_turns: int = 0, min_s1_words: int = 0) -> list[NameTrial]:
    """Up to ``n_trials`` trials (a seeded sample, in record order) from the spans of
    ``entity_type``. ``min_s1_words``: skip a trial whose S1 has fewer words (an S1 of
    "." leaves the true-prefix attack nothing to reconstruct)."""
    if context not in ("turn", "dialogue"):
        raise ValueError(f"context must be 'turn' or 'dialogue', not {context!r}")
    pool: list[NameTrial] = []
    for r in records:
        text = r["text"]
        for s in sorted(r.get("spans") or [], key=lambda s: s["start"]):
            if s["type"] != entity_type:
                continue
            start, end = int(s["start"]), int(s["end"])
            name = text[start:end]
            s0 = text[_s0_start(text, start, context, max_context_chars):start]
            s1 = text[end:_s1_end(text, end, following_turns)]
            if name in s0 or name in s1 or len(WORD_RE.findall(s1)) < min_s1_words:
                continue
            pool.append(NameTrial(s0, name, s1))
    if len(pool) <= n_trials:
        return pool
    idx = np.sort(np.random.default_rng(seed).choice(len(pool), size=n_trials, replace=False))
    return [pool[i] for i in idx]


def candidate_pool(candidates: Iterable[str]) -> list[str]:
    """Distinct, stripped, non-empty names in first-seen order."""
    return list(dict.fromkeys(c.strip() for c in candidates if c and c.strip()))


def draw_distractors(pool: Sequence[str], true_name: str, k: int, rng: np.random.Generator,
                     where: dict[str, int] | None = None) -> list[str]:
    """``k`` distinct names of ``pool`` other than ``true_name``, drawn without replacement."""
    where = where if where is not None else {n: i for i, n in enumerate(pool)}
    own = where.get(true_name)
    available = len(pool) - (own is not None)
    if k > available:
        raise ValueError(f"{k + 1} candidates per trial need {k} names besides the true one; the list has {available}")
    drawn = rng.choice(len(pool), size=min(len(pool), k + (own is not None)), replace=False)
    return [pool[i] for i in drawn if i != own][:k]


def name_reconstruction(adapter: Any, trials: Sequence[NameTrial], candidates: Sequence[str], n_candidates: int,
                        seed: int = 0, *, batch_tokens: int = 16384, chunk_strings: int = 20000,
                        progress: Callable[[int], None] | None = None) -> SuccessRate:
    """Success rate of picking the true name among ``n_candidates`` (it plus names drawn
    from ``candidates``) by lowest PPL(S0 + name + S1) under ``adapter``. Strings are
    scored in chunks of trials; a string that several trials share is scored once."""
    if n_candidates < 2:
        raise ValueError("n_candidates must be at least 2 (the true name and one other)")
    if not trials:
        raise ValueError("no trials")
    pool = candidate_pool(candidates)
    where = {n: i for i, n in enumerate(pool)}
    rng = np.random.default_rng(seed)
    per_chunk = max(1, chunk_strings // n_candidates)
    successes = 0
    for c in range(0, len(trials), per_chunk):
        part = trials[c: c + per_chunk]
        rows = [[t.s0 + n + t.s1 for n in [t.name, *draw_distractors(pool, t.name, n_candidates - 1, rng, where)]]
                for t in part]
        unique = list(dict.fromkeys(s for row in rows for s in row))
        loss = dict(zip(unique, adapter.losses(unique, batch_tokens=batch_tokens)))
        for row in rows:
            true, others = loss[row[0]], min(loss[s] for s in row[1:])
            successes += bool(true < others)  # strictly: a tie does not single out the true name
        if progress:
            progress(len(part))
    return SuccessRate(trials=len(trials), candidates=n_candidates, successes=successes,
                       rate=successes / len(trials))


def same_extent(sample: str, s1: str) -> str:
    """``sample`` cut to as many lines as S1 spans: S1 stops at a line end by construction,
    so text the model writes past it (the next turns) is not part of the comparison."""
    lines = sample.split("\n")
    return "\n".join(lines[: s1.count("\n") + 1])


def true_prefix(adapter: Any, trials: Sequence[NameTrial], samples: int = 100, seed: int = 0,
                max_new_tokens: int = 48, *, top_k: int = 64, nlp: Any = None) -> TruePrefixResult:
    """Prompt with ``S0 + name``, sample ``samples`` continuations (temperature 1, top-k),
    and take each trial's best content-word distance to its S1 (higher = more private)."""
    from attacks.similarity import true_prefix_result

    if not trials:
        raise ValueError("no trials")
    gens = adapter.generate([t.s0 + t.name for t in trials], samples=samples, max_new_tokens=max_new_tokens,
                            temperature=1.0, top_k=top_k, seed=seed)
    cut = [[same_extent(g, t.s1) for g in gs] for t, gs in zip(trials, gens)]
    return true_prefix_result([t.s1 for t in trials], cut, nlp)
