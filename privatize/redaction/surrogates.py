"""Surrogates: realistic stand-ins for what policy pi removed ("hiding in plain sight").

The redact stage's ``operator: surrogate`` replaces each detected span by a made-up value of
its type (a name for ``PERSON``, a phone number for ``PHONE_NUMBER``, a postcode for
``POSTCODE``...) drawn with Faker in the stage's ``surrogate_locale``. A model trained on
the result learns what such values look like, which ``<MASK>`` cannot teach it, and a
secret pi missed hides among the made-up ones.

What a surrogate may depend on, so that it carries nothing of the secret's value:

* the entity type pi gave the span (what ``tag`` already shows);
* the record with every span masked (the same text ``mask`` writes), the span's ordinal
  in it and ``surrogate_seed``: they seed the draw, so the same masked record gets the same
  surrogates on every runner and batch size, and dedup still counts repeats of a masked
  record as one record;
* whether the secret was written in lower or upper case (a property of the document's
  style: a lower-case chat gets a lower-case name).

A type without a generator here (an adapted detector's own labels, ``NRP``, ``CRYPTO``)
gets ``<MASK>``: never the original text.
"""

from __future__ import annotations

import hashlib
from typing import Callable

from faker import Faker
from faker.config import AVAILABLE_LOCALES

from privatize.ciphers.tokens import MASK_TOKEN
from privatize.redaction.spans import replace_spans

Generator = Callable[[Faker], str]


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def _date(f: Faker) -> str:
    # drawn from the seeded generator alone: Faker's date provider reads the clock (relative
    # bounds, and month_name draws a date up to now) and strftime the process's locale
    day, month, year = f.random_int(1, 28), f.random_int(1, 12), f.random_int(1990, 2026)
    return f.random_element((f"{day} {MONTHS[month - 1]} {year}", f"{MONTHS[month - 1]} {day}",
                             f"{month}/{day}/{year}", f"{day}/{month}"))


GENERATORS: dict[str, Generator] = {
    "PERSON": lambda f: f.name(),
    "LOCATION": lambda f: f.city(),
    "ORGANIZATION": lambda f: f.company(),
    "DATE_TIME": _date,
    "AGE": lambda f: str(f.random_int(18, 89)),
    "PHONE_NUMBER": lambda f: f.phone_number(),
    "EMAIL_ADDRESS": lambda f: f.safe_email(),  # example.com / .org / .net: no real mailbox
    "URL": lambda f: f"https://www.{f.domain_word()}.example.com/{f.uri_path()}",
    "IP_ADDRESS": lambda f: f.ipv4(),
    "MAC_ADDRESS": lambda f: f.mac_address(),
    "CREDIT_CARD": lambda f: f.credit_card_number(),
    "IBAN_CODE": lambda f: f.iban(),
    "US_BANK_NUMBER": lambda f: f.numerify("#" * 10),
    "US_SSN": lambda f: f.numerify("###-##-####"),
    "US_ITIN": lambda f: f.numerify("9##-7#-####"),
    "US_PASSPORT": lambda f: f.numerify("#########"),
    "US_DRIVER_LICENSE": lambda f: f.bothify("?#######").upper(),
    "UK_NHS": lambda f: f.numerify("### ### ####"),
    "MEDICAL_LICENSE": lambda f: f.bothify("??#######").upper(),
    "STREET_ADDRESS": lambda f: f.street_address(),
    "ZIP_CODE": lambda f: f.postcode(),
    "POSTCODE": lambda f: f.postcode(),
    "REFERENCE_NUMBER": lambda f: f.bothify("??##?#??").upper(),
    "UUID": lambda f: f.uuid4(),
}
"""Entity type -> a generator of one made-up value. Adding a type is one entry here."""


def check_locale(locale: str) -> str:
    if locale not in AVAILABLE_LOCALES:
        raise ValueError(f"surrogate_locale: {locale!r} is not a Faker locale (e.g. en_US, en_GB, de_DE, fr_FR)")
    return locale


def _cased_like(value: str, original: str) -> str:
    letters = [c for c in original if c.isalpha()]
    if letters and all(c.islower() for c in letters):
        return value.lower()
    if len(letters) > 1 and all(c.isupper() for c in letters):
        return value.upper()
    return value


class Surrogates:
    """Replacements for one stage: a seeded Faker of ``locale`` and ``seed``."""

    def __init__(self, locale: str = "en_US", seed: int = 0):
        self.faker = Faker(check_locale(locale))
        self.seed = seed

    def replace(self, text: str, spans: list[dict]) -> str:
        """``text`` with each (sorted, non-overlapping) span replaced by its surrogate."""
        masked = replace_spans(text, spans, lambda sp: MASK_TOKEN)
        record = hashlib.sha256(f"{self.seed}\x00{masked}".encode()).digest()
        ordinal = iter(range(len(spans)))

        def one(sp: dict) -> str:
            gen = GENERATORS.get(sp["entity_type"])
            k = next(ordinal)
            if gen is None:
                return MASK_TOKEN
            h = hashlib.sha256(record + k.to_bytes(4, "big") + sp["entity_type"].encode()).digest()
            self.faker.seed_instance(int.from_bytes(h[:8], "big"))
            value = " ".join(gen(self.faker).split())  # one line: Faker's addresses hold newlines
            return _cased_like(value, text[sp["start"]:sp["end"]])

        return replace_spans(text, spans, one)
