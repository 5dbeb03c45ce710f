"""``privatize keys|encrypt|decrypt`` through the real CLI entry (``privatize.cli.main``,
and once as a subprocess, as a user runs it)."""

import io
import json
import os
import stat
import subprocess
import sys

import pytest

from privatize.cli import main
from privatize.ciphers.entity import TOKEN_RE
from privatize.ciphers.vigenere import Vigenere
from privatize.keys import load_key_file
from tests.conftest import ROOT
from tests.secrets_scan import leaks


def run(monkeypatch, capsys, *argv, stdin: bytes = b""):
    """(exit code, stdout, stderr) of ``privatize <argv>`` in this process."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def cli(monkeypatch, capsys):
    return lambda *argv, stdin=b"": run(monkeypatch, capsys, *argv, stdin=stdin)


def test_paper_vector_through_the_real_command(tmp_path):
    """The must-show: ``printf 'I am a cat.' | privatize encrypt --key K`` with K imported
    from ``hENTu`` prints exactly ``q oG I quo.``, and decrypt restores it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def privatize(*args, stdin: bytes):
        return subprocess.run([sys.executable, "-m", "privatize.cli", *map(str, args)], input=stdin,
                              capture_output=True, cwd=tmp_path, env=env, timeout=300)

    r = privatize("keys", "import", "--kind", "vigenere", "--out", "K", stdin=b"hENTu\n")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(tmp_path / "K").st_mode) == 0o600
    r = privatize("encrypt", "--key", "K", stdin=b"I am a cat.")
    assert (r.returncode, r.stdout) == (0, b"q oG I quo.")
    assert b"obfuscation, not confidentiality" in r.stderr
    r = privatize("decrypt", "--key", "K", stdin=b"q oG I quo.")
    assert (r.returncode, r.stdout) == (0, b"I am a cat.")


def test_keys_new_prints_only_id_kind_and_path(cli, tmp_path):
    for kind in ("vigenere", "aes-siv", "aes-ecb", "hmac"):
        rc, out, err = cli("keys", "new", "--kind", kind, "--out", tmp_path / f"{kind}.key")
        assert rc == 0, err
        info = json.loads(out)
        km = load_key_file(tmp_path / f"{kind}.key")
        assert info == {"key_id": km.key_id, "kind": kind, "path": str(tmp_path / f"{kind}.key")}
        assert ("leak equality" in err) == (kind == "aes-ecb")
        assert ("obfuscation" in err) == (kind == "vigenere")
    rc, out, err = cli("keys", "new", "--kind", "vigenere", "--length", "7", "--alphabet", "latin",
                       "--out", tmp_path / "l.key")
    km = load_key_file(tmp_path / "l.key")
    assert rc == 0 and len(km.letters) == 7 and km.alphabet == "latin"


def test_whole_document_per_line_and_jsonl(cli, tmp_path):
    k = tmp_path / "K"
    assert cli("keys", "import", "--kind", "vigenere", "--out", k, stdin=b"hENTu\n")[0] == 0
    v = Vigenere("hENTu")
    doc = "I am a cat.\nI am a cat.\n"  # one document: positions run on across lines
    rc, out, _ = cli("encrypt", "--key", k, stdin=doc.encode())
    assert rc == 0 and out == v.encrypt(doc) and out.startswith("q oG I quo.\n") and out.endswith("\n")
    lines = [json.dumps({"id": 1, "text": "I am a cat.", "meta": {"a": "b"}}), "I am a cat.",
             json.dumps({"id": 2, "text": None}), json.dumps([1, 2]), ""]
    rc, out, _ = cli("encrypt", "--key", k, "--per-line", stdin="\n".join(lines).encode())
    assert rc == 0
    got = out.split("\n")
    assert json.loads(got[0]) == {"id": 1, "text": "q oG I quo.", "meta": {"a": "b"}}
    assert got[1] == "q oG I quo."  # every line starts at position 0
    assert json.loads(got[2]) == {"id": 2, "text": None}
    assert got[3] == v.encrypt(json.dumps([1, 2])) and got[4] == ""
    rc, back, _ = cli("decrypt", "--key", k, "--per-line", stdin=out.encode())
    assert rc == 0 and [json.loads(x) if x.startswith("{") else x for x in back.split("\n")] == \
        [json.loads(lines[0]), "I am a cat.", json.loads(lines[2]), json.dumps([1, 2]), ""]


def test_entity_tokens_with_given_spans_and_decrypt_report(cli, tmp_path):
    k = tmp_path / "e.key"
    assert cli("keys", "new", "--kind", "aes-siv", "--out", k)[0] == 0
    lines = [json.dumps({"id": 1, "text": "Hi Ann Lee"}), "Call 555 0101 now"]
    spans = tmp_path / "spans.jsonl"
    spans.write_text(json.dumps([{"start": 3, "end": 10, "entity_type": "PERSON"}]) + "\n"
                     + json.dumps([{"start": 5, "end": 13, "entity_type": "PHONE_NUMBER"}]) + "\n")
    rc, out, err = cli("encrypt", "--key", k, "--per-line", "--spans", spans, stdin="\n".join(lines).encode())
    assert rc == 0, err
    got = out.split("\n")
    assert json.loads(got[0])["id"] == 1 and "Ann" not in got[0]
    assert TOKEN_RE.fullmatch(json.loads(got[0])["text"][3:])
    assert got[1].startswith("Call PhoneNumber_[") and got[1].endswith("] now")
    tampered = got[1].replace("PhoneNumber_[", "PhoneNumber_[A", 1)
    person = json.loads(got[0])["text"][3:]  # 16 + 7 bytes: one "=" of padding
    assert person.endswith("=]")
    stripped = "Dear " + person.replace("=", "")
    rc, back, err = cli("decrypt", "--key", k, "--per-line", stdin="\n".join([got[0], tampered, stripped]).encode())
    assert rc == 0
    res = back.split("\n")
    assert json.loads(res[0])["text"] == "Hi Ann Lee"
    assert res[1] == tampered and "555 0101" not in res[1]
    assert res[2] == "Dear Ann Lee"
    assert err.strip().splitlines()[-1] == "ok=1 revised=1 invalid=1"


def test_ecb_key_encrypts_with_a_warning(cli, tmp_path):
    k = tmp_path / "ecb.key"
    assert cli("keys", "new", "--kind", "aes-ecb", "--out", k)[0] == 0
    spans = tmp_path / "s.jsonl"
    spans.write_text(json.dumps([{"start": 0, "end": 3, "entity_type": "PERSON"}]) + "\n")
    rc, out, err = cli("encrypt", "--key", k, "--spans", spans, stdin=b"Ann says hi")
    assert rc == 0 and out.startswith("Person_[") and out.endswith("] says hi") and "ECB" in err
    rc, back, err = cli("decrypt", "--key", k, stdin=out.encode())
    assert rc == 0 and back == "Ann says hi" and err.strip().endswith("ok=1 revised=0 invalid=0")


@pytest.mark.parametrize("args, stdin, msg", [
    (("encrypt", "--key", "/nonexistent.key"), b"x", "cannot read key file"),
    (("encrypt", "--key", "{hmac}"), b"x", "does not encrypt text"),
    (("decrypt", "--key", "{hmac}"), b"x", "does not decrypt text"),
    (("encrypt", "--key", "{siv}", "--spans", "/nonexistent.jsonl"), b"x", "cannot read spans"),
    (("encrypt", "--key", "{siv}", "--spans", "{spans2}"), b"one record", "2 span lines for 1"),
    (("encrypt", "--key", "{siv}", "--spans", "{badspan}"), b"abc", "outside the text"),
    (("encrypt", "--key", "{vig}", "--spans", "{spans2}"), b"x", "--spans applies"),
    (("encrypt", "--key", "{vig}"), b"\xff\xfe", "not UTF-8"),
    (("keys", "new", "--kind", "aes-siv", "--length", "5", "--out", "{new}"), b"", "--length applies"),
    (("keys", "new", "--kind", "vigenere", "--out", "{vig}"), b"", "exists"),
    (("keys", "import", "--kind", "vigenere", "--out", "{new}"), b"zzz\n", "identity"),
    (("keys", "import", "--kind", "vigenere", "--out", "{new}"), b"ab c\n", "outside"),
])
def test_bad_input_exits_2_with_one_line(cli, tmp_path, args, stdin, msg):
    files = {"hmac": tmp_path / "h.key", "siv": tmp_path / "s.key", "vig": tmp_path / "v.key",
             "spans2": tmp_path / "two.jsonl", "badspan": tmp_path / "bad.jsonl", "new": tmp_path / "new.key"}
    cli("keys", "new", "--kind", "hmac", "--out", files["hmac"])
    cli("keys", "new", "--kind", "aes-siv", "--out", files["siv"])
    cli("keys", "new", "--kind", "vigenere", "--out", files["vig"])
    files["spans2"].write_text("[]\n[]\n")
    files["badspan"].write_text(json.dumps([{"start": 1, "end": 9, "entity_type": "PERSON"}]) + "\n")
    rc, out, err = cli(*[a.format(**{k: str(v) for k, v in files.items()}) for a in args], stdin=stdin)
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("privatize: warning")]
    assert rc == 2 and out == "" and len(lines) == 1 and msg in lines[0], err
    assert not (tmp_path / "new.key").exists()


def test_missing_redaction_component_is_a_clear_error(cli, tmp_path, monkeypatch):
    k = tmp_path / "e.key"
    assert cli("keys", "new", "--kind", "aes-siv", "--out", k)[0] == 0
    monkeypatch.setitem(sys.modules, "privatize.redaction.detect", None)  # as if not installed
    rc, out, err = cli("encrypt", "--key", k, stdin=b"Call Ann on 555 0101")
    assert rc == 2 and out == ""
    assert "entity encryption needs the redaction component (privatize.redaction), not installed yet" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.presidio
@pytest.mark.slow
def test_entity_encryption_with_detection_round_trips(cli, tmp_path):
    pytest.importorskip("privatize.redaction.detect")
    k = tmp_path / "e.key"
    assert cli("keys", "new", "--kind", "aes-siv", "--out", k)[0] == 0
    text = "Please call John Smith on 212-555-0198 or mail john.smith@example.com today."
    rc, out, err = cli("encrypt", "--key", k, stdin=text.encode())
    assert rc == 0, err
    assert "john.smith@example.com" not in out and "EmailAddress_[" in out and out.endswith(" today.")
    rc, back, err = cli("decrypt", "--key", k, stdin=out.encode())
    assert rc == 0 and back == text and "invalid=0" in err


def test_no_key_bytes_in_anything_the_commands_print(cli, tmp_path):
    printed = {}
    for kind in ("vigenere", "aes-siv", "aes-ecb", "hmac"):
        p = tmp_path / f"{kind}.key"
        rc, out, err = cli("-v", "keys", "new", "--kind", kind, "--out", p,
                           *(["--length", "64"] if kind == "vigenere" else []))
        assert rc == 0
        printed[kind] = out + err
    spans = tmp_path / "s.jsonl"
    spans.write_text(json.dumps([{"start": 0, "end": 3, "entity_type": "PERSON"}]) + "\n")
    for kind in ("vigenere", "aes-siv", "aes-ecb"):
        p = tmp_path / f"{kind}.key"
        extra = ["--spans", spans] if kind != "vigenere" else []
        rc, enc, err = cli("-v", "encrypt", "--key", p, *extra, stdin=b"Ann wrote this")
        assert rc == 0, err
        printed[kind] += enc + err
        rc, dec, err = cli("-v", "decrypt", "--key", p, stdin=enc.encode())
        assert rc == 0 and dec == "Ann wrote this"
        printed[kind] += dec + err
    for name in ("encrypt", "decrypt"):
        rc, out, err = cli("-v", name, "--key", tmp_path / "hmac.key", stdin=b"x")
        assert rc == 2
        printed["hmac"] += out + err
    for kind, text in printed.items():
        secret = load_key_file(tmp_path / f"{kind}.key").secret
        assert not leaks(text.encode(), secret), kind


# ---- the fast path: stdin's bytes as one Arrow array, as the encrypt_text stage runs it ------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from privatize.commands import crypto  # noqa: E402

_PIECES = st.sampled_from(["a", "Z", "q", "é", "ß", "中", "😀", " ", "\n", "\r", "\t", "<MASK>", "<PERSON>",
                           "Person_[", "]", "_[", "<", ">", "=", "7", "{", "-", "'"])


def _record_path(cipher, text: str, per_line: bool, sign: int) -> bytes:
    recs = crypto._records(text, per_line)
    texts = [r.text for r in recs]
    outs = cipher.encrypt_batch(texts) if sign > 0 else cipher.decrypt_batch(texts)
    rendered = [r.render(o) for r, o in zip(recs, outs)]
    return ("\n".join(rendered) if per_line else rendered[0]).encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=60).map("".join), st.booleans(), st.sampled_from([1, -1]),
       st.sampled_from(["letters52", "latin"]), st.sampled_from([1, 5, 8 << 20]))
def test_the_fast_path_writes_what_the_record_path_writes(text, per_line, sign, alphabet, piece_bytes):
    letters = "KeY" if alphabet == "letters52" else "KéY"
    cipher = Vigenere(letters, alphabet)
    saved, crypto.PIECE_BYTES = crypto.PIECE_BYTES, piece_bytes  # pieces cut after a newline past this size
    try:
        fast = crypto._vigenere_bytes(cipher, text.encode(), per_line, sign)
    finally:
        crypto.PIECE_BYTES = saved
    if per_line and "{" in text:
        assert fast is None  # a line may be a JSON record: only the record path reads those
        return
    assert bytes(fast) == _record_path(cipher, text, per_line, sign)


@pytest.mark.parametrize("data, line", [(b"ok\n\xff", 2), (b"a\nb\n\xed\xa0\x80", 3), (b"\xc3", 1)])
def test_the_fast_path_refuses_what_is_not_utf8_naming_the_line(data, line):
    from privatize.errors import InputError

    for per_line in (False, True):
        with pytest.raises(InputError, match=f"<stdin>:{line}: input is not UTF-8"):
            crypto._vigenere_bytes(Vigenere("KeY"), data, per_line, 1)
