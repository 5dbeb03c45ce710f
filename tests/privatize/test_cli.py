"""The privatize command line, run as a user runs it (a subprocess)."""

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from privatize.keys import load_key_file
from tests.conftest import ROOT
from tests.secrets_scan import leaks, scan_tree


def cli(*args, stdin: bytes = b"", cwd=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "privatize.cli", *map(str, args)], input=stdin,
                          capture_output=True, cwd=cwd or ROOT, env=env, timeout=120)


def test_paper_vector_through_the_cli(tmp_path):
    k = tmp_path / "K"
    r = cli("keys", "import", "--kind", "vigenere", "--out", k, stdin=b"hENTu\n")
    assert r.returncode == 0, r.stderr
    r = cli("encrypt", "--key", k, stdin=b"I am a cat.")
    assert r.returncode == 0 and r.stdout == b"q oG I quo."
    assert b"obfuscation" in r.stderr
    r = cli("decrypt", "--key", k, stdin=b"q oG I quo.")
    assert r.returncode == 0 and r.stdout == b"I am a cat."


def test_per_line_jsonl_and_entity_tokens_with_given_spans(tmp_path):
    k = tmp_path / "e.key"
    assert cli("keys", "new", "--kind", "aes-siv", "--out", k).returncode == 0
    lines = [json.dumps({"id": 1, "text": "Hi Ann Lee"}), "Call 555 0101 now"]
    spans = tmp_path / "spans.jsonl"
    spans.write_text(json.dumps([{"start": 3, "end": 10, "entity_type": "PERSON"}]) + "\n"
                     + json.dumps([{"start": 5, "end": 13, "entity_type": "PHONE_NUMBER"}]) + "\n")
    r = cli("encrypt", "--key", k, "--per-line", "--spans", spans, stdin="\n".join(lines).encode())
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode().split("\n")
    assert json.loads(out[0])["id"] == 1 and "Ann" not in out[0] and out[1].startswith("Call PhoneNumber_[")
    tampered = out[1].replace("PhoneNumber_[", "PhoneNumber_[A", 1)
    r = cli("decrypt", "--key", k, "--per-line", stdin="\n".join([out[0], tampered]).encode())
    assert r.returncode == 0
    back = r.stdout.decode().split("\n")
    assert json.loads(back[0])["text"] == "Hi Ann Lee" and "555 0101" not in back[1]
    assert r.stderr.decode().strip().endswith("ok=1 revised=0 invalid=1")


@pytest.mark.parametrize("args, stdin, msg", [
    (("encrypt", "--key", "/nonexistent.key"), b"x", "cannot read key file"),
    (("run", "/nonexistent.yaml", "--input", "x", "--output", "y"), b"", "cannot read spec"),
    (("frobnicate",), b"", "invalid choice"),
    (("keys", "new", "--kind", "aes-siv", "--length", "5", "--out", "/tmp/never.key"), b"", "--length applies"),
])
def test_bad_input_exits_2_with_one_line(args, stdin, msg):
    r = cli(*args, stdin=stdin)
    assert r.returncode == 2
    err = r.stderr.decode().strip()
    assert msg in err and len(err.splitlines()) == 1, err


def test_run_verify_and_tampering(tmp_path):
    (tmp_path / "keys").mkdir()
    assert cli("keys", "new", "--kind", "vigenere", "--out", tmp_path / "keys" / "text.key").returncode == 0
    assert cli("make-corpus", "--out", tmp_path / "c.jsonl", "--docs", "30").returncode == 0
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nstages:\n  - kind: encrypt_text\n    key: file:keys/text.key\n"
                    "output: {num_shards: 3}\n")
    r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["output_records"] == 30
    assert cli("verify", tmp_path / "out").returncode == 0
    # existing output is refused without --overwrite, and left intact
    r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "out")
    assert r.returncode == 2 and b"exists" in r.stderr
    shard = tmp_path / "out" / "shards" / "part-00001-of-00003.parquet"
    t = pq.read_table(shard)
    pq.write_table(t.slice(1), shard)
    r = cli("verify", tmp_path / "out")
    assert r.returncode == 1 and b"part-00001" in r.stderr


def test_run_shows_progress_lines_when_stderr_is_no_terminal(tmp_path):
    """In process, off a terminal (a log, CI, this subprocess), ``privatize run`` says per
    stage how far it got: a line when each stage ends, and every ``--progress-every``
    seconds while one runs (issue 54, item 4); ``--quiet`` says nothing."""
    (tmp_path / "keys").mkdir()
    assert cli("keys", "new", "--kind", "vigenere", "--out", tmp_path / "keys" / "text.key").returncode == 0
    assert cli("make-corpus", "--out", tmp_path / "c.jsonl", "--docs", "120").returncode == 0
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nstages:\n  - kind: split\n  - kind: dedup\n"
                    "  - kind: encrypt_text\n    key: file:keys/text.key\n")
    r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "out", "--batch-size", "16")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.decode().strip().splitlines()[-1])  # stdout: the summary alone
    lines = [x for x in r.stderr.decode().splitlines() if x.startswith("privatize: stage ")]
    for i, kind in enumerate(("split", "dedup", "encrypt_text")):
        done = [x for x in lines if x.startswith(f"privatize: stage {i} {kind}: ") and " records done, " in x]
        assert len(done) == 1, lines
        assert " records/s, " in done[0] and done[0].endswith(" s elapsed")
    assert lines[0] == [x for x in lines if "stage 0 split: 120/120 records done" in x][0]
    assert f"stage 2 encrypt_text: {summary['output_records']}/" in lines[-1]
    assert "\r" not in r.stderr.decode()  # no bar redraws in a log
    r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "q", "--quiet")
    assert r.returncode == 0 and b"privatize: stage" not in r.stderr


def test_no_key_bytes_in_logs_manifest_or_outputs(tmp_path):
    (tmp_path / "keys").mkdir()
    for kind, name in (("vigenere", "text.key"), ("hmac", "p.key")):
        r = cli("keys", "new", "--kind", kind, "--out", tmp_path / "keys" / name,
                *(["--length", "1000"] if kind == "vigenere" else []))
        assert r.returncode == 0
    texts = load_key_file(tmp_path / "keys" / "text.key").secret
    pseud = load_key_file(tmp_path / "keys" / "p.key").secret
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Record {i} by someone.", "individual_id": f"u{i % 3}"}) + "\n"
                              for i in range(20)) + "{broken\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nstages:\n  - kind: encrypt_text\n    key: file:keys/text.key\n"
                    "output: {num_shards: 2, pseudonym_key: 'file:keys/p.key'}\n")
    r = cli("-v", "run", spec, "--input", corpus, "--output", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert b"INFO" in r.stderr  # logging was on, and still shows no key
    for secret in (texts, pseud):
        assert not leaks(r.stdout + r.stderr, secret)
        assert scan_tree(tmp_path / "out", secret) == []
        assert not leaks((tmp_path / "out.quarantine.jsonl").read_bytes(), secret)
    # keys new / encrypt / decrypt print no key bytes either
    r1 = cli("keys", "new", "--kind", "aes-siv", "--out", tmp_path / "keys" / "e.key")
    e = load_key_file(tmp_path / "keys" / "e.key").secret
    r2 = cli("decrypt", "--key", tmp_path / "keys" / "e.key", stdin=b"Person_[AAAA]")
    assert not leaks(r1.stdout + r1.stderr + r2.stdout + r2.stderr, e)


def test_run_refuses_a_key_of_the_wrong_kind_before_any_work(tmp_path):
    """issue 23: a key file of a kind the field does not take is one line naming the field
    path and the file, exit 2, no output folder; the kinds are what the settings declare."""
    from privatize.keys import new_key, write_key_file

    for name, kind in (("siv.key", "aes-siv"), ("text.key", "vigenere")):
        write_key_file(new_key(kind), tmp_path / name)
    (tmp_path / "c.jsonl").write_text('{"text": "hello"}\n')
    cases = [("stages:\n  - kind: encrypt_text\n    key: file:siv.key\n", "stages.0.key: ", "expected vigenere"),
             ("stages:\n  - kind: encrypt_text\n    key: file:text.key\noutput:\n  pseudonym_key: file:siv.key\n",
              "output.pseudonym_key: ", "expected hmac")]
    for text, path, expected in cases:
        spec = tmp_path / "spec.yaml"
        spec.write_text("version: 1\n" + text)
        r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "out")
        err = r.stderr.decode().strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"privatize: error: {path}") and "siv.key: key " in err and "is aes-siv" in err
        assert expected in err and "Traceback" not in err
        assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


def test_run_quarantines_lines_that_are_not_standard_json(tmp_path):
    """NaN/Infinity, a lone surrogate and deep nesting are quarantined lines, counted,
    never a crash (before issue 23: a UnicodeEncodeError traceback from Arrow)."""
    from privatize.keys import new_key, write_key_file

    write_key_file(new_key("vigenere"), tmp_path / "text.key")
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "fine"}\n{"text": "\\ud800"}\n{"text": "a", "x": NaN}\n'
                                       b'{"text": "b", "x": -Infinity}\n{"text": "c", "x": '
                                       + b"[" * 3000 + b"]" * 3000 + b"}\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nstages:\n  - kind: encrypt_text\n    key: file:text.key\n")
    r = cli("run", spec, "--input", tmp_path / "c.jsonl", "--output", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.decode().strip().splitlines()[-1])
    assert summary["input_records"] == 5 and summary["output_records"] == 1
    q = [json.loads(line) for line in open(summary["quarantine"], encoding="utf-8")]
    assert len(q) == 4 and all("invalid JSON" in json.dumps(x) for x in q)


def test_every_command_module_is_found_and_listed_in_its_order():
    """Issue 49: no hand-kept list of the CLI's modules; each module of privatize/commands is
    found, and ``--help`` lists them by their ``ORDER`` (run first), the plugins' after."""
    import pkgutil

    import privatize.commands as package
    from privatize.cli import build_parser, builtin_commands

    names = [m.__name__.rsplit(".", 1)[1] for m in builtin_commands()]
    assert sorted(names) == sorted(m.name for m in pkgutil.iter_modules(package.__path__))
    assert names == ["run", "corpus", "crypto", "detect", "ner"]
    commands = list(build_parser()._subparsers._group_actions[0].choices)
    assert commands[:3] == ["run", "verify", "make-corpus"] and commands.index("train-ner") < commands.index("attack")
