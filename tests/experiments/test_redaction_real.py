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
