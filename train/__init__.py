"""Ray Train: tokenizers, packing, pre-training, continual pre-training, DP-SGD and CRT.

Not built yet (a later issue); the package exists so the distribution's layout is
fixed. It may import ``privatize`` (record format, loss masks), never the reverse.
"""
