"""experiments/redaction_real.py's TAB measures (entity and mention recall, token precision
and recall), by hand on one document."""

import pytest

pytestmark = pytest.mark.presidio


def test_tab_measures_by_hand():
    from experiments import redaction_real as mod

    text = "Mr John Smith met Smith in Oslo on 3 May 2001 at the Court."
    #       0         1         2         3         4         5
    doc = {"text": text, "mentions": [
        (3, 13, "PERSON", "DIRECT", "e1"), (18, 23, "PERSON", "DIRECT", "e1"),  # one entity, two mentions
        (27, 31, "LOC", "QUASI", "e2"), (35, 45, "DATETIME", "QUASI", "e3"), (53, 58, "ORG", "NO_MASK", "e4")]}
    # masks "John Smith" and "3 May 2001" and "Court": the second "Smith" and "Oslo" are missed
    preds = [[(3, 13, "PERSON"), (35, 45, "DATE_TIME"), (53, 58, "ORGANIZATION")]]
    m = mod.score_tab([doc], preds)
    assert m["entity_recall_direct"] == 0.0  # e1 has an unmasked mention
    assert m["mention_recall_direct"] == 0.5
    assert m["entity_recall_quasi"] == 0.5  # e3 yes, e2 no
    # tokens: gold DIRECT+QUASI = John, Smith, Smith, Oslo, 3, May, 2001 (7); predicted = John, Smith, 3, May,
    # 2001, Court (6); true positives 5
    assert m["token_precision"] == pytest.approx(5 / 6) and m["token_recall"] == pytest.approx(5 / 7)


def test_a_tab_line_becomes_the_scorers_document():
    """``legal_doc`` (shared by ``redaction_real.py`` and the TAB rows of
    ``redaction_adapt.py``): DIRECT and QUASI mentions are gold, NO_MASK ones negatives, every
    mention keeps its identifier type and entity id."""
    from experiments.redaction_real import legal_doc

    line = {"text": "Mr Smith v. the Court", "metadata": {}, "entities": [
        {"start_offset": 3, "end_offset": 8, "entity_type": "PERSON", "identifier_type": "DIRECT", "entity_id": "a"},
        {"start_offset": 16, "end_offset": 21, "entity_type": "ORG", "identifier_type": "NO_MASK", "entity_id": "b"}]}
    d = legal_doc(line)
    assert d["gold"] == [(3, 8, "PERSON")] and d["negatives"] == [(16, 21, "ORG")] and d["neutral"] == []
    assert d["mentions"] == [(3, 8, "PERSON", "DIRECT", "a"), (16, 21, "ORG", "NO_MASK", "b")]
