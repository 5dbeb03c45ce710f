"""Reserved tokens: copied unchanged by the whole-text cipher (their positions still
advance the key), and never searched for PII.

* ``<MASK>``: what dedup and redaction put in place of a removed span.
* tags: ``<PERSON>``, ``<PHONE_NUMBER>``… (redaction's ``tag`` operator).
* entity tokens: ``Person_[<base64>]`` (redaction's ``encrypt`` operator, see ``entity``).
"""

from __future__ import annotations

import re

MASK_TOKEN = "<MASK>"

# Presidio entity types and the token prefixes of the SoE format (``Person_[...]``).
ENTITY_PREFIX = {
    "PERSON": "Person", "PHONE_NUMBER": "PhoneNumber", "EMAIL_ADDRESS": "EmailAddress",
    "CREDIT_CARD": "CreditCard", "US_SSN": "UsSsn", "IP_ADDRESS": "IpAddress", "IBAN_CODE": "IbanCode",
    "STREET_ADDRESS": "StreetAddress", "LOCATION": "Location", "GPE": "Gpe", "ORGANIZATION": "Organization",
    "DATE_TIME": "DateTime", "NRP": "Nrp", "URL": "Url", "US_DRIVER_LICENSE": "UsDriverLicense",
    "US_PASSPORT": "UsPassport", "US_BANK_NUMBER": "UsBankNumber", "UK_NHS": "UkNhs", "POSTCODE": "Postcode",
    "ZIP_CODE": "ZipCode", "REFERENCE_NUMBER": "ReferenceNumber", "ORDER_NUMBER": "OrderNumber",
    "TRACKING_NUMBER": "TrackingNumber", "AGE": "Age", "TITLE": "Title", "NAME": "Name", "ADDRESS": "Address",
    "PHONE": "Phone", "CANARY_SECRET": "CanarySecret", "ID": "Id", "MEDICAL_LICENSE": "MedicalLicense",
    "CRYPTO": "Crypto", "MAC_ADDRESS": "MacAddress", "US_ITIN": "UsItin", "UUID": "Uuid", "FAC": "Fac",
    "LOC": "Loc", "NORP": "Norp",
}


def entity_prefix(entity_type: str) -> str:
    """Token prefix of an entity type: the table above, or CamelCase of the type."""
    if entity_type in ENTITY_PREFIX:
        return ENTITY_PREFIX[entity_type]
    if not re.fullmatch(r"[A-Z][A-Z0-9_]*", entity_type):
        raise ValueError(f"entity type {entity_type!r} must be upper case letters, digits and '_'")
    return "".join(p.capitalize() for p in entity_type.split("_") if p)


_PREFIX_TYPE = {v: k for k, v in ENTITY_PREFIX.items()}


def entity_type_of(prefix: str) -> str:
    """Inverse of :func:`entity_prefix`."""
    if prefix in _PREFIX_TYPE:
        return _PREFIX_TYPE[prefix]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", prefix).upper()


# A token's Base64 is standard or URL-safe alphabet, optionally '='-padded (the
# decrypter repairs missing padding and reports the token as "revised").
ENTITY_TOKEN_RE = re.compile(r"(?<![A-Za-z0-9])([A-Z][A-Za-z0-9]*)_\[([A-Za-z0-9+/_-]+={0,2})\]")
TAG_RE = re.compile(r"<[A-Z][A-Z0-9_]*>")
RESERVED_RE = re.compile(f"{ENTITY_TOKEN_RE.pattern}|{TAG_RE.pattern}")


def reserved_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) code-point spans of reserved tokens in ``text``."""
    if "<" not in text and "_[" not in text:
        return []
    return [m.span() for m in RESERVED_RE.finditer(text)]
