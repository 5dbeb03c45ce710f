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


def _data_files(source: str, what: str) -> tuple[str, list[str]]:
    """``train.data.data_files`` of ``source``, its errors naming our field ``what``."""
    from train.data import data_files

    if not Path(source).exists():
        raise SpecError(f"{what}: {source} does not exist")
    try:
        return data_files(source)
    except InputError as exc:
        msg = str(exc).split(": ", 1)[1] if str(exc).startswith("data.") else str(exc)
        raise SpecError(f"{what}: {msg}") from None


def read_texts_with_spans(source: str, *, column: str = "text", spans_column: str = "spans",
                          limit: int | None = None, seed: int = 0,
                          what: str = "data") -> tuple[list[str], list[list[tuple[int, int]]]]:
    """:func:`read_texts`' sample (the same texts for the same seed) with each text's
    character spans from ``spans_column``: a list of ``{start, end, ...}`` per record (the
    product's ``spans``, or gold spans), empty or null for none."""
    from train.data import read_table

    fmt, files = _data_files(source, what)
    if fmt == "text":
        raise SpecError(f"{what}: {source} is plain text, which has no spans (use Parquet or JSONL with a "
                        f"{spans_column!r} column)")
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    for f in files:
        t = read_table(fmt, f)
        for col in (column, spans_column):
            if col not in t.column_names:
                raise SpecError(f"{what}: {f} has no column {col!r} (columns: {', '.join(t.column_names)})")
        for i, (text, sp) in enumerate(zip(t[column].to_pylist(), t[spans_column].to_pylist())):
            if not text:
                continue
            try:
                pairs = [(int(x["start"]), int(x["end"])) for x in sp or []]
            except (TypeError, KeyError, ValueError):
                raise SpecError(f"{what}: {f}: record {i}: {spans_column} must be a list of {{start, end}} "
                                "character offsets") from None
            if any(not 0 <= a <= b <= len(text) for a, b in pairs):
                raise SpecError(f"{what}: {f}: record {i}: a span in {spans_column} lies outside its text "
                                f"({len(text)} characters)")
            texts.append(text)
            spans.append(pairs)
    if not texts:
        raise SpecError(f"{what}: {source} has no texts")
    if limit is not None and len(texts) > limit:
        idx = np.sort(np.random.default_rng(seed).choice(len(texts), size=limit, replace=False))
        texts, spans = [texts[i] for i in idx], [spans[i] for i in idx]
    return texts, spans


IDENTIFIER_COLUMNS = ("identifier_spans", "individual_id", "text")


def read_identifier_records(source: str, *, limit: int | None = None, seed: int = 0, what: str = "data") -> list:
    """Up to ``limit`` :class:`attacks.identifiers.Record` of ``source`` (a seeded random
    sample when there are more), in source order: a privatization output whose shards
    carry ``identifier_spans`` and pseudonymised ``individual_id``, or Parquet/JSONL with
    those columns (and ``doc_id``, else ``id``, else the row number). Records without text
    are skipped; one without an individual is an error, as is a missing column."""
    from attacks.identifiers import Record
    from train.data import read_table

    fmt, files = _data_files(source, what)
    hints = {"identifier_spans": "run the identifiers stage",
             "individual_id": "the identifiers stage needs it; keep it with output.pseudonym_key",
             "text": "the text the spans index"}
    rows: list[tuple] = []
    no_individual = 0
    for f in files:
        try:
            t = read_table(fmt, f)
        except Exception as exc:  # an unreadable file: one line naming it
            raise SpecError(f"{what}: cannot read {f}: {str(exc).splitlines()[0] if str(exc) else exc}") from None
        for col in IDENTIFIER_COLUMNS:
            if col not in t.column_names:
                where = source if f == files[0] else f  # a later file that differs: name it
                raise SpecError(f"{what}: {where} has no column {col} ({hints[col]})")
        ids = next((t[c].to_pylist() for c in ("doc_id", "id") if c in t.column_names), None)
        if ids is None:
            ids = [f"{Path(f).name}:{i}" for i in range(t.num_rows)]
        for d, spans, who, text in zip(ids, *(t[c].to_pylist() for c in IDENTIFIER_COLUMNS)):
            if not text:
                continue
            if who is None or who == "":
                no_individual += 1
                continue
            rows.append((str(d), str(who), text, spans or []))
    if no_individual:
        if not rows:
            raise SpecError(f"{what}: {source}: individual_id is empty: run the pipeline with output.pseudonym_key "
                            "so individuals stay distinguishable")
        raise SpecError(f"{what}: {source}: individual_id is empty in {no_individual} of "
                        f"{no_individual + len(rows)} records")
    if not rows:
        raise SpecError(f"{what}: {source} has no texts")
    seen: set[str] = set()
    for d, _, _, spans in rows:
        if d in seen:
            raise SpecError(f"{what}: {source}: doc_id {d!r} occurs more than once")
        seen.add(d)
        for sp in spans:
            ok = isinstance(sp, dict) and sp.get("kind") in ("direct", "indirect") and isinstance(sp.get("term"), str) \
                and all(isinstance(sp.get(k), int) for k in ("start", "end"))
            if not ok:
                raise SpecError(f"{what}: {source}: record {d!r}: identifier_spans must be "
                                "{start, end, kind: direct|indirect, term} (the identifiers stage's column)")
    if limit is not None and len(rows) > limit:
        idx = np.sort(np.random.default_rng(seed).choice(len(rows), size=limit, replace=False))
        rows = [rows[i] for i in idx]
    return [Record(d, who, text, spans) for d, who, text, spans in rows]
