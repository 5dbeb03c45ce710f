"""The package version (its own module, so that layers below the façade can read it)."""

__version__ = "0.1.0"
