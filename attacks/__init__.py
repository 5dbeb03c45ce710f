"""Leakage attacks (canary exposure, membership inference, extraction) over trained models.

Not built yet (a later issue); the package exists so the distribution's layout is
fixed. It may import ``train`` and ``privatize``, never the reverse.
"""
