"""Ray Train's ``TorchTrainer`` as this project runs it: without the per-run helper actor
a run here does not need.

Ray Train (2.60) starts a detached ``PlacementGroupCleaner`` actor for every run, waits
for it before the workers train (it registers the run's placement group) and again at the
end. It removes the placement group if the controller dies while the driver lives on. A
run here is its driver's job (``privatize train``, the service's ``train.job``): Ray
removes a job's placement groups when the job ends, so the cleaner is a process start per
run in the critical path for nothing (1.4 s of a 9.6 s four-step run on 2 cores, measured
interleaved). It also fails where two embedded clusters share a machine ("Found multiple
active Ray instances"). A long-lived driver that runs many trainings (an experiment, the
test suite) keeps a crashed controller's CPUs until it exits.

The hook is Ray's private ``_create_default_callbacks``; Ray is pinned in
``constraints.txt``, and ``tests/train/test_raytrain.py`` fails if the callback it drops
is no longer there to drop.
"""

from __future__ import annotations

import functools


@functools.cache
def trainer_class():
    """``TorchTrainer`` without the placement-group cleaner (imported on first use: Ray
    Train is heavy)."""
    from ray.train.torch import TorchTrainer
    from ray.train.v2._internal.callbacks.placement_group_callback import PlacementGroupCleanerCallback

    class RunTrainer(TorchTrainer):
        def _create_default_callbacks(self):
            return [cb for cb in super()._create_default_callbacks()
                    if not isinstance(cb, PlacementGroupCleanerCallback)]

    return RunTrainer
