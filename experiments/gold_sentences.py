"""Real text with gold secrets, cut into CRT's data points (issue 50).

The three labelled corpora the calibrated pi_c is fitted, calibrated and scored on, from
the shared data folder (``data``, given by the caller):

* ``clinical``: PhysioNet deid ICU notes (``real_dev/clinical_physionet_dev.jsonl``),
  every PHI span a secret; documents grouped by patient;
* ``multiwoz``: MultiWOZ 2.1 validation dialogues (``real_dev/dialogue_multiwoz_val.jsonl``),
  turns joined as ``USR: ...``/``SYS: ...`` lines; secrets are the slots ``Addr``,
  ``Phone``, ``Post``, ``Ref``, ``Id`` (venue names are not personal);
* ``customersim``: CustomerSim dialogues (``customersim/<split>.jsonl``), every gold
  span a secret (the dataset's own canary records left out).

Documents are assigned to a part (``fit``, ``calibration``, ``report``) by a hash of
their group, so that a patient's notes never straddle two parts. Sentences are cut by
the split stage's own rules (:func:`privatize.stages.split.segment_spans`, the CRT
recipe's unit); a sentence is secret when a gold secret's letter or digit falls in it.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

MULTIWOZ_SECRETS = ("Addr", "Phone", "Post", "Ref", "Id")
CORPORA = ("clinical", "multiwoz", "customersim")
PARTS = {"fit": (0, 50), "calibration": (50, 75), "report": (75, 100)}
"""Share of groups (by hash, per hundred) in each part of the development halves."""


@dataclass
class Doc:
    id: str
    group: str
    text: str
    secrets: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass
class Sentence:
    doc: str
    start: int
    end: int
    text: str
    secrets: list[tuple[int, int, str]]
    """Gold secrets cut to the sentence, offsets into the sentence."""

    @property
    def secret(self) -> bool:
        return bool(self.secrets)


def part_of(corpus: str, group: str) -> str:
    h = int.from_bytes(hashlib.sha256(f"{corpus}\x00{group}".encode()).digest()[:4], "big") % 100
    return next(p for p, (a, b) in PARTS.items() if a <= h < b)


def load(corpus: str, data: Path, *, split: str = "train", limit: int | None = None, seed: int = 0) -> list[Doc]:
    """The documents of one corpus with their gold secrets (``split`` and ``limit``:
    CustomerSim only, a seeded sample)."""
    data = Path(data)
    if corpus == "clinical":
        out = []
        for line in open(data / "real_dev" / "clinical_physionet_dev.jsonl", encoding="utf-8"):
            r = json.loads(line)
            out.append(Doc(f"p{r['patient']}n{r['note']}", str(r["patient"]), r["text"],
                           [(s["start"], s["end"], s["type"]) for s in r["spans"]]))
        return out
    if corpus == "multiwoz":
        out = []
        for line in open(data / "real_dev" / "dialogue_multiwoz_val.jsonl", encoding="utf-8"):
            g = json.loads(line)
            parts, secrets, pos = [], [], 0
            for t in g["turns"]:
                prefix = "USR: " if t["speaker"] == "USER" else "SYS: "
                base = pos + len(prefix)
                for sp in t["spans"]:
                    if sp["slot"] in MULTIWOZ_SECRETS:
                        secrets.append((base + sp["start"], base + sp["end"], sp["slot"]))
                parts.append(prefix + t["text"])
                pos += len(prefix) + len(t["text"]) + 1
            out.append(Doc(g["dialogue_id"], g["dialogue_id"], "\n".join(parts), secrets))
        return out
    if corpus == "customersim":
        rows = [json.loads(x) for x in open(data / "customersim" / f"{split}.jsonl", encoding="utf-8")]
        rows = [r for r in rows if r.get("kind") != "canary"]
        if limit is not None and limit < len(rows):
            rows = random.Random(seed).sample(rows, limit)
        return [Doc(r["id"], r["id"], r["text"], [(s["start"], s["end"], s["type"]) for s in r["spans"]])
                for r in rows]
    raise ValueError(f"unknown corpus {corpus!r}; choose from {', '.join(CORPORA)}")


def sentences(doc: Doc, unit: str = "sentence") -> list[Sentence]:
    """``doc`` cut by the split stage's rules, each sentence with the gold secrets whose
    letters or digits fall in it."""
    from privatize.stages.split import segment_spans

    return [Sentence(doc.id, s, e, doc.text[s:e], secrets_in(doc, s, e)) for s, e in segment_spans(doc.text, unit)]


def secrets_in(doc: Doc, s: int, e: int) -> list[tuple[int, int, str]]:
    """The gold secrets of ``doc`` with a letter or digit in ``doc.text[s:e]``, cut to it,
    offsets into it."""
    inside = []
    for a, b, typ in doc.secrets:
        lo, hi = max(a, s), min(b, e)
        if lo < hi and any(c.isalnum() for c in doc.text[lo:hi]):
            inside.append((lo - s, hi - s, typ))
    return inside


