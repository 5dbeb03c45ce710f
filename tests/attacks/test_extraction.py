import random
import string

import numpy as np
import pytest

from attacks.extraction import TrainingIndex, extraction_result, words
from attacks.metrics import zlib_ratio


def pseudo_words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def corpus():
    rng = random.Random(1)
    vocab = pseudo_words(rng, 3000)
    docs = [" ".join(rng.choices(vocab, k=400)) for _ in range(250)]  # 100,000 words
    return docs, TrainingIndex.build(docs)


def test_words_lowercase_and_drop_punctuation():
    assert words("The U.S. Department of Energy's office, (cc-by-sa 3.0)!") == \
        ["the", "u", "s", "department", "of", "energy's", "office", "cc-by-sa", "3", "0"]


def test_planted_35_word_run_is_found_and_34_is_not_enough(corpus):
    docs, index = corpus
    assert index.words == 100_000 and index.documents == 250
    doc = docs[117].split()
    unknown = [w.upper() + "Q" for w in doc[:10]]  # 'q' + upper: lowercased they are not corpus words
    for n in (35, 34):
        run = doc[150:150 + n]
        gen = " ".join(unknown + run + unknown)
        assert index.longest_match(gen) == (n, 10)
        r = extraction_result([gen], index, min_words=35)
        assert (r.extracted, r.unique_extracted, r.dropped_low_zlib) == ((1, 1, 0) if n == 35 else (0, 0, 0))
    # the same run flanked by corpus words: at least as long, starting no later
    rng = random.Random(2)
    gen = rng.choices(doc, k=12) + doc[150:185] + rng.choices(doc, k=12)
    length, start = index.longest_match(gen)
    assert length >= 35 and start <= 12 and start + length >= 47


@pytest.mark.parametrize("filler", [0, 70_000])
def test_longest_match_agrees_with_brute_force_on_a_small_alphabet(filler):
    # filler: one more document of distinct words, so ids need 1 byte (4 words) or more than 2
    rng = random.Random(3)
    docs = [" ".join(rng.choices("abcd", k=rng.randint(1, 40))) for _ in range(30)]
    index = TrainingIndex.build(docs + [" ".join(f"f{i}" for i in range(filler))])
    assert len(index.vocab) == 4 + filler
    split = [d.split() for d in docs]
    grams = {tuple(d[i:j]) for d in split for i in range(len(d)) for j in range(i + 1, len(d) + 1)}
    for _ in range(300):
        gen = rng.choices("abcde", k=rng.randint(0, 30))
        best = max(((j - i, -i) for i in range(len(gen)) for j in range(i + 1, len(gen) + 1)
                    if tuple(gen[i:j]) in grams), default=(0, 0))
        assert index.longest_match(gen) == (best[0], -best[1]), gen
        if len(gen) >= 3:
            assert index.count(gen[:3]) == sum(d[i:i + 3] == gen[:3] for d in split for i in range(len(d)))


def test_matches_never_span_documents():
    index = TrainingIndex.build(["alpha beta gamma", "delta epsilon"])
    assert index.longest_match("beta gamma delta epsilon") == (2, 0)
    assert index.count("gamma delta") == 0 and index.count("alpha beta") == 1
    assert index.longest_match("Alpha, BETA; gamma!") == (3, 0)  # case and punctuation do not matter
    assert index.longest_match("zeta") == (0, 0) and index.longest_match("") == (0, 0)


def test_low_zlib_runs_are_dropped_and_unique_strings_counted(corpus):
    docs, _ = corpus
    pages = " ".join(f"page {i}" for i in range(1, 40))  # 78 words, very compressible once digits are 0
    index = TrainingIndex.build(docs + [pages])
    run = " ".join(docs[5].split()[:60])
    assert zlib_ratio(" ".join(words(pages))) < 0.275 < zlib_ratio(run)
    r = extraction_result([run, run + " zzzzq", pages, "nothing here"], index, prompts=10)
    assert (r.prompts, r.extracted, r.dropped_low_zlib, r.unique_extracted) == (10, 2, 1, 1)
    assert r.examples == [run[:197] + "..."]


def test_save_and_load_give_the_same_answers(corpus, tmp_path):
    docs, index = corpus
    index.save(tmp_path / "idx")
    loaded = TrainingIndex.load(tmp_path / "idx")
    assert isinstance(loaded.sa, np.memmap)
    assert (loaded.words, loaded.documents, loaded.vocab) == (index.words, index.documents, index.vocab)
    gen = docs[3].split()[20:80]
    assert loaded.longest_match(gen) == index.longest_match(gen) == (60, 0)


def test_empty_corpus_is_refused():
    with pytest.raises(ValueError):
        TrainingIndex.build(["", " ,. "])
