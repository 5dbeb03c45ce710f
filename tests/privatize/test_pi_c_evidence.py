"""pi_c's evidence rules (issue 50): the lexicon class of a candidate's words, the digit
kinds of clinical numbers, the style's reason for dropping a pi candidate as a feature,
and the one declaration of pi_c's fields. Hand-written sentences, not corpus text."""

from __future__ import annotations

import pytest

from privatize.redaction.evidence import _digit_kinds, candidates, vocab_class


@pytest.mark.parametrize("word,cls", [
    ("HR", "abbr"), ("peep", "abbr"), ("FiO2", "abbr"),   # clinical shorthand
    ("Lasix", "clin"),                                      # a drug name, no known name
    ("hospital", "dict"), ("basilar", "dict"),              # Webster's, no name
    ("Thomas", "name"),                                     # a known name in no dictionary
    ("Price", "dictname"), ("bay", "dictname"),            # a surname that is also a word
    ("Dr.", "title"), ("mrs", "title"),
    ("Zorbleckian", "other"),                               # in no list at all
    ("120", "num"),
])
def test_vocab_class(word, cls):
    assert vocab_class(word) == cls


@pytest.mark.parametrize("tok,kind", [("130-140", "range"), ("97-100%", "range"), ("7.44/32/166", "chain"),
                                      ("5/10/35%", "chain")])
def test_digit_kinds_read_ranges_and_chains_of_values(tok, kind):
    assert kind in _digit_kinds(tok)


@pytest.mark.parametrize("tok", ["120/80", "1800", "555-867-5309"])
def test_two_values_a_time_or_a_phone_are_no_chain(tok):
    assert "chain" not in _digit_kinds(tok)


def _feats(text, piece, kind, **kw):
    s = text.index(piece)
    args = {"style": "clinical", "ner": [], "case_ner": [], "hits": [], "weak": [], "upper_regions": []} | kw
    return next(f for a, b, k, f in candidates(text, **args) if (a, b, k) == (s, s + len(piece), kind))


def test_an_entity_of_clinical_or_dictionary_words_says_so():
    text = "Lungs: left basilar crackles, on Lasix and heparin."
    s = text.index("left basilar crackles")
    f = _feats(text, "left basilar crackles", "ner", ner=[(s, s + 21, "PERSON")])
    assert "ner:all_dict" in f and "ner:all_dict:clinical" in f
    assert not any(x.startswith("ner:namelike") for x in f)
    f = _feats(text, "Lasix", "ner", ner=[(text.index("Lasix"), text.index("Lasix") + 5, "ORG")])
    assert {"ner:all_clin", "ner:all_clin:clinical", "ner:has_clin"} <= set(f)


def test_an_entity_holding_a_name_is_namelike():
    text = "Spoke with brother Thomas Okonkwo by phone."
    s = text.index("Thomas Okonkwo")
    f = _feats(text, "Thomas Okonkwo", "ner", ner=[(s, s + 14, "PERSON")])
    assert "ner:namelike:clinical" in f and "ner:has_name" in f and "ner:has_other" in f
    assert "ner:all_dict" not in f and "ner:all_clin" not in f


def test_capitalised_and_caseless_words_carry_their_class():
    text = "Titrated to keep SBP over 90. PAGED DR ZORBLECKIAN."
    assert {"cap:voc=abbr", "cap:voc=abbr:clinical"} <= set(_feats(text, "SBP", "cap"))
    a = text.index("PAGED")
    f = _feats(text, "ZORBLECKIAN", "caseless", upper_regions=[(a, len(text))])
    assert "caseless:voc=other" in f


def test_the_styles_reason_to_drop_a_hit_is_a_feature():
    text = "Tidal volumes 380-550 overnight."
    s = text.index("380-550")
    hit = (s, s + 7, "REFERENCE_NUMBER", 0.3, "ReferenceNumberRecognizer", False)
    why = "not a reference (a word, a dose or a range)"
    f = _feats(text, "380-550", "rec", hits=[hit], dropped={(s, s + 7, "ReferenceNumberRecognizer"): why})
    assert {"rec:dropped", "rec:REFERENCE_NUMBER:dropped", f"rec:drop={why}"} <= set(f)
    f = _feats(text, "380-550", "rec", hits=[hit])
    assert not any("drop" in x for x in f)
    # an NER entity is looked up by its source, spacy or spacy_case
    f = _feats(text, "380-550", "ner", ner=[(s, s + 7, "CARDINAL")], dropped={(s, s + 7, "spacy"): "a range"})
    assert {"ner:dropped", "ner:drop=a range"} <= set(f)


def test_the_detector_passes_the_clinical_styles_drops_to_the_evidence():
    from privatize.redaction.detect import Detector, PiCOptions
    from privatize.redaction.styles import get_style

    text = "BP 130-170/60 after the bolus, HR 80s."
    det = Detector(pi_c=PiCOptions(policy="strict"))
    (d,) = det.detect([text], want_evidence=True, styles=["clinical"])
    style = get_style("clinical")
    hits, _ = det._patterns(text, None)
    dropped = [h for h in hits + style.extra(text) if style.drop(text, h) is not None]
    assert dropped, "the clinical style drops a pattern hit on a blood pressure range"
    for h in dropped:
        (f,) = [f for a, b, k, f in d.evidence if k == "rec" and (a, b) == (h[0], h[1]) and f"rec:src={h[4]}" in f]
        assert f"rec:drop={style.drop(text, h)}" in f


def test_pic_settings_are_pic_options_with_the_stages_default():
    from privatize.redaction.detect import PiCOptions
    from privatize.stages.redact import PiCSettings

    assert issubclass(PiCSettings, PiCOptions)
    assert list(PiCSettings.model_fields) == list(PiCOptions.model_fields)
    stage, detector = PiCSettings().model_dump(), PiCOptions().model_dump()
    assert stage.pop("policy") == "calibrated" and detector.pop("policy") == "strict"
    assert stage == detector
    assert PiCSettings.model_validate({"digits": False}).policy == "strict"  # switches alone: strict, as before
    with pytest.raises(ValueError):
        PiCOptions(unknown_switch=True)
