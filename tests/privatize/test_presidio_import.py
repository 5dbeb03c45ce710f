"""Presidio is imported without its optional Hugging Face pipeline (which pulled
Transformers and torch into every redaction worker: 2.9 s of a 6.1 s start), and
nothing else notices: the detector finds entities, and Transformers still imports."""

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import sys
from privatize.redaction.detect import detect_spans
spans = detect_spans(["Call Alice Smith on +44 20 7946 0958 or mail alice@example.com."])
print("transformers" in sys.modules)
print(sorted({s["entity_type"] for s in spans[0]}))
import transformers
print(transformers.__name__)
"""


def test_redaction_loads_without_transformers_and_leaves_it_importable():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded, entities, name = proc.stdout.strip().splitlines()[-3:]
    assert loaded == "False"  # spaCy and Presidio loaded, Transformers not
    assert "EMAIL_ADDRESS" in entities and "PHONE_NUMBER" in entities and "PERSON" in entities
    assert name == "transformers"
