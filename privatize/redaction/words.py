"""Word lists the detector and the recognizers share (a module of its own, so that
neither imports the other for them)."""

from __future__ import annotations

import functools

MONTH_NAMES = (r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
               r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?")
"""Month names and their abbreviations (lower case; the NER date filter uses them too)."""


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stop words and common greetings and fillers: words that are never
    a name (loads ``spacy.lang.en`` on first use)."""
    from spacy.lang.en.stop_words import STOP_WORDS

    extra = {"hello", "hi", "hey", "thanks", "thank", "please", "sure", "yes", "ok", "okay", "good", "great",
             "sorry", "dear", "regards", "bye", "goodbye", "welcome", "well", "oh", "no", "yeah", "yep", "sir",
             "madam", "shall"}
    return frozenset(STOP_WORDS) | frozenset(extra)
