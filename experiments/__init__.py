"""The paper and quality experiments: each reproduces a seed paper's table at small scale or
measures how well a part of the product does its job (crt_paper, refill_eval, identifier_eval,
quality_harness, redaction_real, dp_audit, ...; experiments/README.md indexes them all), run
as ``python -m experiments.<name>`` from the repository root, with the harness modules they
are built from (mlm_identifiers, quality_eval, gold_sentences, pic_fit) and ``common``: the
data location, timing and results files they share with ``benchmarks/``. They use the
product's public pieces (privatize, train, attacks) and are tested in ``tests/experiments/``;
they are not installed with the product."""
