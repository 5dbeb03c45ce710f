"""Ciphers: the whole-text polyalphabetic cipher (``vigenere``) and deterministic entity
tokens (``entity``: AES-SIV by default, ECB only to reproduce the SoE paper)."""


def _vigenere(km, texts: list[str]):
    from privatize.ciphers.vigenere import Vigenere

    return Vigenere.from_key(km).decrypt_many(texts), None


def _entity(km, texts: list[str]):
    from privatize.ciphers.entity import DecryptReport, EntityCipher

    cipher, report, outs = EntityCipher(km), DecryptReport(), []
    for t in texts:
        plain, rep = cipher.decrypt_text(t)
        report.add(rep)
        outs.append(plain)
    return outs, report


DECRYPTERS = {"vigenere": _vigenere, "aes-siv": _entity, "aes-ecb": _entity}
"""Key kind -> how text encrypted under such a key is decrypted."""


def decrypt_texts(km, texts: list[str]):
    """``texts`` decrypted with ``km`` (a :class:`privatize.keys.KeyMaterial`), and the
    entity cipher's :class:`~privatize.ciphers.entity.DecryptReport` (None for the
    whole-text cipher); LookupError for a kind of key that encrypts no text."""
    try:
        decrypt = DECRYPTERS[km.kind]
    except KeyError:
        raise LookupError(f"key {km.key_id} is a {km.kind} key; it does not decrypt text") from None
    return decrypt(km, texts)
