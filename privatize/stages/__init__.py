"""Built-in stages. Importing this package registers them (see ``privatize.stage``).
``redact`` imports Presidio and spaCy lazily, on first use."""

from privatize.stages import canaries, dedup, encrypt_text, mask, redact, split, split_private  # noqa: F401  (registration)
