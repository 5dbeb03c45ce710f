"""Texts for attacks: members, non-members, held-out text, prompts.

A source is what training reads (a privatization output folder, a folder of Parquet or
JSONL files, one such file; ``train.data.read_texts``) or a ``.txt`` file, one text per
non-empty line. Samples are random but seeded, so the same config scores the same texts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privatize.errors import InputError, SpecError


def read_texts(source: str, *, column: str = "text", limit: int | None = None, seed: int = 0,
               what: str = "data") -> list[str]:
    """Up to ``limit`` texts of ``source`` (a seeded random sample when there are more)."""
    p = Path(source)
    if not p.exists():
        raise SpecError(f"{what}: {source} does not exist")
    if p.is_file() and p.suffix == ".txt":
        texts = [line.strip() for line in p.read_text(encoding="utf-8", errors="replace").splitlines()]
        texts = [t for t in texts if t]
    else:
        from train.data import read_texts as read_training_texts

        try:
            texts = read_training_texts(str(p), column)
        except (SpecError, InputError) as exc:
            # the reader names its own field (data.path); say which of ours it was
            msg = str(exc).split(": ", 1)[1] if str(exc).startswith("data.") else str(exc)
            raise SpecError(f"{what}: {msg}") from None
    if not texts:
        raise SpecError(f"{what}: {source} has no texts")
    if limit is not None and len(texts) > limit:
        idx = np.sort(np.random.default_rng(seed).choice(len(texts), size=limit, replace=False))
        texts = [texts[i] for i in idx]
    return texts
