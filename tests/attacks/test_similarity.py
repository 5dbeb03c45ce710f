import pytest

from attacks.similarity import best_distance, content_words, load_nlp, normalised_distance, true_prefix_result

TRUE_S1 = "has been lived in Canada for 10 years."
SAMPLE = "likes Canada and U.S."


@pytest.fixture(scope="module")
def nlp():
    return load_nlp()


def test_paper_example_content_words_and_distance(nlp):
    # Crypto-LLM appendix A.1: C1 = [lived, Canada, 10, years], C1* = [likes, Canada, U.S.]
    assert content_words(TRUE_S1, nlp) == ["lived", "Canada", "10", "years"]
    assert content_words(SAMPLE, nlp) == ["likes", "Canada", "U.S."]
    # lived->likes, 10->U.S., delete years: 3 edits over 4 words
    assert best_distance(TRUE_S1, [SAMPLE], nlp) == 0.75
    # with the bracketed name kept, "Tom" matches on both sides: 3 / 5, not the paper's figure
    assert best_distance("(Tom) " + TRUE_S1, ["(Tom) " + SAMPLE], nlp) == pytest.approx(0.6)


def test_function_words_and_punctuation_are_dropped(nlp):
    assert content_words("She would not have gone to the market, but oh, it rained!", nlp) == \
        ["gone", "market", "rained"]
    assert content_words("  ... ,  ", nlp) == []


def test_normalised_distance_by_hand():
    assert normalised_distance(["a", "b", "c"], ["a", "c"]) == pytest.approx(1 / 3)
    assert normalised_distance(["a", "b"], ["b", "a"]) == 1.0  # two substitutions over 2
    assert normalised_distance([], []) == 0.0
    assert normalised_distance([], ["x", "y"]) == 1.0
    assert normalised_distance(["Canada"], ["canada"]) == 1.0  # case is kept


def test_best_distance_takes_the_closest_sample_and_results_average(nlp):
    samples = ["likes Canada and U.S.", "has lived in Canada for 10 years.", "is a cat."]
    assert best_distance(TRUE_S1, samples, nlp) == 0.0
    r = true_prefix_result([TRUE_S1, TRUE_S1], [samples, [SAMPLE]], nlp)
    assert (r.trials, r.samples, r.distances, r.mean_best_distance) == (2, 3, [0.0, 0.75], 0.375)
    with pytest.raises(ValueError):
        best_distance(TRUE_S1, [], nlp)
