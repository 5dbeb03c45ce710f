"""``encrypt_text``: the whole-text cipher over each record (obfuscation, not
confidentiality; see ``privatize.ciphers.vigenere``)."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from privatize.ciphers.vigenere import Vigenere, warn_obfuscation
from privatize.keys import KeyResolver
from privatize.settings import KeyRef, StageSettings
from privatize.stage import QUARANTINE, Stage, register_stage, set_column


class EncryptTextSettings(StageSettings):
    kind: Literal["encrypt_text"] = "encrypt_text"
    key: KeyRef
    """A ``vigenere`` key, by reference."""


@register_stage("encrypt_text", EncryptTextSettings)
class EncryptText(Stage):
    def setup(self) -> None:
        km = KeyResolver(self.context.base_dir).resolve(self.settings.key, expect=("vigenere",))
        self._cipher = Vigenere.from_key(km)
        self._key_id = km.key_id
        warn_obfuscation()

    def key_ids(self) -> dict[str, str]:
        return {"key": self._key_id} if hasattr(self, "_key_id") else {}

    def process_batch(self, batch: pa.Table) -> pa.Table:
        text = batch["text"]
        out = self._cipher.encrypt_array(text)
        batch = set_column(batch, "text", out)
        if text.null_count:
            batch = set_column(batch, QUARANTINE, pc.if_else(pc.is_null(text), "no text to encrypt",
                                                             pa.scalar(None, pa.string())))
        return set_column(batch, "_stat.chars_encrypted", pc.fill_null(pc.utf8_length(text), 0))
