"""The Ray Data runner: the same stages, the same output, on a Ray cluster.

``privatize.run(spec, input, output, runner="ray")`` runs a spec here. One module per job:

* :mod:`~privatize.ray.run`: the plan (stages as Ray Data maps) and the run function;
* :mod:`~privatize.ray.cluster`: joining or starting Ray, the CPU budget per node, the one
  place tasks and maps are made, errors as one line, the stall guard;
* :mod:`~privatize.ray.workers`: what runs in workers for a stage (set-up stages cached
  per process and run, the callables Ray Data maps, per-batch counts);
* :mod:`~privatize.ray.reads`: read tasks, files cut into byte ranges;
* :mod:`~privatize.ray.shuffle`: a GlobalStage's keys, decisions and router;
* :mod:`~privatize.ray.final`: the final pass, shard writes and the merged tally.

Every stage runs through :mod:`privatize.execution` and decisions reach their rows
through :mod:`privatize.routing`, as in-process, so the shards are byte-identical to the
in-process runner's. Workers receive stage *settings* (key references), never key bytes.
"""

from privatize.ray.cluster import connect, local_init_args

__all__ = ["connect", "local_init_args"]
