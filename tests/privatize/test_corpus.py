import json

from privatize.cli import main
from privatize.corpus import make_corpus


def test_make_corpus_is_seeded_and_spans_match_text(tmp_path):
    a = make_corpus(tmp_path / "a.jsonl", n_docs=40, seed=3)
    b = make_corpus(tmp_path / "b.jsonl", n_docs=40, seed=3)
    c = make_corpus(tmp_path / "c.jsonl", n_docs=40, seed=4)
    ta, tb, tc = ((tmp_path / f"{n}.jsonl").read_bytes() for n in "abc")
    assert ta == tb and ta != tc
    assert a["documents"] == 40 and a["gold_spans"] > 40
    recs = [json.loads(line) for line in ta.decode().splitlines()]
    assert len({r["id"] for r in recs}) == 40
    types = set()
    for r in recs:
        for s in r["spans"]:
            assert r["text"][s["start"]:s["end"]] == s["text"]
            types.add(s["type"])
    assert {"PERSON", "PHONE_NUMBER", "EMAIL_ADDRESS", "CREDIT_CARD", "US_SSN"} <= types
    # boilerplate repeats across documents, so dedup has something to find
    sentences = [s for r in recs for s in r["text"].split(". ")]
    assert len(sentences) > len(set(sentences))


def test_make_corpus_cli(tmp_path, capsys):
    assert main(["make-corpus", "--out", str(tmp_path / "c.jsonl"), "--docs", "5", "--seed", "1"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 5 and (tmp_path / "c.jsonl").exists()
