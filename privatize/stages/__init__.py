"""Built-in stages. Importing this package registers them (see ``privatize.stage``)."""

import importlib

# Each module registers its stage on import. Listed here, in one place.
_MODULES = ["encrypt_text", "split", "dedup", "split_private", "redact"]

for _name in _MODULES:
    try:
        importlib.import_module(f"{__name__}.{_name}")
    except ModuleNotFoundError as exc:  # a stage still being written is simply absent
        if exc.name != f"{__name__}.{_name}":
            raise
