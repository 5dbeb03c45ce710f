"""Presidio and spaCy are imported without Transformers and torch (Presidio's optional
Hugging Face recognizers and its GPU probe pulled both into every redaction worker: 4.2 s
of a 6.1 s start), and nothing else notices: the detector finds entities, both still
import afterwards, and the environment is as it was."""

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import os, sys
from privatize.redaction.detect import detect_spans
spans = detect_spans(["Call Alice Smith on +44 20 7946 0958 or mail alice@example.com."])
print("transformers" in sys.modules, "torch" in sys.modules, os.environ.get("PRESIDIO_DEVICE"))
print(sorted({s["entity_type"] for s in spans[0]}))
import torch, transformers
print(torch.tensor([1.0, 2.0]).sum().item(), transformers.__name__)
"""


def test_redaction_loads_without_transformers_or_torch_and_leaves_them_importable():
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded, entities, after = proc.stdout.strip().splitlines()[-3:]
    assert loaded == "False False None"  # spaCy and Presidio loaded; the two not; no env var left behind
    assert "EMAIL_ADDRESS" in entities and "PHONE_NUMBER" in entities and "PERSON" in entities
    assert after == "3.0 transformers"
