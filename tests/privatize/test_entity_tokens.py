import base64
import pickle
import string
import warnings

import pytest
from Crypto.Cipher import AES

from privatize.ciphers.entity import (TOKEN_RE, EntityCipher, decrypt_text, encrypt_entity, encrypt_spans,
                                      siv_decrypt, siv_encrypt, token_prefix)
from privatize.ciphers.tokens import entity_prefix, entity_type_of
from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial, new_key

B64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "+/"

# RFC 5297 appendix A (checked against the RFC text, S2V intermediates included)
A1_KEY = bytes.fromhex("fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0" "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
A1_AD = bytes.fromhex("101112131415161718191a1b1c1d1e1f" "2021222324252627")
A1_PT = bytes.fromhex("112233445566778899aabbccddee")
A1_OUT = bytes.fromhex("85632d07c6e8f37f950acd320a2ecc93" "40c02b9690c4dc04daef7f6afe5c")
A2_KEY = bytes.fromhex("7f7e7d7c7b7a79787776757473727170" "404142434445464748494a4b4c4d4e4f")
A2_AD = [bytes.fromhex("00112233445566778899aabbccddeeff" "deaddadadeaddadaffeeddccbbaa9988" "7766554433221100"),
         bytes.fromhex("102030405060708090a0"),
         bytes.fromhex("09f911029d74e35bd84156c5635688c0")]  # the nonce, as the last AD part
A2_PT = b"this is some plaintext to encrypt using SIV-AES"
A2_OUT = bytes.fromhex("7bdb6e3b432667eb06f4d14bff2fbd0f" "cb900f2fddbe404326601965c889bf17"
                       "dba77ceb094fa663b7a3f748ba8af829" "ea64ad544a272e9c485b62a3fd5c0d")


@pytest.mark.parametrize("key, ad, pt, out", [(A1_KEY, [A1_AD], A1_PT, A1_OUT), (A2_KEY, A2_AD, A2_PT, A2_OUT)])
def test_rfc5297_vectors_through_the_wrapper(key, ad, pt, out):
    assert siv_encrypt(key, pt, ad) == out
    assert siv_decrypt(key, out, ad) == pt
    with pytest.raises(ValueError, match="authentication"):
        siv_decrypt(key, out, ad[:-1] + [ad[-1] + b"x"])
    with pytest.raises(ValueError):
        siv_decrypt(key, out[:-1] + bytes([out[-1] ^ 1]), ad)
    with pytest.raises(ValueError):
        siv_decrypt(key, out, ad[::-1] if len(ad) > 1 else [])  # AD parts are ordered and separate


def test_wrapper_agrees_with_pycryptodome_siv():
    key = new_key("aes-siv").secret
    for pt, ad in ((b"Ann Lee", [b"PERSON"]), (b"+44 20 7946 0958", [b"PHONE_NUMBER", b"x"])):
        c = AES.new(key, AES.MODE_SIV)
        for part in ad:
            c.update(part)
        ct, tag = c.encrypt_and_digest(pt)
        assert siv_encrypt(key, pt, ad) == tag + ct


@pytest.fixture(scope="module")
def siv():
    return EntityCipher(new_key("aes-siv"))


def test_same_entity_and_type_same_token_type_bound(siv):
    a = siv.token("John Smith", "PERSON")
    assert a == siv.token("John Smith", "PERSON") == siv._token_uncached("John Smith", "PERSON")
    assert TOKEN_RE.fullmatch(a) and a.startswith("Person_[") and a.endswith("]")
    assert siv.token("John Smith", "LOCATION").split("[")[1] != a.split("[")[1]
    assert siv.token("John Smyth", "PERSON") != a
    assert EntityCipher(new_key("aes-siv")).token("John Smith", "PERSON") != a  # another key
    raw = base64.b64decode(a[len("Person_["):-1])
    assert len(raw) == 16 + len("John Smith")  # V || C
    # a token moved to another type does not decrypt (the type is associated data)
    moved = "Location_[" + a.split("[", 1)[1]
    text, rep = siv.decrypt_text(moved)
    assert text == moved and (rep.ok, rep.invalid) == (0, 1)


def test_spans_round_trip_and_report(siv):
    text = "Call John Smith at +44 20 7946 0958, or mail js@example.org."
    spans = [{"start": 45, "end": 59, "entity_type": "EMAIL_ADDRESS"},  # any order
             {"start": 5, "end": 15, "entity_type": "PERSON"},
             {"start": 19, "end": 35, "entity_type": "PHONE_NUMBER"}]
    enc = siv.encrypt_spans(text, spans)
    assert "John" not in enc and "7946" not in enc and len(TOKEN_RE.findall(enc)) == 3
    assert enc.startswith("Call Person_[") and " at PhoneNumber_[" in enc and "mail EmailAddress_[" in enc
    dec, rep = siv.decrypt_text(enc)
    assert dec == text and (rep.ok, rep.revised, rep.invalid) == (3, 0, 0)
    assert [t["entity_type"] for t in rep.tokens] == ["PERSON", "PHONE_NUMBER", "EMAIL_ADDRESS"]
    for bad, msg in (([{"start": 0, "end": 6, "entity_type": "PERSON"}, {"start": 5, "end": 9, "entity_type": "PERSON"}],
                      "overlaps"),
                     ([{"start": 3, "end": 3, "entity_type": "PERSON"}], "empty"),
                     ([{"start": 50, "end": 99, "entity_type": "PERSON"}], "outside"),
                     ([{"start": 0, "end": 2}], "entity_type")):
        with pytest.raises(ValueError, match=msg):
            siv.encrypt_spans(text, bad)


def test_every_single_character_change_of_a_token_is_never_decrypted(siv):
    tok = siv.token("Ann", "PERSON")
    tried = 0
    for i in range(len(tok)):
        for c in B64 + "=":
            if c == tok[i]:
                continue
            variant = tok[:i] + c + tok[i + 1:]
            text, rep = siv.decrypt_text(variant)
            assert rep.ok == 0 and rep.revised == 0, (i, c)
            # left exactly as it was: nothing decrypted. (A changed base64 character can spell
            # "Ann" by chance, so the plaintext's absence is no test; equality is.)
            assert text == variant
            tried += 1
    assert tried == len(tok) * 65 - sum(1 for ch in tok if ch in B64 + "=")


def test_missing_padding_is_revised_and_noncanonical_or_invented_is_invalid(siv):
    tok = siv.token("Bob", "PERSON")  # 16-byte tag + 3 bytes = 19 bytes -> "==" padding
    b64 = tok[len("Person_["):-1]
    assert b64.endswith("==") and not b64.endswith("===")
    core = b64.rstrip("=")
    text, rep = siv.decrypt_text(f"x Person_[{core}] y")
    assert text == "x Bob y" and (rep.ok, rep.revised, rep.invalid) == (0, 1, 0)
    # a padding bit set: decodes to the same bytes, but is not the canonical encoding
    noncanonical = "Person_[" + core[:-1] + B64[B64.index(core[-1]) ^ 1] + "==]"
    assert base64.b64decode(noncanonical[8:-1]) == base64.b64decode(b64)
    text, rep = siv.decrypt_text(noncanonical)
    assert text == noncanonical and rep.invalid == 1
    # a token a model invented
    fake = "Person_[" + base64.b64encode(b"\x01" * 24).decode() + "]"
    text, rep = siv.decrypt_text(f"Hello {fake}!")
    assert text == f"Hello {fake}!" and rep.invalid == 1
    # URL-safe characters and a short body are invalid, not missed
    assert siv.decrypt_text("Person_[ab-_cd]")[1].invalid == 1
    assert siv.decrypt_text("Person_[ab]")[1].invalid == 1


def test_token_glued_to_a_preceding_word_still_decrypts(siv):
    text = "McJohn and xAnn"
    enc = siv.encrypt_spans(text, [{"start": 2, "end": 6, "entity_type": "PERSON"},
                                   {"start": 12, "end": 15, "entity_type": "PERSON"}])
    assert enc.startswith("McPerson_[") and " xPerson_[" in enc
    dec, rep = siv.decrypt_text(enc)
    assert dec == text and rep.ok == 2 and rep.tokens[0]["start"] == 2


def test_table5_summary(siv):
    a, b = siv.token("Ann", "PERSON"), siv.token("Bob", "PERSON")
    bad = "Person_[" + base64.b64encode(b"\x02" * 20).decode() + "]"
    _, rep = siv.decrypt_text(" ".join([a, a, b, bad, bad]))
    assert rep.summary() == {"ok": 3, "revised": 0, "invalid": 2, "total_tokens": 5, "unique_tokens": 3,
                             "unique_failures": 1, "failure_ratio": 0.4}


def test_ecb_mode_warns_leaks_equality_and_reports():
    with pytest.warns(UserWarning, match="ECB"):
        ecb = EntityCipher(new_key("aes-ecb"))
    tok = ecb.token("Carol", "PERSON")
    assert ecb.token("Carol", "PERSON") == tok
    assert ecb.token("Carol", "LOCATION").split("[")[1] == tok.split("[")[1]  # type not bound
    assert len(base64.b64decode(tok[len("Person_["):-1])) == 16  # one PKCS7-padded block
    text, rep = ecb.decrypt_text(tok)
    assert text == "Carol" and rep.ok == 1
    stripped = tok.replace("=", "")
    text, rep = ecb.decrypt_text(stripped)
    assert text == "Carol" and (rep.ok, rep.revised) == (0, 1)
    bad = "Person_[" + base64.b64encode(b"\x00" * 16).decode() + "]"  # PKCS7 unpadding fails
    text, rep = ecb.decrypt_text(bad)
    assert text == bad and rep.invalid == 1
    # equal 16-byte blocks give equal ciphertext blocks: the pattern leak the warning names
    raw = base64.b64decode(ecb.token("A" * 32, "PERSON")[len("Person_["):-1])
    assert raw[:16] == raw[16:32]


def test_type_prefix_round_trip_and_refusal():
    for t in ("PERSON", "PHONE_NUMBER", "US_SSN", "MY_CUSTOM_ID", "CREDIT_CARD", "MAC_ADDRESS", "UUID"):
        assert entity_type_of(entity_prefix(t)) == t
        assert token_prefix(t) == entity_prefix(t)
    assert token_prefix("PERSON") == "Person" and token_prefix("PHONE_NUMBER") == "PhoneNumber"
    for bad in ("X_1", "lower", "A__B"):
        with pytest.raises(ValueError):
            token_prefix(bad)


def test_module_functions_and_key_kinds():
    km = new_key("aes-siv")
    tok = encrypt_entity(km, "Ann", "PERSON")
    assert decrypt_text(km, f"[{tok}]")[0] == "[Ann]"
    assert encrypt_spans(km, "Hi Ann", [{"start": 3, "end": 6, "entity_type": "PERSON"}]) == f"Hi {tok}"
    with pytest.raises(KeyMaterialError, match="vigenere"):
        EntityCipher(new_key("vigenere"))


def test_key_material_never_in_repr_and_cipher_not_picklable():
    km = new_key("aes-siv")
    c = EntityCipher(km)
    for s in (repr(km), str(km), repr(c)):
        assert km.secret.hex() not in s and base64.b64encode(km.secret).decode() not in s
    assert isinstance(km, KeyMaterial)
    with pytest.raises(TypeError, match="setup"):
        pickle.dumps(c)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError):
            pickle.dumps(EntityCipher(new_key("aes-ecb")))
