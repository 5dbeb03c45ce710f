"""privatize: turn text corpora into training data that does not give away their secrets.

The package is organised around small stages over Arrow batches (see ``privatize.stage``),
a pydantic pipeline spec (``privatize.spec``), one façade that runs a spec
(:func:`privatize.run`, in :mod:`privatize.api`) on either runner (``privatize.runner``
in-process, ``privatize.ray`` on Ray Data), and the deterministic output layout
(``privatize.output``).
"""

from privatize.version import __version__  # noqa: F401

__all__ = ["RunOptions", "run"]


def __getattr__(name: str):
    # lazy: ``import privatize`` stays cheap for workers that import one stage module
    if name in __all__:
        from privatize import api

        return getattr(api, name)
    raise AttributeError(f"module 'privatize' has no attribute {name!r}")
