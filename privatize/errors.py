"""One small error hierarchy; each error is also the builtin a caller would expect."""

from __future__ import annotations


class PrivatizeError(Exception):
    """Base of every error this package raises on purpose."""


class SpecError(PrivatizeError, ValueError):
    """The pipeline spec is invalid; the message names the field path."""


class InputError(PrivatizeError, ValueError):
    """An input file cannot be used at all (unreadable, empty, wrong format).

    The message is one line naming the file and, where known, the line.
    """


class RecordError(PrivatizeError, ValueError):
    """A record-level problem raised as an error because ``--strict`` was given."""


class KeyMaterialError(PrivatizeError, ValueError):
    """A key file or key reference is unusable. Never carries key bytes in its message."""


class OutputError(PrivatizeError, OSError):
    """The output directory cannot be written, or fails verification."""


class TrainingFailed(PrivatizeError, RuntimeError):
    """A run finished its steps but its result breaks a promise (a LoRA adapter that never
    moved, a frozen base that did): no model is written."""
