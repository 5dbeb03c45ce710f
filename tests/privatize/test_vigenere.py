import logging
import pickle
import re
import unicodedata
import warnings

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privatize.ciphers import vigenere
from privatize.ciphers.tokens import MASK_TOKEN
from privatize.ciphers.vigenere import Vigenere, decrypt, decrypt_batch, encrypt, encrypt_batch, reserved_spans
from privatize.errors import KeyMaterialError
from privatize.keys import import_key, new_key

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
# The latin alphabet written out independently of privatize.keys: letters up to U+024F.
LATIN = "".join(chr(c) for c in range(0x250) if unicodedata.category(chr(c))[0] == "L")


def oracle_reserved(text: str, alpha: str) -> list[tuple[int, int]]:
    """The case-blind reserved-token grammar, written independently: <word> tags and
    Word_[16+ base64 chars] entity tokens after a non-alphanumeric character."""
    L = "".join(re.escape(c) for c in alpha)
    rx = re.compile(rf"(?<![{L}0-9])[{L}][{L}0-9]*_\[[{L}0-9+/_\-]{{16,}}={{0,2}}\]|<[{L}][{L}0-9_]*>")
    return [m.span() for m in rx.finditer(text)]


def naive(text: str, key: str, alpha: str = LETTERS, sign: int = 1) -> str:
    """The paper's definition, one code point at a time (the independent oracle)."""
    keep = set()
    for s, e in oracle_reserved(text, alpha):
        keep.update(range(s, e))
    out = []
    for i, ch in enumerate(text):
        if ch in alpha and i not in keep:
            k = (alpha.index(key[i % len(key)]) + 1) % len(alpha)
            out.append(alpha[(alpha.index(ch) + sign * k) % len(alpha)])
        else:
            out.append(ch)
    return "".join(out)


def test_paper_vector_figure_3():
    v = Vigenere("hENTu")
    assert v.encrypt("I am a cat.") == "q oG I quo."
    assert v.decrypt("q oG I quo.") == "I am a cat."
    km = import_key("vigenere", "hENTu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert encrypt("I am a cat.", km) == "q oG I quo."
        assert encrypt("I am a cat.", ("hENTu", "letters52")) == "q oG I quo."
        assert encrypt_batch(["I am a cat.", None, ""], km) == ["q oG I quo.", None, ""]
    assert decrypt("q oG I quo.", km) == "I am a cat."
    assert decrypt_batch(["q oG I quo."], ("hENTu", "letters52")) == ["I am a cat."]


def test_hand_computed_shifts_positions_and_reserved_tokens():
    # key letter z (52nd) is shift 0, A is 1, Z is 26
    assert Vigenere("zA").encrypt("aaZ") == "abZ"
    # B = shift 2; <MASK> copied
    assert Vigenere("B").encrypt("ab <MASK> cd") == "cd <MASK> ef"
    # key AB: shifts 1, 2 by position; <MASK> advances the position by 6
    assert Vigenere("AB").encrypt("a<MASK>a") == "b<MASK>c"
    # non-letters (é, an astral emoji) are one position each
    assert Vigenere("AB").encrypt("aéa") == "béb"
    assert Vigenere("AB").encrypt("a\U0001F600a") == "b\U0001F600b"
    assert Vigenere("AB").decrypt("b\U0001F600b") == "a\U0001F600a"
    # latin: next letter in code point order; z -> ª (U+00AA); the last letter wraps to A
    assert Vigenere("A", "latin").encrypt("Zzɏ!") == "aªA!"
    assert Vigenere("A", "latin").decrypt("aªA!") == "Zzɏ!"


def test_identity_and_bad_keys_refused():
    with pytest.raises(KeyMaterialError, match="identity"):
        Vigenere("zzz")
    with pytest.raises(KeyMaterialError, match="identity"):
        Vigenere("ɏɏ", "latin")
    with pytest.raises(KeyMaterialError):
        Vigenere("ab1")
    with pytest.raises(KeyMaterialError):
        Vigenere("")
    with pytest.raises(KeyMaterialError, match="aes-siv"):
        Vigenere.from_key(new_key("aes-siv"))


def test_case_blind_grammar_keeps_decryption_unambiguous():
    # Key Z (shift 26) maps every lower-case letter to its upper case: with a
    # case-sensitive tag grammar "<mask>" would encrypt to "<MASK>", which decryption
    # would then copy; the case-blind grammar copies "<mask>" itself.
    v = Vigenere("Z")
    assert v.encrypt("<mask> ab") == "<mask> AB"
    assert v.decrypt(v.encrypt("<mask> ab")) == "<mask> ab"
    body = "abcdefghijklmnopQRSTUVWX"  # 24 Base64 characters, lower case prefix
    tok = f"person_[{body}]"
    assert v.encrypt(f"x {tok} y") == f"X {tok} Y"
    # too short to be a token, or right after a digit: encrypted like any text
    assert v.encrypt("x_[i]") == "X_[I]"
    assert reserved_spans(f"1{tok}") == []
    assert v.encrypt(f"1{tok}") == naive(f"1{tok}", "Z") != f"1{tok}"
    # a word glued in front becomes part of the prefix (and is copied with the token)
    assert reserved_spans(f"a{tok}") == [(0, 1 + len(tok))]
    assert reserved_spans(f"({tok})") == [(1, 1 + len(tok))]


@pytest.mark.parametrize("alphabet", ["letters52", "latin"])
def test_matches_the_naive_definition(alphabet):
    alpha = LETTERS if alphabet == "letters52" else LATIN
    key = new_key("vigenere", length=37, alphabet=alphabet).letters
    text = ("Über naïve café, ÿ and ǅ; plain ASCII too. 123 <MASK> <b>bold</b> "
            "Person_[QUJDREVGR0hJSktMTU5PUFFSU1RVVg==] \U0001F600 ") * 5
    v = Vigenere(key, alphabet)
    assert v.encrypt(text) == naive(text, key, alpha)
    assert v.decrypt(v.encrypt(text)) == text
    assert v.decrypt(text) == naive(text, key, alpha, -1)


# Random text plus pieces of the token grammar, so tags, tokens and near misses occur.
_pieces = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.sampled_from(["<", ">", "_[", "]", "=", "==", "<mask>", "<B>", "x_[", "Person", "_", "/+",
                     "QUJDREVGR0hJSktMTU5P", "é", "\U0001F600", "ǅ", " ", "\n",
                     "Person_[QUJDREVGR0hJSktMTU5P]", "x_[QUJDREVGR0hJSktMTU5P==]", "<PHONE_NUMBER>"]),
)
_texts = st.lists(_pieces, max_size=30).map("".join)


@pytest.mark.parametrize("alphabet", ["letters52", "latin"])
@pytest.mark.parametrize("length", [1, 10, 100])
@settings(max_examples=40, deadline=None)
@given(text=_texts, cut=st.integers(min_value=0, max_value=400))
def test_round_trip_random_unicode_with_mask_inside(alphabet, length, text, cut):
    alpha = LETTERS if alphabet == "letters52" else LATIN
    cut = min(cut, len(text))
    text = text[:cut] + MASK_TOKEN + text[cut:]
    key = new_key("vigenere", length=length, alphabet=alphabet).letters
    v = Vigenere(key, alphabet)
    enc = v.encrypt(text)
    assert len(enc) == len(text)
    assert enc[cut:cut + len(MASK_TOKEN)] == MASK_TOKEN
    assert enc == naive(text, key, alpha)
    assert v.decrypt(enc) == text
    texts = [text, None, text[:cut], "", text[cut:]]
    assert v.encrypt_batch(texts) == [None if t is None else v.encrypt(t) for t in texts]
    arr = pa.array(texts, pa.string())
    enc_arr = v.encrypt_array(arr)
    assert enc_arr.to_pylist() == v.encrypt_batch(texts)
    assert v.decrypt_array(enc_arr).to_pylist() == texts


def test_array_paths_short_long_sliced_chunked_and_large_string():
    v = Vigenere(new_key("vigenere", length=100).letters)
    short = [f"Sentence {i} é’ <MASK> end." for i in range(50)]  # the batched-positions path
    long = ["Long document ü " * 200, "ASCII only " * 300]  # the per-record path
    for texts in (short, long, short + long):
        want = [v.encrypt(t) for t in texts]
        chunked = pa.chunked_array([pa.array(texts[:3], pa.string()), pa.array(texts[3:], pa.string())])
        assert v.encrypt_array(chunked).to_pylist() == want
        assert v.encrypt_array(pa.array(texts).slice(2)).to_pylist() == want[2:]
        assert v.encrypt_array(pa.array(texts, pa.large_string())).to_pylist() == want
    with_nulls = pa.array([None, "abc", None, "dé f"]).slice(1)
    assert v.encrypt_array(with_nulls).to_pylist() == [v.encrypt("abc"), None, v.encrypt("dé f")]
    assert v.encrypt_array(pa.array([], pa.string())).to_pylist() == []
    assert v.encrypt_array(pa.array(["", None])).to_pylist() == ["", None]


def test_records_longer_than_one_tile_keep_the_key_alignment():
    key = "AbCdEfG"  # length 7; the tile holds about 2**20 positions
    v = Vigenere(key)
    n = 2_500_003
    enc = v.encrypt("a" * n)
    shifts = [(LETTERS.index(c) + 1) % 52 for c in key]
    expected = [LETTERS[(26 + s) % 52] for s in shifts]
    for r in range(7):
        assert set(enc[r::7]) == {expected[r]}
    assert v.decrypt(enc) == "a" * n
    # the same with a non-ASCII character early on (every later position shifts by one)
    enc2 = v.encrypt("é" + "a" * n)
    assert enc2[1:] == "".join(expected[(i + 1) % 7] for i in range(7)) * (n // 7) + \
        "".join(expected[(i + 1) % 7] for i in range(n % 7))


def test_obfuscation_warning_once_in_warnings_and_log(monkeypatch, caplog):
    monkeypatch.setattr(vigenere, "_warned", False)
    with caplog.at_level(logging.WARNING, logger="privatize.ciphers.vigenere"):
        with pytest.warns(UserWarning, match="obfuscation, not confidentiality"):
            encrypt("abc", ("hENTu", "letters52"))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second warning would raise
            encrypt("abc", ("hENTu", "letters52"))
    assert [r.getMessage() for r in caplog.records].count(vigenere.OBFUSCATION_WARNING) == 1


def test_cipher_object_is_not_picklable_and_repr_shows_no_key():
    v = Vigenere("hENTuQ")
    with pytest.raises(TypeError, match="setup"):
        pickle.dumps(v)
    assert "hENTuQ" not in repr(v)


@pytest.mark.data
def test_gutenberg_stories_round_trip_and_match_the_oracle(shared_data):
    import json

    docs = [json.loads(line)["document"] for f in ("dev",)
            for line in open(shared_data / "squality_gutenberg" / f"{f}.jsonl", encoding="utf-8")]
    assert any(not d.isascii() for d in docs)
    key = new_key("vigenere", length=100).letters
    v = Vigenere(key)
    enc = v.encrypt_array(pa.array(docs))
    assert enc.to_pylist()[:2] == [naive(d, key) for d in docs[:2]]
    assert v.decrypt_array(enc).to_pylist() == docs
    assert np.mean([a != b for a, b in zip(enc.to_pylist()[0], docs[0])]) > 0.5
