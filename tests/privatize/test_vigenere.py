import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privatize.ciphers.tokens import MASK_TOKEN
from privatize.ciphers.vigenere import Vigenere
from privatize.errors import KeyMaterialError
from privatize.keys import alphabet_chars, new_key

LETTERS = alphabet_chars("letters52")


def naive(text: str, key: str, alphabet: str = LETTERS, sign: int = 1) -> str:
    """The paper's definition, one character at a time (the independent oracle)."""
    out = []
    for i, ch in enumerate(text):
        if ch in alphabet:
            k = (alphabet.index(key[i % len(key)]) + 1) % len(alphabet)
            out.append(alphabet[(alphabet.index(ch) + sign * k) % len(alphabet)])
        else:
            out.append(ch)
    return "".join(out)


def test_paper_vector_figure_3():
    v = Vigenere("hENTu")
    assert v.encrypt("I am a cat.") == "q oG I quo."
    assert v.decrypt("q oG I quo.") == "I am a cat."


def test_last_letter_is_shift_zero_and_identity_key_refused():
    assert Vigenere("zA").encrypt("aaZ") == "abZ"  # z: shift 0, A: shift 1 (a -> b); Z at i=2 uses z again
    with pytest.raises(KeyMaterialError, match="identity"):
        Vigenere("zzz")
    with pytest.raises(KeyMaterialError):
        Vigenere("ab1")


def test_positions_count_code_points_and_reserved_tokens_advance_them():
    key = "bcd"
    text = "é<MASK>ab Person_[QUJD] xy"
    enc = Vigenere(key).encrypt(text)
    # reserved spans copied, everything else as the naive cipher over the whole text
    expected = list(naive(text, key))
    for s, e in ((1, 7), (10, 23)):
        expected[s:e] = text[s:e]
    assert enc == "".join(expected)
    assert Vigenere(key).decrypt(enc) == text


@pytest.mark.parametrize("alphabet", ["letters52", "latin"])
def test_matches_the_naive_definition(alphabet):
    alpha = alphabet_chars(alphabet)
    key = new_key("vigenere", length=37, alphabet=alphabet).letters
    text = "Über naïve café, ÿ and ǅ; plain ASCII too. 123 " * 5
    v = Vigenere(key, alphabet)
    assert v.encrypt(text) == naive(text, key, alpha)
    assert v.decrypt(v.encrypt(text)) == text


_no_reserved = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=300).filter(
    lambda t: "<" not in t and "_[" not in t)


@pytest.mark.parametrize("alphabet", ["letters52", "latin"])
@pytest.mark.parametrize("length", [1, 10, 100])
@settings(max_examples=60, deadline=None)
@given(text=_no_reserved, cut=st.integers(min_value=0, max_value=300))
def test_round_trip_random_unicode_with_mask_inside(alphabet, length, text, cut):
    cut = min(cut, len(text))
    text = text[:cut] + MASK_TOKEN + text[cut:]
    key = new_key("vigenere", length=length, alphabet=alphabet)
    v = Vigenere(key.letters, alphabet)
    enc = v.encrypt(text)
    assert len(enc) == len(text)
    assert enc[cut:cut + len(MASK_TOKEN)] == MASK_TOKEN
    assert v.decrypt(enc) == text
    arr = pa.array([text, None, text[:cut]])
    enc_arr = v.encrypt_array(arr)
    assert enc_arr.to_pylist() == [enc, None, v.encrypt(text[:cut])]
    assert v.decrypt_array(enc_arr).to_pylist() == arr.to_pylist()


def test_array_path_equals_string_path_for_short_and_long_records():
    key = new_key("vigenere", length=100).letters
    v = Vigenere(key)
    short = [f"Sentence {i} é’ <MASK> end." for i in range(50)]
    long = ["Long document ü " * 200, "ASCII only " * 300]
    for texts in (short, long):
        arr = pa.chunked_array([pa.array(texts[:3], pa.string()), pa.array(texts[3:], pa.string())])
        assert v.encrypt_array(arr).to_pylist() == [v.encrypt(t) for t in texts]
        assert v.encrypt_array(pa.array(texts).slice(2)).to_pylist() == [v.encrypt(t) for t in texts[2:]]
