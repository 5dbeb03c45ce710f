import json
import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privatize.stages.split import (ABBREVIATIONS, NUMBER_ABBREVIATIONS, Split, SplitSettings, line_spans,
                                    paragraph_spans, segment_bytes, segment_spans, sentence_spans)


def _sentences(t):
    return [t[a:b] for a, b in sentence_spans(t)]


def test_sentences_hand_checked():
    t = ('Mr. Smith went to Washington. He said "Hi!" Then he left.\n'
         "The U.S. is big. J. R. R. Tolkien wrote it.\n\nNew paragraph here? Yes. 3 apples.")
    assert _sentences(t) == [
        "Mr. Smith went to Washington.", 'He said "Hi!"', "Then he left.", "The U.S. is big.",
        "J. R. R. Tolkien wrote it.", "New paragraph here?", "Yes.", "3 apples."]


@pytest.mark.parametrize("text, expected", [
    # abbreviations never end a sentence; "No." only before a digit
    ("See Dr. Watson and Mrs. Hudson at 221B. They wait.", ["See Dr. Watson and Mrs. Hudson at 221B.", "They wait."]),
    ("Fruit, e.g. Apples, i.e. Red ones. Done.", ["Fruit, e.g. Apples, i.e. Red ones.", "Done."]),
    ("He lives on Main St. The house is red.", ["He lives on Main St. The house is red."]),
    # initials, also right after an opening quote or bracket
    ('She said "Q. Jones (J. R. Doe) came." Then left.', ['She said "Q. Jones (J. R. Doe) came."', "Then left."]),
    ("See No. 5 here. No. He refused.", ["See No. 5 here.", "No.", "He refused."]),
    ("It was Vol. 2 of the set. Vol. Three was lost.", ["It was Vol. 2 of the set.", "Vol.", "Three was lost."]),
    # closing quotes and brackets stay with the sentence; opening ones start the next
    ("(It rained.) Then: “Go!” he said. ‘Fine.’ “Next?”", ["(It rained.)", "Then: “Go!” he said.", "‘Fine.’", "“Next?”"]),
    ("Wait... What?! [Silence] ok", ["Wait...", "What?!", "[Silence] ok"]),
    # a lower-case word after the period: no cut (abbreviation-like or a false stop)
    ("The value is approx. ten. Next one.", ["The value is approx. ten.", "Next one."]),
    ("Version 2.5 is out. 3.0 is next.", ["Version 2.5 is out.", "3.0 is next."]),
    # Latin-1 capitals start a sentence, × does not
    ("Café closed. Émile left. 3 × 4. × is times.", ["Café closed.", "Émile left.", "3 × 4. × is times."]),
    # single newlines are not cuts (hard-wrapped prose); a blank line always is
    ("A line that wraps\nhere and ends. Next\n\nparagraph without stop\n \t\nlast", [
        "A line that wraps\nhere and ends.", "Next", "paragraph without stop", "last"]),
    ("ends with a stop.\nNew line sentence.", ["ends with a stop.", "New line sentence."]),
    ("  \n  leading and trailing space.  \n ", ["leading and trailing space."]),
    ("", []),
    (" \n\t ", []),
])
def test_sentence_rules(text, expected):
    assert _sentences(text) == expected


def test_lines_and_paragraphs():
    t = "SYS: Hello\nUSR: hi there  \n\n  \nSYS: bye\n"
    assert [t[a:b] for a, b in line_spans(t)] == ["SYS: Hello", "USR: hi there", "SYS: bye"]
    assert [t[a:b] for a, b in paragraph_spans(t)] == ["SYS: Hello\nUSR: hi there", "SYS: bye"]
    crlf = "SYS: Hi. How are you?\r\nUSR: Fine.\r\n"
    assert [crlf[a:b] for a, b in line_spans(crlf)] == ["SYS: Hi. How are you?", "USR: Fine."]


def test_code_point_offsets_with_multibyte_text():
    t = "😀 Ünïcödé here. “Zweite” Sätze! Drei 😀."
    spans = sentence_spans(t)
    assert [t[a:b] for a, b in spans] == ["😀 Ünïcödé here.", "“Zweite” Sätze!", "Drei 😀."]
    assert spans[1] == (t.index("“"), t.index("!") + 1)


def _batch(texts, ids=None, **extra):
    n = len(texts)
    cols = {"doc_id": ids or [f"d{i}" for i in range(n)], "text": texts, "individual_id": [f"u{i}" for i in range(n)],
            "meta": [None] * n, "_src": pa.array([0] * n, pa.int32()), "_line": pa.array(range(1, n + 1), pa.int64()),
            "_seg": pa.array([0] * n, pa.int32())}
    cols.update(extra)
    return pa.table(cols)


@pytest.mark.parametrize("unit", ["sentence", "line", "paragraph"])
def test_stage_records_offsets_ids_and_expansion(unit):
    texts = ["One. Two here.\nThree!\n\nFour?", "   ", "Single"]
    batch = _batch(texts, ["a", "b", "c"])
    out = Split(SplitSettings(unit=unit)).process_batch(batch).to_pylist()
    segs = [r for r in out if r["_drop"] is None]
    dropped = [r for r in out if r["_drop"] is not None]
    assert [r["doc_id"] for r in dropped] == ["b"] and dropped[0]["_drop"] == "empty after split"
    assert dropped[0]["_stat.segments"] == 0 and dropped[0]["_stat.expanded"] == 0
    for r in segs:
        parent = texts[["a", "b", "c"].index(r["parent_id"])]
        assert parent[r["start"]:r["end"]] == r["text"]
        assert r["doc_id"] == f"{r['parent_id']}#{r['_seg']}"
        assert r["_stat.segments"] == 1
    a = [r for r in segs if r["parent_id"] == "a"]
    expected = {"sentence": ["One.", "Two here.", "Three!", "Four?"], "line": ["One. Two here.", "Three!", "Four?"],
                "paragraph": ["One. Two here.\nThree!", "Four?"]}[unit]
    assert [r["text"] for r in a] == expected
    assert [r["_seg"] for r in a] == list(range(len(expected)))
    assert [r["_stat.expanded"] for r in a] == [len(expected) - 1] + [0] * (len(expected) - 1)
    assert all(r["individual_id"] == "u0" and r["_line"] == 1 for r in a)
    assert sum(r["_stat.expanded"] for r in segs) == len(segs) - 2  # two parents with segments


def test_earlier_statistics_stay_on_one_row_per_document():
    batch = _batch(["A b. C d. E f.", "G."], **{"_stat.0.chars": pa.array([14, 2], pa.int64())})
    out = Split(SplitSettings()).process_batch(batch)
    assert out["_stat.0.chars"].to_pylist() == [14, 0, 0, 2]
    assert out["doc_id"].to_pylist() == ["d0#0", "d0#1", "d0#2", "d1#0"]


def test_many_segments_get_decimal_numbers():
    text = " ".join(f"Sentence {i}." for i in range(1500))
    out = Split(SplitSettings()).process_batch(_batch([text]))
    assert out.num_rows == 1500
    assert out["doc_id"][1234].as_py() == "d0#1234" and out["text"][1234].as_py() == "Sentence 1234."


# ---- an independent reference: the documented rules, one text at a time, with `re` ----

WS = " \t\n\r\x0b\x0c"
_TERMINATOR = re.compile(r"[.!?][.!?\"')\]’”]*\Z")


def _opens_sentence(c: str) -> bool:
    return ("A" <= c <= "Z") or ("0" <= c <= "9") or c in "\"'([“‘" or ("À" <= c <= "Þ" and c != "×")


def _ends_sentence(text: str, run_start: int, run_end: int) -> bool:
    m = _TERMINATOR.search(text, 0, run_start)
    if not m or not _opens_sentence(text[run_end]):
        return False
    p = m.start()
    if text[p] != ".":
        return True
    q = p
    while q > 0 and text[q - 1] not in WS:
        q -= 1
    word = text[q:p]
    if len(word) > 1 and word[0] in "\"'([":
        word = word[1:]
    if len(word) == 1 and "A" <= word <= "Z":
        return False
    if word.isascii() and (word.lower() in ABBREVIATIONS
                           or (word.lower() in NUMBER_ABBREVIATIONS and text[run_end] in "0123456789")):
        return False
    return True


def reference_spans(text: str, unit: str) -> list[tuple[int, int]]:
    cs, ce = 0, len(text)
    while cs < ce and text[cs] in WS:
        cs += 1
    while ce > cs and text[ce - 1] in WS:
        ce -= 1
    if cs >= ce:
        return []
    spans, start = [], cs
    for m in re.finditer(r"[ \t\n\r\x0b\x0c]+", text[:ce]):
        if m.start() <= cs:
            continue
        newlines = m.group().count("\n")
        cut = newlines >= (1 if unit == "line" else 2)
        if unit == "sentence" and not cut:
            cut = _ends_sentence(text, m.start(), m.end())
        if cut:
            spans.append((start, m.start()))
            start = m.end()
    spans.append((start, ce))
    return spans


TOKENS = ["Mr", "mr", "Dr", "e.g", "U.S", "No", "vol", "etc", "approx", "A", "b", "Word", "word", "lowercase", "Zz",
          "42", "7", "É", "é", "×", "😀", "ß", ".", ".", ".", "!", "?", "...", "?!", '"', "'", "(", ")", "[", "]",
          "’", "”", "“", "‘", " ", " ", " ", "  ", "\n", "\n\n", " \n \n", "\t", "\r\n", "\x0c", "\u00a0"]
texts = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6), st.sampled_from(["sentence", "line", "paragraph"]))
def test_vectorised_split_matches_the_reference_rules(batch_texts, unit):
    rec, start, end, _, _ = segment_bytes(pa.array(batch_texts, pa.string()), unit)
    got = [[] for _ in batch_texts]
    for r, a, b in zip(rec.tolist(), start.tolist(), end.tolist()):
        got[r].append((a, b))
    assert got == [reference_spans(t, unit) for t in batch_texts]


@settings(max_examples=100, deadline=None)
@given(st.lists(texts, min_size=1, max_size=6), st.sampled_from(["sentence", "line", "paragraph"]))
def test_stage_output_reproduces_each_segment_from_its_parent(batch_texts, unit):
    # sliced input: the batch's arrays start at an offset into their buffers
    batch = _batch(["pad. Pad.", *batch_texts]).slice(1)
    out = Split(SplitSettings(unit=unit)).process_batch(batch).to_pylist()
    parents = dict(zip(batch["doc_id"].to_pylist(), batch_texts))
    live = [r for r in out if r["_drop"] is None]
    for r in live:
        seg = parents[r["parent_id"]][r["start"]:r["end"]]
        assert seg == r["text"] and seg and seg.strip(WS) == seg
    # every parent either has segments or is dropped as empty, never both
    assert {r["doc_id"] for r in out if r["_drop"]} == {d for d, t in parents.items() if not t.strip(WS)}
    assert sum(r["_stat.segments"] + r["_stat.expanded"] for r in out) == len(live) * 2 - len(
        {r["parent_id"] for r in live})


@pytest.mark.data
def test_customersim_turns_are_lines(shared_data):
    with open(shared_data / "customersim" / "train.jsonl", encoding="utf-8") as fh:
        recs = [json.loads(next(fh)) for _ in range(40)]
    texts = [r["text"] for r in recs]
    out = Split(SplitSettings(unit="line")).process_batch(_batch(texts))
    turns = out["text"].to_pylist()
    assert turns == [line.strip(WS) for t in texts for line in t.split("\n") if line.strip(WS)]
    assert all(t.startswith(("SYS: ", "USR: ", "My ID is ")) for t in turns)
    assert out["_stat.segments"].to_pylist() == [1] * len(turns)


@pytest.mark.parametrize("unit", ["sentence", "line", "paragraph"])
def test_long_runs_take_the_slow_path_with_the_same_answer(unit):
    # runs longer than the vectorised scan's step budget: whitespace, closers, newlines
    texts = ["Go." + " " * 300 + "\n" * 40 + "  Next one" + "!" * 50 + '")' * 20 + " " * 20 + "End." + " " * 500,
             " " * 1000 + "x",
             "A" * 5000 + ". B" + "\n \n" * 100 + "c"]
    rec, start, end, _, _ = segment_bytes(pa.array(texts), unit)
    got = [[(a, b) for r, a, b in zip(rec, start, end) if r == i] for i in range(len(texts))]
    assert got == [reference_spans(t, unit) for t in texts]
    assert segment_spans(texts[0], unit) == reference_spans(texts[0], unit)


def test_a_run_of_marks_gives_one_gap_inside_the_buffer():
    # the later marks of "..." merge into the first; a merged mark once kept end -1, which
    # looked like a gap before the buffer whenever the buffer ended in whitespace
    import numpy as np

    from privatize.stages.split import _sentence_gaps

    for text in ["So... Yes\t", "So... Yes"]:
        b = np.frombuffer(text.encode(), np.uint8)
        start, end = _sentence_gaps(b, np.array([0]), np.array([len(b)]))
        assert (start.tolist(), end.tolist()) == ([5], [6])
    assert segment_bytes(pa.array(["x. Y", "So... Yes\t"]))[1].tolist() == [0, 3, 0, 6]


def test_doc_style_gives_every_segment_its_documents_style():
    """``split.doc_style``: each segment carries the style judged on its whole document
    (issue 50), the same as ``detect_style`` on the document; off by default."""
    from privatize.redaction.styles import detect_style

    note = ("74 YO WOMAN TRANSFERRED FROM VAMC FOR CATH. PMH: CAD, HTN. ABD SOFT. FOLEY DRAINING. MAE. "
            "HR 80 SR NO VEA. BP 120/80. PLAN: CONT TO MONITOR.")
    prose = "The committee met on Tuesday. It agreed to publish the report. Nobody objected to that."
    assert detect_style(note) == "clinical" and detect_style(prose) == "general"
    t = _batch([note, prose], ids=["n", "p"])
    out = Split(SplitSettings(doc_style=True)).process_batch(t)
    by_parent = {}
    for p, st in zip(out["parent_id"].to_pylist(), out["doc_style"].to_pylist()):
        by_parent.setdefault(p, set()).add(st)
    assert by_parent == {"n": {"clinical"}, "p": {"general"}}
    assert sum(p == "n" for p in out["parent_id"].to_pylist()) > 5  # the note was cut into many sentences
    assert "doc_style" not in Split(SplitSettings()).process_batch(t).column_names
