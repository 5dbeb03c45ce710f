"""Entity tokens in a model's generations (SoE, Table 5): how many it writes, how many
are not genuine (fail to decrypt or authenticate under the data owner's key), and
whether plaintext PII of the training set comes back out.

A valid token is the design working: only the key holder can read it. A plaintext PII
value in a generation is the leak, so plaintext is searched in the generations as
written, never in their decryption.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from attacks.results import CipherOutputs
from privatize.ciphers.entity import CipherLike, DecryptReport, EntityCipher, decrypt_text


def _verbatim(value: str) -> re.Pattern[str]:
    """``value`` as written, not inside a longer word: "Ann" is not found in "Annabel".
    An edge that is not a word character ("+44 ...") needs no boundary."""
    left = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    right = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    return re.compile(left + re.escape(value) + right)


def resurfaced(generations: Iterable[str], values: Iterable[str]) -> int:
    """How many distinct ``values`` occur verbatim (see :func:`_verbatim`) in any generation."""
    joined = "\n".join(generations)  # a value never holds a newline, so never spans two generations
    found = 0
    for v in {v for v in values if v and v.strip() and "\n" not in v}:
        if v in joined and _verbatim(v).search(joined):  # the substring test is the fast pre-filter
            found += 1
    return found


def cipher_outputs(generations: Iterable[str], key: CipherLike, training_pii: Iterable[str] = ()) -> CipherOutputs:
    """Entity tokens found in ``generations``, checked under ``key`` (a ``KeyMaterial`` of
    kind aes-siv/aes-ecb or an ``EntityCipher``), and how many of the distinct
    ``training_pii`` plaintext values reappear. A token counts as invalid when it fails
    to decrypt (not genuine: invented, edited, or made under another key); unique
    counts are over the token text."""
    gens = list(generations)
    cipher = key if isinstance(key, EntityCipher) else EntityCipher(key)
    report = DecryptReport()
    for g in gens:
        report.add(decrypt_text(cipher, g)[1])
    s = report.summary()
    return CipherOutputs(total_tokens=s["total_tokens"], unique_tokens=s["unique_tokens"],
                         invalid_tokens=s["invalid"], unique_invalid=s["unique_failures"],
                         failure_ratio=s["failure_ratio"], resurfaced_plaintext=resurfaced(gens, training_pii))
