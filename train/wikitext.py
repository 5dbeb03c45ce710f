"""WikiText-2 as it ships in ../shared/data (the word-level, tokenised release: `` @-@ ``
joins, spaces before punctuation, ``<unk>`` for rare words) turned back into plain
paragraphs, so a model pre-trained on it reads text the way the product's corpora are
written. ``<unk>`` is dropped: it is no word, and a filler that learnt it would write it
into every gap."""

from __future__ import annotations

import json
import re
from pathlib import Path

_JOINS = re.compile(r" @([-.,])@ ")
_UNK = re.compile(r"\s*<unk>")
_BEFORE = re.compile(r" ([.,;:!?)\]'%]|n't|'s|'re|'ve|'ll|'d)(?=\s|$)")
_AFTER = re.compile(r"([(\[]) ")


def detokenize(line: str) -> str:
    s = _JOINS.sub(r"\1", line.strip())
    s = _UNK.sub("", s)
    s = _BEFORE.sub(r"\1", s)
    s = _AFTER.sub(r"\1", s)
    return re.sub(r"\s+", " ", s).strip()


def paragraphs(path: str | Path, limit: int | None = None) -> list[str]:
    """The body paragraphs of a WikiText file (headings ``= ... =`` left out)."""
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            t = line.strip()
            if not t or t.startswith("="):
                continue
            t = detokenize(t)
            if t:
                out.append(t)
                if limit and len(out) >= limit:
                    break
    return out


def write_jsonl(texts: list[str], dest: str | Path, prefix: str = "wiki") -> Path:
    """``texts`` as a JSONL corpus (``doc_id``, ``text``)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"doc_id": f"{prefix}{i}", "text": t}) + "\n")
    return dest
