"""``privatize keys new|import``, ``privatize encrypt`` and ``privatize decrypt``.

stdin is one document and the output adds no newline; ``--per-line`` treats each line
as a record (a JSON object's ``text`` field, or the line itself). The scheme follows the
key's kind: ``vigenere`` is the whole-text cipher; ``aes-siv`` / ``aes-ecb`` are entity
tokens (``encrypt`` detects entities with the redaction component, or takes ``--spans``).
"""

from __future__ import annotations

import argparse
import json
import sys

from privatize.errors import InputError, KeyMaterialError
from privatize.keys import import_key, load_key_file, new_key, write_key_file


def _keys_new(args: argparse.Namespace) -> int:
    km = new_key(args.kind, length=args.length, alphabet=args.alphabet)
    path = write_key_file(km, args.out)
    if args.kind == "aes-ecb":
        from privatize.ciphers.entity import ECB_WARNING

        print(f"privatize: warning: {ECB_WARNING}", file=sys.stderr)
    if args.kind == "vigenere":
        from privatize.ciphers.vigenere import OBFUSCATION_WARNING

        print(f"privatize: warning: {OBFUSCATION_WARNING}", file=sys.stderr)
    print(json.dumps({"key_id": km.key_id, "kind": km.kind, "path": str(path)}))
    return 0


def _keys_import(args: argparse.Namespace) -> int:
    value = sys.stdin.read().rstrip("\r\n")
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


def _records(text: str, per_line: bool):
    """(line text, JSON object or None) per record."""
    if not per_line:
        yield text, None
        return
    for line in text.split("\n"):
        obj = None
        if line.lstrip().startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                obj = None
        yield (obj["text"] if obj is not None else line), obj


def _emit(outputs: list[str], per_line: bool) -> None:
    sys.stdout.write("\n".join(outputs) if per_line else outputs[0])
    sys.stdout.flush()


def _detect(texts: list[str]) -> list[list[dict]]:
    try:
        from privatize.redaction.detect import detect_spans
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("privatize.redaction"):
            raise InputError("entity encryption needs the redaction component (privatize.redaction), which is "
                             "not installed yet; pass --spans FILE to encrypt given spans") from None
        raise
    return detect_spans(texts)


def _load_spans(path: str, n: int) -> list[list[dict]]:
    try:
        lines = [ln for ln in open(path, encoding="utf-8").read().split("\n") if ln.strip()]
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    out = []
    for i, ln in enumerate(lines, 1):
        try:
            spans = json.loads(ln)
            assert isinstance(spans, list) and all({"start", "end", "entity_type"} <= set(s) for s in spans)
        except (ValueError, AssertionError, TypeError):
            raise InputError(f"{path}:{i}: expected a JSON list of {{start, end, entity_type}}") from None
        out.append(spans)
    if len(out) != n:
        raise InputError(f"{path}: {len(out)} span lines for {n} input record(s)")
    return out


def _encrypt(args: argparse.Namespace) -> int:
    km = load_key_file(args.key)
    recs = list(_records(_read_stdin(), args.per_line))
    texts = [t for t, _ in recs]
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere, warn_obfuscation

        warn_obfuscation()
        outs = Vigenere.from_key(km).encrypt_many(texts)
    elif km.kind in ("aes-siv", "aes-ecb"):
        from privatize.ciphers.entity import EntityCipher

        spans = _load_spans(args.spans, len(texts)) if args.spans else _detect(texts)
        cipher = EntityCipher(km)
        try:
            outs = [cipher.encrypt_spans(t, s) for t, s in zip(texts, spans)]
        except ValueError as exc:
            raise InputError(f"--spans: {exc}") from None
    else:
        raise KeyMaterialError(f"{args.key}: a {km.kind} key does not encrypt text")
    _emit([_rewrap(o, obj) for o, (_, obj) in zip(outs, recs)], args.per_line)
    return 0


def _rewrap(text: str, obj: dict | None) -> str:
    if obj is None:
        return text
    return json.dumps({**obj, "text": text}, ensure_ascii=False)


def _decrypt(args: argparse.Namespace) -> int:
    km = load_key_file(args.key)
    recs = list(_records(_read_stdin(), args.per_line))
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere

        outs = Vigenere.from_key(km).decrypt_many([t for t, _ in recs])
    elif km.kind in ("aes-siv", "aes-ecb"):
        from privatize.ciphers.entity import DecryptReport, EntityCipher

        cipher, total, outs = EntityCipher(km), DecryptReport(), []
        for t, _ in recs:
            plain, rep = cipher.decrypt_text(t)
            total.add(rep)
            outs.append(plain)
        print(f"ok={total.ok} revised={total.revised} invalid={total.invalid}", file=sys.stderr)
    else:
        raise KeyMaterialError(f"{args.key}: a {km.kind} key does not decrypt text")
    _emit([_rewrap(o, obj) for o, (_, obj) in zip(outs, recs)], args.per_line)
    return 0


def register(sub) -> None:
    keys = sub.add_parser("keys", help="create or import key files (mode 0600)")
    ksub = keys.add_subparsers(dest="keys_command", required=True)
    kn = ksub.add_parser("new", help="new key from the OS CSPRNG; prints only its id")
    kn.add_argument("--kind", required=True, choices=["vigenere", "aes-siv", "aes-ecb", "hmac"])
    kn.add_argument("--length", type=int, default=None, help="vigenere key length (default 100)")
    kn.add_argument("--alphabet", choices=["letters52", "latin"], default="letters52")
    kn.add_argument("--out", required=True)
    kn.set_defaults(func=_keys_new)
    ki = ksub.add_parser("import", help="import a vigenere key value from stdin")
    ki.add_argument("--kind", required=True, choices=["vigenere"])
    ki.add_argument("--alphabet", choices=["letters52", "latin"], default="letters52")
    ki.add_argument("--out", required=True)
    ki.set_defaults(func=_keys_import)

    for name, func, helptext in (("encrypt", _encrypt, "encrypt stdin (whole-text cipher or entity tokens)"),
                                 ("decrypt", _decrypt, "decrypt stdin; entity tokens report ok/revised/invalid")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--key", required=True, help="key file")
        p.add_argument("--per-line", action="store_true", help="each line is a record (JSONL or text)")
        if name == "encrypt":
            p.add_argument("--spans", help="JSONL: per record, a list of {start, end, entity_type} to encrypt")
        p.set_defaults(func=func)
