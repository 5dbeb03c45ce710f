import base64

import pytest

from attacks.cipher_outputs import cipher_outputs, resurfaced
from privatize.ciphers.entity import EntityCipher
from privatize.errors import KeyMaterialError
from privatize.keys import new_key


@pytest.fixture(scope="module")
def key():
    return new_key("aes-siv")


def test_counts_valid_invalid_and_resurfaced_pii(key):
    c = EntityCipher(key)
    ann, bob = c.token("Ann Lee", "PERSON"), c.token("Bob Stone", "PERSON")
    phone = c.token("+44 20 7946 0958", "PHONE_NUMBER")
    invented = "Person_[" + base64.b64encode(b"\x07" * 24).decode() + "]"
    foreign = EntityCipher(new_key("aes-siv")).token("Ann Lee", "PERSON")  # right format, another key
    generations = [
        f"{ann} met {bob} in town.",
        f"{ann} called {phone}.",
        f"Then {invented} arrived, {invented} left, and {foreign} stayed.",
        "Ann Lee lives on Elm Street; Annabel does not.",
    ]
    pii = ["Ann Lee", "Bob Stone", "Elm Street", "Anna", "+44 20 7946 0958", "Ann Lee", ""]
    r = cipher_outputs(generations, key, pii)
    # 7 tokens: ann x2, bob, phone, invented x2, foreign; 5 distinct; invented and foreign fail
    assert (r.total_tokens, r.unique_tokens, r.invalid_tokens, r.unique_invalid) == (7, 5, 3, 2)
    assert r.failure_ratio == pytest.approx(3 / 7)
    # in plain text: "Ann Lee" and "Elm Street"; Bob and the phone only as tokens, "Anna" only inside "Annabel"
    assert r.resurfaced_plaintext == 2
    assert cipher_outputs(generations, c, pii) == r  # a built cipher gives the same


def test_nothing_found(key):
    r = cipher_outputs(["no tokens here", ""], key, ["Zed"])
    assert (r.total_tokens, r.unique_tokens, r.invalid_tokens, r.unique_invalid, r.failure_ratio,
            r.resurfaced_plaintext) == (0, 0, 0, 0, 0.0, 0)


def test_resurfaced_respects_word_edges_only_where_the_value_has_them():
    phone = "+44 20 7946 0958"
    assert resurfaced(["tel:x+44 20 7946 0958."], [phone]) == 1  # "+" needs no word edge before it
    assert resurfaced(["tel: +44 20 7946 09581"], [phone]) == 0  # "8" does, after it
    assert resurfaced(["ref x0958", "0958y"], ["0958"]) == 0
    assert resurfaced(["mail js@example.org."], ["js@example.org", "example", "exam"]) == 2


def test_a_hmac_key_is_refused():
    with pytest.raises(KeyMaterialError, match="aes-siv or aes-ecb"):
        cipher_outputs(["x"], new_key("hmac"))
