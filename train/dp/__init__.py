"""DP-SGD, in one place, bottom to top:

* :mod:`~train.dp.accountant`: Opacus' accountants (epsilon <-> noise, a joint history);
* :mod:`~train.dp.accounting`: the same, bounded in memory and time (PRV, else RDP);
* :mod:`~train.dp.budget`: a run's budget (:func:`~train.dp.budget.plan_budget`), group
  privacy for records, CRT's confidentiality bound;
* :mod:`~train.dp.ledger`: what several trainings on one body of data spend together;
* :mod:`~train.dp.audit`: the one-run audit's canaries and its lower bound;
* :mod:`~train.dp.grad_samplers`, :mod:`~train.dp.bk`: per-example clipping (Opacus'
  hooks and ghost clipping; book-keeping);
* :mod:`~train.dp.engine`: a model and optimizer made private (what a worker calls).

Nothing here imports the run (``train.run``, ``train.planning``): the run imports these.
"""
