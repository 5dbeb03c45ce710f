"""PII detection and redaction: Presidio recognizers, a lean batch detector, and the two
policies of confidentially redacted training (pi: redact; pi_c: flag conservatively).

* :mod:`privatize.redaction.engine`: Presidio's ``AnalyzerEngine`` from its default
  configuration (only the spaCy model name changed) and the spaCy models, once per
  process; tldextract kept offline.
* :mod:`privatize.redaction.recognizers`: the better pattern recognizers (international
  phone numbers, 12-19 digit cards with Luhn, street addresses, postcodes, reference
  numbers, ages, names after titles and cues, name lines, occupations).
* :mod:`privatize.redaction.detect`: :class:`~privatize.redaction.detect.Detector` and
  ``detect_spans(texts)``.
* :mod:`privatize.redaction.words`: the stop words both of them use.

The ``redact`` stage is :mod:`privatize.stages.redact`. Importing this package is cheap:
Presidio and spaCy load on first use.
"""
