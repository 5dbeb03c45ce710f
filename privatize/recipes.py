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


def crt_stages(masked: str = "private", **redact) -> list[dict]:
    """The CRT recipe's stages (``crt.yaml``: split into sentences, redact, SHA-1 dedup of
    every flagged sentence with ``skip_clean``, split_private), with the redact stage's
    settings replaced by ``redact`` (its ``kind`` kept), e.g. ``operator="mask"``.

    ``masked``: where a sentence pi removed something from goes. ``private`` (the paper's
    routing, the recipe as shipped): always to the private split. ``public``: to the public
    split when pi_c, judging only what pi left in the clear (``pi_c.scope: rest``), flags
    nothing; dedup then keeps repeats of such sentences (``clean_flags``) and split_private
    routes by ``dedup_hit`` and ``pi_c_hit`` alone. With a value-free replacement (``mask``
    or ``tag``; ``encrypt`` is refused) the model sees the same redacted text either way;
    with the calibrated policy, delta_2 becomes the measured share of secret sentences that
    keep a readable secret and are left unflagged (the rest threshold's calibration; the
    strict policy has no such measurement)."""
    if masked not in ("private", "public"):
        raise ValueError(f"masked must be 'private' or 'public' (got {masked!r})")
    if masked == "public" and redact.get("operator", "mask") == "encrypt":
        raise ValueError("masked='public' needs operator mask, tag or surrogate: an encrypted entity token carries its "
                         "secret's value into the public split")
    stages = copy.deepcopy(packaged_spec("crt")["stages"])
    for i, s in enumerate(stages):
        if s["kind"] == "redact":
            stages[i] = {"kind": "redact", **redact}
    if masked == "public":
        for s in stages:
            if s["kind"] == "redact":
                pic = s.get("pi_c", "calibrated")
                s["pi_c"] = {**({"policy": pic} if isinstance(pic, str) else pic), "scope": "rest"}
            elif s["kind"] == "dedup":
                s["clean_flags"] = ["pi_c_hit"]
            elif s["kind"] == "split_private":
                s["flags"] = ["dedup_hit", "pi_c_hit"]
    return stages


def crt_split() -> dict:
    """The CRT recipe's split stage alone (``crt.yaml``'s first stage): the paper's data
    points. Raw and held-out text cut by it give every model, protected or not, the same
    data points to train and be scored on."""
    return next(s for s in packaged_spec("crt")["stages"] if s["kind"] == "split")
