"""Leakage attacks on trained models and the privacy report.

Canary exposure (exact by a digit trie, or extrapolated), membership inference (loss,
zlib, min-k%, min-k%++, reference), data extraction (suffix array), name reconstruction,
true-prefix, cipher outputs and corpus statistics; one self-contained HTML report per
evaluation. Every attack is an entry of ``attacks.registry`` (the papers' one module each
in ``attacks.kinds``), which ``attacks.run`` loops over; each model's results are keyed by
attack. Only ``attacks.model`` imports
torch. It may import ``train`` and ``privatize``, never the reverse. Entry points:
``privatize attack CONFIG`` (``attacks.cli``), ``attacks.run.run_evaluation``, and the
service's job kind ``evaluate`` (``attacks.job``).
"""
