import base64
import string

import pytest

from privatize.ciphers.entity import EntityCipher, siv_decrypt, siv_encrypt
from privatize.ciphers.tokens import ENTITY_TOKEN_RE, entity_prefix, entity_type_of
from privatize.keys import KeyMaterial, new_key

B64 = string.ascii_letters + string.digits + "+/"


def test_rfc5297_a1_through_the_wrapper():
    key = bytes.fromhex("fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
    ad = bytes.fromhex("101112131415161718191a1b1c1d1e1f2021222324252627")
    pt = bytes.fromhex("112233445566778899aabbccddee")
    out = siv_encrypt(key, pt, [ad])
    assert out.hex() == "85632d07c6e8f37f950acd320a2ecc93" "40c02b9690c4dc04daef7f6afe5c"
    assert siv_decrypt(key, out, [ad]) == pt
    with pytest.raises(ValueError):
        siv_decrypt(key, out, [ad + b"x"])


@pytest.fixture(scope="module")
def siv():
    return EntityCipher(new_key("aes-siv"))


def test_same_entity_and_type_same_token_type_bound(siv):
    a = siv.token("John Smith", "PERSON")
    assert a == siv.token("John Smith", "PERSON") == EntityCipher._token_uncached(siv, "John Smith", "PERSON")
    assert a.startswith("Person_[") and a.endswith("]")
    assert siv.token("John Smith", "LOCATION") .split("[")[1] != a.split("[")[1]
    assert siv.token("John Smyth", "PERSON") != a
    # a token moved to another type does not decrypt (type is associated data)
    moved = "Location_[" + a.split("[", 1)[1]
    text, rep = siv.decrypt_text(moved)
    assert text == moved and rep.invalid == 1


def test_spans_round_trip_and_report(siv):
    text = "Call John Smith at +44 20 7946 0958, or mail js@example.org."
    spans = [{"start": 5, "end": 15, "entity_type": "PERSON"},
             {"start": 19, "end": 35, "entity_type": "PHONE_NUMBER"},
             {"start": 45, "end": 59, "entity_type": "EMAIL_ADDRESS"}]
    enc = siv.encrypt_spans(text, spans)
    assert "John" not in enc and "7946" not in enc and len(ENTITY_TOKEN_RE.findall(enc)) == 3
    dec, rep = siv.decrypt_text(enc)
    assert dec == text and (rep.ok, rep.revised, rep.invalid) == (3, 0, 0)
    with pytest.raises(ValueError, match="overlaps"):
        siv.encrypt_spans(text, [{"start": 0, "end": 6, "entity_type": "X"}, {"start": 5, "end": 9, "entity_type": "X"}])


def test_every_single_character_change_of_a_token_is_invalid(siv):
    tok = siv.token("Ann", "PERSON")
    body = ENTITY_TOKEN_RE.fullmatch(tok).group(2)
    start = tok.index("[") + 1
    changed = 0
    for i in range(len(body)):
        for c in B64 + "=":
            if c == body[i]:
                continue
            variant = tok[:start + i] + c + tok[start + i + 1:]
            text, rep = siv.decrypt_text(variant)
            assert rep.ok == 0 and rep.revised == 0, (i, c)
            assert "Ann" not in text
            changed += 1
    assert changed >= len(body) * 63


def test_missing_padding_is_revised_and_hallucinated_token_invalid(siv):
    tok = siv.token("Bob", "PERSON")  # 16-byte tag + 3 bytes = 19 bytes -> one '=' of padding
    assert tok.endswith("=]")
    text, rep = siv.decrypt_text("x " + tok.replace("=]", "]") + " y")
    assert text == "x Bob y" and rep.revised == 1
    fake = "Person_[" + base64.b64encode(b"\x01" * 24).decode() + "]"
    text, rep = siv.decrypt_text(fake)
    assert text == fake and rep.invalid == 1


def test_ecb_mode_warns_and_reports():
    with pytest.warns(UserWarning, match="ECB"):
        ecb = EntityCipher(new_key("aes-ecb"))
    tok = ecb.token("Carol", "PERSON")
    assert ecb.token("Carol", "PERSON") == tok and ecb.token("Carol", "LOCATION").split("[")[1] == tok.split("[")[1]
    text, rep = ecb.decrypt_text(tok)
    assert text == "Carol" and rep.ok == 1
    stripped = tok.replace("=", "")
    text, rep = ecb.decrypt_text(stripped)
    assert text == "Carol" and rep.revised == 1
    bad = "Person_[" + base64.b64encode(b"\x00" * 16).decode() + "]"  # PKCS7 unpadding fails
    assert ecb.decrypt_text(bad)[1].invalid == 1


def test_type_prefix_round_trip():
    for t in ("PERSON", "PHONE_NUMBER", "US_SSN", "MY_CUSTOM_ID", "CREDIT_CARD"):
        assert entity_type_of(entity_prefix(t)) == t


def test_key_material_never_in_repr():
    km = new_key("aes-siv")
    c = EntityCipher(km)
    for s in (repr(km), str(km), repr(c)):
        assert km.secret.hex() not in s and base64.b64encode(km.secret).decode() not in s
    assert isinstance(km, KeyMaterial)
