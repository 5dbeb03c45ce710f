"""privatize: turn text corpora into training data that does not give away their secrets.

The package is organised around small stages over Arrow batches (see ``privatize.stage``),
a pydantic pipeline spec (``privatize.spec``), runners that call the stages
(``privatize.runner`` in-process; the Ray Data runner alongside) and the deterministic
output layout (``privatize.output``).
"""

__version__ = "0.1.0"
