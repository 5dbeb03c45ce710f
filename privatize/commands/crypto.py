"""``privatize keys new|import``, ``privatize encrypt`` and ``privatize decrypt``.

* ``keys new --kind vigenere|aes-siv|aes-ecb|hmac [--length N] [--alphabet ...] --out FILE``
  writes a key file (mode 0600, never overwriting) and prints only its id, kind and path.
* ``keys import --kind vigenere [--alphabet ...] --out FILE`` reads the key letters from
  stdin (the trailing newline is stripped).
* ``encrypt|decrypt --key FILE [--per-line]``: stdin is one document and the output adds
  no newline; with ``--per-line`` each line is a record: a JSON object with a ``text``
  field (that field is processed and the object written back) or a plain text line.

The scheme follows the key's kind: ``vigenere`` is the whole-text cipher; ``aes-siv`` /
``aes-ecb`` are entity tokens: ``encrypt`` finds entities with the redaction component
(``privatize.redaction.detect.detect_spans``) or takes them from ``--spans FILE`` (JSONL,
one list of ``{start, end, entity_type}`` per record); ``decrypt`` decrypts every token it
finds and prints ``ok=N revised=N invalid=N`` on stderr. Nothing here prints key bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

from privatize.errors import InputError, KeyMaterialError
from privatize.keys import KINDS, import_key, load_key_file, new_key, write_key_file

ALPHABETS = ("letters52", "latin")
REDACTION_MISSING = ("entity encryption needs the redaction component (privatize.redaction), not installed yet; "
                     "pass --spans FILE to encrypt given spans")


def _keys_new(args: argparse.Namespace) -> int:
    km = new_key(args.kind, length=args.length, alphabet=args.alphabet)
    path = write_key_file(km, args.out)
    if args.kind == "aes-ecb":
        from privatize.ciphers.entity import ECB_WARNING

        print(f"privatize: warning: {ECB_WARNING}", file=sys.stderr)
    elif args.kind == "vigenere":
        from privatize.ciphers.vigenere import OBFUSCATION_WARNING

        print(f"privatize: warning: {OBFUSCATION_WARNING}", file=sys.stderr)
    print(json.dumps({"key_id": km.key_id, "kind": km.kind, "path": str(path)}))
    return 0


def _keys_import(args: argparse.Namespace) -> int:
    value = sys.stdin.read()
    if value.endswith("\n"):
        value = value[:-1]
    if value.endswith("\r"):
        value = value[:-1]
    km = import_key(args.kind, value, alphabet=args.alphabet)
    path = write_key_file(km, args.out)
    print(json.dumps({"key_id": km.key_id, "kind": km.kind, "path": str(path)}))
    return 0


def _read_stdin() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"<stdin>:{line}: input is not UTF-8") from None


class _Record:
    """One unit of input: its text, and the JSON object it came from (if any)."""

    __slots__ = ("text", "obj")

    def __init__(self, text: str | None, obj: dict | None):
        self.text, self.obj = text, obj

    def render(self, new_text: str | None) -> str:
        if self.obj is None:
            return new_text or ""
        if self.text is None:  # "text": null -> nothing to process, written back as it was
            return json.dumps(self.obj, ensure_ascii=False)
        return json.dumps({**self.obj, "text": new_text}, ensure_ascii=False)


def _records(data: str, per_line: bool) -> list[_Record]:
    if not per_line:
        return [_Record(data, None)]
    out = []
    for line in data.split("\n"):
        obj = None
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
        if isinstance(obj, dict) and "text" in obj and (obj["text"] is None or isinstance(obj["text"], str)):
            out.append(_Record(obj["text"], obj))
        else:
            out.append(_Record(line, None))
    return out


def _emit(recs: list[_Record], outputs: list[str | None], per_line: bool) -> None:
    rendered = [r.render(o) for r, o in zip(recs, outputs)]
    sys.stdout.write("\n".join(rendered) if per_line else rendered[0])
    sys.stdout.flush()


def _detect(texts: list[str]) -> list[list[dict]]:
    try:
        from privatize.redaction.detect import detect_spans
    except ImportError as exc:
        name = getattr(exc, "name", None) or ""
        if name == "privatize.redaction" or name.startswith("privatize.redaction."):
            raise InputError(REDACTION_MISSING) from None
        raise InputError(f"entity encryption needs the redaction component's dependencies "
                         f"({name or exc} is not installed); pass --spans FILE to encrypt given spans") from None
    return detect_spans(texts)


def _load_spans(path: str, n: int) -> list[list[dict]]:
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [ln for ln in fh.read().split("\n") if ln.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read spans ({getattr(exc, 'strerror', None) or exc})") from None
    out = []
    for i, ln in enumerate(lines, 1):
        try:
            spans = json.loads(ln)
        except ValueError:
            spans = None
        if not isinstance(spans, list) or not all(
                isinstance(s, dict) and isinstance(s.get("start"), int) and isinstance(s.get("end"), int)
                and isinstance(s.get("entity_type"), str) for s in spans):
            raise InputError(f"{path}:{i}: expected a JSON list of {{start, end, entity_type}}")
        out.append(spans)
    if len(out) != n:
        raise InputError(f"{path}: {len(out)} span lines for {n} input record(s)")
    return out


@contextlib.contextmanager
def _one_warning_line(args: argparse.Namespace):
    """The ciphers both warn (the CLI prints warnings on stderr) and log the same warning
    (for services and workers); on the command line one line is enough unless -v."""
    logger = logging.getLogger("privatize.ciphers")
    level = logger.level
    if not getattr(args, "verbose", False):
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _encrypt(args: argparse.Namespace) -> int:
    with _one_warning_line(args):
        return _encrypt_quiet(args)


def _decrypt(args: argparse.Namespace) -> int:
    with _one_warning_line(args):
        return _decrypt_quiet(args)


def _encrypt_quiet(args: argparse.Namespace) -> int:
    km = load_key_file(args.key)
    if args.spans and km.kind not in ("aes-siv", "aes-ecb"):
        raise InputError(f"--spans applies to aes-siv / aes-ecb keys; {args.key} is a {km.kind} key")
    recs = _records(_read_stdin(), args.per_line)
    texts = [r.text for r in recs]
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere, warn_obfuscation

        warn_obfuscation()
        outs = Vigenere.from_key(km).encrypt_batch(texts)
    elif km.kind in ("aes-siv", "aes-ecb"):
        from privatize.ciphers.entity import EntityCipher

        cipher = EntityCipher(km)
        present = [t if t is not None else "" for t in texts]
        spans = _load_spans(args.spans, len(recs)) if args.spans else _detect(present)
        outs = []
        for i, (t, s) in enumerate(zip(texts, spans), 1):
            try:
                outs.append(None if t is None else cipher.encrypt_spans(t, s))
            except ValueError as exc:
                raise InputError(f"{args.spans or 'detected spans'}:{i}: {exc}") from None
    else:
        raise KeyMaterialError(f"{args.key}: a {km.kind} key does not encrypt text "
                               f"(use vigenere, aes-siv or aes-ecb)")
    _emit(recs, outs, args.per_line)
    return 0


def _decrypt_quiet(args: argparse.Namespace) -> int:
    km = load_key_file(args.key)
    recs = _records(_read_stdin(), args.per_line)
    texts = [r.text for r in recs]
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere

        outs = Vigenere.from_key(km).decrypt_batch(texts)
    elif km.kind in ("aes-siv", "aes-ecb"):
        from privatize.ciphers.entity import DecryptReport, EntityCipher

        cipher, total, outs = EntityCipher(km), DecryptReport(), []
        for t in texts:
            if t is None:
                outs.append(None)
                continue
            plain, rep = cipher.decrypt_text(t)
            total.add(rep)
            outs.append(plain)
        print(f"ok={total.ok} revised={total.revised} invalid={total.invalid}", file=sys.stderr)
    else:
        raise KeyMaterialError(f"{args.key}: a {km.kind} key does not decrypt text "
                               f"(use vigenere, aes-siv or aes-ecb)")
    _emit(recs, outs, args.per_line)
    return 0


def register(sub) -> None:
    keys = sub.add_parser("keys", help="create or import key files (mode 0600)")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    kn = ksub.add_parser("new", help="new key from the OS CSPRNG; prints only its id and path")
    kn.add_argument("--kind", required=True, choices=[k for k in KINDS if k != "api-key"])
    kn.add_argument("--length", type=int, default=None, help="vigenere key length (default 100)")
    kn.add_argument("--alphabet", choices=ALPHABETS, default="letters52", help="vigenere alphabet")
    kn.add_argument("--out", required=True, help="key file to create (never overwritten)")
    kn.set_defaults(func=_keys_new)
    ki = ksub.add_parser("import", help="import vigenere key letters, or an LLM provider's API key, from stdin")
    ki.add_argument("--kind", required=True, choices=["vigenere", "api-key"])
    ki.add_argument("--alphabet", choices=ALPHABETS, default="letters52")
    ki.add_argument("--out", required=True, help="key file to create (never overwritten)")
    ki.set_defaults(func=_keys_import)

    for name, func, helptext in (
            ("encrypt", _encrypt, "encrypt stdin: whole-text cipher (vigenere key) or entity tokens (AES key)"),
            ("decrypt", _decrypt, "decrypt stdin; entity tokens are reported ok/revised/invalid on stderr")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--key", required=True, help="key file")
        p.add_argument("--per-line", action="store_true", help="each line is a record (JSONL or text)")
        if name == "encrypt":
            p.add_argument("--spans", help="JSONL: per record, a list of {start, end, entity_type} to encrypt "
                                           "(AES keys; instead of entity detection)")
        p.set_defaults(func=func)
