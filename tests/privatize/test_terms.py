"""A tenant's terms (:mod:`privatize.redaction.terms`): matching, the sample rule, storage.
Expectations are worked out by hand from the module's rules; no model is loaded."""

import json

import pytest

from privatize.errors import InputError
from privatize.redaction.terms import TERM_SCORE, TERMS_FILE, TermSet, parse_terms_option, sample_terms


def _spans(ts, text):
    return [(text[s:e], t) for s, e, t, *_ in ts.find(text)]


def test_terms_match_whole_words_in_any_case_longest_first():
    ts = TermSet()
    assert ts.add([("Quartermain", "LOCATION"), ("Quartermain Building 2", "LOCATION"), ("Hanley-McCue", "PERSON"),
                   ("St. Agnes", "LOCATION"), ("#x", "LOCATION"), ("12 34", "LOCATION")], "list") == 4
    assert len(ts) == 4 and ts.sources == {"list": 4}  # "#x" (under 3 characters) and "12 34" (no letter) have no key
    text = ("to QUARTERMAIN building 2 today; quartermain 4 later. Seen by hanley mccue at st agnes; "
            "not Quartermains, nor xquartermain, nor Hanley alone")
    assert _spans(ts, text) == [("QUARTERMAIN building 2", "LOCATION"), ("quartermain", "LOCATION"),
                                ("hanley mccue", "PERSON"), ("st agnes", "LOCATION")]
    s, e, t, score, source, ctx = ts.find("Dr Hanley-McCue")[0]
    assert (s, e, score, source, ctx) == (3, 15, TERM_SCORE, "terms", False)
    assert ts.find("nothing here") == [] and TermSet().find("Quartermain") == []


def test_a_term_keeps_its_first_type_and_a_saved_set_finds_the_same(tmp_path):
    ts = TermSet()
    ts.add([("Kimbrough", "LOCATION")], "a")
    assert ts.add([("KIMBROUGH", "PERSON"), ("Vista Health", "ORGANIZATION")], "b") == 1
    ts.save(tmp_path)
    back = TermSet.load(tmp_path)
    text = "screened by kimbrough and vista   health"
    assert _spans(back, text) == _spans(ts, text) == [("kimbrough", "LOCATION"), ("vista   health", "ORGANIZATION")]
    assert back.sources == {"a": 1, "b": 1}


def test_the_file_holds_keyed_digests_not_the_terms(tmp_path):
    names = ["Quartermain", "Radu Crosson", "Wil Laberbera"]
    a, b = TermSet(), TermSet()
    for ts, d in ((a, tmp_path / "a"), (b, tmp_path / "b")):
        ts.add([(n, "PERSON") for n in names], "sample")
        d.mkdir()
        ts.save(d)
    raw = [(tmp_path / d / TERMS_FILE).read_text(encoding="utf-8") for d in ("a", "b")]
    for r in raw:
        for n in names:
            for part in n.casefold().split():
                assert part not in r.casefold()
    da, db = json.loads(raw[0])["digests"], json.loads(raw[1])["digests"]
    assert len(da) == len(db) == 3 and not set(da) & set(db)  # a key of its own per folder


def test_the_sample_keeps_rare_terms_mostly_annotated_where_they_occur():
    recs = []

    def rec(text, *annotated):
        spans = []
        for word, ty in annotated:
            s = text.index(word)
            spans.append((s, s + len(word), ty))
        recs.append({"text": text, "spans": spans})

    rec("Moved to Quartermain 2 at noon.", ("Quartermain", "Location"))
    rec("Back to quartermain tomorrow.", ("quartermain", "Location"))
    rec("Daughter lives by the Bay.", ("Bay", "Location"))  # annotated once of three: 1/3 < 0.5
    rec("Bay leaves in the soup; bay window.")
    rec("Lives in White Marsh with his wife.", ("White Marsh", "Location"))  # two words, rare as a phrase
    rec("White count stable.")
    rec("Seen by Dr. Wexworth.", ("Wexworth", "HCPName"))
    rec("Paged Wexworth twice, no answer from wexworth.")  # 1 of 3 annotated: dropped
    rec("Home with family.", ("family", "Location"))  # a common word: never a term
    rec("Record 55-2 filed.", ("55-2", "Other"))  # no letter: no term
    rec("Seen at Elmcrest.", ("Elmcrest", "Unmapped"))  # a type with no entity type
    types = {"Location": "LOCATION", "HCPName": "PERSON", "Other": "OTHER"}
    got = sorted(sample_terms(recs, types.get))
    assert got == [("quartermain", "LOCATION"), ("white marsh", "LOCATION")]


@pytest.mark.parametrize("value, msg", [
    ("LOCATION", "expected TYPE=FILE"), ("location={f}", "expected TYPE=FILE"), ("LOCATION=", "expected TYPE=FILE"),
    ("LOCATION={f}.missing", "no such file"),
])
def test_a_bad_terms_option_is_one_line(tmp_path, value, msg):
    f = tmp_path / "t.txt"
    f.write_text("Quartermain\n")
    with pytest.raises(InputError, match=msg) as e:
        parse_terms_option([value.format(f=f)])
    assert "\n" not in str(e.value)
    assert parse_terms_option([f"LOCATION={f}"]) == [("LOCATION", f)]
