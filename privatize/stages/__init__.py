"""Built-in stages. Importing this package registers them (see ``privatize.stage``)."""

from privatize.stages import dedup, encrypt_text, split, split_private  # noqa: F401  (registration)
