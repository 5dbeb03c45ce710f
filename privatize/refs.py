"""References that a spec or config may hold instead of a value, resolved where the work runs:
models by the service's ``training:<id>``, ``detector:<id>`` and ``catalog:<id>`` (located through
:data:`MODELS_ENV`). Key references
are :class:`privatize.settings.KeyRef` (resolved by :mod:`privatize.keys`). The service imports
this module, never a stage, to recognise and resolve them."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from privatize.errors import SpecError
from privatize.io.locations import localize_input

MODEL_REF = re.compile(r"training:([0-9a-f]{16})")
"""A model by reference (the service's ``training:<id>``, the id its group), not by folder."""
CATALOG_REF = re.compile(r"catalog:([0-9a-f]{16})")
"""A model of the operator's catalog by reference (what the service makes of a tenant's
``base:<name>`` where a job reads the model outside the tenant's folder: an evaluation)."""
DETECTOR_REF = re.compile(r"detector:([0-9a-f]{16})")
"""An adapted detector by reference (the service's ``detector:<id>``: the folder one of the
tenant's succeeded detector jobs wrote), not by folder."""
MODELS_ENV = "PRIVATIZE_MODELS"
"""JSON ``{reference: location}`` (a path or a URI) for the models a run names by
reference: the service sets it in the job's runtime environment, so every worker, on any
node, finds them (locations only, as the key bundle's)."""


_FETCHED: dict[str, str] = {}


def is_reference(value: str) -> bool:
    """Whether ``value`` is a model reference of the service's (``training:``, ``detector:``,
    ``catalog:``)."""
    return value.startswith(("training:", "detector:", "catalog:"))


def model_folder(checkpoint: str, field: str = "refill.checkpoint") -> str:
    """A local folder holding ``checkpoint``: the folder itself (or a model's name), or, for
    a reference, the run's copy of its location (fetched once per process when it is
    remote); ``field`` names where it was given, for the error."""
    if not is_reference(checkpoint):
        return checkpoint
    if checkpoint in _FETCHED:
        return _FETCHED[checkpoint]
    try:
        location = json.loads(os.environ.get(MODELS_ENV) or "{}").get(checkpoint)
    except ValueError:
        location = None
    if not location:
        raise SpecError(f"{field}: {checkpoint} names a model of the service; this run has no "
                        "location for it (outside the service, give the model's folder)")
    import atexit
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="privatize-model-"))
    atexit.register(shutil.rmtree, tmp, True)
    _FETCHED[checkpoint] = localize_input(location, tmp)
    return _FETCHED[checkpoint]
