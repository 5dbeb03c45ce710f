"""Reading config files and validating them, the one way every config kind does it
(pipeline specs' remote copies, training and evaluation configs, the service client):
YAML, or JSON by a ``.json`` name, from a local path or a URI ``pyarrow.fs`` opens; a
pydantic model's first error becomes one :class:`SpecError` line naming the field path."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from privatize.errors import SpecError


def read_mapping(location: str, what: str = "the config") -> object:
    """The parsed content of the file at ``location`` (a path, ``file://`` or any URI);
    one-line SpecErrors when it cannot be read or parsed. Not checked to be a mapping."""
    import yaml

    try:
        if "://" in location and not location.startswith("file://"):
            from privatize.io.locations import open_location

            fs, path = open_location(location)
            with fs.open_input_stream(path, compression=None) as fh:  # as a local file reads
                text = fh.read().decode("utf-8")
        else:
            path = location.removeprefix("file://")
            text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{location}: cannot read {what} ({str(exc).splitlines()[0]})") from None
    is_json = path.lower().endswith(".json")
    try:
        return json.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        raise SpecError(f"{location}: not valid {'JSON' if is_json else 'YAML'}") from None


def _loc(err: dict) -> str:
    return ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after")) or "(config)"


def validate(model_cls, data, source: str, what: str):
    """``model_cls`` validated from ``data``, or a SpecError ``"{source}: {field path}:
    {message}"`` for the first error (``what`` names the config kind when ``data`` is not
    a mapping at all)."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: {what} is a mapping, got {type(data).__name__}")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise SpecError(f"{source}: {_loc(e)}: {e['msg'].removeprefix('Value error, ')}") from None
