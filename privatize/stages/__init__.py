"""Built-in stages. Importing this package registers them (see ``privatize.stage``).
``redact`` imports Presidio and spaCy lazily, on first use."""

from privatize.stages import (  # noqa: F401  (registration)
    canaries, dedup, encrypt_text, identifiers, mask, redact, refill, split, split_private, synthesize)
