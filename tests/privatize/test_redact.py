"""The redact stage and the batch detector with a real spaCy model (built once)."""

import argparse
import json

import pyarrow as pa
import pytest
from pydantic import ValidationError

from privatize.ciphers.tokens import MASK_TOKEN, reserved_spans
from privatize.records import INTERNAL_SCHEMA
from privatize.stage import QUARANTINE

pytestmark = pytest.mark.presidio

redact = pytest.importorskip("privatize.stages.redact")
Redact, RedactSettings = redact.Redact, redact.RedactSettings

REPEATED = ("Jonathan Pemberton met us in Leeds. Later Pemberton called, and Jonathan Pemberton wrote to "
            "Mr. Pemberton again. Jonathan Pemberton never stops.")


def batch(texts):
    n = len(texts)
    t = pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": texts, "individual_id": [None] * n,
                  "meta": [None] * n, "_src": [0] * n, "_line": list(range(n)), "_seg": [0] * n,
                  QUARANTINE: [None] * n}, schema=INTERNAL_SCHEMA)
    return t.drop_columns([QUARANTINE])  # stages get batches without the reserved columns


def stage(**kw):
    s = Redact(RedactSettings(**kw))
    s.setup()
    return s


def masked_by_hand(text, spans, token=MASK_TOKEN):
    out, pos = [], 0
    for sp in spans:
        out += [text[pos:sp["start"]], token]
        pos = sp["end"]
    return "".join(out) + text[pos:]


# ---- propagation --------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    REPEATED,
    "Maria Gonzalez called twice. Gonzalez said the parcel never came; Maria Gonzalez wants a refund.",
    "SYS: May I have your name?\nUSR: Leatrice Hawkins.\nSYS: Thanks Leatrice Hawkins, and your phone?\n"
    "USR: 968-172-8164\nSYS: So 968-172-8164, Leatrice Hawkins?",
])
def test_every_occurrence_of_every_detected_string_is_gone(text):
    out = stage().process_batch(batch([text])).to_pylist()[0]
    assert out["pi_hit"] and out["spans"]
    for sp in out["spans"]:
        assert text[sp["start"]:sp["end"]] not in out["text"], sp
    assert masked_by_hand(text, out["spans"]) == out["text"]  # offsets are into the original text


def test_name_parts_propagate_and_none_turns_it_off():
    out = stage().process_batch(batch([REPEATED])).to_pylist()[0]
    assert "Pemberton" not in out["text"] and "Jonathan" not in out["text"]
    assert any(sp["source"] == "propagation" for sp in out["spans"]) or \
        sum("Pemberton" in REPEATED[s["start"]:s["end"]] for s in out["spans"]) == REPEATED.count("Pemberton")
    plain = stage(propagate="none").process_batch(batch([REPEATED])).to_pylist()[0]
    assert all(sp["source"] != "propagation" for sp in plain["spans"])


def test_propagation_adds_missed_occurrences(redaction_detector):
    # "Quirinus" alone is not found by NER here; detected once as a full name, it is everywhere
    text = "Yesterday Quirinus brought the parcel. Later, Mr. Quirinus Albrecht signed for it."
    spans = redaction_detector.detect([text])[0].spans
    got = [text[s["start"]:s["end"]] for s in spans]
    assert "Mr. Quirinus Albrecht" in got or "Quirinus Albrecht" in got
    assert "Quirinus" in got and next(s for s in spans if text[s["start"]:s["end"]] == "Quirinus")["source"] == \
        "propagation"


# ---- operators ----------------------------------------------------------------------

TEXTS = ["Email jane.doe@example.com or call +44 20 7946 0958 about Jonathan Pemberton.",
         "Card 4111 1111 1111 1111 belongs to Maria Gonzalez of 221B Baker Street, London."]


def test_mask_and_tag():
    m = stage(operator="mask").process_batch(batch(TEXTS)).to_pylist()
    t = stage(operator="tag").process_batch(batch(TEXTS)).to_pylist()
    for orig, rm, rt in zip(TEXTS, m, t):
        assert rm["spans"] == rt["spans"]
        assert rm["text"] == masked_by_hand(orig, rm["spans"])
        assert rm["text"].count(MASK_TOKEN) == len(rm["spans"])
        tags = [f"<{sp['entity_type']}>" for sp in rt["spans"]]
        assert reserved_spans(rt["text"]) and [rt["text"][a:b] for a, b in reserved_spans(rt["text"])] == tags
    assert "<EMAIL_ADDRESS>" in t[0]["text"] and "<PHONE_NUMBER>" in t[0]["text"]
    assert "<CREDIT_CARD>" in t[1]["text"]
    for pii in ("jane.doe@example.com", "7946 0958", "4111", "Pemberton", "Gonzalez", "Baker Street"):
        assert all(pii not in r["text"] for r in m + t)


def test_surrogates_replace_every_span_with_a_value_of_its_type_and_nothing_of_the_secret():
    """``operator: surrogate``: the same spans as ``mask``; each replaced by a made-up value
    of its type (an e-mail under example.*, a card number that passes Luhn, digits for a
    phone); no secret left; and the surrogates depend on the masked record only: a record
    whose secrets differ but whose masked text is the same gets the same surrogates (the
    value-free property CRT's public split needs), the same in one batch or one by one."""
    import re

    m = stage(operator="mask").process_batch(batch(TEXTS)).to_pylist()
    s = stage(operator="surrogate", surrogate_seed=3)
    out = s.process_batch(batch(TEXTS)).to_pylist()
    assert [r["spans"] for r in out] == [r["spans"] for r in m]
    for pii in ("jane.doe@example.com", "7946 0958", "4111", "Pemberton", "Gonzalez", "Baker Street"):
        assert all(pii not in r["text"] for r in out)
    # the surrogates sit where the masks were: cut the text at the masked text's fixed parts
    for orig, rm, rs in zip(TEXTS, m, out):
        parts = rm["text"].split(MASK_TOKEN)
        got = re.fullmatch("(.*?)".join(map(re.escape, parts)), rs["text"]).groups()
        by_type = dict(zip([sp["entity_type"] for sp in rm["spans"]], got))
        assert {"PERSON", "EMAIL_ADDRESS" if orig is TEXTS[0] else "CREDIT_CARD"} <= set(by_type)
        if orig is TEXTS[0]:
            assert re.fullmatch(r"[\w.+-]+@example\.(com|org|net)", by_type["EMAIL_ADDRESS"])
            assert sum(c.isdigit() for c in by_type["PHONE_NUMBER"]) >= 7
        else:
            digits = [int(c) for c in by_type["CREDIT_CARD"] if c.isdigit()][::-1]
            assert sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits)) % 10 == 0
    other = TEXTS[0].replace("jane.doe@example.com", "kim.ray@example.org").replace("Jonathan Pemberton",
                                                                                    "Rosa Lindqvist")
    again = s.process_batch(batch([other, TEXTS[0]])).to_pylist()
    assert masked_by_hand(other, again[0]["spans"]) == m[0]["text"]  # the same masked record...
    assert again[0]["text"] == again[1]["text"] == out[0]["text"]   # ...the same surrogates
    assert stage(operator="surrogate", surrogate_seed=4).process_batch(batch(TEXTS[:1])).to_pylist()[0]["text"] \
        != out[0]["text"]


def test_surrogates_follow_the_secrets_case_and_mask_a_type_they_have_no_generator_for():
    from privatize.redaction.surrogates import Surrogates

    sur = Surrogates("en_GB", 0)
    text = "ring ann lee on 01223 356555, SEE DR. JONES, id 0xAB"
    spans = [{"start": text.index(v), "end": text.index(v) + len(v), "entity_type": t}
             for v, t in (("ann lee", "PERSON"), ("01223 356555", "PHONE_NUMBER"), ("DR. JONES", "PERSON"),
                          ("0xAB", "CRYPTO"))]
    out = sur.replace(text, spans)
    name, rest = out[len("ring "):].split(" on ", 1)
    assert name == name.lower() and name.strip() and name != "ann lee"
    big = rest.split("SEE ", 1)[1].split(",", 1)[0]
    assert big == big.upper() and big != "DR. JONES"
    assert out.endswith(", id <MASK>")
    assert "356555" not in out


def test_a_surrogate_locale_faker_lacks_fails_in_one_line():
    with pytest.raises(ValidationError, match="surrogate_locale: 'xx_YY' is not a Faker locale"):
        RedactSettings(operator="surrogate", surrogate_locale="xx_YY")
    with pytest.raises(ValidationError, match="only used by operator 'surrogate' \\(operator is 'mask'\\)"):
        RedactSettings(surrogate_locale="en_GB")


def test_surrogate_dates_do_not_read_the_clock(monkeypatch):
    """The same record gets the same date surrogate on any day: the date is drawn from the
    seeded generator alone, never from Faker's date provider, whose relative bounds
    ("-30y") read today's date (patched here to fail if read)."""
    import faker.providers.date_time as provider

    from privatize.redaction.surrogates import Surrogates

    class NoClock:
        def __getattr__(self, name):
            raise AssertionError("a surrogate read the clock")

    text = "Seen on 3 March 2019."
    spans = [{"start": 8, "end": 20, "entity_type": "DATE_TIME"}]
    before = Surrogates("en_US", 0).replace(text, spans)
    monkeypatch.setattr(provider, "dtdate", NoClock())
    monkeypatch.setattr(provider, "datetime", NoClock())
    assert Surrogates("en_US", 0).replace(text, spans) == before != text


def test_encrypt_round_trip(tmp_path):
    from privatize.ciphers.entity import EntityCipher
    from privatize.keys import load_key_file, new_key, write_key_file

    write_key_file(new_key("aes-siv"), tmp_path / "e.key")
    s = Redact(RedactSettings(operator="encrypt", key="file:e.key"), context=redact_context(tmp_path))
    s.setup()
    out = s.process_batch(batch(TEXTS + [REPEATED])).to_pylist()
    km = load_key_file(tmp_path / "e.key")
    assert s.key_ids() == {"key": km.key_id}
    cipher = EntityCipher(km)
    for orig, row in zip(TEXTS + [REPEATED], out):
        assert "Person_[" in row["text"] and "Pemberton" not in row["text"] and "Gonzalez" not in row["text"]
        plain, report = cipher.decrypt_text(row["text"])
        assert plain == orig
        assert report.ok == len(row["spans"]) and report.invalid == 0
    # the same entity gives the same token every time (SoE: associations survive)
    toks = [out[2]["text"][a:b] for a, b in reserved_spans(out[2]["text"])]
    assert len(set(toks)) < len(toks)


def redact_context(base):
    from privatize.stage import StageContext

    return StageContext(base_dir=str(base))


# ---- settings -----------------------------------------------------------------------

def test_settings_are_validated():
    with pytest.raises(ValidationError, match="needs a key"):
        RedactSettings(operator="encrypt")
    with pytest.raises(ValidationError, match="only used by operator 'encrypt'"):
        RedactSettings(operator="mask", key="file:k.key")
    with pytest.raises(ValidationError, match="global stage"):
        RedactSettings(propagate="corpus")
    with pytest.raises(ValidationError, match="unknown entity"):
        RedactSettings(entities=["PERSN"])
    with pytest.raises(ValidationError):
        RedactSettings(score_threshold=1.5)
    with pytest.raises(ValidationError):
        RedactSettings(pi_c={"digitz": False})


def test_entities_restrict_what_is_removed():
    out = stage(entities=["EMAIL_ADDRESS"]).process_batch(batch(TEXTS[:1])).to_pylist()[0]
    assert [s["entity_type"] for s in out["spans"]] == ["EMAIL_ADDRESS"]
    assert "Pemberton" in out["text"] and "+44 20 7946 0958" in out["text"]
    assert out["pi_c_hit"] is True  # the conservative flag still sees the rest


# ---- reserved tokens, quarantine, statistics ------------------------------------------

def test_mask_tokens_are_left_alone():
    texts = ["My name is <MASK> and I live in <MASK>. Call John Smith on 020 7946 0958.", MASK_TOKEN,
             "<MASK> <MASK>"]
    out = stage(operator="tag").process_batch(batch(texts)).to_pylist()
    t0 = texts[0]
    masks = [(a, b) for a, b in reserved_spans(t0)]
    for sp in out[0]["spans"]:
        assert all(sp["end"] <= a or sp["start"] >= b for a, b in masks)
    assert out[0]["text"].count(MASK_TOKEN) == 2 and "<PHONE_NUMBER>" in out[0]["text"]
    assert out[1]["text"] == MASK_TOKEN and out[1]["spans"] == [] and out[1]["pi_hit"] is False
    assert out[1]["pi_c_hit"] is False and out[2]["text"] == "<MASK> <MASK>"


def test_null_text_is_quarantined_never_passed_through():
    out = stage().process_batch(batch(["Call Jonathan Pemberton.", None])).to_pylist()
    assert out[0][QUARANTINE] is None and out[0]["pi_hit"] is True
    assert out[1][QUARANTINE] == "no text to redact" and out[1]["spans"] is None


def test_a_record_that_fails_is_quarantined_and_the_rest_go_on(monkeypatch):
    s = stage()
    real = s._detector.detect

    def flaky(texts, **kw):
        if any("BOOM" in t for t in texts):
            if len(texts) == 1:
                raise RuntimeError("simulated failure inside detection")
            raise RuntimeError("batch failure")
        return real(texts, **kw)

    monkeypatch.setattr(s._detector, "detect", flaky)
    out = s.process_batch(batch(["Call Jonathan Pemberton.", "BOOM Maria Gonzalez", "Hi Leeds"])).to_pylist()
    assert out[1][QUARANTINE] == "redaction failed: RuntimeError"
    assert out[1]["text"] == "BOOM Maria Gonzalez" and out[1]["pi_hit"] is None  # the runner keeps it out
    assert out[0][QUARANTINE] is None and "Pemberton" not in out[0]["text"]
    assert out[2][QUARANTINE] is None


def test_statistics_per_row():
    out = stage().process_batch(batch(TEXTS))
    rows = out.to_pylist()
    for r in rows:
        assert r["_stat.chars_redacted"] == sum(s["end"] - s["start"] for s in r["spans"])
        for t in RedactSettings().entities:
            assert r[f"_stat.entities.{t}"] == sum(s["entity_type"] == t for s in r["spans"])
        assert r["_stat.pi_hits"] == 1 and r["_stat.pi_c_hits"] == 1
    assert out.schema.field("spans").type == redact.SPANS_TYPE


def test_stage_is_registered():
    from privatize.stages import build_stage

    st = build_stage(RedactSettings())
    assert isinstance(st, Redact) and st.kind == "redact"


def test_through_the_runner(tmp_path):
    """split -> redact -> split_private with the in-process runner: no PII in the shards,
    entity counts in the manifest, pi/pi_c flags routing sentences."""
    import pyarrow.parquet as pq

    from privatize import run
    from privatize.spec import OutputSettings, PipelineSpec
    from privatize.stages.split import SplitSettings
    from privatize.stages.split_private import SplitPrivateSettings

    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(
        ["Jonathan Pemberton called. The cat sat on the mat.", "Write to jane.doe@example.com today. It rained."])))
    # built without validation so the test does not depend on the spec's union listing "redact"
    spec = PipelineSpec.model_construct(stages=[SplitSettings(), RedactSettings(), SplitPrivateSettings()],
                                        output=OutputSettings(num_shards=1))
    m = run(spec, src, tmp_path / "o")
    rows = pq.read_table(tmp_path / "o" / "shards" / "part-00000-of-00001.parquet").to_pylist()
    text = " ".join(r["text"] for r in rows)
    assert "Pemberton" not in text and "jane.doe" not in text and "The cat sat on the mat." in text
    by_id = {r["doc_id"]: r for r in rows}
    assert by_id["r0#0"]["private"] and by_id["r1#0"]["private"] and not by_id["r0#1"]["private"]
    stats = m["stages"][1]["stats"]
    assert stats["entities.PERSON"] >= 1 and stats["entities.EMAIL_ADDRESS"] == 1 and stats["pi_hits"] >= 2


def test_skip_clean_dedup_masks_repeated_secrets_however_short_and_keeps_clean_repeats(tmp_path):
    """The CRT recipe with ``dedup.skip_clean`` (split, redact, dedup, split_private): a
    16-character canary repeated three times survives once, its repeats become <MASK>
    (private); a repeated clean sentence keeps its text and stays public every time.
    By hand from the texts: r0#1, r1#1 and r2#0 are the canary; r0#0 and r2#1 clean."""
    import pyarrow.parquet as pq

    from privatize import run
    from privatize.spec import parse_spec

    canary, clean = "My ID is: 123456", "The cat sat on the mat."
    texts = [f"{clean}\n\n{canary}", f"It rained all day.\n\n{canary}", f"{canary}\n\n{clean}"]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    for name, dedup in (("skip", {"skip_clean": True}), ("len20", None)):
        stages = [{"kind": "split"}, {"kind": "redact", "operator": "mask"}, {"kind": "split_private"}]
        if dedup:
            stages.insert(2, {"kind": "dedup", **dedup})
        else:  # the old recipe: dedup before redact with a length threshold
            stages.insert(1, {"kind": "dedup", "min_length": 20})
        run(parse_spec({"version": 1, "stages": stages, "output": {"num_shards": 1}}), src, tmp_path / name)
        rows = {r["doc_id"]: r for r in pq.read_table(tmp_path / name / "shards").to_pylist()}
        texts_out = {k: r["text"] for k, r in rows.items()}
        if name == "skip":
            assert texts_out == {"r0#0": clean, "r0#1": "My ID is: <MASK>", "r1#0": "It rained all day.",
                                 "r1#1": "<MASK>", "r2#0": "<MASK>", "r2#1": clean}
            assert [k for k, r in rows.items() if r["dedup_hit"]] == ["r1#1", "r2#0"]
            assert not rows["r0#0"]["private"] and not rows["r2#1"]["private"]
        else:  # the 16-character canary escapes min_length 20 (three copies reach training),
            # while the 23-character clean sentence is masked and made private
            assert [texts_out[k] for k in ("r0#1", "r1#1", "r2#0")] == ["My ID is: <MASK>"] * 3
            assert [k for k, r in rows.items() if r["dedup_hit"]] == ["r2#1"] and rows["r2#1"]["private"]
        assert all(rows[k]["private"] for k in ("r0#1", "r1#1", "r2#0"))


# ---- the conservative policy -----------------------------------------------------------

def test_pi_c_catches_what_pi_misses(redaction_detector):
    texts = ["Yesterday Quirinus brought the parcel.", "There were 17 cats in the yard.", "ask zelda about it",
             "The cat sat on the mat."]
    dets = redaction_detector.detect(texts, want_intervals=True)
    for t, d in zip(texts[:3], dets[:3]):
        assert d.spans == [] and d.pi_c_hit, t  # pi finds nothing, pi_c flags the record
    assert [texts[0][a:b] for a, b in dets[0].pi_c_intervals] == ["Yesterday", "Quirinus"]
    assert [texts[1][a:b] for a, b in dets[1].pi_c_intervals] == ["17"]
    assert "zelda" in [texts[2][a:b] for a, b in dets[2].pi_c_intervals]  # no case: content words
    assert dets[3].spans == [] and not dets[3].pi_c_hit and dets[3].pi_c_intervals == []


def test_pi_c_signals_can_be_turned_off():
    s = stage(pi_c={"digits": False, "recognizer_hits": False, "all_ner_labels": False})
    assert s.process_batch(batch(["There were 17 cats in the yard."])).to_pylist()[0]["pi_c_hit"] is False


def test_upper_case_names(redaction_detector):
    text = "NOTICE TO JONATHAN PEMBERTON OF LEEDS: YOUR PARCEL IS LATE."
    got = [text[s["start"]:s["end"]] for s in redaction_detector.detect([text])[0].spans]
    assert any("PEMBERTON" in g for g in got)


# ---- the detect command and detect_spans ------------------------------------------------

def test_detect_spans_entry_point():
    from privatize.redaction.detect import detect_spans

    [spans] = detect_spans(["Call +44 20 7946 0958 now."])
    assert spans == [{"start": 5, "end": 21, "entity_type": "PHONE_NUMBER", "score": 1.0,
                      "source": "InternationalPhoneRecognizer"}]


def test_detect_command(tmp_path, capsys):
    from privatize.commands import detect as cmd
    from privatize.errors import InputError

    src = tmp_path / "in.jsonl"
    recs = [{"id": "a", "text": "Call +44 20 7946 0958 now."}, {"doc_id": "b", "text": "The cat sat on the mat."},
            {"text": "Email jane.doe@example.com"}]
    src.write_text("\n".join(json.dumps(r) for r in recs) + "\n\n", encoding="utf-8")
    p = argparse.ArgumentParser()
    cmd.register(p.add_subparsers())
    args = p.parse_args(["detect", "--input", str(src)])
    assert args.func(args) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0] == {"id": "a", "spans": [{"start": 5, "end": 21, "entity_type": "PHONE_NUMBER", "score": 1.0,
                                              "source": "InternationalPhoneRecognizer"}]}
    assert lines[1] == {"doc_id": "b", "spans": []}
    assert set(lines[2]) == {"spans"} and "EMAIL_ADDRESS" in [s["entity_type"] for s in lines[2]["spans"]]
    assert all(set(s) == {"start", "end", "entity_type", "score", "source"} for ln in lines for s in ln["spans"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.jsonl:2: expected a JSON object"):
        args = p.parse_args(["detect", "--input", str(bad)])
        args.func(args)


# ---- pi_c settings (issue 17: the public fraction of CRT against pi_c's recall) ----------

def _pi_c(texts, **options):
    from privatize.redaction.detect import Detector, PiCOptions

    dets = Detector(pi_c=PiCOptions(**options)).detect(texts, want_intervals=True)
    return [[t[a:b] for a, b in d.pi_c_intervals] for t, d in zip(texts, dets)]


def test_speaker_labels_setting():
    texts = ["USR: All good.", "SYS: Bye.\nUSR: Where is my package?"]
    assert all("USR" in got for got in _pi_c(texts, speaker_labels=True))
    assert _pi_c(texts, speaker_labels=False) == [[], []]
    # only a tag opening a line and followed by a colon is a label
    assert "USR" in _pi_c(["Ask the USR team: now."], speaker_labels=False)[0]
    # a tag NER reads as a PERSON still counts
    assert "ANNA" in _pi_c(["ANNA: I will call you.\nBOB: Fine."], speaker_labels=False)[0]


def test_relative_dates_setting():
    texts = ["I ordered a pot several days ago."]
    assert _pi_c(texts, relative_dates=True) == [["several days ago"]]
    assert _pi_c(texts, relative_dates=False) == [[]]
    # a date that names a day still counts
    assert _pi_c(["We met on 12 March 2021."], relative_dates=False, digits=False, capitalized=False) != [[]]


def test_sentence_initial_and_digit_min_length_settings():
    off = {"relative_dates": False}
    assert _pi_c(["Yesterday Quirinus brought the parcel."], sentence_initial=False, **off) == [["Quirinus"]]
    no_ner = {"all_ner_labels": False, "recognizer_hits": False}
    assert _pi_c(["There were 17 cats and 2024 dogs."], digit_min_length=3, **no_ner) == [["2024"]]


def test_contracted_function_words_are_function_words():
    from privatize.redaction.spans import is_function_word
    from privatize.redaction.words import stop_words

    stops = stop_words()
    for w in ("It's", "That's", "What’s", "Don't", "Can't", "Won't", "We'll", "They're"):
        assert is_function_word(w, stops), w
    for w in ("Patrick's", "Verify", "Quirinus"):
        assert not is_function_word(w, stops), w
    assert _pi_c(["That's all.", "What's up?"]) == [[], []]


def test_pi_c_settings_reach_the_detector():
    s = stage(pi_c={"speaker_labels": False, "relative_dates": False, "sentence_initial": False,
                    "digit_min_length": 2})
    opts = s._detector.pi_c
    assert (opts.speaker_labels, opts.relative_dates, opts.sentence_initial, opts.digit_min_length) == \
        (False, False, False, 2)
    with pytest.raises(ValidationError):
        RedactSettings(pi_c={"digit_min_length": 0})


def test_miss_share_leaves_a_seeded_batch_independent_share_of_hits_in_the_clear():
    """The CRT paper's gamma (issue 37): the missed hits are exactly those whose seeded hash
    falls under the share, computed here independently; the same in one batch or in many;
    pi_c still flags the record; the stat counts them."""
    import hashlib

    texts = TEXTS * 4
    full = stage(operator="mask").process_batch(batch(texts)).to_pylist()
    s = stage(operator="mask", miss_share=0.3, miss_seed=7)
    one = s.process_batch(batch(texts)).to_pylist()
    many = [r for k in range(0, len(texts), 3) for r in s.process_batch(batch(texts[k:k + 3])).to_pylist()]
    assert [r["text"] for r in one] == [r["text"] for r in many]

    def missed(text, sp):
        h = hashlib.sha256(f"7\x00{sp['start']}\x00{sp['end']}\x00{text}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2 ** 64 < 0.3

    total = dropped = 0
    for orig, f, r in zip(texts, full, one):
        want = [sp for sp in f["spans"] if not missed(orig, sp)]
        assert r["spans"] == want and r["text"] == masked_by_hand(orig, want)
        assert r["_stat.pi_missed"] == len(f["spans"]) - len(want)
        assert r["pi_c_hit"] == f["pi_c_hit"]
        total, dropped = total + len(f["spans"]), dropped + len(f["spans"]) - len(want)
    assert 0 < dropped < total
    assert "_stat.pi_missed" not in full[0]
    with pytest.raises(ValidationError):
        RedactSettings(miss_share=0.6)
