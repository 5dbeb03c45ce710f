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

ORDER = 30  # where `privatize --help` lists this module's commands

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


def _read_stdin(data: bytes | None = None) -> str:
    data = sys.stdin.buffer.read() if data is None else data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"<stdin>:{line}: input is not UTF-8") from None


PIECE_BYTES = 8 << 20
"""Stdin is ciphered in pieces of about this size, cut after a newline (no reserved token
holds one), so that memory stays a few times a piece and is reused piece after piece."""


def _vigenere_pieces(cipher, data: bytes, per_line: bool, sign: int):
    """The whole-text cipher over stdin's bytes on the encrypt_text stage's path (Arrow arrays
    over the bytes as they were read: no decode, no Python strings), as output pieces; or None
    where only the record path applies (``--per-line`` input with a ``{``, which may be a JSON
    record). Byte for byte what the record path writes: a document is one record, ciphered
    piece by piece with the key continued (:meth:`Vigenere.rotated`); with ``--per-line`` each
    line is one record, and its newline, which the cipher leaves as it is, ends it. Everything
    is checked to be UTF-8 before the first piece is written."""
    import numpy as np
    import pyarrow as pa

    from privatize.allocator import tune

    if per_line and b"{" in data:
        return None
    whole = pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(data)], np.int64)), pa.py_buffer(data))
    try:
        whole.validate(full=True)
    except pa.ArrowInvalid:
        _read_stdin(data)  # names the line
        raise
    tune()  # keep freed memory for the next piece (glibc would give it back, then fault it in again)
    return _pieces(cipher, data, per_line, sign)


def _pieces(cipher, data: bytes, per_line: bool, sign: int):
    import numpy as np
    import pyarrow as pa

    n, start, positions = len(data), 0, 0
    view = np.frombuffer(data, np.uint8)
    while True:
        end = min(start + PIECE_BYTES, n)
        if end < n:
            nl = data.find(b"\n", end)
            end = n if nl < 0 else nl + 1
        piece = view[start:end]
        if per_line:
            ends = np.flatnonzero(piece == 10) + 1
            if not len(ends) or ends[-1] != len(piece):
                ends = np.append(ends, len(piece))
            offsets, c = np.concatenate(([0], ends)).astype(np.int32), cipher
        else:
            offsets, c = np.array([0, len(piece)], np.int32), cipher.rotated(positions)
            positions += len(piece) - int(np.count_nonzero((piece & 0xC0) == 0x80))
        arr = pa.StringArray.from_buffers(len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data[start:end]))
        out = c.encrypt_array(arr) if sign > 0 else c.decrypt_array(arr)
        bounds = np.frombuffer(out.buffers()[1], np.int32, count=len(out) + 1)
        yield memoryview(out.buffers()[2])[int(bounds[0]):int(bounds[-1])]
        start = end
        if start >= n:
            return


def _vigenere_bytes(cipher, data: bytes, per_line: bool, sign: int) -> bytes | None:
    """All of :func:`_vigenere_pieces` at once (for tests)."""
    pieces = _vigenere_pieces(cipher, data, per_line, sign)
    return None if pieces is None else b"".join(pieces)


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


def _write_fast(cipher, data: bytes, per_line: bool, sign: int) -> bool:
    pieces = _vigenere_pieces(cipher, data, per_line, sign)
    if pieces is None:
        return False
    for out in pieces:
        sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return True


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
    data = sys.stdin.buffer.read()
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere, warn_obfuscation

        warn_obfuscation()
        if _write_fast(Vigenere.from_key(km), data, args.per_line, +1):
            return 0
    recs = _records(_read_stdin(data), args.per_line)
    texts = [r.text for r in recs]
    if km.kind == "vigenere":
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
    data = sys.stdin.buffer.read()
    if km.kind == "vigenere":
        from privatize.ciphers.vigenere import Vigenere

        if _write_fast(Vigenere.from_key(km), data, args.per_line, -1):
            return 0
    recs = _records(_read_stdin(data), args.per_line)
    texts = [r.text for r in recs]
    if km.kind == "vigenere":
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
