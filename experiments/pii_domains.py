"""A generated, labelled multi-domain PII benchmark corpus: text with gold character spans.

Purpose: measure a redaction detector's recall and character precision (for example against
Presidio) on text that looks like four real domains, each with its typical hard cases and
look-alike decoys that must NOT be redacted. Generated, not tuned: the detector is measured on
the ``test`` split and may only be tuned on ``dev`` (see "Splits" below).

Domains
    clinical  ICU / ward nursing notes in the terse, partly lower-case style of i2b2-like notes,
              full of abbreviation decoys (``Neuro:``, ``ID: afebrile``, ``BP 130/80``, ``PIV x2``,
              ``1/2 tab``, ``24/7``, ``s/p CABG``, ``POD 2``, ``ABG 7.38/42/88``, ``foley``).
    legal     court judgments (England & Wales, some US) and contracts: parties, witnesses,
              judges, dates of birth and events, home addresses, case numbers; decoys are court
              names, statute names with years, published case citations, section references,
              law-report URLs, Latin phrases, all-caps headings.
    email     business and personal e-mails (optional header block, greeting, body, closing,
              signature, boilerplate); decoys: "e.g.", "i.e.", file names, version numbers,
              Q3 / FY2024, times without dates, money, product names, company websites.
    dialogue  task-oriented booking / customer-service dialogues, mostly lower case, one turn
              per line prefixed ``USR:`` / ``SYS:``; decoys: "5 nights", "2 people", "4 star",
              "free wifi", train times and train ids, prices, areas ("the north"), venue names.

Gold types (exactly these): PERSON, DATE_TIME, PHONE_NUMBER, EMAIL_ADDRESS, STREET_ADDRESS,
LOCATION, ORGANIZATION, AGE, ZIP_CODE, POSTCODE, US_SSN, CREDIT_CARD, IBAN_CODE, ID, URL,
IP_ADDRESS.

What counts as gold (the conventions of this corpus; HIPAA-like, applied to every domain)
    PERSON        every named individual: patients, relatives, clinicians and nurses, judges,
                  parties, witnesses, counsel, senders/recipients, customers. A first name,
                  a surname, a full name (one span, middle initial included; a first name and
                  surname separated by one space are always merged) and "Keller, Mary" are each
                  one span. Titles and roles are outside the span ("Dr.",
                  "Mr", "RN", "Lord Justice", "HHJ", "wife"). Not gold: the names in published
                  case citations ("Smith v Jones [1994] 2 AC 1"; but the parties named in the
                  heading of the judgment itself, including "R v NAME", are gold) and eponyms
                  (foley catheter, Wednesbury unreasonableness, a Polkey reduction).
    DATE_TIME     any specific calendar date in any form ("10/13", "9/7", "10/13/92",
                  "2019-03-04", "Oct 13", "13 Oct", "October 13th", "March 2019", "june 12th",
                  "12th of june" - a leading "the" stays outside), birth dates, and bare years of personal events including
                  two-digit ones ("hx MI in '92": the span is "'92", apostrophe included; "in 92":
                  "92"). A weekday or a time of day written attached to a date belongs to that
                  one span ("Tuesday 14 March at 10:30", e-mail header timestamps). Not gold:
                  weekdays alone ("friday"), times alone ("15:45", "0400"), durations and relative
                  times ("x3 days", "overnight", "q4h", "POD 2", "5 nights", "tomorrow"), years
                  inside statute names ("Human Rights Act 1998"), citations ("[2001] UKHL 12"),
                  fiscal periods ("Q3", "FY2024"), version numbers.
    AGE           the number only ("67" in "67 yo", "67-year-old", "age 67", "aged 9", "72M");
                  every age of a person is gold, not only ages over 89.
    Addresses     split into components, each its own span: STREET_ADDRESS = house number,
                  street and flat/apartment ("Flat 3, 14 Mill Road", "154 chesterton road",
                  "park street"); LOCATION = town/city, US state, and other place names that
                  locate a person or a private organisation; ZIP_CODE = US ZIP codes (5 or 5+4
                  digits); POSTCODE = UK postcodes in any case, with or without the space
                  ("CB2 3BU", "cb23bu"). The separators (", ", " ") are outside the spans. Not
                  gold: court and tribunal addresses and the place names inside court names
                  ("County Court at Oxford", "Royal Courts of Justice, Strand, London, WC2A 2LL",
                  "Heard at Field House"), governing-law jurisdictions ("England and Wales",
                  "State of Delaware"), and vague areas ("the north", "the centre"). In dialogues,
                  every street address, postcode and town is gold, the venue's included (it
                  reveals where the customer is going).
    ORGANIZATION  companies and employers, hospitals, schools, law firms, pharmacies, care homes,
                  banks named as a party. Not gold: courts, tribunals, government departments,
                  hospital units (MICU, CCU), products and software (Excel, Teams, a Salesforce
                  migration, a white toyota), and
                  public venues (restaurants, hotels, guest houses, museums) in dialogues and
                  e-mails, which do not identify the person.
    PHONE_NUMBER, EMAIL_ADDRESS, US_SSN, CREDIT_CARD (full, Luhn-valid), IBAN_CODE (valid
                  check digits, grouped or compact), IP_ADDRESS (a person's device): the whole
                  value, labels outside.
    ID            the identifier only, label outside: MRNs, hospital account numbers, claim and
                  case numbers of the (private) matter judged, indictment and appeal numbers,
                  invoice / order / ticket / booking references, bank and customer account
                  numbers, contract references, UK National Insurance numbers. Not gold: neutral
                  citations and law-report references, train ids ("TR7542"), file names,
                  version numbers, section and clause numbers.
    URL           personal URLs only (a person's homepage, portfolio, LinkedIn / GitHub /
                  Instagram profile). Company websites in signatures and boilerplate and public
                  law-report URLs are not gold.

Splits
    Every pool of sentence templates (openers, PII-bearing sentences, non-PII filler sentences,
    headings, greetings, closings, signatures, dialogue turns...) is divided into two disjoint
    halves by index parity: ``dev`` documents use only the even-index templates, ``test`` only
    the odd-index ones, so tuning on dev cannot overfit the test templates. Fake values (names,
    addresses...) come from the same pools for both splits but from different random streams:
    document i of (domain, split, seed) is generated by ``random.Random`` seeded with a string
    made of all four, so output is deterministic (same arguments give byte-identical documents)
    and ``generate(d, 50)`` is a prefix of ``generate(d, 200)``.

Construction
    Documents are built by concatenating filled templates; gold offsets are tracked while
    filling (never found by searching afterwards) and checked (``text[start:end]`` equals the
    inserted value, spans sorted, non-overlapping, no surrounding whitespace) before returning.
    Fake values: first names and surnames from the US Census 1990 lists in
    ``shared/data/names`` (half frequency-weighted, half uniform over the top ranks), plus some
    international names, addresses, cities and companies from
    ``shared/data/presidio_research`` (FakeNameGenerator.com_3000.csv,
    companies_and_organizations.csv; both MIT / synthetic). UK postcodes, phone numbers, dates,
    MRNs, case numbers, Luhn-valid card numbers, IBANs with valid check digits, SSNs, IPs,
    booking references and so on are invented with ``random``.

    All templates, filler sentences, venue and street-name lists in this file were written for
    it; no text is copied from any licensed dataset (i2b2, MIMIC, MultiWOZ, Enron, TAB/ECHR...).
    The few real things named are facts: well-known statutes and case citations, UK towns.

The data folder is ``<project>/../shared/data`` (``SHARED_DATA`` overrides it).

    .venv/bin/python -m experiments.pii_domains      # per domain and split: docs, words, spans
"""

from __future__ import annotations

import csv
import os
import random
import re
import unicodedata
from datetime import date, timedelta
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

DOMAINS = ("clinical", "legal", "email", "dialogue")
SPLITS = ("dev", "test")
TYPES = ("PERSON", "DATE_TIME", "PHONE_NUMBER", "EMAIL_ADDRESS", "STREET_ADDRESS", "LOCATION",
         "ORGANIZATION", "AGE", "ZIP_CODE", "POSTCODE", "US_SSN", "CREDIT_CARD", "IBAN_CODE", "ID",
         "URL", "IP_ADDRESS")

# --------------------------------------------------------------------------- data


def data_dir() -> Path:
    env = os.environ.get("SHARED_DATA")
    d = Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    need = [d / "names" / f for f in ("dist.male.first", "dist.female.first", "dist.all.last")]
    need += [d / "presidio_research" / f
             for f in ("FakeNameGenerator.com_3000.csv", "companies_and_organizations.csv")]
    missing = [str(p) for p in need if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            "experiments/pii_domains.py needs the shared data folder (census name lists in names/ "
            "and presidio_research/ fake identities); missing: " + ", ".join(missing)
            + ". Put it at <project>/../shared/data or set SHARED_DATA to its path.")
    return d


def _census_case(name: str) -> str:
    name = name.capitalize()
    if name.startswith("Mc") and len(name) > 3:
        name = "Mc" + name[2:].capitalize()
    return name


def _census(path: Path, top: int) -> tuple[list[str], list[float]]:
    names, cum, total = [], [], 0.0
    with open(path, encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2:
                continue
            total += float(parts[1]) or 0.0005
            names.append(_census_case(parts[0]))
            cum.append(total)
            if len(names) >= top:
                break
    return names, cum


_GLUED = re.compile(r"[a-z](Limited|Ltd|Inc)\b|\.[A-Za-z]|\bI+$")
_BAD_ORG = re.compile(r"&amp;|&#|\d|ETF|[;|/\\\"]|\b(Index|Fund|Trust|Shares?|Units?|Preferred|Preference|"
                      r"Warrants?|ADR|ADS|Notes|Class|Series|Depositary|Rights)\b")


@lru_cache(maxsize=4)
def _load(root: str) -> SimpleNamespace:
    d = Path(root)
    male = _census(d / "names" / "dist.male.first", 1219)
    female = _census(d / "names" / "dist.female.first", 2500)
    last = _census(d / "names" / "dist.all.last", 6000)
    with open(d / "presidio_research" / "FakeNameGenerator.com_3000.csv", encoding="utf-8-sig",
              newline="") as f:
        rows = list(csv.DictReader(f))
    us = [r for r in rows if r["Country"] == "US" and r["StreetAddress"][:1].isdigit()]
    gb = [r for r in rows if r["Country"] == "GB" and r["StreetAddress"][:1].isdigit()]
    intl = [(r["GivenName"], r["Surname"], r["Gender"]) for r in rows
            if r["GivenName"].isalpha() and r["Surname"].replace("-", "").isalpha()]
    orgs = sorted({r["Company"].strip() for r in rows if 3 <= len(r["Company"].strip()) <= 32
                   and not _BAD_ORG.search(r["Company"])})
    with open(d / "presidio_research" / "companies_and_organizations.csv", encoding="utf-8",
              newline="") as f:
        big = [r[0].strip() for r in csv.reader(f) if r]
    big = sorted({o for o in big[1:] if 4 <= len(o) <= 32 and not _BAD_ORG.search(o)
                  and o[:1].isupper() and o.count(" ") <= 3 and not _GLUED.search(o)
                  and not any(w.isupper() and len(w) >= 5 for w in o.split())})
    return SimpleNamespace(male=male, female=female, last=last, us=us, gb=gb, intl=intl,
                           orgs=orgs, big_orgs=big,
                           gb_cities=sorted({r["City"].title() for r in gb}),
                           gb_streets=sorted({r["StreetAddress"] for r in gb}))


# --------------------------------------------------------------------------- small fact lists

_UK_TOWNS = ["Cambridge", "Ely", "Norwich", "Peterborough", "Stevenage", "Ipswich", "London",
             "Bishops Stortford", "Kings Lynn", "Leicester", "Birmingham", "Broxbourne",
             "Huntingdon", "Bury St Edmunds", "St Neots", "Royston", "Newmarket", "Oxford",
             "Brighton", "York", "Bath", "Colchester", "Luton", "Bedford", "Leeds", "Bristol",
             "Manchester", "Reading", "Sheffield", "Nottingham", "Harlow", "Saffron Walden"]
_COURT_TOWNS = ["Oxford", "Manchester", "Leeds", "Bristol", "Birmingham", "Cardiff", "Cambridge",
                "Norwich", "Reading", "Luton", "Central London", "Brentford", "Bournemouth",
                "Liverpool", "Newcastle", "Exeter", "Nottingham", "Sheffield"]
_STREET_BASES = ["Chesterton", "Mill", "Station", "Church", "Regent", "Trumpington", "Hills",
                 "Newmarket", "Victoria", "Park", "Bridge", "Castle", "Orchard", "Milton", "Histon",
                 "Green", "Grange", "Harvey", "Tenison", "Gwydir", "Mawson", "Abbey", "Thompson's",
                 "Saxon", "Lensfield", "Norfolk", "Chapel", "Queen's", "King's", "Hertford",
                 "Elm", "Beech", "Willow", "Marshall", "Carlton", "Hope", "Cherry Hinton",
                 "Arbury", "Coleridge", "Glisson", "Perne", "Ditton", "Fen"]
_STREET_SUFFIXES = ["Road", "Road", "Street", "Street", "Lane", "Avenue", "Close", "Way", "Drive",
                    "Gardens", "Crescent", "Place", "Terrace", "Walk", "Grove"]
_PC_AREAS = ["CB"] * 6 + ["NR", "PE", "SG", "IP", "CO", "OX", "LS", "M", "B", "BS", "SW", "N",
                          "E", "SE", "NW", "W", "RG", "LU", "MK", "YO", "S", "NG", "CM", "BN"]
_PC_LETTERS = "ABDEFGHJLNPQRSTUWXYZ"
_UK_AREA_CODES = ["01223", "01223", "01603", "01733", "01473", "01353", "0161", "0113", "0121",
                  "020", "020", "0131", "01865", "01206", "01438", "0117"]
_WEBMAIL = ["gmail.com", "gmail.com", "yahoo.com", "outlook.com", "hotmail.com",
            "hotmail.co.uk", "icloud.com", "btinternet.com", "protonmail.com", "aol.com"]
_SAINTS = ["Mary", "Luke", "Joseph", "Vincent", "Elizabeth", "Francis", "John", "Anne", "Jude",
           "Catherine", "Michael", "Thomas"]
_US_STATES = ["Alabama", "Arizona", "California", "Colorado", "Florida", "Georgia", "Illinois",
              "Maryland", "Massachusetts", "Michigan", "Minnesota", "New Jersey", "New York",
              "North Carolina", "Ohio", "Oregon", "Pennsylvania", "Texas", "Virginia",
              "Washington", "Wisconsin"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_STATUTES = ["Human Rights Act 1998", "Limitation Act 1980", "Equality Act 2010",
             "Employment Rights Act 1996", "Housing Act 1988", "Children Act 1989",
             "Data Protection Act 2018", "Sale of Goods Act 1979", "Consumer Rights Act 2015",
             "Misrepresentation Act 1967", "Landlord and Tenant Act 1985",
             "Matrimonial Causes Act 1973", "Criminal Justice Act 2003", "Occupiers' Liability Act 1957",
             "Protection from Harassment Act 1997", "Nationality, Immigration and Asylum Act 2002"]
_FAMOUS_CASES = ["Donoghue v Stevenson [1932] AC 562", "Caparo Industries plc v Dickman [1990] 2 AC 605",
                 "Associated Provincial Picture Houses Ltd v Wednesbury Corporation [1948] 1 KB 223",
                 "Hadley v Baxendale (1854) 9 Exch 341", "Carlill v Carbolic Smoke Ball Co [1893] 1 QB 256",
                 "Polkey v A E Dayton Services Ltd [1988] AC 344", "Robinson v Chief Constable of West Yorkshire Police [2018] UKSC 4"]

_CHOICES: dict[str, list[str]] = {
    "unit": ["MICU", "CCU", "SICU", "CSRU", "T-SICU", "CVICU", "the unit", "MICU-B", "NICU step-down"],
    "complaint": ["chest pain", "resp distress", "GI bleed", "urosepsis", "CHF exacerbation", "AMS",
           "DKA", "COPD flare", "SOB", "hypotension", "new afib w/ RVR", "pneumonia"],
    "pmh": ["CAD, HTN, DM2", "COPD on home O2", "ESRD on HD", "afib on coumadin", "CHF (EF 25%)",
            "ETOH abuse, cirrhosis", "HTN, hyperlipidemia", "DM2, PVD, s/p L BKA", "asthma, OSA",
            "CVA w/ residual R weakness", "HIV on HAART", "breast ca s/p chemo"],
    "drip": ["levophed", "heparin gtt", "propofol", "insulin gtt", "nitro gtt", "dilt gtt",
             "neo", "fentanyl/versed"],
    "job": ["teacher", "mechanic", "bus driver", "accountant", "electrician", "farmer",
            "postal worker", "engineer", "secretary", "nurse", "carpenter", "chef", "librarian"],
    "jobtitle": ["Account Manager", "Head of Finance", "Senior Software Engineer", "Office Manager",
                 "Procurement Lead", "HR Business Partner", "Marketing Director", "Project Manager",
                 "Operations Coordinator", "Sales Executive", "Data Analyst", "Paralegal"],
    "subject": ["Re: Q3 budget", "Invoice query", "Updated contract", "Meeting next week",
                "Fwd: site visit", "Quick question", "Your order has shipped", "Project Falcon - next steps",
                "Catch-up", "Re: re: slides for Thursday", "Expenses", "Security alert",
                "Offer letter", "Party!!", "Welcome aboard", "Renewal reminder"],
    "venue": ["the blue anchor", "riverside lodge", "the golden lotus", "ashfield guest house",
              "the old granary", "hilltop b&b", "the lemon tree", "saffron kitchen", "the copper pot",
              "la piazza", "the red lion", "the mill house hotel", "kingsfield lodge", "bamboo garden",
              "the fen museum of art", "parkside cinema", "the orchard tea rooms", "rosie's cafe"],
    "food": ["italian", "chinese", "indian", "british", "thai", "french", "lebanese", "korean",
             "spanish", "vietnamese"],
    "pricerange": ["cheap", "moderate", "expensive", "moderately priced"],
    "area": ["the north", "the south", "the centre", "the east", "the west"],
    "day": ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"],
    "car": ["white toyota", "black volkswagen", "grey ford", "red skoda", "blue bmw", "silver audi",
            "yellow tesla", "black lexus"],
    "court_town": _COURT_TOWNS,
    "statute": _STATUTES,
    "us_district": ["Massachusetts", "New Jersey", "Colorado", "Oregon", "Maryland", "Minnesota"],
    "us_county": ["Alameda", "Sacramento", "Santa Clara", "San Diego", "Orange", "Marin"],
    "sec": ["3(1)(b)", "14(2)", "27A", "98(1)", "6", "21(3)(a)", "33", "1(3)", "94(1)", "11(4)"],
}

# --------------------------------------------------------------------------- helpers


def _ascii(s: str) -> str:
    return unicodedata.normalize("NFKD", s).encode("ascii", "ignore").decode()


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", _ascii(s).lower())


def _ordinal(n: int) -> str:
    suf = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suf}"


def _fmt(d: date, form: str) -> str:
    return form.format(m=d.month, d=d.day, mm=f"{d.month:02d}", dd=f"{d.day:02d}",
                       yy=f"{d.year % 100:02d}", yyyy=d.year, Month=_MONTHS[d.month - 1],
                       Mon=_MONTHS[d.month - 1][:3], Wkd=_WEEKDAYS[d.weekday()],
                       Wk=_WEEKDAYS[d.weekday()][:3], dth=_ordinal(d.day))


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + _digits(rng, length - len(prefix) - 1)
    total = 0
    for i, ch in enumerate(reversed(body)):
        v = int(ch)
        if i % 2 == 0:
            v *= 2
            if v > 9:
                v -= 9
        total += v
    return body + str((10 - total % 10) % 10)


def _iban_check(country: str, bban: str) -> str:
    s = "".join(str(int(c, 36)) for c in bban + country + "00")
    return f"{98 - int(s) % 97:02d}"


# --------------------------------------------------------------------------- people and context


class _Person:
    def __init__(self, ctx: "_Ctx", role: str):
        rng = ctx.rng
        D = ctx.D
        main = ctx.people.get(ctx.main)
        if role == "sp" and main is not None:
            self.sex = ("F" if main.sex == "M" else "M") if rng.random() < 0.92 else main.sex
        else:
            self.sex = rng.choice("MF")
        if rng.random() < 0.12 and ctx.domain != "dialogue":
            given, surname, g = rng.choice([x for x in D.intl if (x[2] == "male") == (self.sex == "M")] or D.intl)
            self.first, self.last = given, surname
        else:
            pool = D.male if self.sex == "M" else D.female
            self.first = self._pick(rng, pool)
            self.last = self._pick(rng, D.last)
        if role in ("sp", "ch") and main is not None and rng.random() < 0.8:
            self.last = main.last
        middle = rng.random() < (0.12 if ctx.domain in ("legal", "email") else 0.0)
        self.full = f"{self.first} {rng.choice('ABCDEFGHJKLMNPRSTW')}. {self.last}" if middle \
            else f"{self.first} {self.last}"
        dot = "" if ctx.locale == "uk" else "."
        if role in ("md", "md2") or rng.random() < 0.04:
            self.title = "Dr" + dot
        elif self.sex == "M":
            self.title = "Mr" + dot
        else:
            self.title = rng.choice(["Mrs", "Ms", "Ms", "Miss"]) + ("" if ctx.locale == "uk" else ".")
            if self.title == "Miss.":
                self.title = "Miss"
        if role == "pt":
            self.age = rng.randint(19, 96)
        elif role == "ch":
            self.age = rng.randint(2, 16) if ctx.domain == "legal" else rng.randint(24, 66)
        else:
            self.age = rng.randint(21, 78)
        self.rel = {"sp": "wife" if self.sex == "F" else "husband",
                    "ch": "daughter" if self.sex == "F" else "son"}.get(role, "friend")
        self.role = role
        self._email: str | None = None
        self._pemail: str | None = None

    @staticmethod
    def _pick(rng: random.Random, pool: tuple[list[str], list[float]]) -> str:
        names, cum = pool
        if rng.random() < 0.5:
            return rng.choices(names, cum_weights=cum)[0]
        return names[rng.randrange(min(len(names), 3000))]

    def local_part(self, rng: random.Random) -> str:
        f, la = _slug(self.first), _slug(self.last)
        return rng.choice([f"{f}.{la}", f"{f}.{la}", f"{f[0]}{la}", f"{f}{la[0]}", f"{f}_{la}",
                           f"{f}.{la}{rng.randint(1, 99)}", f"{la}.{f}", f"{f}{rng.randint(70, 99)}"])


class _Ctx:
    def __init__(self, rng: random.Random, domain: str, D: SimpleNamespace):
        self.rng, self.domain, self.D = rng, domain, D
        self.locale = {"clinical": "us", "legal": "uk", "dialogue": "uk"}.get(
            domain, "uk" if rng.random() < 0.5 else "us")
        self.main = {"clinical": "pt", "legal": "pa", "email": "s", "dialogue": "c"}[domain]
        self.people: dict[str, _Person] = {}
        self.memo: dict[str, object] = {}
        self.base = date(2004, 1, 1) + timedelta(days=rng.randrange(7300))
        self.last_date = self.base
        self.lower = domain == "dialogue" and rng.random() < 0.85

    def person(self, role: str) -> _Person:
        if role not in self.people:
            if role in ("sp", "ch") and self.main not in self.people:
                self.people[self.main] = _Person(self, self.main)
            self.people[role] = _Person(self, role)
        return self.people[role]

    def once(self, key: str, make):
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


_ROLES = {"pt", "sp", "ch", "md", "md2", "rn", "pa", "pb", "pc", "w", "w2", "lc", "judge",
          "s", "r", "t", "c"}

# --------------------------------------------------------------------------- slot generators
# A slot function takes (ctx, second) and returns a str (typed with the slot's type) or a list of
# (text, type-or-None) segments. "<name>2" calls slot <name> with second=True: another memoised
# entity (org2, hosp2) or, for dates, a date after the previous one.

_SLOTS: dict[str, tuple] = {}


def _slot(name: str, typ: str | None = None):
    def deco(fn):
        _SLOTS[name] = (fn, typ)
        return fn
    return deco


for _name, _opts in _CHOICES.items():
    _SLOTS[_name] = ((lambda opts: lambda ctx, second: ctx.rng.choice(opts))(_opts), None)


def _num(lo, hi, fmt="{}"):
    return lambda ctx, second: fmt.format(ctx.rng.randint(lo, hi))


for _name, _fn in {
    "bp": lambda c, s: f"{c.rng.randint(92, 172)}/{c.rng.randint(48, 98)}",
    "hr": _num(58, 124), "rr": _num(12, 28), "spo2": _num(88, 100, "{}%"),
    "o2l": _num(1, 6, "{}L"), "n_days": _num(2, 5),
    "wbc": lambda c, s: f"{c.rng.randint(4, 19)}.{c.rng.randint(0, 9)}",
    "tmax": lambda c, s: f"{c.rng.randint(98, 101)}.{c.rng.randint(0, 9)}",
    "clock": lambda c, s: c.rng.choice(["0200", "0400", "0600", "2200", "2330", "1400", "0800"]),
    "money": lambda c, s: c.rng.choice([f"{c.rng.randint(1, 9)},{c.rng.randint(0, 999):03d}.00",
                                        f"{c.rng.randint(120, 980)}", f"{c.rng.randint(10, 99)}.50",
                                        f"{c.rng.randint(1, 45)},{c.rng.randint(0, 9)}00"]),
    "cur": lambda c, s: {"uk": "£", "us": "$"}[c.locale] if c.rng.random() < 0.85 else "€",
    "price": lambda c, s: c.rng.choice([f"£{c.rng.randint(5, 60)}", f"£{c.rng.randint(5, 30)}.{c.rng.choice(['10', '50', '60', '24'])}", f"{c.rng.randint(8, 40)} pounds"]),
    "people": lambda c, s: c.rng.choice(["2 people", "3 people", "4 people", "6 people", "one person", "two people", "5 people"]),
    "nights": lambda c, s: c.rng.choice(["2 nights", "3 nights", "4 nights", "5 nights", "one night", "a week"]),
    "stars": lambda c, s: c.rng.choice(["4 star", "3 star", "2 star", "4-star", "3-star"]),
    "train_id": lambda c, s: f"TR{c.rng.randint(1000, 9999)}",
    "para": _num(12, 88),
    "natid_label": lambda c, s: "National Insurance number" if c.locale == "uk" else "Social Security number",
}.items():
    _SLOTS[_name] = (_fn, None)


@_slot("time")
def _time(ctx, second):
    rng = ctx.rng
    if second:
        h, m = ctx.memo.get("time", (rng.randint(5, 20), 0))
        t = h * 60 + m + rng.randint(17, 140)
        h, m = min(t // 60, 23), t % 60
    else:
        h, m = rng.randint(5, 21), rng.choice([0, 15, 30, 45, 9, 24, 51, 11, 36])
    ctx.memo["time"] = (h, m)
    return f"{h:02d}:{m:02d}"


@_slot("citation")
def _citation(ctx, second):
    rng = ctx.rng
    if rng.random() < 0.2:
        return rng.choice(_FAMOUS_CASES)
    a = _Person._pick(rng, ctx.D.last)
    b = _Person._pick(rng, ctx.D.last)
    yr = rng.randint(1950, 2023)
    n = rng.randint(1, 1500)
    return rng.choice([f"{a} v {b} [{yr}] UKHL {rng.randint(1, 60)}",
                       f"{a} v {b} ({yr}) {rng.randint(1, 3)} AC {n}",
                       f"R v {a} [{yr}] EWCA Crim {n}", f"{a} v {b} [{yr}] EWCA Civ {n}",
                       f"{a} Ltd v {b} [{yr}] 1 WLR {n}", f"Re {a} [{yr}] Ch {n}",
                       f"{a} v {b} [{yr}] UKSC {rng.randint(1, 70)}"])


@_slot("us_citation")
def _us_citation(ctx, second):
    rng = ctx.rng
    a = _Person._pick(rng, ctx.D.last)
    b = _Person._pick(rng, ctx.D.last)
    yr = rng.randint(1960, 2022)
    return rng.choice([f"{a} v. {b}, {rng.randint(300, 590)} U.S. {rng.randint(1, 999)} ({yr})",
                       f"{a} v. {b} Corp., {rng.randint(1, 999)} F.3d {rng.randint(1, 1400)}, "
                       f"{rng.randint(1, 1400)} ({rng.randint(1, 11)}th Cir. {yr})"])


@_slot("ncn")
def _ncn(ctx, second):
    rng = ctx.rng
    return f"[{ctx.base.year}] {rng.choice(['EWCA Civ', 'EWHC', 'EWCA Crim', 'UKUT', 'EWFC'])} {rng.randint(10, 2999)}"


@_slot("law_url")
def _law_url(ctx, second):
    rng = ctx.rng
    y = rng.randint(2001, 2023)
    return rng.choice([f"https://www.bailii.org/ew/cases/EWCA/Civ/{y}/{rng.randint(1, 2000)}.html",
                       f"https://caselaw.nationalarchives.gov.uk/ewhc/kb/{y}/{rng.randint(1, 3000)}",
                       f"https://www.supremecourt.uk/cases/uksc-{y}-{rng.randint(1, 250):04d}.html"])


@_slot("corp_url")
def _corp_url(ctx, second):
    return ctx.rng.choice(["https://www.gov.uk/vat-rates", "https://support.microsoft.com",
                           "https://www.ico.org.uk/for-the-public", "www.apple.com/uk/privacy",
                           "https://policies.google.com/privacy"])


@_slot("file")
def _file(ctx, second):
    return ctx.rng.choice(["report_v2.pdf", "final.v2.docx", "Q3_review_final.pptx", "budget_FY24.xlsx",
                           "minutes-draft.docx", "scan0042.pdf", "IMG_2231.jpg", "contract_v3_clean.pdf"])


# ---- dates


def _after(ctx, second, lo, hi):
    return ctx.last_date + timedelta(days=ctx.rng.randint(1, 21)) if second \
        else ctx.base + timedelta(days=ctx.rng.randint(lo, hi))


def _date_slot(name, lo, hi, forms, lower=False, times=None):
    def fn(ctx, second):
        d = _after(ctx, second, lo, hi)
        ctx.last_date = d
        s = _fmt(d, ctx.rng.choice(forms(ctx) if callable(forms) else forms))
        if times and ctx.rng.random() < 0.3:
            s += ctx.rng.choice(times)
        s = s.lower() if lower else s
        if s.startswith("the "):  # the article stays outside the span
            return [(s[:4], None), (s[4:], "DATE_TIME")]
        return s
    _SLOTS[name] = (fn, "DATE_TIME")


_date_slot("date", -10, 3, ["{m}/{d}", "{m}/{d}", "{mm}/{dd}", "{Mon} {d}", "{d} {Mon}", "{Month} {dth}",
                            "{m}/{d}/{yy}", "{yyyy}-{mm}-{dd}", "{m}-{d}"])
_date_slot("date_full", -2500, -30, ["{m}/{d}/{yy}", "{m}/{d}/{yyyy}", "{yyyy}-{mm}-{dd}",
                                     "{Month} {d}, {yyyy}", "{Mon} {d} {yyyy}", "{mm}/{dd}/{yyyy}"])
_date_slot("month_year", -3000, -60, ["{Month} {yyyy}", "{Month} {yyyy}", "{Mon} {yyyy}", "{mm}/{yyyy}",
                                      "{Mon} '{yy}"])
_date_slot("date_long", -1800, 0, lambda c: (
    ["{d} {Month} {yyyy}", "{d} {Month} {yyyy}", "{dth} {Month} {yyyy}", "{d} {Mon} {yyyy}",
     "the {dth} day of {Month} {yyyy}"] if c.locale == "uk" else
    ["{Month} {d}, {yyyy}", "{Month} {d}, {yyyy}", "{Month} {dth}, {yyyy}", "{m}/{d}/{yyyy}"]))
_E_TIMES = [" at 10:30", " at 3pm", " at 14:00", ", 9:30am", " at 11am", " 16:00"]
_date_slot("date_e", 0, 30, lambda c: (
    ["{Wkd} {d} {Month}", "{Wk} {d} {Mon}", "{d} {Month}", "{dth} {Month}", "{dd}/{mm}", "{d} {Mon} {yyyy}",
     "{dd}/{mm}/{yyyy}"] if c.locale == "uk" else
    ["{Wkd}, {Month} {d}", "{Wk} {m}/{d}", "{Month} {dth}", "{Month} {d}", "{m}/{d}", "{Month} {d}, {yyyy}",
     "{m}/{d}/{yyyy}"]), times=_E_TIMES)
_date_slot("dt_email", -3, 0, ["{Wkd}, {Month} {d}, {yyyy} 10:32 AM", "{d} {Month} {yyyy} 09:15",
                               "{Wk}, {d} {Mon} {yyyy} 09:15:22 +0000", "{m}/{d}/{yyyy} 4:05 PM",
                               "{Wkd}, {d} {Month} {yyyy} 17:48", "{Wk} {Mon} {d}, {yyyy} at 8:02 AM"])
_date_slot("date_d", 1, 90, ["{Month} {dth}", "{dth} {Month}", "the {dth} of {Month}", "{d} {Month}",
                             "{Month} {d}", "{dd}/{mm}", "{Wkd} the {dth}", "{Wkd} {dth} {Month}"], lower=True)


@_slot("yy", "DATE_TIME")
def _yy(ctx, second):
    y = ctx.base.year - ctx.rng.randint(2, 40)
    return (f"'{y % 100:02d}" if ctx.rng.random() < 0.6 else f"{y % 100:02d}")


@_slot("year", "DATE_TIME")
def _year(ctx, second):
    return str(ctx.base.year - ctx.rng.randint(1, 30))


# ---- places


def _uk_postcode(rng: random.Random) -> str:
    area = rng.choice(_PC_AREAS)
    district = str(rng.randint(1, 9 if len(area) == 1 else 25))
    if area in ("SW", "EC", "W") and rng.random() < 0.15:
        district = f"{rng.randint(1, 9)}{rng.choice('AVXY')}"
    return f"{area}{district} {rng.randint(0, 9)}{rng.choice(_PC_LETTERS)}{rng.choice(_PC_LETTERS)}"


def _uk_street(ctx, number: bool | None = None) -> str:
    rng = ctx.rng
    if number is not False and rng.random() < 0.3:
        s = rng.choice(ctx.D.gb_streets)
        return s if number is None or s[:1].isdigit() else s
    name = f"{rng.choice(_STREET_BASES)} {rng.choice(_STREET_SUFFIXES)}"
    if rng.random() < 0.06:
        name = "High Street"
    if number is False or (number is None and rng.random() < 0.2):
        return name
    s = f"{rng.randint(1, 240)} {name}"
    if rng.random() < 0.12:
        s = f"Flat {rng.randint(1, 14)}, {s}"
    return s


def _us_row(ctx):
    return ctx.rng.choice(ctx.D.us)


def _us_street(ctx) -> str:
    rng = ctx.rng
    if rng.random() < 0.6:
        s = _us_row(ctx)["StreetAddress"]
    else:
        s = (f"{rng.randint(10, 9999)} {rng.choice(['Oak', 'Maple', 'Cedar', 'Pine', 'Elm', 'Lake', 'Hill'] + [_Person._pick(rng, ctx.D.last)])} "
             f"{rng.choice(['St', 'Street', 'Ave', 'Avenue', 'Blvd', 'Dr', 'Ln', 'Court', 'Road'])}")
    if rng.random() < 0.12:
        s += rng.choice([f" Apt {rng.randint(1, 40)}{rng.choice(['', 'B', 'C'])}", f", Unit {rng.randint(1, 300)}", f" #{rng.randint(2, 99)}"])
    return s


def _city(ctx) -> str:
    rng = ctx.rng
    if ctx.locale == "us":
        return _us_row(ctx)["City"]
    return rng.choice(ctx.D.gb_cities) if rng.random() < 0.35 else rng.choice(_UK_TOWNS)


@_slot("street", "STREET_ADDRESS")
def _street(ctx, second):
    return _uk_street(ctx, True) if ctx.locale == "uk" else _us_street(ctx)


@_slot("city", "LOCATION")
def _city_slot(ctx, second):
    return _city(ctx)


@_slot("postcode", "POSTCODE")
def _postcode(ctx, second):
    return _uk_postcode(ctx.rng)


@_slot("addr")
def _addr(ctx, second):
    rng = ctx.rng
    if ctx.locale == "uk":
        segs = [(_uk_street(ctx, True), "STREET_ADDRESS"), (", ", None), (_city(ctx), "LOCATION")]
        segs += [(rng.choice([" ", ", ", " "]), None), (_uk_postcode(rng), "POSTCODE")]
        return segs
    row = _us_row(ctx)
    zipc = row["ZipCode"] + (f"-{rng.randint(1000, 9999)}" if rng.random() < 0.15 else "")
    street = row["StreetAddress"] if rng.random() < 0.7 else _us_street(ctx)
    return [(street, "STREET_ADDRESS"), (", ", None), (row["City"], "LOCATION"), (", ", None),
            (row["State"], "LOCATION"), (" ", None), (zipc, "ZIP_CODE")]


@_slot("addr_short")
def _addr_short(ctx, second):
    return [(_street(ctx, False), "STREET_ADDRESS"), (", ", None), (_city(ctx), "LOCATION")]


@_slot("country", "LOCATION")
def _country(ctx, second):
    return ctx.rng.choice(["Poland", "Nigeria", "Pakistan", "Romania", "Ireland", "Portugal", "Iran",
                           "Albania", "Sri Lanka", "Canada", "Brazil", "Eritrea"])


@_slot("town_d", "LOCATION")
def _town_d(ctx, second):
    return ctx.rng.choice(_UK_TOWNS[:18]).lower()


@_slot("street_d", "STREET_ADDRESS")
def _street_d(ctx, second):
    return _uk_street(ctx, None if ctx.rng.random() < 0.5 else False)


@_slot("house_street_d", "STREET_ADDRESS")
def _house_street_d(ctx, second):
    return f"{ctx.rng.randint(1, 240)} {_uk_street(ctx, False)}"


@_slot("pc_d", "POSTCODE")
def _pc_d(ctx, second):
    pc = _uk_postcode(ctx.rng) if ctx.rng.random() < 0.3 else \
        f"CB{ctx.rng.randint(1, 5)} {ctx.rng.randint(0, 9)}{ctx.rng.choice(_PC_LETTERS)}{ctx.rng.choice(_PC_LETTERS)}"
    return pc.replace(" ", "") if ctx.rng.random() < 0.8 else pc


# ---- organisations


def _org_name(ctx) -> str:
    rng = ctx.rng
    o = rng.choice(ctx.D.orgs) if rng.random() < 0.6 else rng.choice(ctx.D.big_orgs)
    if ctx.domain == "legal" and ctx.locale == "uk" and rng.random() < 0.5 and not re.search(
            r"\b(Ltd|plc|LLP|Limited|AG|NV|SA|Inc|Group|Company)\b", o):
        o += rng.choice([" Ltd", " Limited", " plc", " Ltd"])
    return o


@_slot("org", "ORGANIZATION")
def _org(ctx, second):
    return ctx.once("org2" if second else "org", lambda: _org_name(ctx))


@_slot("hosp", "ORGANIZATION")
def _hosp(ctx, second):
    def make():
        rng = ctx.rng
        city = _us_row(ctx)["City"]
        return rng.choice([f"{city} General Hospital", f"St. {rng.choice(_SAINTS)}'s Hospital",
                           f"{_Person._pick(rng, ctx.D.last)} Memorial Hospital", f"{city} Medical Center",
                           f"University of {rng.choice(_US_STATES)} Medical Center",
                           f"{city} Regional", f"Mercy {city}"])
    return ctx.once("hosp2" if second else "hosp", make)


@_slot("rehab", "ORGANIZATION")
def _rehab(ctx, second):
    rng = ctx.rng
    return rng.choice([f"{_us_row(ctx)['City']} Rehabilitation Center", f"{_Person._pick(rng, ctx.D.last)} House Nursing Home",
                       f"{rng.choice(['Maple', 'Cedar', 'Oak'])} Ridge Skilled Nursing"])


@_slot("pharmacy", "ORGANIZATION")
def _pharmacy(ctx, second):
    rng = ctx.rng
    return rng.choice([f"{_Person._pick(rng, ctx.D.last)} Pharmacy", f"{_us_row(ctx)['City']} Drug",
                       f"{_Person._pick(rng, ctx.D.last)}'s Apothecary"])


@_slot("lawfirm", "ORGANIZATION")
def _lawfirm(ctx, second):
    def make():
        rng = ctx.rng
        a, b = _Person._pick(rng, ctx.D.last), _Person._pick(rng, ctx.D.last)
        return rng.choice([f"{a} {b} LLP", f"{a} & Co Solicitors", f"{a} {b} Solicitors", f"{a} Law"])
    return ctx.once("lawfirm", make)


@_slot("school", "ORGANIZATION")
def _school(ctx, second):
    rng = ctx.rng
    return rng.choice([f"{_Person._pick(rng, ctx.D.last)} Primary School",
                       f"St {rng.choice(_SAINTS)}'s C of E Primary School", f"{rng.choice(_UK_TOWNS)} Academy",
                       f"{rng.choice(_STREET_BASES)} Park Infant School"])


# ---- numbers and identifiers


@_slot("phone", "PHONE_NUMBER")
def _phone(ctx, second):
    rng = ctx.rng
    if ctx.locale == "us":
        a = rng.choice([x for x in range(201, 990) if x % 100 != 11])
        e, n = rng.randint(200, 999), _digits(rng, 4)
        return rng.choice([f"({a}) {e}-{n}", f"{a}-{e}-{n}", f"{a}.{e}.{n}", f"+1 {a} {e} {n}",
                           f"{a}-{e}-{n}", f"1-{a}-{e}-{n}"])
    return _uk_phone(rng)


def _uk_phone(rng: random.Random, spaced: bool = True) -> str:
    local = lambda n: str(rng.randint(2, 9)) + _digits(rng, n - 1)  # noqa: E731
    if rng.random() < 0.35:
        s = f"07{rng.randint(400, 999)} {_digits(rng, 6)}"
        if rng.random() < 0.3:
            s = "+44 " + s[1:]
    else:
        code = rng.choice(_UK_AREA_CODES)
        if code == "020":
            s = f"020 {rng.choice('378')}{_digits(rng, 3)} {_digits(rng, 4)}"
        elif len(code) == 4:
            s = f"{code} {local(3)} {_digits(rng, 4)}"
        else:
            s = f"{code} {local(6)}"
        if rng.random() < 0.15:
            s = "+44 (0)" + s[1:]
    return s if spaced else s.replace(" ", "")


@_slot("phone_d", "PHONE_NUMBER")
def _phone_d(ctx, second):
    return _uk_phone(ctx.rng, spaced=ctx.rng.random() < 0.6)


@_slot("mrn", "ID")
def _mrn(ctx, second):
    rng = ctx.rng
    return ctx.once("mrn", lambda: rng.choice([_digits(rng, 7), _digits(rng, 8), f"{rng.randint(10, 99)}-{_digits(rng, 5)}",
                                               f"0{_digits(rng, 6)}"]))


@_slot("acct", "ID")
def _acct(ctx, second):
    rng = ctx.rng
    return rng.choice([_digits(rng, 8), _digits(rng, 10), f"{rng.choice(['AC', 'CU', 'C-'])}{_digits(rng, 7)}",
                       f"{_digits(rng, 4)}-{_digits(rng, 4)}"])


@_slot("invoice", "ID")
def _invoice(ctx, second):
    rng = ctx.rng
    return rng.choice([f"INV-{_digits(rng, 5)}", f"#{_digits(rng, 5)}", f"INV/{ctx.base.year}/{_digits(rng, 4)}",
                       f"{rng.choice('ABS')}{_digits(rng, 6)}"])


@_slot("order_id", "ID")
def _order_id(ctx, second):
    rng = ctx.rng
    return rng.choice([f"{_digits(rng, 3)}-{_digits(rng, 7)}-{_digits(rng, 7)}", f"ORD-{_digits(rng, 6)}",
                       f"#{_digits(rng, 8)}", f"W{_digits(rng, 9)}"])


@_slot("order_d", "ID")
def _order_d(ctx, second):
    rng = ctx.rng
    return rng.choice([_digits(rng, 6), f"{rng.choice('ABCDEFGH')}{_digits(rng, 5)}", f"{_digits(rng, 3)}-{_digits(rng, 4)}"])


@_slot("ticket", "ID")
def _ticket(ctx, second):
    rng = ctx.rng
    return rng.choice([f"CS-{_digits(rng, 6)}", f"{_digits(rng, 4)}-{rng.choice('ABCDEFXZ')}{rng.choice('ABCDEFXZ')}",
                       f"CLM{_digits(rng, 7)}", f"SR{_digits(rng, 8)}"])


@_slot("ref", "ID")
def _ref(ctx, second):
    rng = ctx.rng
    chars = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    while True:
        r = "".join(rng.choice(chars) for _ in range(8))
        if any(c.isdigit() for c in r) and any(c.isalpha() for c in r):
            return r


@_slot("contract_ref", "ID")
def _contract_ref(ctx, second):
    rng = ctx.rng
    return rng.choice([f"CTR/{ctx.base.year}/{rng.randint(10, 999)}", f"SA-{_digits(rng, 5)}", f"{_digits(rng, 4)}/{rng.choice('CKLM')}"])


@_slot("claimno", "ID")
def _claimno(ctx, second):
    rng = ctx.rng
    L = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    return ctx.once("claimno", lambda: rng.choice([
        f"HQ{ctx.base.year % 100:02d}X{_digits(rng, 5)}", f"{rng.choice(L)}{_digits(rng, 2)}{rng.choice(L)}{rng.choice(L)}{_digits(rng, 3)}",
        f"KB-{ctx.base.year}-{_digits(rng, 6)}", f"BL-{ctx.base.year}-{_digits(rng, 6)}"]))


@_slot("caseno_ca", "ID")
def _caseno_ca(ctx, second):
    rng = ctx.rng
    return f"{rng.choice(['A2', 'B2', 'B4', 'C1', 'A3'])}/{ctx.base.year}/{_digits(rng, 4)}"


@_slot("et_caseno", "ID")
def _et_caseno(ctx, second):
    return f"{ctx.rng.randint(1300000, 6099999)}/{ctx.base.year}"


@_slot("indict", "ID")
def _indict(ctx, second):
    return f"T{ctx.base.year}{_digits(ctx.rng, 4)}"


@_slot("fam_caseno", "ID")
def _fam_caseno(ctx, second):
    rng = ctx.rng
    return f"{rng.choice(['ZW', 'LU', 'CB', 'MA', 'BS'])}{ctx.base.year % 100:02d}{rng.choice('CP')}{_digits(rng, 5)}"


@_slot("ut_no", "ID")
def _ut_no(ctx, second):
    rng = ctx.rng
    return f"{rng.choice(['PA', 'HU', 'DA', 'EA'])}/{_digits(rng, 5)}/{ctx.base.year}"


@_slot("us_caseno", "ID")
def _us_caseno(ctx, second):
    rng = ctx.rng
    return rng.choice([f"{rng.randint(1, 4)}:{ctx.base.year % 100:02d}-cv-{_digits(rng, 5)}",
                       f"{rng.randint(1, 4)}:{ctx.base.year % 100:02d}-cv-{_digits(rng, 5)}-{rng.choice(['JLS', 'RMB', 'KAW'])}"])


@_slot("us_caseno2", "ID")
def _us_caseno2(ctx, second):
    return f"{ctx.base.year % 100:02d}CV{_digits(ctx.rng, 6)}"


@_slot("ssn", "US_SSN")
def _ssn(ctx, second):
    rng = ctx.rng
    area = rng.choice([x for x in range(1, 900) if x != 666])
    s = f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
    return s if rng.random() < 0.85 else s.replace("-", " ")


def _ni(rng: random.Random) -> str:
    ok1 = "ABCEGHJKLMNOPRSTWXYZ"
    ok2 = "ABCEGHJKLMNPRSTWXYZ"
    while True:
        p = rng.choice(ok1) + rng.choice(ok2)
        if p not in ("BG", "GB", "NK", "KN", "TN", "NT", "ZZ"):
            break
    d = _digits(rng, 6)
    suf = rng.choice("ABCD")
    return f"{p} {d[:2]} {d[2:4]} {d[4:]} {suf}" if rng.random() < 0.6 else f"{p}{d}{suf}"


@_slot("natid")
def _natid(ctx, second):
    if ctx.locale == "uk":
        return [(_ni(ctx.rng), "ID")]
    return [(_ssn(ctx, False), "US_SSN")]


@_slot("cc", "CREDIT_CARD")
def _cc(ctx, second):
    rng = ctx.rng
    kind = rng.choice(["visa", "visa", "mc", "mc", "amex", "disc"])
    if kind == "amex":
        n = _luhn_complete(rng, rng.choice(["34", "37"]), 15)
        sep = rng.choice([" ", "-", ""])
        return f"{n[:4]}{sep}{n[4:10]}{sep}{n[10:]}"
    prefix = {"visa": "4", "mc": str(rng.randint(51, 55)), "disc": "6011"}[kind]
    n = _luhn_complete(rng, prefix, 16)
    sep = rng.choice([" ", " ", "-", ""])
    return sep.join(n[i:i + 4] for i in range(0, 16, 4))


@_slot("iban", "IBAN_CODE")
def _iban(ctx, second):
    rng = ctx.rng
    c = rng.choice(["GB", "GB", "GB", "DE", "FR", "NL", "ES", "IE"])
    if c in ("GB", "IE"):
        bank = rng.choice(["NWBK", "BARC", "LOYD", "HBUK", "MIDL"] if c == "GB" else ["AIBK", "BOFI"])
        bban = bank + _digits(rng, 14)
    elif c == "DE":
        bban = _digits(rng, 18)
    elif c == "FR":
        bban = _digits(rng, 23)
    elif c == "NL":
        bban = rng.choice(["ABNA", "INGB", "RABO"]) + _digits(rng, 10)
    else:
        bban = _digits(rng, 20)
    iban = c + _iban_check(c, bban) + bban
    return " ".join(iban[i:i + 4] for i in range(0, len(iban), 4)) if rng.random() < 0.7 else iban


@_slot("ip", "IP_ADDRESS")
def _ip(ctx, second):
    rng = ctx.rng
    if rng.random() < 0.2:
        return f"192.168.{rng.randint(0, 5)}.{rng.randint(2, 254)}"
    first = rng.choice([x for x in range(1, 224) if x not in (10, 127)])
    return f"{first}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


# ---- people


def _person_slot(ctx: _Ctx, role: str, attr: str) -> list[tuple[str, str | None]]:
    p = ctx.person(role)
    rng = ctx.rng
    P = "PERSON"
    he = {"he": ("he", "she"), "his": ("his", "her"), "him": ("him", "her")}
    if attr in he:
        return [(he[attr][p.sex == "F"], None)]
    if attr == "first":
        return [(p.first, P)]
    if attr == "last":
        return [(p.last, P)]
    if attr == "full":
        return [(p.full, P)]
    if attr == "ilast":
        return [(f"{p.first[0]}. {p.last}", P)]
    if attr == "lastfirst":
        return [(f"{p.last}, {p.first}", P)]
    if attr == "title":
        return [(p.title + " ", None), (p.last, P)]
    if attr == "tfull":
        return [(p.title + " ", None), (p.full, P)]
    if attr == "rel":
        return [(p.rel, None)]
    if attr == "sexw":
        return [(rng.choice(["M", "male"] if p.sex == "M" else ["F", "female"]), None)]
    if attr == "sexw2":
        return [(rng.choice(["man", "male", "gentleman"] if p.sex == "M" else ["woman", "female", "lady"]), None)]
    if attr == "sexl":
        return [(p.sex, None)]
    if attr == "age":
        return [(str(p.age), "AGE")]
    if attr == "dob":
        y = ctx.base.year - p.age - (1 if rng.random() < 0.5 else 0)
        d = date(y, rng.randint(1, 12), rng.randint(1, 28))
        if ctx.domain == "clinical":
            forms = ["{m}/{d}/{yyyy}", "{mm}/{dd}/{yy}", "{m}/{d}/{yy}", "{yyyy}-{mm}-{dd}"]
        elif ctx.locale == "uk":
            forms = ["{d} {Month} {yyyy}", "{dth} {Month} {yyyy}", "{dd}/{mm}/{yyyy}", "{dd}.{mm}.{yyyy}"]
        else:
            forms = ["{Month} {d}, {yyyy}", "{m}/{d}/{yyyy}", "{mm}/{dd}/{yyyy}"]
        return [(_fmt(d, rng.choice(forms)), "DATE_TIME")]
    if attr == "org":
        return [(ctx.once(f"org:{role}", lambda: _org_name(ctx)), "ORGANIZATION")]
    if attr == "web":
        org = ctx.once(f"org:{role}", lambda: _org_name(ctx))
        return [(ctx.once(f"web:{role}", lambda: "www." + _slug(org)[:18] + rng.choice([".com", ".co.uk", ".com"])), None)]
    if attr == "email":
        if p._email is None:
            if role in ("s", "r", "t", "w") and ctx.domain in ("email", "legal") and rng.random() < 0.7:
                org = ctx.once(f"org:{role}", lambda: _org_name(ctx))
                dom = ctx.once(f"dom:{role}", lambda: _slug(org)[:16] + rng.choice([".com", ".co.uk", ".com", ".net", ".io"]))
            else:
                dom = rng.choice(_WEBMAIL)
            p._email = f"{p.local_part(rng)}@{dom}"
        return [(p._email, "EMAIL_ADDRESS")]
    if attr == "pemail":
        if p._pemail is None:
            p._pemail = f"{p.local_part(rng)}@{rng.choice(_WEBMAIL)}"
        return [(p._pemail, "EMAIL_ADDRESS")]
    f, la = _slug(p.first), _slug(p.last)
    if attr == "linkedin":
        return [(rng.choice([f"linkedin.com/in/{f}-{la}-{rng.randint(10, 999)}{rng.choice('abcdef')}",
                             f"https://www.linkedin.com/in/{f}{la}", f"www.linkedin.com/in/{f}-{la}"]), "URL")]
    if attr == "url":
        return [(rng.choice([f"https://www.{f}{la}.com", f"www.{f}{la}.co.uk", f"https://github.com/{f[0]}{la}",
                             f"https://{f}{la}photography.com", f"https://instagram.com/{f}.{la}",
                             f"https://www.linkedin.com/in/{f}-{la}", f"{f}{la}.design", f"https://{la}{f[0]}.dev"]), "URL")]
    if attr == "jt":
        return [("Mr Justice" if p.sex == "M" else "Mrs Justice", None)]
    if attr == "lj":
        return [("Lord Justice" if p.sex == "M" else "Lady Justice", None)]
    if attr == "hon":
        return [("His Honour Judge" if p.sex == "M" else "Her Honour Judge", None)]
    raise KeyError(f"unknown person attribute {role}_{attr}")


def _segments(ctx: _Ctx, name: str) -> list[tuple[str, str | None]]:
    second = False
    if name not in _SLOTS and name.endswith("2") and name[:-1] in _SLOTS:
        name, second = name[:-1], True
    if name in _SLOTS:
        fn, typ = _SLOTS[name]
        out = fn(ctx, second)
        return [(out, typ)] if isinstance(out, str) else out
    role, _, attr = name.partition("_")
    if role in _ROLES and attr:
        return _person_slot(ctx, role, attr)
    raise KeyError(f"unknown template slot {{{name}}}")


_SLOT_RE = re.compile(r"\{(\w+)(?:\|(\w+))?\}")


def _render(tpl: str, ctx: _Ctx) -> tuple[str, list[tuple[int, int, str, str]]]:
    """Fill ``tpl``; returns the text and its gold spans ``(start, end, TYPE, inserted value)``."""
    out: list[str] = []
    spans: list[tuple[int, int, str, str]] = []
    n = pos = 0
    for m in _SLOT_RE.finditer(tpl):
        lit = tpl[pos:m.start()]
        out.append(lit)
        n += len(lit)
        mod = m.group(2)
        for text, typ in _segments(ctx, m.group(1)):
            if mod == "lower" or (ctx.lower and typ != "ID"):
                text = text.lower()
            elif mod == "upper":
                text = text.upper()
            elif mod == "title":
                text = text.title()
            elif mod == "cap":
                text = text[:1].upper() + text[1:]
            if typ == "PERSON" and spans and spans[-1][2] == "PERSON" and spans[-1][1] + 1 == n \
                    and out[-1] == " " and text:
                # "{x_first} {x_last}" is one full name, hence one span
                s0, _, _, v0 = spans.pop()
                spans.append((s0, n + len(text), typ, f"{v0} {text}"))
            elif typ and text:
                spans.append((n, n + len(text), typ, text))
            out.append(text)
            n += len(text)
        pos = m.end()
    out.append(tpl[pos:])
    return "".join(out), spans


# --------------------------------------------------------------------------- templates
# Pools are split by index parity (dev: even, test: odd). "UK:" / "US:" prefixes restrict a legal
# template to documents of that locale. All text below was written for this module.

_T: dict[str, dict[str, list[str]]] = {}

_T["clinical"] = {
    "open": [
        "{pt_age} yo {pt_sexw} admitted to {unit} on {date} w/ {complaint}, hx {pmh}.",
        "Pt is a {pt_age} y/o {pt_sexw} transferred from {hosp} on {date} for further mgmt of {complaint}.",
        "Nursing Progress Note 0700-1900.",
        "MICU nursing note: please see flowsheet for VS, I/O and drips.",
        "{pt_age}-year-old {pt_sexw2} with PMH {pmh} presenting with {complaint} x{n_days} days.",
        "Admit note: {pt_title} is a {pt_age} yo {pt_sexw} from {city} w/ PMH {pmh}, brought in by EMS after found down at home.",
        "NPN 7p-7a: pt remains in {unit}, full code, on {drip}.",
        "CCU NPN, events overnight as below.",
        "Pt {pt_first} {pt_last} (MRN {mrn}) seen and examined at bedside this AM.",
        "{pt_lastfirst} -- {pt_age}{pt_sexl} -- adm {date_full} -- MRN {mrn}",
        "Events: pt hypotensive overnight, SBP 80s, bolused 500cc NS x2 w/ good effect.",
        "Resp care note: pt on vent, AC 500 x 14, PEEP 5, FiO2 40%.",
        "This is a {pt_age} yo {pt_sexw} s/p CABG x3 on {date} at {hosp}, now POD 2.",
        "Pt is a pleasant {pt_age} yo {pt_sexw}, pmh {pmh}, admitted {date} w/ {complaint}.",
    ],
    "pii": [
        "PMH significant for MI in {yy}, s/p stent to LAD, HTN, hyperlipidemia.",
        "{sp_rel|cap} {sp_first} at bedside most of the day, updated on plan of care by Dr. {md_last}.",
        "Family mtg held w/ {sp_rel} {sp_first} and Dr. {md_last} re: goals of care, pt remains full code for now.",
        "{ch_rel|cap} {ch_first} called x2 for update, ph {phone}, requests call w/ any changes.",
        "Last colonoscopy {month_year} at {hosp}, per pt unremarkable.",
        "Seen by cards (Dr. {md2_last}) this am, plan for cath {date} if Cr stable.",
        "Pt lives alone in {city}, {ch_rel} {ch_first} nearby checks on {pt_him} daily.",
        "Dx'd w/ breast ca {month_year}, s/p lumpectomy and XRT at {hosp}.",
        "Last seen in clinic by Dr. {md_last} on {date}, at that time BP {bp}.",
        "Outpt PCP is Dr. {md_full} in {city}, ph {phone}.",
        "ID: Tmax {tmax}, WBC {wbc} from {wbc} on {date}, cont vanco/zosyn day 3.",
        "Code status d/w {sp_rel} {sp_first} {pt_last}, DNR/DNI confirmed, form signed {date}.",
        "Per {ch_rel} {ch_first}, pt was independent w/ ADLs until {month_year}.",
        "Echo {date_full}: EF 35%, mod MR, no effusion.",
        "Admitted to {hosp} {date_full} for CHF exacerbation, d/c'd home on lasix 40mg po daily.",
        "Social: retired {job}, lives w/ {sp_rel} in {city}, quit smoking in {yy}.",
        "Pt states DOB is {pt_dob} when asked, oriented x3.",
        "Surgery f/u scheduled {date} w/ Dr. {md2_last}, appt confirmed w/ pt's {ch_rel}.",
        "Report given to RN {rn_last} at 1900, pt resting comfortably.",
        "Pt seen by Dr. {md_last} and Dr. {md2_last}, plan to wean and extubate in AM.",
        "MRN {mrn} / acct {acct} verified w/ armband on arrival to unit.",
        "Contact: {sp_first} {pt_last} ({sp_rel}) {phone}, alt {phone2}.",
        "Blood cx from {date} grew GPC in clusters, ID consult (Dr. {md2_last}) following.",
        "Pt's {ch_rel} {ch_full} flying in from {city}, expected on unit {date}.",
        "Previous admit {month_year} for urosepsis at {hosp2}, see old records.",
        "{pt_title} reports a fall at home {date}, no LOC, brought in by {pt_his} {sp_rel}.",
        "Pt is a {pt_age} year old retired {job} followed at {hosp} since {year}.",
        "hx DVT in {yy} and again {month_year}, on coumadin, INR today 2.4.",
        "Meds reconciled w/ {pharmacy} in {city} ({phone}), no recent changes.",
        "Spoke w/ {rn_first} in case mgmt re: rehab placement at {rehab}, bed avail {date}.",
        "Pt reports last drink was {date}, CIWA started, ativan prn.",
        "Age {pt_age}, PMH as above, here since {date}.",
        "Dr. {md_last} notified of K 3.1 at {clock}, repleted w/ 40 mEq KCl po.",
        "CT head {date}: no acute bleed, read by Dr. {md2_last} at {hosp}.",
        "Pt's {sp_rel} states pt 'has not been {pt_him}self' since {month_year}.",
        "Hospice info given to {ch_rel} {ch_first} {ch_last}, who is HCP, cell {phone}.",
        "{pt_first} was tearful this am, asking for {pt_his} {sp_rel} {sp_first}, who was called at {phone}.",
        "Transfer to {hosp2} discussed w/ Dr. {md_full}, pt and family prefer to stay.",
        "Pt's home phone {phone} and {sp_rel}'s cell {phone2} confirmed for d/c planning.",
        "Labs drawn under acct {acct}, results to Dr. {md_last} and PCP Dr. {md2_last}.",
    ],
    "filler": [
        "Neuro: A&Ox3, MAE, follows commands, PERRL 3mm brisk.",
        "CV: NSR {hr}s, no ectopy, SBP 110s-140s, +pp bilat.",
        "Resp: LS coarse bilat, dim at bases, O2 sat {spo2} on {o2l} NC, RR {rr}.",
        "GI: abd soft, NT/ND, +BS x4, tol clear liquids, no BM today.",
        "GU: foley draining clear yellow urine 40-60cc/hr, I/O +1.2L at midnight.",
        "ID: afebrile, Tmax {tmax}, cont abx as ordered.",
        "Skin: intact, sacrum reddened but blanchable, repositioned q2h.",
        "Access: PIV x2, L radial aline w/ good waveform.",
        "Endo: BS 180-220, covered per RISS, lantus 20u at HS.",
        "Pain: c/o incisional pain 6/10, medicated w/ morphine 2mg IV x2 w/ relief.",
        "Plan: cont lasix 40mg IV bid, f/u AM labs, wean O2 as tol.",
        "Pt SOB w/ exertion, placed back on 4L NC, sats 92-95%.",
        "NPO after midnight for procedure, IVF D5 1/2NS at 75cc/hr.",
        "Given 1/2 tab ativan prn for anxiety at {clock} w/ good effect.",
        "Heparin gtt d/c'd per team, PTT 48.",
        "Tele: NSR, occasional PVCs, no runs of VT noted overnight.",
        "Lines d/c'd, pt OOB to chair x2 w/ assist, tol well.",
        "Labs: WBC {wbc}, Hct 29.8, K 4.1, Cr 1.3, Mg 2.0 - repleted prn.",
        "Pt remains on CPAP 5/5 FiO2 40%, ABG 7.38/42/88 on these settings.",
        "Pt c/o nausea x1, zofran 4mg IV given, tol sips of water since.",
        "Safety: bed alarm on, fall precautions, 1:1 sitter 24/7 per protocol.",
        "Pt A&Ox3 but intermittently confused overnight, reoriented easily.",
        "Cont to monitor I/O, strict I&O, daily wts.",
        "Dressing to sternal incision dry and intact, CDI, no drainage.",
        "Pt ambulated in hall x2 w/ PT, steady gait w/ walker.",
        "Abx: vanco 1g IV q12h, zosyn 3.375g IV q6h, trough due prior to 4th dose.",
        "CXR this AM showed ? RLL infiltrate, team aware.",
        "Diet: cardiac/diabetic, appetite fair, ate 50% of dinner.",
        "Psychosocial: pt anxious re: procedure, emotional support given, questions answered.",
        "Chest tubes to -20 sxn, no air leak, minimal serosang drainage.",
        "Insulin gtt titrated per protocol, FS q1h, goal 80-140.",
        "Resp: sx for thick tan sputum q2-3h, RSBI 62, SBT planned in AM.",
        "Vent: CPAP+PS 10/5, Vt 450s, RR {rr}, no distress.",
        "HR {hr}, BP {bp}, RR {rr}, T {tmax}, O2 sat {spo2} on RA.",
        "Pt d/w team, plan to cont current mgmt and reassess after AM rounds.",
        "s/p 2 units PRBCs, post-transfusion Hct pending.",
    ],
    "sign": [
        "{rn_first} {rn_last}, RN",
        "-- {rn_first} {rn_last} RN, BSN",
        "Signed: {rn_ilast}, RN",
        "Note by {rn_full}, RN ({unit})",
        "Will cont to monitor. {rn_ilast} RN",
        "See flowsheet for details. -{rn_first}",
        "{rn_last}, RN / 7p-7a",
        "Reviewed w/ charge RN {rn_first}.",
    ],
}

_T["legal"] = {
    "j_head": [
        "Neutral Citation Number: {ncn}\nCase No: {caseno_ca}\nIN THE COURT OF APPEAL (CIVIL DIVISION)\nON APPEAL FROM THE COUNTY COURT AT {court_town|upper}\nRoyal Courts of Justice\nStrand, London, WC2A 2LL\nDate: {date_long}\nBefore:\n{judge_lj|upper} {judge_last|upper}\nBetween:\n{pa_full|upper}\nAppellant\n- and -\n{pb_full|upper}\nRespondent",
        "IN THE HIGH COURT OF JUSTICE\nKING'S BENCH DIVISION\nClaim No: {claimno}\nBefore:\n{judge_jt|upper} {judge_last|upper}\nBETWEEN:\n{pa_full|upper}\nClaimant\n- and -\n{org|upper}\nDefendant",
        "IN THE EMPLOYMENT TRIBUNAL\nCase Number: {et_caseno}\nClaimant: {pa_tfull}\nRespondent: {org}\nHeard at: London Central\nOn: {date_long}\nBefore: Employment Judge {judge_last}\nJUDGMENT",
        "IN THE COUNTY COURT AT {court_town|upper}\nClaim No: {claimno}\nBETWEEN:\n{pa_full|upper}\nClaimant\n-v-\n{pb_full|upper}\nDefendant\nJUDGMENT OF {judge_hon|upper} {judge_last|upper}",
        "IN THE CROWN COURT AT {court_town|upper}\nR v {pa_full|upper}\nIndictment No: {indict}\nSENTENCING REMARKS OF {judge_hon|upper} {judge_last|upper}",
        "IN THE FAMILY COURT\nSITTING AT {court_town|upper}\nCase No: {fam_caseno}\nRe: the child {ch_first} (born {ch_dob})\nApplicant: {pa_tfull}\nRespondent: {pb_tfull}",
        "JUDGMENT\nApproved by the court for handing down.",
        "UPPER TRIBUNAL\n(IMMIGRATION AND ASYLUM CHAMBER)\nAppeal Number: {ut_no}\nTHE IMMIGRATION ACTS\nHeard at Field House\nOn {date_long}\nBetween\n{pa_full|upper}\n(ANONYMITY DIRECTION NOT MADE)\nAppellant\nand\nTHE SECRETARY OF STATE FOR THE HOME DEPARTMENT\nRespondent",
        "US:UNITED STATES DISTRICT COURT\nDISTRICT OF {us_district|upper}\n{pa_full|upper}, Plaintiff,\nv.\n{org|upper}, Defendant.\nCase No. {us_caseno}\nMEMORANDUM OPINION AND ORDER",
        "US:SUPERIOR COURT OF THE STATE OF CALIFORNIA\nIN AND FOR THE COUNTY OF {us_county|upper}\n{pa_full|upper},\nPlaintiff,\nvs.\n{pb_full|upper},\nDefendant.\nCase No.: {us_caseno2}",
        "Neutral Citation Number: {ncn}\nIN THE HIGH COURT OF JUSTICE\nBUSINESS AND PROPERTY COURTS\nDate: {date_long}\nBefore:\n{judge_jt|upper} {judge_last|upper}\nBetween:\n{org|upper}\nClaimant\n- and -\n{pa_full|upper}\nDefendant",
        "US:UNITED STATES DISTRICT COURT\nDISTRICT OF {us_district|upper}\nCase No. {us_caseno}\n{pa_full|upper},\nPlaintiff,\nv.\n{pb_full|upper} and {org|upper},\nDefendants.\nOPINION",
    ],
    "j_pii": [
        "UK:The Claimant, {pa_tfull}, was born on {pa_dob} and lived at {addr} until {month_year}.",
        "UK:On {date_long} the Appellant began working for {org} as a {job}, based at its premises in {city}.",
        "UK:{pb_title} gave evidence that {pb_he} first met the Claimant in {year} at a party in {city}.",
        "UK:The incident occurred at about 10.30 pm on {date_long} outside {addr_short}.",
        "UK:The claim form was issued on {date_long} under claim number {claimno}.",
        "UK:{judge_jt} {judge_last} heard the application on {date_long} and refused permission to amend.",
        "UK:I heard oral evidence from {w_tfull}, a neighbour, and from {w2_tfull}, the Claimant's former line manager at {org}.",
        "UK:The Respondent's solicitors, {lawfirm}, wrote to the Claimant on {date_long} rejecting the grievance.",
        "UK:{w_title}, who lives at {street}, {city}, telephoned the police at 23:14 and gave {w_his} mobile number as {phone}.",
        "UK:By a tenancy agreement dated {date_long} the Defendant let the flat at {addr} to the Claimant for a term of twelve months.",
        "UK:The Appellant's date of birth is {pa_dob}; {pa_he} was therefore {pa_age} when the offences were committed.",
        "UK:{pa_title} was {pa_age} years old at the date of the accident and had no previous back problems.",
        "UK:The sum of £{money} was transferred from the Claimant's account (IBAN {iban}) on {date_long}.",
        "UK:{pa_first} {pa_last} (\"the mother\") and {pb_first} {pb_last} (\"the father\") separated in {month_year}.",
        "UK:The child, {ch_first}, now aged {ch_age}, attends {school} and is said to be doing well.",
        "UK:In a witness statement dated {date_long}, {w_tfull} described the Defendant's conduct as intimidating.",
        "UK:The matter came before HHJ {judge_last} in the County Court at {court_town} on {date_long}, when directions were given.",
        "UK:The Appellant was dismissed by letter dated {date_long}, signed by {w_full}, operations director of {org}.",
        "UK:Dr {w2_last}, a consultant psychiatrist instructed jointly by the parties, examined {pa_title} on {date_long}.",
        "UK:Police attended {addr_short} shortly after midnight on {date_long} and arrested {pb_title}.",
        "UK:E-mails sent from the Claimant's personal account ({pa_email}) show that {pa_he} knew of the decision by {month_year}.",
        "UK:{pa_title} was represented by {lc_title} of counsel, instructed by {lawfirm}.",
        "UK:The Appellant, who had travelled from {country}, claimed asylum on {date_long} and has lived in {city} since {year}.",
        "UK:The Respondent, {pb_tfull} of {addr}, did not attend and was not represented.",
        "UK:{pa_first}'s {pa_rel} {pc_first} {pc_last} telephoned the surgery on {date_long} from {pc_his} mobile, {phone}.",
        "UK:On {date_long}, {pb_title} moved out of the family home at {addr_short} and into a rented flat.",
        "US:Plaintiff {pa_full} was hired by {org} on {date_long} as a {job} at its {city} facility.",
        "US:Plaintiff's Social Security number, {ssn}, appears unredacted in Exhibit 4 and must be filed under seal.",
        "US:Defendant {pb_full} resides at {addr} and was served with the summons on {date_long}.",
        "US:On {date_long}, {pa_title} e-mailed {w_full} at {w_email} to complain about the schedule change.",
        "US:{pa_full}, then {pa_age} years old, was terminated on {date_long2} after {pa_he} reported the incident to {w_title}.",
        "US:According to {w_tfull}, the supervisor at {org}, the complaint was received on {date_long} and logged as {ticket}.",
        "US:Plaintiff {pa_first} {pa_last} and Defendant {pb_first} {pb_last} were married on {date_long} in {city}, {us_district}.",
        "US:The parties' minor child, {ch_first}, born {ch_dob}, resides with Plaintiff at {addr}.",
    ],
    "j_fill": [
        "UK:This appeal raises a short point on the construction of s. {sec} of the {statute}.",
        "UK:Section 6(1) of the Human Rights Act 1998 makes it unlawful for a public authority to act in a way which is incompatible with a Convention right.",
        "UK:The correct approach is that stated in {citation}, which remains binding on this court.",
        "UK:The test is an objective one: see {citation} at [{para}].",
        "UK:The burden of proof lies on the Claimant, and the standard is the balance of probabilities.",
        "UK:Article 8 of the Convention is plainly engaged, but the interference is justified under Article 8(2).",
        "UK:In my judgment the judge was entitled to reach the conclusion that he did, and this ground of appeal fails.",
        "UK:The full text of the earlier decision is available at {law_url}.",
        "UK:For these reasons I would dismiss the appeal.",
        "UK:The maxim res ipsa loquitur has no application where the cause of the accident is known.",
        "UK:Costs were reserved; the parties should attempt to agree an order within 14 days of hand-down.",
        "UK:Permission to appeal was granted on ground 2 only, limited to the issue of causation.",
        "UK:I am grateful to counsel on both sides for their clear and helpful written submissions.",
        "UK:Under CPR 52.21(3) the appeal court will allow an appeal where the decision of the lower court was wrong or unjust because of a serious procedural irregularity.",
        "UK:The decision in {citation} was doubted, obiter, in {citation2}, but it has never been overruled.",
        "UK:The court must have regard to the welfare checklist in s. 1(3) of the Children Act 1989.",
        "UK:The clause must be read contra proferentem, and the pre-contractual correspondence does not assist.",
        "UK:This judgment was handed down remotely by circulation to the parties' representatives by e-mail and by release to the National Archives.",
        "UK:The Secretary of State accepts that the First-tier Tribunal erred in law in its treatment of the expert evidence.",
        "UK:The judge directed himself correctly as to the law, and no criticism is made of that self-direction.",
        "UK:Whether a duty of care arises in a novel situation depends on the incremental approach endorsed in {citation}.",
        "UK:The sentence of 18 months' imprisonment, suspended for 2 years, was not manifestly excessive.",
        "UK:The Crown Court has no power under Part 2 of the Proceeds of Crime Act 2002 to make such an order.",
        "UK:The Tribunal found that the dismissal was procedurally unfair but made a 50% Polkey reduction.",
        "UK:Wednesbury unreasonableness is a high threshold, and it is not met on the facts of this case.",
        "UK:The other members of the court have read this judgment in draft and agree with it.",
        "US:Summary judgment is appropriate where there is no genuine dispute as to any material fact. Fed. R. Civ. P. 56(a).",
        "US:See {us_citation}; see also 42 U.S.C. § 1983.",
        "US:The Court has jurisdiction under 28 U.S.C. § 1331, and venue is proper in this District.",
        "US:For the foregoing reasons, Defendant's motion to dismiss is GRANTED in part and DENIED in part.",
        "US:A complaint must contain sufficient factual matter, accepted as true, to state a claim to relief that is plausible on its face. {us_citation}.",
        "US:The Court declines to exercise supplemental jurisdiction over the remaining state-law claims.",
        "US:Plaintiff bears the burden of establishing a prima facie case of retaliation under Title VII.",
        "US:The parties shall submit a joint status report within 30 days of the entry of this Order.",
    ],
    "j_sub": ["Background", "The facts", "The proceedings below", "Grounds of appeal", "Discussion",
              "The law", "Conclusion", "Analysis", "Disposal", "The evidence"],
    "c_head": [
        "THIS AGREEMENT is dated {date_long}\nPARTIES\n(1) {org}, incorporated and registered in England and Wales, whose registered office is at {addr} (\"the Supplier\"); and\n(2) {pa_full} of {addr2} (\"the Customer\").",
        "CONTRACT OF EMPLOYMENT\nThis contract is made on {date_long} between {org} (\"the Employer\") and {pa_tfull} of {addr} (\"the Employee\").",
        "US:RESIDENTIAL LEASE AGREEMENT\nThis Lease is entered into as of {date_long} by and between {pa_full} (\"Landlord\") and {pb_full} (\"Tenant\") for the premises located at {addr}.",
        "DEED OF VARIATION\nDated: {date_long}\nBetween {pa_full} and {pb_full}, both of {addr}, and {org} (\"the Lender\").",
        "CONSULTANCY AGREEMENT\nReference: {contract_ref}\nThis Agreement is made on {date_long} between {org} (\"the Client\") and {pa_full}, trading as {org2} (\"the Consultant\").",
        "MUTUAL NON-DISCLOSURE AGREEMENT\nEffective Date: {date_long}\nParty A: {org}\nParty B: {pa_full}, {addr}",
        "ASSURED SHORTHOLD TENANCY AGREEMENT\nThe Landlord: {pa_full}\nThe Tenant: {pb_full}\nThe Property: {addr}\nThe Term: 12 months from {date_long}",
        "US:EMPLOYMENT AGREEMENT\nThis Employment Agreement (the \"Agreement\") is entered into on {date_long} by {org}, a Delaware corporation (the \"Company\"), and {pa_full}, an individual residing at {addr} (\"Executive\").",
    ],
    "c_pii": [
        "The Employee's employment began on {date_long} and no employment with a previous employer counts as part of the Employee's continuous period of employment.",
        "All payments shall be made by bank transfer to the Landlord's account, IBAN {iban}, or to such other account as the Landlord may notify in writing.",
        "Notices under this Agreement shall be sent to {pa_full} at {pa_email} or by post to {addr}.",
        "The Employee's {natid_label} is {natid}.",
        "The Tenant's emergency contact is {pc_full}, telephone {phone}.",
        "The Consultant shall report to {w_full}, Head of Operations, or such other person as the Client may nominate.",
        "This Agreement shall commence on {date_long} and continue until {date_long2} unless terminated earlier in accordance with clause 14.",
        "The Guarantor, {pc_full}, born {pc_dob}, of {addr}, guarantees the Tenant's obligations under this Lease.",
        "The first payment of rent, being {cur}{money}, is due on {date_long}.",
        "SIGNED by {pa_full} in the presence of:\nWitness name: {w_full}\nAddress: {addr}\nOccupation: {job}",
        "The Customer's account number is {acct} and all invoices shall quote this reference.",
        "Signed for and on behalf of {org} by {w_full}, Director, on {date_long}.",
        "The Employee's normal place of work is the Employer's office at {street}, {city}, but the Employee may be required to work at other locations.",
        "The property known as {addr} (\"the Property\") is let together with the fixtures and fittings listed in the Inventory.",
        "The Consultant's fees shall be paid into the account held in the name of {pa_full}, account number {acct}.",
        "Any dispute shall first be referred to {w_tfull} of {org2}, acting as mediator.",
        "US:For payroll purposes, Executive's Social Security Number is {ssn}.",
        "This Agreement supersedes the letter of intent between the parties dated {date_long}.",
        "Correspondence for the Tenant should be addressed to {pb_tfull}, {addr}, telephone {phone}.",
        "The Landlord's agent is {w_full} of {org2}, who may be contacted on {phone} or at {w_email}.",
    ],
    "c_fill": [
        "In this Agreement, unless the context otherwise requires, words in the singular include the plural and vice versa.",
        "Clause, schedule and paragraph headings shall not affect the interpretation of this Agreement.",
        "UK:This Agreement shall be governed by and construed in accordance with the law of England and Wales.",
        "UK:Each party irrevocably agrees that the courts of England and Wales shall have exclusive jurisdiction to settle any dispute arising out of or in connection with this Agreement.",
        "Nothing in this Agreement is intended to, or shall be deemed to, establish any partnership or joint venture between the parties.",
        "The Receiving Party shall keep the Confidential Information secret and shall not use it except for the Purpose.",
        "UK:A person who is not a party to this Agreement shall have no rights under the Contracts (Rights of Third Parties) Act 1999 to enforce any of its terms.",
        "The Employee shall be entitled to 28 days' paid holiday in each holiday year, inclusive of public holidays.",
        "Either party may terminate this Agreement by giving not less than three months' written notice to the other.",
        "The Tenant shall not assign, sublet or part with possession of the Property or any part of it.",
        "Time shall be of the essence for the purposes of clause 4.2.",
        "UK:The Supplier shall comply with all applicable data protection legislation, including the UK GDPR and the Data Protection Act 2018.",
        "This Agreement may be executed in any number of counterparts, each of which shall constitute a duplicate original.",
        "IN WITNESS WHEREOF the parties have executed this Agreement on the date first written above.",
        "Neither party shall be liable for any failure or delay in performance caused by events beyond its reasonable control.",
        "UK:The deposit will be protected in a government-approved scheme within 30 days of receipt, as required by the Housing Act 2004.",
        "The Services are described in Schedule 1 and the Charges in Schedule 2 (version 2.1).",
        "US:This Agreement shall be governed by the laws of the State of Delaware, without regard to its conflict of laws principles.",
        "US:Executive shall be eligible to participate in the Company's 401(k) plan, subject to the terms of the plan.",
        "US:Any controversy arising under this Agreement shall be settled by binding arbitration in accordance with the rules then in effect.",
        "Payment is due within 30 days of the date of each invoice; late payments bear interest at 4% per annum above base rate.",
        "The Consultant is an independent contractor and nothing in this Agreement renders the Consultant an employee of the Client.",
        "If any provision of this Agreement is found to be invalid or unenforceable, the remaining provisions shall continue in full force.",
        "The Tenant shall keep the interior of the Property in good and clean condition, fair wear and tear excepted.",
    ],
    "c_sub": ["DEFINITIONS", "TERM", "PAYMENT", "CONFIDENTIALITY", "TERMINATION", "GOVERNING LAW",
              "NOTICES", "GENERAL", "OBLIGATIONS OF THE TENANT", "DUTIES"],
}

_T["email"] = {
    "head": [
        "From: {s_full} <{s_email}>\nSent: {dt_email}\nTo: {r_full} <{r_email}>\nSubject: {subject}",
        "From: {s_email}\nTo: {r_email}\nCc: {t_email}\nDate: {dt_email}\nSubject: {subject}",
        "Subject: {subject}",
        "To: {r_email}\nSubject: {subject}",
        "Subject: {subject}\nFrom: {s_full}\nTo: {r_full}; {t_full}",
        "Date: {dt_email}\nFrom: \"{s_lastfirst}\" <{s_email}>\nTo: {r_email}\nSubject: {subject}",
        "RE: {subject}",
        "Subject: Fwd: {subject}\n\n---------- Forwarded message ---------\nFrom: {t_full} <{t_email}>\nDate: {dt_email}",
    ],
    "greet": ["Hi {r_first},",
              "Dear {r_title},",
              "Hi all,",
              "Morning all,",
              "Good morning {r_first},",
              "Hey {r_first}!",
              "Dear Sir or Madam,",
              "Hello,",
              "Dear {r_first} {r_last},",
              "Hello {r_first} and team,",
              "{r_first} -",
              "Hi {r_first}, {t_first},",
              "Hiya,",
              "Dear {r_tfull},"],
    "pii": [
        "Following up on our call on {date_e}, I've attached the revised quote (quote_v2.pdf) for your review.",
        "Could you send the signed contract to {t_full} at {t_email} by {date_e}?",
        "I'm out of the office from {date_e} until {date_e2}; for anything urgent please contact {t_first} on {phone}.",
        "Please find attached invoice {invoice} for {cur}{money}, which is due on {date_e}.",
        "Shall we meet on {date_e} at the {org} office, {street}, {city}?",
        "My new mobile number is {phone}, please update your records.",
        "I paid with my card {cc} on {date_e}, but the booking still shows as unpaid.",
        "For the transfer, please use IBAN {iban} (beneficiary: {s_full}).",
        "You can see some of my recent work on my portfolio site, {s_url}.",
        "For payroll: my SSN is {ssn} and my new home address is {addr}.",
        "{t_full} from {org2} will join the call as well; {t_his} direct line is {phone}.",
        "We noticed a new sign-in to your account from IP address {ip} on {date_e}. If this wasn't you, please reset your password.",
        "Your order {order_id} was dispatched on {date_e} and will be delivered to {addr}.",
        "The kids' party is on {date_e} at our place, {street} - RSVP to {s_pemail}.",
        "I've copied in {t_first} ({t_email}), who looks after the {city} accounts.",
        "Your customer ID is {acct} and the reference for this request is {ticket}.",
        "As agreed with {t_title} on {date_e}, the deadline for the FY2024 budget moves to {date_e2}.",
        "I'll be in {city} from {date_e} and could drop by your office then.",
        "My personal e-mail is {s_pemail} if you'd rather not use the work one.",
        "We've booked a table at {venue|title} for {date_e} under the name {s_last}.",
        "Please call me on {phone} or on my mobile, {phone2}, any time after 2pm.",
        "The parcel for {t_full} should go to {addr} rather than the office.",
        "The login alert came from {ip}, which isn't an address we recognise.",
        "{t_first} starts with us on {date_e} as our new {jobtitle}, so please make {t_him} welcome.",
        "Our accountant, {t_tfull} at {org2}, can be reached at {t_email} or {phone}.",
        "Reminder: your appointment with Dr. {t_last} is on {date_e}.",
        "Can you update the supplier record for {org2}: new account number {acct}, contact {t_full}?",
        "Our new address from {date_e} will be {addr}.",
        "The case reference is {ticket}; I spoke to {t_first} in your claims team on {date_e}.",
        "Congratulations to {t_full} on {t_his} promotion to {jobtitle}!",
        "I've shared the folder with {t_email} and {r_email} so you can both edit it.",
        "{t_first} {t_last} ({t_age}) is our emergency contact, on {phone}.",
        "The new starter form needs your date of birth ({r_dob} is what we have on file) and your NI number.",
        "Happy to connect you with {t_full} - here's {t_his} LinkedIn: {t_linkedin}.",
        "Our bank details have changed: please pay future invoices to IBAN {iban}, account name {org}.",
        "Can you charge the remaining balance to my other card, {cc}? Thanks.",
        "{t_first} is turning {t_age} on {date_e} and we're organising a surprise lunch.",
        "My login keeps failing from {ip}; could IT have a look? It's the laptop {t_first} set up for me.",
        "HR needs my W-4 updated before {date_e}: SSN {ssn}, same home address as before.",
        "{t_first}'s flight lands on {date_e}; {t_his} mobile is {phone} if the driver needs it.",
    ],
    "filler": [
        "I hope you had a good weekend.",
        "Thanks for getting back to me so quickly.",
        "Attached are the slides ({file}) and the raw numbers in Excel.",
        "Let me know if anything is unclear, e.g. the headcount assumptions or the travel budget.",
        "We need to finalise the FY2024 forecast before the end of Q3, i.e. within the next two weeks.",
        "The call is at 10:30 UK time; the Teams link is in the calendar invite.",
        "I've made the changes you suggested in {file}, see sections 3 and 4.",
        "The total comes to {cur}{money} including VAT, which is within the approved budget.",
        "Sorry for the late reply, it's been a hectic week.",
        "Could we push our 1:1 to Thursday afternoon?",
        "The new version (v2.3) fixes the export bug but the x2 scaling option is still missing.",
        "Please review and approve by end of day, otherwise we'll miss the print deadline.",
        "I'm happy to discuss further if helpful.",
        "The team agreed to move the launch to Q4 given the supplier delays.",
        "Our standard payment terms are 30 days from the invoice date.",
        "Quick reminder that the office will be closed on Monday for the bank holiday.",
        "Lunch will be provided, please let me know of any dietary requirements.",
        "See the attached PDF for the full terms and conditions.",
        "I think option B is the safer bet, but happy to be overruled.",
        "The latest build is 4.2.1-rc3; release notes are in CHANGELOG.md.",
        "Can you double-check the figures in tab 3 of the spreadsheet?",
        "Looking forward to working with you on this.",
        "Apologies for the duplicate message, please ignore the previous one.",
        "Just a heads-up that the Salesforce migration starts next week, so expect some downtime.",
        "Do we still need the 2pm slot, or can we cancel it?",
        "Great news about the pilot results, well done everyone!",
        "I've moved the minutes to the shared drive under /Projects/2024/Board.",
        "Hope you're all keeping well.",
    ],
    "close": ["Best regards,", "Thanks,", "Kind regards,", "Cheers,", "Many thanks,", "Best,",
              "Thanks in advance,", "Warm wishes,", "Regards,", "Speak soon,", "All the best,", "Thanks again,"],
    "sig": [
        "{s_first}",
        "{s_full}\n{jobtitle} | {s_org}\nM: {phone}\n{s_email}",
        "{s_full}\n{jobtitle}\n{s_org}\n{addr}\nTel: {phone} | {s_web}",
        "-- \n{s_first} {s_last}\n{s_url}",
        "{s_first} {s_last}, {s_org}\nDirect: {phone} | Mobile: {phone2}\nLinkedIn: {s_linkedin}",
        "{s_full} | {jobtitle}\n{s_org} | {addr}",
        "{s_first}\n{phone}",
        "Dr. {s_full}\n{jobtitle}, {s_org}",
        "{s_first} x",
        "{s_ilast}\nAccounts Payable, {s_org}\n{s_email} | {phone}",
        "{s_first} ({s_pemail})",
        "{s_full}\n{s_web}",
    ],
    "boiler": [
        "Sent from my iPhone",
        "This e-mail and any attachments are confidential and intended solely for the addressee. If you have received it in error, please notify the sender and delete it. Our privacy notice is at {corp_url}.",
        "Sent from Outlook for Android",
        "Please consider the environment before printing this e-mail.",
        "CONFIDENTIALITY NOTICE: The information in this message is intended only for the named recipient. Any review, retransmission or dissemination is prohibited.",
        "{s_org} is registered in England and Wales. Registered office: {street}, {city} {postcode}.",
        "Get Outlook for iOS",
        "To manage your notification settings, visit {corp_url}.",
        "{s_org} | {addr} | {s_web}",
        "You are receiving this message because you subscribed to updates from our team.",
    ],
}

_T["dialogue"] = {
    "usr_open": [
        "hi, i'm looking for a cheap hotel in {area} with free wifi.",
        "i need a train from {town_d} to {town_d2} on {day}.",
        "can you book me a taxi from {street_d} to the train station please?",
        "hello, i'd like to book a table for {people} at a {food} place in the centre.",
        "hi there, i need a guesthouse for {nights} starting {date_d}.",
        "hi, i'm calling about my booking, the reference is {ref}.",
        "hello, my name is {c_full} and i'd like to change a reservation.",
        "i need to get to {town_d} by {time} on {day}, can you help?",
        "i'm looking for somewhere to stay in {town_d} from {date_d} to {date_d2}.",
        "good morning, is there a museum near {street_d}?",
        "hey, my order hasn't arrived yet.",
        "i want to find a {pricerange} restaurant that serves {food} food.",
        "hi, this is {c_first}, i booked a room for {date_d} and need to add a night.",
        "i'd like a taxi to pick me up at {house_street_d}, {pc_d}.",
    ],
    "usr_pii": [
        "my name is {c_full}.",
        "it's {c_last}, {c_first} {c_last}.",
        "my number is {phone_d}.",
        "i'd like to arrive on {date_d} and stay for {nights}.",
        "i live at {house_street_d}, {pc_d}, can the taxi pick me up there?",
        "the booking should be under {c_first} {c_last}.",
        "can you send the confirmation to {c_email}?",
        "i'll be coming from {town_d}.",
        "actually, can we change it to {date_d} instead?",
        "sure, my mobile is {phone_d} and my email is {c_email}.",
        "the reference you gave me was {ref}.",
        "i'm at {street_d} near the station, postcode {pc_d}.",
        "yes, for {people} on {date_d} please.",
        "i need to go from {street_d} to {street_d2}.",
        "put it under {c_last} please, the phone is {phone_d}.",
        "my order number is {order_d} and my postcode is {pc_d}.",
        "we're staying until {date_d}, is that ok?",
        "it's for my {sp_rel}, {sp_first} {sp_last}, not me.",
        "can i check in on {date_d} around {time}?",
        "i'm arriving {date_d} and leaving {date_d2}.",
    ],
    "usr_fill": [
        "no, i don't mind about the price, just somewhere with free parking.",
        "i need it to leave after {time} please.",
        "that sounds good, yes please book it.",
        "what's the price range?",
        "could you also give me the postcode?",
        "that's fine, what's the reference number?",
        "is there free wifi?",
        "for {people}, {nights} please.",
        "somewhere in the centre would be great.",
        "does it have at least {stars}s?",
        "can you tell me the travel time?",
        "i'd prefer a guesthouse rather than a hotel.",
        "what time does it get in?",
        "ok, how much is the entrance fee?",
        "i'd like to leave on {day} after {time}.",
        "any {food} place is fine.",
    ],
    "sys_pii": [
        "booking was successful, your reference number is {ref}.",
        "i've booked your taxi, it's a {car} and the contact number is {phone_d}.",
        "the address is {street_d}, postcode {pc_d}.",
        "the phone number is {phone_d} and they are located at {street_d}.",
        "okay, i have you down for {date_d}, under the name {c_last}.",
        "what time would you like to be picked up from {street_d}?",
        "your table for {people} at {venue} on {day} at {time} is confirmed, reference {ref}.",
        "i found one: {venue}, at {street_d} in {town_d}, postcode {pc_d}.",
        "i've sent the confirmation to {c_email}.",
        "thank you {c_first}, i can see your booking for {date_d}.",
        "your new booking runs from {date_d} to {date_d2}, reference {ref}.",
        "the train {train_id} leaves {town_d} at {time} and arrives in {town_d2} at {time2}, reference {ref}.",
        "i've updated the number on your account to {phone_d}.",
        "i'm sorry {c_first}, that date is full, but {date_d} is available.",
        "your order {order_d} is with the courier and should reach {pc_d} tomorrow.",
        "can you confirm the postcode, is it {pc_d}?",
        "the museum is on {street_d} in {town_d}, postcode {pc_d}, and entry is free.",
        "i've booked {nights} from {date_d}, the reference is {ref}.",
        "your stay at {venue} from {date_d} is confirmed under {c_full}, reference {ref}.",
        "ok, a taxi will collect you from {house_street_d} at {time}.",
    ],
    "sys_fill": [
        "what area of town would you prefer?",
        "i have 3 options, do you have a price range in mind?",
        "there is a train leaving at {time} and arriving at {time2}, it costs {price}.",
        "can i have a name for the booking please?",
        "sure, what day and how many people?",
        "i'm sorry, there's nothing available for {nights}, would you like to try a shorter stay?",
        "could i take a contact number in case we need to reach you?",
        "do you have a preference for the area?",
        "{venue} is a {stars} guesthouse in the east with free parking and free wifi.",
        "the journey takes about 50 minutes and the ticket is {price} per person.",
        "what time would you like to leave?",
        "i'd recommend {venue}, it's a {pricerange} {food} restaurant in the centre.",
        "do you need parking or wifi?",
        "your taxi will be a {car} and it will arrive at {time}.",
        "the entrance fee is {price} and it is open from 10:00 to 17:00.",
        "would you like me to book it for you?",
        "which day would you like to travel?",
        "the train id is {train_id}, it takes 79 minutes.",
    ],
    "usr_close": ["no, that's all, thank you.", "great, thanks for your help!", "that's everything, have a nice day.",
                  "perfect, thanks so much.", "no thanks, bye.", "that's all i need, cheers.", "thank you, goodbye.",
                  "brilliant, that's it for today."],
    "sys_close": ["you're welcome, have a nice day.", "thank you for calling, goodbye.", "enjoy your stay!",
                  "glad i could help, enjoy your trip.", "have a great day!", "thank you for using our service.",
                  "you're welcome, goodbye.", "have a lovely meal!"],
}

# --------------------------------------------------------------------------- assembly


class _Doc:
    def __init__(self):
        self.parts: list[str] = []
        self.spans: list[tuple[int, int, str, str]] = []
        self.n = 0

    def add(self, text: str, spans=()):
        for s, e, t, value in spans:
            self.spans.append((self.n + s, self.n + e, t, value))
        self.parts.append(text)
        self.n += len(text)

    def text(self) -> str:
        return "".join(self.parts)

    def words(self) -> int:
        return len(self.text().split())


def _half(pool: list[str], split: str) -> list[str]:
    return pool[0::2] if split == "dev" else pool[1::2]


def _tagged(tpl: str) -> tuple[str | None, str]:
    if tpl[:3] in ("UK:", "US:"):
        return tpl[:2].lower(), tpl[3:]
    return None, tpl


def _local(pool: list[str], locale: str) -> list[str]:
    return [t for loc, t in map(_tagged, pool) if loc in (None, locale)]


def _body(ctx: _Ctx, doc: _Doc, pii: list[str], fill: list[str], n: int, *, sep, min_words: int,
          max_words: int, max_units: int) -> int:
    rng = ctx.rng
    k = max(2, round(n * rng.uniform(0.4, 0.65)))
    a = rng.sample(pii, len(pii))
    b = rng.sample(fill, len(fill))
    plan = a[:k] + b[:max(0, n - k)]
    rng.shuffle(plan)
    rest = a[k:] + b[max(0, n - k):]
    rng.shuffle(rest)
    used = 0
    for tpl in plan + rest:
        if used >= max_units or (used >= n and doc.words() >= min_words):
            break
        text, spans = _render(tpl, ctx)
        if used and doc.words() + len(text.split()) > max_words:
            continue
        doc.add(sep(used))
        doc.add(text, spans)
        used += 1
    return used


def _build_clinical(ctx: _Ctx, T: dict, doc: _Doc) -> None:
    rng = ctx.rng
    doc.add(*_render(rng.choice(T["open"]), ctx))
    _body(ctx, doc, T["pii"], T["filler"], rng.randint(5, 10), min_words=80, max_words=290, max_units=11,
          sep=lambda i: "\n" if i == 0 or rng.random() < 0.65 else " ")
    if rng.random() < 0.6:
        doc.add("\n")
        doc.add(*_render(rng.choice(T["sign"]), ctx))


def _build_legal(ctx: _Ctx, T: dict, doc: _Doc) -> None:
    rng = ctx.rng
    judgment = rng.random() < 0.6
    head = rng.choice(T["j_head" if judgment else "c_head"])
    loc, head = _tagged(head)
    ctx.locale = loc or "uk"
    doc.add(*_render(head, ctx))
    pii = _local(T["j_pii" if judgment else "c_pii"], ctx.locale)
    fill = _local(T["j_fill" if judgment else "c_fill"], ctx.locale)
    subs = T["j_sub" if judgment else "c_sub"]

    def sep(i: int) -> str:
        s = "\n\n"
        if i and rng.random() < 0.2:
            s += rng.choice(subs) + "\n\n"
        return s + f"{i + 1}. "

    _body(ctx, doc, pii, fill, rng.randint(4, 9), sep=sep, min_words=100, max_words=380, max_units=10)


def _build_email(ctx: _Ctx, T: dict, doc: _Doc) -> None:
    rng = ctx.rng
    if rng.random() < 0.4:
        doc.add(*_render(rng.choice(T["head"]), ctx))
        doc.add("\n\n")
    if rng.random() < 0.9:
        doc.add(*_render(rng.choice(T["greet"]), ctx))
        doc.add("\n\n")
    _body(ctx, doc, T["pii"], T["filler"], rng.randint(3, 8), min_words=75, max_words=260, max_units=10,
          sep=lambda i: "" if i == 0 else ("\n\n" if rng.random() < 0.4 else " "))
    doc.add("\n\n")
    doc.add(*_render(rng.choice(T["close"]), ctx))
    doc.add("\n")
    doc.add(*_render(rng.choice(T["sig"]), ctx))
    if rng.random() < 0.35:
        doc.add("\n\n")
        doc.add(*_render(rng.choice(T["boiler"]), ctx))


def _build_dialogue(ctx: _Ctx, T: dict, doc: _Doc) -> None:
    rng = ctx.rng
    n = rng.randint(4, 12)
    closing = n >= 6 and rng.random() < 0.8
    mids = [i for i in range(1, n) if not (closing and i >= n - 2)]
    k = max(1, round(len(mids) * rng.uniform(0.4, 0.7)))
    pii_turns = set(rng.sample(mids, min(k, len(mids))))
    pools = {key: rng.sample(T[key], len(T[key])) for key in ("usr_pii", "usr_fill", "sys_pii", "sys_fill")}
    for i in range(n):
        role = "usr" if i % 2 == 0 else "sys"
        if i == 0:
            tpl = rng.choice(T["usr_open"])
        elif closing and i >= n - 2:
            tpl = rng.choice(T[f"{role}_close"])
        else:
            want, other = (f"{role}_pii", f"{role}_fill") if i in pii_turns else (f"{role}_fill", f"{role}_pii")
            tpl = (pools[want] or pools[other]).pop()
        doc.add(("\n" if i else "") + role.upper() + ": ")
        doc.add(*_render(tpl, ctx))


_BUILDERS = {"clinical": _build_clinical, "legal": _build_legal, "email": _build_email,
             "dialogue": _build_dialogue}


def _check(doc: dict, inserted: list[str]) -> None:
    text, prev = doc["text"], 0
    assert len(doc["gold"]) == len(inserted), doc["id"]
    for (s, e, t), value in zip(doc["gold"], inserted):
        assert t in TYPES, (doc["id"], t)
        assert 0 <= prev <= s < e <= len(text), (doc["id"], s, e)
        assert text[s:e] == value and value == value.strip(), (doc["id"], text[s:e], value)
        prev = e


def generate(domain: str, n_docs: int, *, seed: int = 0, split: str = "dev") -> list[dict]:
    """``n_docs`` documents of ``domain``, from the ``split`` half of its templates.

    Each document: ``{"text", "gold": [(start, end, TYPE), ...], "domain", "id"}``; offsets are
    Python str indices, end exclusive, sorted and non-overlapping."""
    if domain not in DOMAINS:
        raise ValueError(f"domain must be one of {DOMAINS}, not {domain!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be 'dev' or 'test', not {split!r}")
    D = _load(str(data_dir()))
    T = {k: _half(v, split) for k, v in _T[domain].items()}
    docs = []
    for i in range(n_docs):
        rng = random.Random(f"pii_domains|{domain}|{split}|{seed}|{i}")
        ctx = _Ctx(rng, domain, D)
        b = _Doc()
        _BUILDERS[domain](ctx, T, b)
        spans = sorted(b.spans)
        doc = {"text": b.text(), "gold": [(s, e, t) for s, e, t, _ in spans], "domain": domain,
               "id": f"{domain}-{split}-{i}"}
        _check(doc, [value for *_, value in spans])  # offsets tracked while filling vs the values inserted
        docs.append(doc)
    return docs


def corpus(n_per_domain: int = 200, *, seed: int = 0, split: str = "test") -> dict[str, list[dict]]:
    """``generate`` for every domain: ``{domain: [doc, ...]}``."""
    return {d: generate(d, n_per_domain, seed=seed, split=split) for d in DOMAINS}


def _all_templates() -> list[tuple[str, str]]:
    return [(dom, t) for dom, pools in _T.items() for pool in pools.values() for t in pool]


if __name__ == "__main__":
    import time
    from collections import Counter

    t0 = time.perf_counter()
    # every template renders (all slots resolve) in both locales
    D = _load(str(data_dir()))
    for dom, tpl in _all_templates():
        loc, body = _tagged(tpl)
        ctx = _Ctx(random.Random(tpl), dom, D)
        ctx.locale = loc or ctx.locale
        _render(body, ctx)
    for split in SPLITS:
        print(f"== split {split}")
        for dom in DOMAINS:
            docs = generate(dom, 200, split=split)
            assert docs == generate(dom, 200, split=split)
            words = [len(d["text"].split()) for d in docs]
            types = Counter(t for d in docs for _, _, t in d["gold"])
            print(f"{dom:9s} docs {len(docs)}  words {sum(words)} (min {min(words)}, mean {sum(words) / len(words):.0f}, "
                  f"max {max(words)})  spans {sum(types.values())}")
            print("          " + ", ".join(f"{t} {types[t]}" for t in TYPES if types[t]))
    for dom in DOMAINS:
        d = generate(dom, 1, seed=1, split="test")[0]
        print(f"\n== example {d['id']} (seed 1)\n{d['text']}\n-- gold:")
        print("; ".join(f"{d['text'][s:e]!r} {t}" for s, e, t in d["gold"]))
    print(f"\n{time.perf_counter() - t0:.1f}s")
