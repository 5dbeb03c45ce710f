"""Text primitives below every stage (the bottom layer): :mod:`.words`, the vectorised word scanner."""
