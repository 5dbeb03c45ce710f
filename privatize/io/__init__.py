"""The bottom layer's storage side: where inputs and outputs live (:mod:`.locations`) and how
config files are read and validated (:mod:`.configfile`). Imports nothing above
``privatize.errors``."""
