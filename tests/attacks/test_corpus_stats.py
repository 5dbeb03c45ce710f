from math import log2

import pytest

from attacks.corpus_stats import ngram_entropies


def test_hand_computed_word_entropies():
    # a b a c a b a b: unigrams a 4, b 3, c 1
    h = ngram_entropies("a b a c a b a b")
    assert h["unigram"] == pytest.approx(-(4 / 8 * log2(4 / 8) + 3 / 8 * log2(3 / 8) + 1 / 8 * log2(1 / 8)))
    # bigrams ab ba ac ca ab ba ab: after a -> b 3 of 4, c 1 of 4; after b and c always the same
    assert h["2"] == pytest.approx(-(3 / 7 * log2(3 / 4) + 1 / 7 * log2(1 / 4)))
    # trigrams aba bac aca cab aba bab: only "ba" has two continuations (c, b)
    assert h["3"] == pytest.approx(2 / 6)
    # 4-grams abac baca acab caba abab: only "aba" has two (c, b)
    assert h["4"] == pytest.approx(2 / 5)


def test_ngrams_never_span_texts():
    # joined, "a b" + "b a" would add the bigram (b, b); apart, a -> b and b -> a are certain
    assert ngram_entropies(["a b", "b a"]) == {"unigram": 1.0, "2": 0.0, "3": None, "4": None}
    assert ngram_entropies("a b b a")["2"] == pytest.approx(2 / 3)  # after b: b or a


def test_characters_and_tokens():
    h = ngram_entropies("aab", unit="char", max_n=2)
    assert h["unigram"] == pytest.approx(-(2 / 3 * log2(2 / 3) + 1 / 3 * log2(1 / 3)))
    assert h["2"] == pytest.approx(1.0)  # bigrams aa, ab: after a, a or b, each once
    assert ngram_entropies([[1, 2, 1, 2]], unit="token", max_n=2) == {"unigram": 1.0, "2": 0.0}
    # words are verbatim: "The" and "the" are two words
    assert ngram_entropies("The the")["unigram"] == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError):
        ngram_entropies("a", unit="byte")
    with pytest.raises(ValueError):
        ngram_entropies(["", "  "])
