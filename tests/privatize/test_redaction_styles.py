"""Issue 35: document styles and their rules, with hand-checked positives and negatives
drawn from the three real development corpora (``../shared/data/real_dev``; the snippets
are quoted here so the tests need no data):

* clinical: PhysioNet deid ICU nursing notes (MIMIC-II, PHI replaced by surrogates);
* legal: TAB, European Court of Human Rights judgments (train split);
* chat: MultiWOZ 2.1 validation dialogues (tokenised, lower case, as distributed).

The false-positive classes of the issue are among the negatives: drug names and clinical
abbreviations read as names, vital signs and ventilator settings read as dates, public
entities (governments, courts, nationalities of states) in judgments, weekdays and
cuisines in dialogues."""

import pyarrow as pa
import pytest

pytestmark = pytest.mark.presidio

detect = pytest.importorskip("privatize.redaction.detect")
styles = pytest.importorskip("privatize.redaction.styles")
redact = pytest.importorskip("privatize.stages.redact")

# PhysioNet deid, patient 2, note 2 (opening, abridged)
CLINICAL = (" 74 YO WOMAN TRANSFERRED FROM VAMC HOSPITAL FOR CATH/ACUTE MI. \n \nPMH: CAD WITH NQWMI 5/13, HTN, "
            "SUBCLAVIAN STEAL WITH R SBP 40 POINTS LOWER THAN LEFT SBP. EF 50%. \n \nHPI: PT IN USOH UNTIL 8/23 WHEN "
            "PRESENTED AT VAMC HOSPITAL WITH SEVERAL HOURS OF SEVERE ABD PAIN AND NAUSEA. PT TRANSFERRED TO GH FOR "
            "CATH. \n \nRESP: INTUABTED ON 55% 700 X 15, NO SPON BREATHS. LUNGS WITH CRACKLES BILAT BASES. LASIX 20 "
            "MG GIVEN X1 AT 1400 WITH MOD OUTPUT SO FAR. ABD SOFT, FOLEY DRAINING CLEAR YELLOW URINE. MAE. CONT TO "
            "MONITOR IN CCU. \n")
# TAB, application 18403/91 (opening, abridged)
LEGAL = ("PROCEDURE\n\nThe case originated in an application (no. 18403/91) against the Republic of Turkey lodged "
         "with the European Commission of Human Rights (“the Commission”) under former Article 25 of the Convention "
         "for the Protection of Human Rights and Fundamental Freedoms (“the Convention”) by a Cypriot national, Mrs "
         "Anna Evagorou Christou (“the applicant”), on 31 May 1991.\n\nThe applicant, who was granted legal aid, "
         "was represented by Mr A. Demetriades, a lawyer practising in Nicosia. The Turkish Government (“the "
         "Government”) were represented by their Agent, Mr Z.M. Necatigil.\n\nThe applicant alleged that the Turkish "
         "occupation of the northern part of Cyprus had deprived her of her home and properties. The Court of "
         "Cassation dismissed the appeal, and the Kayseri Administrative Court upheld the decision of the Chamber.")
# MultiWOZ 2.1 validation dialogues (turns abridged)
CHAT = ("I need to book a hotel in the east that has 4 stars .\n"
        "I can help you with that . What is your price range ?\n"
        "Could you find a hotel called the acorn guest house ?\n"
        "The Acorn Guest House is located on 154 chesterton road . Would you like to book ?\n"
        "yes , please book the acorn guest house for saturday . I also want some indian food .\n"
        "There are several indian restaurants . Booking was successful , reference number is 7GAWK763 .")
GENERAL = "Hi Dana,\n\nThe invoice for March is attached. Let me know if anything is missing.\n\nThanks,\nOmar"


@pytest.fixture(scope="module")
def detector():
    return detect.Detector()


def spans(det, text):
    r = det.detect([text])[0]
    return r, {text[s["start"]:s["end"]]: s["entity_type"] for s in r.spans}


def flagged(found: dict, piece: str) -> bool:
    return any(piece in k for k in found)


@pytest.mark.parametrize("text, style", [(CLINICAL, "clinical"), (LEGAL, "legal"), (CHAT, "chat"),
                                         (GENERAL, "general")])
def test_auto_style(text, style):
    assert styles.detect_style(text) == style


def test_clinical_positives_and_negatives(detector):
    r, found = spans(detector, CLINICAL)
    assert r.style == "clinical"
    for phi in ("VAMC", "5/13", "8/23", "GH"):
        assert flagged(found, phi), (phi, found)
    # drug names, abbreviations, eponymous devices, vital signs and times are not PHI
    for word in ("LASIX", "ABD", "SOFT", "FOLEY", "MAE", "CONT", "CCU", "1400", "55%", "700 X 15"):
        assert not flagged(found, word), (word, found)


@pytest.mark.parametrize("text, name", [
    ("pt with mild stridor noted, dr green aware. however sats stable.", "green"),  # PhysioNet deid
    ("SPOKE WITH DAUGHTER PHILOMENA ON PHONE SEVERAL TIMES. PT ON LASIX GTT, HR 80S. NEURO: MAE.", "PHILOMENA"),
    ("Plan to extubate tomorrow. s. roberto rrt. BS coarse, sx for thick secretions, abg pending.", "roberto"),
])
def test_clinical_names_next_to_roles(detector, text, name):
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert flagged(found, name), found


@pytest.mark.parametrize("text, not_date", [
    ("PT ON PSV 10/5 WITH 40% FIO2, TOL WELL. SUCTIONED FOR THICK SPUTUM.", "10/5"),
    ("Pt remains on CPAP 5/5 this am, sats 98%. Lungs coarse, suctioned.", "5/5"),
    ("IV D5 1/2 NS at 100cc/hr, BP 130/80, HR 88 SR, lasix given.", "1/2"),
])
def test_clinical_settings_are_not_dates(detector, text, not_date):
    _, found = spans(detector, text)
    assert not flagged(found, not_date), found


def test_a_forced_style_overrides_auto():
    text = "PT TRANSFERRED TO GH FOR CATH. LASIX 20 MG GIVEN. ABD SOFT, FOLEY DRAINING. MAE. CONT TO MONITOR IN CCU."
    r, found = spans(detect.Detector(style="general"), text)
    assert r.style == "general" and flagged(found, "LASIX")  # the re-cased pass reads the drug as a name
    r, found = spans(detect.Detector(), text)
    assert r.style == "clinical" and flagged(found, "GH") and not flagged(found, "LASIX")


def test_legal_public_entities_and_application_numbers(detector):
    r, found = spans(detector, LEGAL)
    assert r.style == "legal"
    assert found.get("18403/91") == "REFERENCE_NUMBER"
    for person in ("Anna Evagorou Christou", "Demetriades", "Necatigil", "31 May 1991"):
        assert flagged(found, person), (person, found)
    # the respondent state, its government, courts without a place, defined terms
    for public in ("Republic of Turkey", "Turkish Government", "Court of Cassation", "Chamber", "Commission"):
        assert not flagged(found, public), (public, found)
    assert not any(k == "Turkish" for k in found), found  # "the Turkish occupation"
    assert flagged(found, "Kayseri")  # a court named after a place tells where


def test_chat_venues_weekdays_cuisines(detector):
    r, found = spans(detector, CHAT)
    assert r.style == "chat"
    lower = {k.lower() for k in found}
    assert "acorn guest house" in lower
    assert sum(1 for k in found if k.lower() == "acorn guest house") >= 2  # every turn, any case
    assert flagged(found, "chesterton road") and flagged(found, "7GAWK763")
    for word in ("saturday", "indian", "east"):
        assert not any(word in k.lower() for k in found), (word, found)


def test_caseless_propagation_only_in_chat(detector):
    text = "Saigon City is a good place .\nI would like to book saigon city for 2 people .\nok thanks"
    det = detect.Detector(style="chat")
    _, found = spans(det, text)
    assert "saigon city" in found and "Saigon City" in found
    _, found = spans(detect.Detector(style="general"), text)
    assert "saigon city" not in found


def test_unknown_style_is_refused():
    with pytest.raises(ValueError, match="unknown style 'poetry'"):
        detect.Detector(style="poetry")
    with pytest.raises(Exception, match="style"):
        redact.RedactSettings(style="poetry")


def test_stage_counts_documents_per_style():
    from privatize.records import INTERNAL_SCHEMA
    from privatize.stage import QUARANTINE

    texts = [CLINICAL, LEGAL, CHAT, GENERAL, GENERAL]
    n = len(texts)
    t = pa.table({"doc_id": [f"d{i}" for i in range(n)], "text": texts, "individual_id": [None] * n,
                  "meta": [None] * n, "_src": [0] * n, "_line": list(range(n)), "_seg": [0] * n,
                  QUARANTINE: [None] * n}, schema=INTERNAL_SCHEMA).drop_columns([QUARANTINE])
    st = redact.Redact(redact.RedactSettings())
    st.setup()
    out = st.process_batch(t)
    got = {c.split(".")[-1]: sum(out[c].to_pylist()) for c in out.column_names if c.startswith("_stat.styles.")}
    assert got == {"clinical": 1, "legal": 1, "chat": 1, "general": 2}
    forced = redact.Redact(redact.RedactSettings(style="legal"))
    forced.setup()
    out = forced.process_batch(t)
    assert sum(out["_stat.styles.legal"].to_pylist()) == n


def test_drug_words_come_from_the_maintained_dictionary():
    from privatize.redaction.styles.vocab import drug_words, is_clinical_word

    words = drug_words()
    assert len(words) > 20_000
    for drug in ("lasix", "captopril", "heparin", "propofol", "ativan"):
        assert drug in words
    assert is_clinical_word("Foley") and is_clinical_word("CCU") and not is_clinical_word("Philomena")


# ---- clinical: names, places, numbers (PhysioNet deid dev snippets) ------------------

@pytest.mark.parametrize("text, phi", [
    ("PLAN INCLUDES CT GUIDED TAP...DICK CUCCHIARA (RESIDENT) WORKING ON IT. PT ON LASIX GTT.", "DICK CUCCHIARA"),
    ("POST TEE SHOWING ONLY MILD TR, Z. MILLER AWARE AND WILL FOLLOW. HR 80S SR, BP STABLE ON NEO.", "Z. MILLER"),
    ("PHONE CONVERSATION WITH PT'S SON IN PIKESVILLE, THE DECISION WAS MADE. CONT LASIX, HEP GTT.", "PIKESVILLE"),
    ("77 YO FEMALE FOUND UNRESONSIVE IN ST MARY HOSPITAL. TRANSFERRED TO CCU. ON DOPA AND LEVO.", "ST MARY"),  # "HOSPITAL" stays
    ("Pt seen for resp care. Sats 95% on 40% fio2, suctioned for thick secretions.\nPager #32007\n", "32007"),
    ("PMH: OVARIAN CA (12/93) S/P DEBULKING, TAH. CAD, HTN. ON LASIX AND KCL. BP STABLE.", "12/93"),
])
def test_clinical_names_places_numbers(detector, text, phi):
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert flagged(found, phi), found


@pytest.mark.parametrize("text, word", [
    ("Fentanyl gtt weaned. Receiving Fetanyl boluses prn, Levoquin started for pna. BP 110/60, HR 88.", "Fetanyl"),
    ("EKG WITH ST DEPRESSION IN LAT LEADS, TROP POS. HEP GTT, NTG GTT. BP 100/60. LASIX GIVEN.", "DEPRESSION"),
    ("SATS IN THE HIGH 90'S ON 2L NC. LUNGS CLEAR. ABD SOFT. FOLEY DRAINING. CONT LASIX.", "HIGH"),
    ("Pt with R. FEMORAL line, A STENT placed in LAD. sputum sent, suctioned for secretions.", "FEMORAL"),
])
def test_clinical_words_are_not_names(detector, text, word):
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert not flagged(found, word), found


# ---- chat and legal ------------------------------------------------------------------

def test_chat_cues_subjects_products(detector):
    text = ("I am looking for a restaurant .\nHow about little seoul ? It 's expensive .\n"
            "Could you book a hotel called avalon please ?\nGlad to help . Your taxi is a white Toyota .\n"
            "Kohinoor has an address on mill road .\nThe Acorn Guest House is in the north .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    for name in ("little seoul", "avalon", "Kohinoor", "Acorn Guest House"):
        assert name in found, (name, found)
    assert "The Acorn Guest House" not in found  # the article names nothing
    for word in ("Glad", "Toyota"):
        assert not flagged(found, word), found


def test_legal_public_bodies_in_dictionary_words(detector):
    text = (LEGAL + "\n\nThe Minister of Agriculture and Food Economics refused. The applicant then complained to "
            "the General Directorate of National Roads and to the Court. Austria was not a party to the appeal.")
    _, found = spans(detector, text)
    for public in ("Agriculture and Food Economics", "Directorate of National Roads"):
        assert not flagged(found, public), found
    assert found.get("Austria") not in ("PERSON", "ORGANIZATION")


# ---- the vocabularies ------------------------------------------------------------------

def test_vocabularies():
    from privatize.redaction.styles import vocab

    for w in ("femoral", "secretions", "suctioned", "supine"):
        assert vocab.is_dictionary_word(w), w
    for w in ("cucchiara", "philomena", "quartermain"):
        assert not vocab.is_dictionary_word(w), w
    assert {"pikesville", "rome", "baltimore"} <= vocab.city_names()
    assert vocab.is_clinical_like("Fetanyl", fuzzy=True) and vocab.is_clinical_like("Ceftaz")
    assert not vocab.is_clinical_like("Cucchiara", fuzzy=True)
    for w in ("restuarant", "pricerange", "swimmingpool"):
        assert vocab.is_misspelt_or_compound(w), w
    for w in ("limehouse", "kohinoor", "nirala"):
        assert not vocab.is_misspelt_or_compound(w), w


# ---- issue 51: the zero-shot default's held-out misses (hand-written sentences) -------

@pytest.mark.parametrize("text, phi", [
    # a hospital named by its name word before the head word, after a movement cue
    ("Pt was found down at home and brought to MERCY HOSPITAL by EMS. Started on heparin gtt. BP 100/60.",
     "MERCY"),
    # a two-word hospital that is no "St" segment
    ("transferred here from good samaritan for cath. heparin gtt at 900 u/hr, lasix 40 iv. sats 95% on 2l nc.",
     "good samaritan"),
    # a ward and its floor in lower case
    ("plan: to wexcombe 4 when bed available. lasix gtt off, k repleted. sats 96% on 2l nc.", "wexcombe"),
    # a lower-case city of dictionary words after a movement cue
    ("wife drove back to fall river last night, will call in the am. bp stable, lasix given, foley draining.",
     "fall river"),
    # a lower-case hospital abbreviation after a cue
    ("ems brought pt from bmc after syncope. cont heparin gtt, bp stable, sats 97% on 2l nc, foley draining.",
     "bmc"),
    # names in quotes or parentheses after a role, and a second name joined to the first
    ("pt calm. son \"dwight\" at bedside most of the day. lungs clear, sats 96% on 2l nc. cont lasix.", "dwight"),
    ("NEXT OF KIN IS ONE CONTACT PERSON (GLORIA). LUNGS CLEAR. CONT LASIX, K REPLETED. BP STABLE.", "GLORIA"),
    ("family: sons kevin and dwight visited this pm, updated on plan. cont lasix. bp 120/60, hr 80 sr.", "dwight"),
    ("SOCIAL: BROTHER & GLORIA (SIGNIFICANT OTHER) AWARE OF PLAN. LUNGS CLEAR. CONT LASIX. BP STABLE.",
     "GLORIA"),
    # a first name that speaks or is spoken with
    ("FAMILY MTG HELD. DOROTHY STATES PT WOULD NOT WANT TRACH. LUNGS COARSE, SUCTIONED. CONT LASIX.",
     "DOROTHY"),
    ("sw to talk with kenneth about placement. pt on propofol gtt, bp stable. lasix 20 iv given.", "kenneth"),
    # census first names that also begin drug names are names after a title or role
    ("Dr. Thomas aware of low uop, lasix 40 iv given. BP 100/60, HR 90 ST. Sats 95% on 4L NC.", "Thomas"),
    # phones in notes: an extension after the number, a local number after a cue
    ("wife asks team to call her at work: 617 555 0143 x218. pt resting, lasix given, bp stable, sats 96%.",
     "218"),
    ("dtr can be reached at home, call 555-0188. pt resting, lasix gtt, bp 110/60, hr 88 sr, foley draining.",
     "555-0188"),
    ("Pt seen for resp care, suctioned for thick secretions. Beeper 4-1187. Sats 95% on 40% fio2.", "4-1187"),
    # a role, "&" and a name; a month and a year in lower case
    ("SOCIAL: WIFE & GLORIA (FRIEND) VISITED TODAY. LUNGS CLEAR. CONT LASIX. BP STABLE. SATS 96%.", "GLORIA"),
    ("pmh: cabg. in june of 2019 pt was admitted with chf. cont lasix, bp stable, sats 96% on 2l nc.",
     "june of 2019"),
    # the doctor's name without the sentence after it
    ("HR 110 AFIB. DR. WOJNAROWSKI AWARE OF RATE, LOPRESSOR 5 MG IV GIVEN. LASIX GIVEN. BP STABLE.",
     "WOJNAROWSKI"),
    # an initial and a surname in lower case after "per"; a ward named as a surname is (also) in
    # the dictionary; a year with its apostrophe after a count (PhysioNet development notes)
    ("bp weaned for systolic bp 120 to 135 per d ross.pacing wires attached. lasix 20mg iv. abd soft.", "d ross"),
    ("PLAN: TO QUARTERMAN 2 WHEN BED AVAIL. LASIX 20 MG. ABD SOFT. FOLEY DRAINING.", "QUARTERMAN"),
    ("PMH: LONG STANDING CAD W CABG X5 99'. COPD. LASIX 20 MG. ABD SOFT.", "99"),
])
def test_issue51_clinical_positives(detector, text, phi):
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert flagged(found, phi), (phi, found)


@pytest.mark.parametrize("text, word", [
    # a generic hospital is no name
    ("PT TO BE TRANSFERRED TO A COMMUNITY HOSPITAL FOR REHAB. LASIX 20 MG. BP STABLE. LUNGS CLEAR.", "COMMUNITY"),
    # settings, doses and ranges are no phone numbers; words that begin drug names stay words
    ("pt on propofol 20, fentanyl 50. wean to ps 10/5. lasix 40 iv. bp stable. sats 95% on 40% fio2.", "20"),
    ("uop 100-1200 cc over shift. k 3.5, repleted. hct 28.5, plt 150. lasix gtt at 10 mg/hr.", "100-1200"),
    ("Delta wave noted on ekg. Crystal clear urine in foley. Normal flora in sputum cx. Lasix given.", "Crystal"),
    # a drug in lower case before a number is no ward
    ("plan: wean to levophed 2 mcg, then off. lasix gtt off, k repleted. sats 96% on 2l nc.", "levophed"),
    # the ST segment stays no saint
    ("EKG: ST DEPRESSION IN V4-V6, ST ELEVATION RESOLVED. HEP GTT. LASIX GIVEN. BP STABLE.", "ST"),
    ("CV: HR 90-110 SR/ST NO ECTOPY. BP 100-130/50-70. LASIX GIVEN. LUNGS CLEAR.", "ST NO"),
    # shorthand compounds and doses before a number are no wards
    ("CV-SR 70-85, NO ECTOPY. PAD'S 18-22 AFTER LASIX. SATS 96% ON 2L NC. FOLEY DRAINING.", "CV-SR"),
    ("CV-SR 70-85, NO ECTOPY. PAD'S 18-22 AFTER LASIX. SATS 96% ON 2L NC. FOLEY DRAINING.", "PAD'S"),
    ("K 3.1, REPLETED. PHOSLO 15 MG GIVEN WITH MEALS. LASIX 20 IV. BP STABLE. SATS 96%.", "PHOSLO"),
    # a role word alone, shorthand with an apostrophe, a graft's artery are no names or places
    ("Husband at bedside, updated on plan. ABG's improved on 40%. LIMA to LAD patent. Lasix given.", "Husband"),
    ("Husband at bedside, updated on plan. ABG's improved on 40%. LIMA to LAD patent. Lasix given.", "ABG"),
    ("Husband at bedside, updated on plan. ABG's improved on 40%. LIMA to LAD patent. Lasix given.", "LIMA"),
    # a drug with a count, and the words after a doctor's name, are no name
    ("Afebrile overnight, received Tylenol X2 for pain. Lasix given. BP 120/60. Sats 96% on 2L NC.", "Tylenol"),
    ("HR 110 AFIB. DR. WOJNAROWSKI AWARE OF RATE, LOPRESSOR 5 MG IV GIVEN. LASIX GIVEN. BP STABLE.", "AWARE"),
    # "per x ray" is no initial and surname
    ("ngt placement confirmed per x ray. lasix 20mg iv. abd soft. cont to monitor. foley draining.", "ray"),
])
def test_issue51_clinical_negatives(detector, text, word):
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert not flagged(found, word), (word, found)


def test_issue51_chat_type_words_are_not_venues(detector):
    text = ("i want a cheap place to stay in the west .\n"
            "There is one guest house and two hotels in the west . Do you need free wifi ?\n"
            "yes , and send me the postcode and the entrance fee of any gastropubs or nightclubs nearby .\n"
            "ok , i can help with accomodations . the Marwick Guest House has free wifi .\n"
            "please book the Pellham 's House instead .\n"
            "Done , your reference is QX81TT4P .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    for word in ("guest house", "free wifi", "postcode", "entrance fee", "gastropubs", "nightclubs", "accomodations"):
        assert not any(k.lower() == word for k in found), (word, found)
    assert flagged(found, "Marwick"), found
    assert any("Pellham 's House" in k for k in found), found  # a name's head word is no type word

    text = ("i need a room for two nights please .\nI can book you at the Stonebell , it has free parking .\n"
            "great , and is there a pricerange for it ?\nIt is cheap . Booked , your reference is QX81TT4P .")
    _, found = spans(detector, text)
    assert flagged(found, "Stonebell"), found  # two common words, written as a name
    assert not flagged(found, "pricerange"), found


def test_issue51_type_words():
    from privatize.redaction.styles import chat

    for w in ("guesthouse", "gastropubs", "gueshouse", "accomodations", "postcode"):
        assert chat._type_word(w), w
    for w in ("allenbell", "avalon", "kohinoor", "carter"):
        assert not chat._type_word(w), w
    assert chat._only_type_words("the guest house") and chat._only_type_words("free wifi")
    assert not chat._only_type_words("a and b guest house") and not chat._only_type_words("Restaurant Two Two")


def test_issue51_chat_address_after_its_cue(detector):
    text = ("hi , i need a museum in town please .\nsure . the address is mill way , near the river .\n"
            "could you give me another one ?\nyes , it is located on the east side of town .\n"
            "it is located at the end of the road .\nthanks , that is all i need .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    assert flagged(found, "mill way"), found
    for words in ("east side", "end of the road"):
        assert not flagged(found, words), (words, found)


def test_chat_list_members_between_found_ones(detector):
    """Issue 51: a list two of whose members pi found names the others too (the members
    between found ones and the last after "or"); a list of booking details does not."""
    text = ("i need a cheap guesthouse in the north please .\n"
            "there is archway house , avalon , hamilton lodge , home from home , or limehouse ?\n"
            "i need the address , the phone number , and the postcode please .\n"
            "thanks , that is all .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    for name in ("avalon", "home from home", "limehouse"):
        assert name in found, (name, found)
    for words in ("the address", "phone number", "postcode"):
        assert not flagged(found, words), (words, found)


def test_chat_the_pieces_of_an_address_after_its_cue(detector):
    """Every piece of an address after its cue, up to the postcode or a word that leaves
    the address; words that say where in town are no address."""
    text = ("hi , i want to go to a museum .\n"
            "the address is unit 8 , viking way , bar hill , postcode cb238el .\n"
            "it is located at the grafton centre , east road and the phone number is 01223 356555 .\n"
            "is it located in the northern part of town ?\nthanks , bye .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    for piece in ("unit 8", "viking way", "bar hill", "east road"):
        assert piece in found, (piece, found)
    assert found["unit 8"] == "STREET_ADDRESS", found
    assert not flagged(found, "northern part") and not flagged(found, "phone number"), found


def test_chat_a_title_cased_subject_is_a_venue(detector):
    """``Home From Home is a ...`` at a turn's start, after ``Sure !`` or ``Yes , the``:
    a name though every word is common; a lower-case common subject is not."""
    text = ("tell me about a guesthouse please .\nSure ! Home From Home is a moderately priced guesthouse .\n"
            "ok , and the other one ?\nThe avalon is a nice guesthouse too .\n"
            "the room is a double .\nthanks .")
    r, found = spans(detector, text)
    assert r.style == "chat"
    assert "Home From Home" in found and "avalon" in found, found
    assert not flagged(found, "room"), found


def test_chat_lists_mid_turn_and_their_limits(detector):
    """A list after a sentence in the same turn counts; a member that starts with a word no
    name starts with (``i like it``, ``no way``) does not; a long comma list is read in
    linear time (it was quadratic: 20,000 members took 82 s)."""
    import time

    from privatize.redaction.styles import STYLES

    text = ("i need a cheap guesthouse in the north please .\n"
            "ok . archway house , avalon , hamilton lodge , or limehouse ?\n"
            "archway house , i like it , no way , limehouse , ok ?\nthanks , bye .")
    r, found = spans(detector, text)
    assert "avalon" in found and "limehouse" in found, found
    assert not flagged(found, "no way") and not flagged(found, "like it"), found
    chat = STYLES.get("chat")
    long = " , ".join(["aa"] * 20_000)
    names = [(i * 5, i * 5 + 2, "LOCATION", 0.5, "test", True) for i in range(0, 20_000, 2)]
    t0 = time.perf_counter()
    inferred = chat.complete(long, names)
    assert time.perf_counter() - t0 < 10 and len(inferred) == 9_999


def test_titles_follow_each_domains_annotation_convention(detector):
    """Clinical de-identification (i2b2, PhysioNet) marks a name without its title: the
    clinical style's person spans start after ``Mr.``/``Dr``, and the title stays in the
    text (so does a hospital's ``Hospital``); judgments (TAB) mark the title with the name,
    and the legal style keeps it."""
    text = ("PT IN CCU, ON LASIX 20 MG. ABD SOFT, FOLEY DRAINING. Upon admission Mr. Lomish was on 10L NC; "
            "discussed with Dr. Chiotelis, plan to cont diuresis. MAE. CONT TO MONITOR.")
    r, found = spans(detector, text)
    assert r.style == "clinical"
    assert found.get("Lomish") == "PERSON" and found.get("Chiotelis") == "PERSON", found
    assert not any(k.startswith(("Mr", "Dr")) for k in found), found
    # a place's generic head word stays in the text too (PhysioNet marks the name alone)
    for text, place in [("PT TRANSFERRED FROM HARFORD MEMORIAL HOSPITAL FOR CATH. LASIX 20 MG GIVEN. ABD SOFT, FOLEY "
                         "DRAINING. MAE. CONT TO MONITOR IN CCU.", "HARFORD MEMORIAL"),
                        ("pt recieved from university of maryland hospital. pt intubated, on levophed 2mcg. abd soft. "
                         "cont to monitor. lasix 20mg iv given.", "university of maryland")]:
        r, found = spans(detector, text)
        assert r.style == "clinical" and found == {place: "LOCATION"}, found
    r, found = spans(detector, LEGAL)
    assert r.style == "legal" and "Mr A. Demetriades" in found, found


@pytest.mark.parametrize("piece, kept", [("Harford Memorial Hospital", "Harford Memorial"),
                                         ("General Hospital Medical Center", "General"),
                                         ("U OF MD MED CENTER", "U OF MD"), ("St Mary hosp.", "St Mary"),
                                         ("Hospital", "Hospital"), ("Mercy Clinic", "Mercy"),
                                         ("Heart Center", "Heart")])
def test_a_place_loses_its_generic_head_words_but_never_all_of_it(piece, kept):
    text = f"to {piece} today"
    s, e, *rest = styles.trim_place_head(text, (3, 3 + len(piece), "LOCATION", 0.8, "spacy", False))
    assert text[s:e] == kept
    person = (3, 3 + len(piece), "PERSON", 0.8, "spacy", False)
    assert styles.trim_place_head(text, person) == person  # only places and organisations
