"""The product's packaged recipes (``privatize/specs/*.yaml``) as data, so that every caller
builds on the one file rather than a copy of it: the main job, the service demo and the
CRT benchmark take the CRT recipe's stages from ``crt.yaml`` and change only the redact
stage's settings (mask or encrypt, a key, a seeded miss share)."""

from __future__ import annotations

import copy
from pathlib import Path

SPECS = Path(__file__).resolve().parent / "specs"


def packaged_spec(name: str) -> dict:
    """``privatize/specs/<name>.yaml`` as a mapping (not yet validated: key references in it
    resolve against that folder when it is parsed from the file)."""
    import yaml

    path = SPECS / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPECS.glob("*.yaml")))
        raise KeyError(f"no packaged spec {name!r} (known: {known})")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def crt_stages(**redact) -> list[dict]:
    """The CRT recipe's stages (``crt.yaml``: split into sentences, redact, SHA-1 dedup of
    every flagged sentence with ``skip_clean``, split_private), with the redact stage's
    settings replaced by ``redact`` (its ``kind`` kept), e.g. ``operator="mask"``."""
    stages = copy.deepcopy(packaged_spec("crt")["stages"])
    for i, s in enumerate(stages):
        if s["kind"] == "redact":
            stages[i] = {"kind": "redact", **redact}
    return stages


def crt_split() -> dict:
    """The CRT recipe's split stage alone (``crt.yaml``'s first stage): the paper's data
    points. Raw and held-out text cut by it give every model, protected or not, the same
    data points to train and be scored on."""
    return next(s for s in packaged_spec("crt")["stages"] if s["kind"] == "split")
