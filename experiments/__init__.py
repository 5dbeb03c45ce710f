"""Paper harnesses: the evaluations that reproduce the seed papers' tables at small scale
(refill_eval: paper 002's perplexity after masking and refilling; identifier_eval and
mlm_identifiers: paper 003's PPCLM / PPMLM; quality_eval: the QuALITY harness). They use the
product's public pieces (privatize, train, attacks) and are run by ``benchmarks/`` and the tests;
they are not installed with the product."""
