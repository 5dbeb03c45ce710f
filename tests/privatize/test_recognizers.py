"""The better recognizers, with hand-made positives and negatives (published test card
numbers, the UK postcode formats of the Royal Mail's PAF guide, real switchboard
numbers)."""

import pytest

pytestmark = pytest.mark.presidio

rec = pytest.importorskip("privatize.redaction.recognizers")


def found(recognizer, text: str, min_score: float = 0.0) -> list[str]:
    """What ``recognizer`` finds through Presidio's own ``analyze`` (no NLP artifacts)."""
    res = recognizer.analyze(text, recognizer.supported_entities)
    return [text[r.start:r.end] for r in res if r.score >= min_score]


# ---- Luhn and cards --------------------------------------------------------------------

@pytest.mark.parametrize("number, valid", [
    ("79927398713", True),  # the worked example of the Luhn algorithm
    ("79927398710", False),
    ("4111111111111111", True),  # Visa test card
    ("4111111111111112", False),
    ("378282246310005", True),  # Amex test card
    ("501800000009", True),  # 12 digits, check digit computed by hand (5+0+1+8 -> 9)
    ("501800000008", False),
])
def test_luhn(number, valid):
    assert rec.luhn_valid(number) is valid


@pytest.mark.parametrize("text, card", [
    ("card 4111 1111 1111 1111 on file", "4111 1111 1111 1111"),
    ("paid with 4111-1111-1111-1111.", "4111-1111-1111-1111"),
    ("amex 378282246310005", "378282246310005"),
    ("diners 30569309025904 ok", "30569309025904"),  # 14 digits
    ("maestro 501800000009", "501800000009"),  # 12 digits: Presidio's default misses it
    ("Visa 4222222222222 (13 digits)", "4222222222222"),
])
def test_cards_found(text, card):
    assert found(rec.LuhnCreditCardRecognizer(), text) == [card]


@pytest.mark.parametrize("text", [
    "card 4111 1111 1111 1112",  # Luhn fails
    "card 4111 1111-1111 1111",  # mixed separators
    "id 4111 1111 111",  # 11 digits
    "order 9111111111111111",  # 16 digits, Luhn holds, but no card starts with 9
])
def test_cards_refused(text):
    assert found(rec.LuhnCreditCardRecognizer(), text) == []


def spans(recognizer, text: str) -> list[tuple[int, int, str]]:
    """(start, end, entity) of what ``recognizer`` finds through ``analyze``, sorted."""
    return sorted((r.start, r.end, r.entity_type) for r in recognizer.analyze(text, recognizer.supported_entities))


def at(text: str, piece: str, entity: str, nth: int = 0) -> tuple[int, int, str]:
    start = -1
    for _ in range(nth + 1):
        start = text.index(piece, start + 1)
    return start, start + len(piece), entity


@pytest.mark.parametrize("text, cards", [
    # issue 51: the greedy pattern ran on into the next card and the whole failed Luhn
    ("4111 1111 1111 1111 5500 0000 0000 0004", ["4111 1111 1111 1111", "5500 0000 0000 0004"]),
    ("cards 4111111111111111 5500000000000004 on file", ["4111111111111111", "5500000000000004"]),
    ("4111-1111-1111-1111 5555-5555-5555-4444.", ["4111-1111-1111-1111", "5555-5555-5555-4444"]),
    ("378282246310005 4111111111111111 5555555555554444", ["378282246310005", "4111111111111111",
                                                           "5555555555554444"]),
    ("amex 3782 822463 10005 visa 4111 1111 1111 1111", ["3782 822463 10005", "4111 1111 1111 1111"]),
])
def test_cards_in_a_row_each_with_its_span(text, cards):
    r = rec.LuhnCreditCardRecognizer()
    assert spans(r, text) == [at(text, c, "CREDIT_CARD") for c in cards]
    # the batch detector runs the same finder
    from privatize.redaction.compiled import CompiledRecognizer

    assert sorted((s, e, t) for s, e, t, _sc, _n in CompiledRecognizer(r).run(text)) == spans(r, text)


@pytest.mark.parametrize("text, card", [
    ("card 4111 1111 1111 1111 on file", "4111 1111 1111 1111"),
    ("paid with 4111-1111-1111-1111.", "4111-1111-1111-1111"),
    ("ref 9111 4111 1111 1111 1111", "4111 1111 1111 1111"),  # a run not starting 1-6 is skipped, as before
])
def test_single_card_spans(text, card):
    assert spans(rec.LuhnCreditCardRecognizer(), text) == [at(text, card, "CREDIT_CARD")]


@pytest.mark.parametrize("text", [
    "order 1234 5678 9012 3456 7890 1234",  # 24 digits: neither one card nor two
    "order 12345678901234567890123456",
    "4111 1111 1111 1111-5500 0000 0000 0004",  # a hyphen binds: one 32-digit number
    "4111 1111 1111 1111 1234",  # a card and a remainder is no split
    "call 0800 123 4567 or 0800 765 4321",
    "phone +44 20 7946 0958, fax +44 20 7946 0959",
    "account 12345678 sort code 12-34-56",
])
def test_digit_runs_that_are_not_cards(text):
    assert spans(rec.LuhnCreditCardRecognizer(), text) == []


# ---- IBANs ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, iban", [
    # issue 51: a lower-case word after the blocks (Presidio's pattern, caseless, read it
    # as one more block and the whole failed the checksum)
    ("GB82 WEST 1234 5698 7654 32 please", "GB82 WEST 1234 5698 7654 32"),
    ("to ES91 2100 0418 4502 0005 1332 please", "ES91 2100 0418 4502 0005 1332"),
    ("to ES91 2100 0418 4502 0005 1332 ok", "ES91 2100 0418 4502 0005 1332"),
    ("FR14 2004 1010 0505 0001 3M02 606 thanks", "FR14 2004 1010 0505 0001 3M02 606"),
    ("Wire the refund to GB82WEST12345698765432.", "GB82WEST12345698765432"),
    ("IBAN DE89370400440532013000", "DE89370400440532013000"),
    ("It is DE89 3704 0044 0532 0130 00.", "DE89 3704 0044 0532 0130 00"),
    ("pay DE89-3704-0044-0532-0130-00 today", "DE89-3704-0044-0532-0130-00"),
    ("my iban is gb48awjv07221741105646", "gb48awjv07221741105646"),
    ("PT50 0002 0123 1234 5678 9015 4 please", "PT50 0002 0123 1234 5678 9015 4"),  # Presidio's PT format is short
])
def test_iban_spans(text, iban):
    assert spans(rec.BlockIbanRecognizer(), text) == [at(text, iban, "IBAN_CODE")]


def test_two_ibans_in_a_row():
    text = "GB82 WEST 1234 5698 7654 32 DE89 3704 0044 0532 0130 00"
    assert spans(rec.BlockIbanRecognizer(), text) == [at(text, "GB82 WEST 1234 5698 7654 32", "IBAN_CODE"),
                                                      at(text, "DE89 3704 0044 0532 0130 00", "IBAN_CODE")]


@pytest.mark.parametrize("text", ["GB82 WEST 1234 5698 7654 33 please", "order AB12 3456 7890 1234 5678 ok",
                                  "DE89370400440532013001"])
def test_not_ibans(text):
    assert spans(rec.BlockIbanRecognizer(), text) == []


def test_iban_scores_as_presidio():
    r = rec.BlockIbanRecognizer()
    assert [x.score for x in r.analyze("GB82 WEST 1234 5698 7654 32", ["IBAN_CODE"])] == [1.0]
    assert [x.score for x in r.analyze("gb82 west 1234 5698 7654 32", ["IBAN_CODE"])] == [0.5]  # only upper-cased


# ---- UK postcodes and US ZIP codes -------------------------------------------------------

@pytest.mark.parametrize("code", ["SW1A 1AA", "M1 1AE", "B33 8TH", "CR2 6XH", "DN55 1PT", "EC1A 1BB", "W1A 0AX"])
def test_uk_postcodes(code):
    assert found(rec.UkPostcodeRecognizer(), f"Send it to 10 Downing St, London {code}, please.") == [code]


@pytest.mark.parametrize("text", ["Q1 1AA is not a district", "M1 1CI has C and I inward", "call SW1A1AAA now",
                                  "product AB12"])
def test_uk_postcode_negatives(text):
    assert found(rec.UkPostcodeRecognizer(), text) == []


def test_zip_after_state_and_with_context():
    r = rec.UsZipCodeRecognizer()
    assert found(r, "Springfield, IL 62704", 0.5) == ["62704"]
    assert found(r, "Austin, TX 78701-1234", 0.5) == ["78701-1234"]
    assert found(r, "we sold 62704 units", 0.3) == []  # a bare number is weak (pi_c only)


# ---- phone numbers ---------------------------------------------------------------------

@pytest.mark.parametrize("text, number", [
    ("call +44 20 7946 0958 today", "+44 20 7946 0958"),  # London
    ("Google: +1 650-253-0000.", "+1 650-253-0000"),
    ("Paris office +33 1 42 68 53 00", "+33 1 42 68 53 00"),
    ("Berlin 0049 30 901820", "0049 30 901820"),
    ("US (650) 253-0000 x123", "(650) 253-0000 x123"),
    ("tel 020 7946 0958", "020 7946 0958"),  # UK national format with trunk 0
])
def test_valid_international_numbers_score_high(text, number):
    assert found(rec.InternationalPhoneRecognizer(), text, 0.99) == [number]


@pytest.mark.parametrize("text, number", [
    ("They're not answering at (88) 684-334", "(88) 684-334"),
    ("You can call 73 448 266", "73 448 266"),
    ("Phone: 88 165 40 96", "88 165 40 96"),
])
def test_phone_shaped_numbers_keep_the_base_score(text, number):
    r = rec.InternationalPhoneRecognizer()
    res = r.analyze(text, ["PHONE_NUMBER"])
    assert [(text[x.start:x.end], x.score) for x in res] == [(number, 0.4)]


@pytest.mark.parametrize("text", [
    "on 2013-03-14 we met", "at 12:53:39", "from 192.168.100.200", "SSN 078-05-1120", "room 1234",
    "in 2019 25 people came", "ref 000000000",
])
def test_not_phone_numbers(text):
    assert found(rec.InternationalPhoneRecognizer(), text) == []


# ---- street addresses ------------------------------------------------------------------

@pytest.mark.parametrize("text, address", [
    ("Write to 1600 Pennsylvania Avenue NW, Washington, DC 20500 soon.",
     "1600 Pennsylvania Avenue NW, Washington, DC 20500"),
    ("He lived at 221B Baker Street for years.", "221B Baker Street"),
    ("My address is 65775 Craig Union North Zachary, WI 42884.", "65775 Craig Union North Zachary, WI 42884"),
    ("69 Roheline 43\n Apt. 305\n Lepassaare\n Marshall Islands 56293",
     "69 Roheline 43\n Apt. 305\n Lepassaare\n Marshall Islands 56293"),
    ("ship to 12 main street, apt 4, springfield", "12 main street, apt 4, springfield"),
    ("P.O. Box 1234, Denver, CO 80202", "P.O. Box 1234, Denver, CO 80202"),
])
def test_addresses(text, address):
    assert found(rec.StreetAddressRecognizer(), text) == [address]


@pytest.mark.parametrize("text", ["I bought 2 apples and 3 pears.", "our 3 founders: Kovalev, Lee and Phillips",
                                  "It took 10 years of work.", "See you at 5 pm tomorrow."])
def test_address_negatives(text):
    assert found(rec.StreetAddressRecognizer(), text) == []


def test_strong_address_evidence_scores_one():
    r = rec.StreetAddressRecognizer()
    [res] = r.analyze("at 1600 Pennsylvania Avenue NW, Washington, DC 20500", ["STREET_ADDRESS"])
    assert res.score == 1.0
    [res] = r.analyze("at 221B Baker Street", ["STREET_ADDRESS"])
    assert res.score == pytest.approx(0.35)


# ---- reference numbers, ages, names, occupations -----------------------------------------

def test_reference_numbers():
    r = rec.ReferenceNumberRecognizer()
    assert found(r, "The tracking number is 3J3Q5WPTK1.", 0.4) == ["3J3Q5WPTK1"]
    assert found(r, "My order ID: 170-69903-9354", 0.6) == ["170-69903-9354"]
    assert found(r, "ticket #448812 closed", 0.4) == ["448812"]
    assert found(r, "COVID vaccines and ABC12 kits", 0.3) == []


def test_ages():
    r = rec.AgeRecognizer()
    assert found(r, "a 42-year-old man", 0.5) == ["42"]
    assert found(r, "she is 37 years old", 0.5) == ["37"]
    assert found(r, "aged 29, he moved", 0.5) == ["29"]
    assert found(r, "I have 3 cats", 0.01) == []


def test_names_after_titles_and_cues():
    r = rec.TitledNameRecognizer()
    assert found(r, "Please ask Dr. Maria van Helsing about it.") == ["Dr. Maria van Helsing"]
    assert found(r, "Hello, my name is Tamara Quist.") == ["Tamara Quist"]
    assert found(r, "Dear Customer, I'm Happy to help.") == []


def test_name_lines_need_a_block_of_lines():
    r = rec.NameLineRecognizer()
    assert found(r, ">Nathaniel Perkovic\n>Smith Ltd.\n>31 Vesturgata 66") == ["Nathaniel Perkovic", "Smith Ltd."]
    assert found(r, "Nathaniel Perkovic") == []
    assert found(r, "Thank You\nFor All\nThe Help") == []


def test_occupation_fast_path_equals_its_pattern():
    """The set lookup must find exactly what the documented pattern finds."""
    import regex

    r = rec.OccupationRecognizer()
    text = ("Matthew Reumer, the Civil drafter, said hi.\nSystems administrator\nThe nurses and the Liquid waste "
            "treatment plant and system operator met a gas-furnace installer. Engineers rule; engineering no.")
    rx = regex.compile(r.patterns[0].regex, r.global_regex_flags)
    assert [text[s:e] for s, e, _, _ in r.find_candidates(text)] == [m.group(0) for m in rx.finditer(text)]
    assert "Civil drafter" in found(r, text) and "Systems administrator" in found(r, text)


# ---- inside Presidio's own AnalyzerEngine ------------------------------------------------

@pytest.mark.slow
def test_registered_in_presidio_analyzer_engine():
    """The recognizers work the Presidio way: added to an AnalyzerEngine's registry (built
    from Presidio's default configuration with only the model name changed), they find
    what the default registry misses."""
    from privatize.redaction.engine import presidio_analyzer_engine

    text = "Maestro 501800000009, call (11) 4706-6184 or write to 69 Roheline 43, Apt. 305, Lepassaare 56293."
    default = presidio_analyzer_engine()
    custom = presidio_analyzer_engine(custom=True)
    assert custom is presidio_analyzer_engine(custom=True)  # cached per process

    def hits(engine):
        return {(text[r.start:r.end], r.entity_type) for r in engine.analyze(text, language="en")}

    ours = hits(custom)
    assert ("501800000009", "CREDIT_CARD") in ours and ("501800000009", "CREDIT_CARD") not in hits(default)
    assert ("(11) 4706-6184", "PHONE_NUMBER") in ours
    assert any(t == "STREET_ADDRESS" and s.startswith("69 Roheline 43") for s, t in ours)
