"""``encrypt_text``: the whole-text cipher over each record's ``text``.

**Obfuscation, not confidentiality**: one known plaintext reveals the key (SEEDS.md
section 1); the stage warns (``warnings.warn`` and the log) each time it is set up.

The stage holds only its settings (a key *reference*) until :meth:`setup` resolves the
reference through its context's :class:`~privatize.keys.KeyResolver` on the worker, so pickling the
stage before setup ships no key bytes. After setup it holds a
:class:`~privatize.ciphers.vigenere.Vigenere`; pickling drops it again
(``__getstate__``), and the next batch sets the stage up anew.

Per row: ``text`` encrypted (positions restart at each record; reserved tokens such as
``<MASK>`` copied), ``_stat.chars_encrypted`` = code points processed; a null ``text``
is quarantined ("no text to encrypt").
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import pyarrow as pa
import pyarrow.compute as pc

from privatize.ciphers.vigenere import Vigenere, warn_obfuscation
from privatize.settings import KeyKinds, KeyRef, Once, StageSettings, declared_key_kinds
from privatize.stage import QUARANTINE, Stage, register_stage, set_column

log = logging.getLogger(__name__)

NO_TEXT = "no text to encrypt"


class EncryptTextSettings(StageSettings):
    kind: Literal["encrypt_text"] = "encrypt_text"
    order_rules = (Once("encrypt_text appears twice"),)
    key: Annotated[KeyRef, KeyKinds("vigenere")]
    """A ``vigenere`` key, by reference (``file:<path>`` or ``keystore:<id>``)."""


@register_stage("encrypt_text", EncryptTextSettings)
class EncryptText(Stage):
    _cipher: Vigenere | None = None
    _key_id: str | None = None

    def setup(self) -> None:
        km = self.context.key_resolver.resolve(self.settings.key,
                                                  expect=declared_key_kinds(self.settings, "key"))
        self._cipher = Vigenere.from_key(km)
        self._key_id = km.key_id
        warn_obfuscation(every_time=True)
        log.info("encrypt_text: key %s (%s, length %d)", km.key_id, self._cipher.alphabet, self._cipher.key_length)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_cipher", None)  # key-derived tables never travel
        return state

    def key_ids(self) -> dict[str, str]:
        """``{"key": <key id>}``: named after the settings field, so the manifest entry
        ``stages.<i>.key`` is the spec path of the reference."""
        return {"key": self._key_id} if self._key_id else {}

    def process_batch(self, batch: pa.Table) -> pa.Table:
        if self._cipher is None:
            self.setup()
        text = batch["text"]
        batch = set_column(batch, "text", self._cipher.encrypt_array(text))
        if text.null_count:
            batch = set_column(batch, QUARANTINE, pc.if_else(pc.is_null(text), pa.scalar(NO_TEXT, pa.string()),
                                                             pa.scalar(None, pa.string())))
        chars = pc.fill_null(pc.utf8_length(text), 0).cast(pa.int64())
        return set_column(batch, "_stat.chars_encrypted", chars)
