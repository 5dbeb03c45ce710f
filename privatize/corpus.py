"""``privatize make-corpus``: a seeded corpus of documents with Faker-generated PII and
their gold spans, for the demo and for a user's own self-check of redaction recall.

Each JSONL line: ``{"id", "individual_id", "text", "spans": [{"start", "end", "type",
"text"}]}`` with ``text[start:end] == span["text"]`` (the convention of the project's data).
A share of the sentences is boilerplate repeated across documents, so deduplication
has something to find.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import tempfile
from pathlib import Path

from faker import Faker

DEMO_DATA = Path(__file__).resolve().parent / "data"
"""The small public data shipped with the package (package data; origins and licences in
``privatize/data/README.md``): ``customersim/{train,test}.jsonl.gz`` (the main job's 400 +
200 CustomerSim dialogues, MIT) and ``gutenberg/stories.jsonl.gz`` (75 Project Gutenberg
stories, public domain: a public base's text). Larger data is passed as a folder."""


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSONL file, gzip-compressed when its name ends in ``.gz``."""
    path = Path(path)
    with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as fh:
        return [json.loads(line) for line in fh if line.strip()]

# (template, slots) — slots are filled in order; {} marks each.
_TEMPLATES = [
    ("My name is {} and I live at {}.", ["PERSON", "STREET_ADDRESS"]),
    ("Please call {} on {} before Friday.", ["PERSON", "PHONE_NUMBER"]),
    ("You can reach me at {} or {}.", ["EMAIL_ADDRESS", "PHONE_NUMBER"]),
    ("The card ending in the number {} was charged twice.", ["CREDIT_CARD"]),
    ("{} works for {} in {}.", ["PERSON", "ORGANIZATION", "CITY"]),
    ("Her social security number is {}.", ["US_SSN"]),
    ("The login came from {} at night.", ["IP_ADDRESS"]),
    ("Send the parcel to {}, attention {}.", ["STREET_ADDRESS", "PERSON"]),
    ("I spoke with {} yesterday about the invoice.", ["PERSON"]),
    ("Wire the refund to IBAN {}.", ["IBAN_CODE"]),
    ("{} was born on {}.", ["PERSON", "DATE_TIME"]),
]
_FILLERS = [
    "The weather has been unusually mild this month.",
    "We are reviewing the request and will reply soon.",
    "The committee meets again after the holidays.",
    "Nothing else of note happened during the week.",
    "The report covers the second quarter in detail.",
    "Shipping usually takes three to five business days.",
]
_BOILERPLATE = [
    "Thank you for contacting customer support.",
    "This message is confidential and intended only for the recipient.",
    "Please do not reply to this automated message.",
    "Kind regards from the service team.",
]


def _value(fake: Faker, kind: str) -> str:
    return {
        "PERSON": fake.name,
        "STREET_ADDRESS": lambda: fake.street_address() + ", " + fake.city(),
        "PHONE_NUMBER": fake.phone_number,
        "EMAIL_ADDRESS": fake.email,
        "CREDIT_CARD": fake.credit_card_number,
        "ORGANIZATION": fake.company,
        "CITY": fake.city,
        "US_SSN": fake.ssn,
        "IP_ADDRESS": fake.ipv4_public,
        "IBAN_CODE": fake.iban,
        "DATE_TIME": lambda: fake.date_of_birth().strftime("%B %d, %Y"),
    }[kind]()


def _fill(template: str, slots: list[str], fake: Faker, offset: int) -> tuple[str, list[dict]]:
    parts = template.split("{}")
    out, spans, pos = [], [], offset
    for i, piece in enumerate(parts):
        out.append(piece)
        pos += len(piece)
        if i < len(slots):
            v = _value(fake, slots[i])
            spans.append({"start": pos, "end": pos + len(v), "type": slots[i], "text": v})
            out.append(v)
            pos += len(v)
    return "".join(out), spans


def generate(n_docs: int, seed: int = 0, repeat_fraction: float = 0.2, sentences: tuple[int, int] = (4, 9)):
    """Yield the corpus records (deterministic for a given seed and Faker version)."""
    rng = random.Random(seed)
    fake = Faker("en_US")
    fake.seed_instance(seed)
    n_people = max(1, n_docs // 3)
    for d in range(n_docs):
        text, spans = "", []
        for _ in range(rng.randint(*sentences)):
            r = rng.random()
            if r < repeat_fraction:
                sent, sp = rng.choice(_BOILERPLATE), []
            elif r < repeat_fraction + 0.25:
                sent, sp = rng.choice(_FILLERS), []
            else:
                tpl, slots = rng.choice(_TEMPLATES)
                sent, sp = _fill(tpl, slots, fake, len(text) + (1 if text else 0))
            text = f"{text} {sent}" if text else sent
            spans.extend(sp)
        yield {"id": f"doc-{d:06d}", "individual_id": f"person-{rng.randrange(n_people):05d}",
               "text": text, "spans": spans}


def make_corpus(out: str | os.PathLike, n_docs: int = 200, seed: int = 0, repeat_fraction: float = 0.2) -> dict:
    """Write the corpus atomically to ``out`` (JSONL) and return a summary."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", dir=path.parent)
    n_spans = n_bytes = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for rec in generate(n_docs, seed, repeat_fraction):
                line = json.dumps(rec, ensure_ascii=False) + "\n"
                fh.write(line)
                n_spans += len(rec["spans"])
                n_bytes += len(line.encode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"path": str(path.resolve()), "documents": n_docs, "gold_spans": n_spans, "bytes": n_bytes, "seed": seed}
