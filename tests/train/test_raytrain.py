"""The project's ``TorchTrainer`` (:mod:`train.raytrain`): Ray Train's own callbacks but
the placement-group cleaner, whose detached actor each run started and waited for."""

from __future__ import annotations


def _callbacks(cls) -> list[str]:
    from ray.train import ScalingConfig

    trainer = cls(lambda config: None, train_loop_config={}, scaling_config=ScalingConfig(num_workers=1))
    return [type(cb).__name__ for cb in trainer._create_default_callbacks()]


def test_the_run_trainer_drops_the_placement_group_cleaner_and_keeps_the_rest():
    from ray.train.torch import TorchTrainer

    from train.raytrain import trainer_class

    ray_own, ours = _callbacks(TorchTrainer), _callbacks(trainer_class())
    # the oracle is Ray's own list: if a Ray upgrade renames or drops the cleaner, this says so
    assert "PlacementGroupCleanerCallback" in ray_own
    assert ours == [name for name in ray_own if name != "PlacementGroupCleanerCallback"]
    assert {"BackendSetupCallback", "AcceleratorSetupCallback"} <= set(ours)
    assert issubclass(trainer_class(), TorchTrainer) and trainer_class() is trainer_class()
