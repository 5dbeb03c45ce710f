"""Importing Presidio the one way this package does (the bottom of ``privatize.redaction``: every
recognizer module calls :func:`import_presidio` first, and this module imports none of them)."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

_presidio_lock = threading.Lock()
_PRESIDIO_DEVICE = "PRESIDIO_DEVICE"


def _hidden_modules() -> list[str]:
    """What :func:`import_presidio` hides: Transformers always (only Presidio's unused
    Hugging Face recognizers want it), torch too unless a spaCy plugin that runs
    transformer pipelines on it is installed (thinc, spaCy's ML layer, then needs it)."""
    names = ["transformers"]
    if not any(importlib.util.find_spec(p) for p in ("spacy_transformers", "spacy_curated_transformers")):
        names.append("torch")
    return [n for n in names if n not in sys.modules]


def import_presidio() -> None:
    """Import spaCy and ``presidio_analyzer`` once per process with the modules of
    :func:`_hidden_modules` hidden from them, and Presidio's device set to the CPU
    (``PRESIDIO_DEVICE``, Presidio's own setting, unless the caller set it): Presidio
    then leaves its optional Hugging Face pipeline out (``hf_pipeline`` is None), and
    neither it nor thinc imports torch (the spaCy models here are CNNs on the CPU).
    Nothing else changes: a process that imported those modules already keeps them, and
    they import and the environment reads as before once this returns."""
    with _presidio_lock:
        if "presidio_analyzer" in sys.modules:
            return
        hidden = _hidden_modules()
        for name in hidden:
            sys.modules[name] = None  # makes ``import name`` raise ImportError
        device = os.environ.get(_PRESIDIO_DEVICE)
        if device is None:
            os.environ[_PRESIDIO_DEVICE] = "cpu"
        try:
            import spacy  # noqa: F401 - thinc looks for torch once, here
            import presidio_analyzer  # noqa: F401
        finally:
            if device is None:
                os.environ.pop(_PRESIDIO_DEVICE, None)
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
