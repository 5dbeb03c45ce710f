"""``privatize detect``: the redaction policy's spans for each record of a JSONL file.

Input: JSONL, one object per line with a ``text`` string (``-`` reads stdin). Output:
one JSON line per record, in input order::

    {"id": "test/dial-0", "spans": [{"start": 170, "end": 186, "entity_type": "PERSON",
                                     "score": 0.85, "source": "spacy"}, ...]}

``id`` and/or ``doc_id`` are copied when the record has them; offsets are Python string
indices (code points) into ``text``. ``--pi-c`` adds ``pi_c_hit``. Blank lines are
skipped; a line that is not a JSON object with a string ``text`` is an error naming the
line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from privatize.errors import InputError

ORDER = 40  # where `privatize --help` lists this module's commands

BATCH = 256


def _records(path: str):
    """(line number, object) per non-blank line."""
    try:
        fh = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    name = "<stdin>" if path == "-" else path
    with fh:
        try:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    raise InputError(f"{name}:{no}: not a JSON object") from None
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise InputError(f"{name}:{no}: expected a JSON object with a string 'text'")
                yield no, obj
        except UnicodeDecodeError:
            raise InputError(f"{name}: input is not UTF-8") from None


def _flush(detector, batch: list[dict], with_pi_c: bool) -> None:
    dets = detector.detect([o["text"] for o in batch])
    lines = []
    for obj, det in zip(batch, dets):
        out = {k: obj[k] for k in ("id", "doc_id") if k in obj}
        out["spans"] = det.spans
        if with_pi_c:
            out["pi_c_hit"] = det.pi_c_hit
        lines.append(json.dumps(out, ensure_ascii=False))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _detect(args: argparse.Namespace) -> int:
    from privatize.redaction.detect import Detector

    if args.threshold is not None and not 0.0 <= args.threshold <= 1.0:
        raise InputError(f"--threshold must be between 0 and 1 (got {args.threshold})")
    detector = Detector(args.model, score_threshold=args.threshold,
                        propagate="none" if args.no_propagate else "document")
    batch: list[dict] = []
    n = 0
    for _, obj in _records(args.input):
        batch.append(obj)
        if len(batch) >= BATCH:
            _flush(detector, batch, args.pi_c)
            n += len(batch)
            batch = []
    if batch:
        _flush(detector, batch, args.pi_c)
        n += len(batch)
    if n == 0:
        raise InputError(f"{args.input}: no records")
    return 0


def register(sub) -> None:
    import importlib.util

    if importlib.util.find_spec("presidio_analyzer") is None:  # the redaction component is absent
        return
    from privatize.redaction.defaults import DEFAULT_MODEL, DEFAULT_SCORE_THRESHOLD

    p = sub.add_parser("detect", help="print the PII spans the redaction policy finds in each JSONL record")
    p.add_argument("--input", required=True, help="JSONL file with a 'text' field per line ('-' for stdin)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"spaCy model: a name, a model directory, or a detector folder written by "
                        f"train-ner --annotated (default {DEFAULT_MODEL})")
    p.add_argument("--threshold", type=float, default=None,
                   help=f"pi score threshold (default: a detector folder's own, else {DEFAULT_SCORE_THRESHOLD})")
    p.add_argument("--no-propagate", action="store_true", help="do not add other occurrences of detected strings")
    p.add_argument("--pi-c", action="store_true", help="add pi_c_hit (the conservative policy's flag)")
    p.set_defaults(func=_detect)
