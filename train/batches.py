"""How a worker's steps draw their examples, and the batches and loss they make.

* Plain phases: each epoch a seeded permutation cut into batches of ``batch_size``; rank r
  takes every world-th example of the batch.
* DP phases: Poisson sampling over the whole split (each example in a step with
  probability q), the same draw on every rank, rank r taking every world-th selected
  example: the union over ranks is a Poisson sample, which the accountant assumes. Under
  ``dp.unit: individual`` the draw is of individuals (:func:`individual_batch`), and an
  individual's blocks stay on one rank.
* Batches are drawn statelessly from (seed, phase, epoch, step), so a resumed run draws
  exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

import numpy as np

from train.kinds import train_kind
from train.plan import Phase
from train.setup import MLMPlan

IGNORE = -100


def plan_phases(kind: str, sizes: dict[str, int], batch_size: int, dp_batch_size: int | None = None) -> list[Phase]:
    """Phases of one epoch. Plain phases take ceil(n / batch) steps (every example once, the
    last batch partial); DP phases take round(n / dp_batch) Poisson steps (sample rate 1 /
    steps; ``dp_batch_size`` defaults to ``batch_size``). An empty plain split is a phase of
    no steps (CRT with no public data is DP-SGD on everything)."""
    def plain(split: str, name: str) -> Phase:
        return Phase(name, False, -(-sizes[split] // batch_size), split)

    def dp(split: str) -> Phase:
        return Phase("private", True, max(1, round(sizes[split] / (dp_batch_size or batch_size))), split)

    return train_kind(kind).phases(plain, dp)


def total_steps(phases: list[Phase], epochs: int, max_steps: int | None) -> int:
    n = epochs * sum(p.steps for p in phases)
    return min(n, max_steps) if max_steps else n


def position(phases: list[Phase], step: int) -> tuple[int, int, int]:
    """Global step -> (epoch, phase index, step within the phase)."""
    per = sum(p.steps for p in phases)
    epoch, rest = divmod(step, per)
    for i, p in enumerate(phases):
        if rest < p.steps:
            return epoch, i, rest
        rest -= p.steps
    raise AssertionError("unreachable")


def batch_indices(phase: Phase, n: int, batch_size: int, seed: int, epoch: int, step: int, pi: int,
                  poisson: bool = True) -> np.ndarray:
    """The step's example indices over all ranks (rank r takes ``[r::world]``; see the
    module docstring)."""
    if phase.dp and poisson:
        rng = np.random.default_rng([seed, pi, epoch, step])
        chosen = np.flatnonzero(rng.random(n) < phase.sample_rate)
    else:
        perm = np.random.default_rng([seed, pi, epoch]).permutation(n)
        chosen = perm[step * batch_size:(step + 1) * batch_size]
    return chosen


class Owners:
    """The blocks of each individual of a split (``dp.unit: individual``): individual j's
    blocks are ``order[start[j]:start[j] + count[j]]``, individuals in the order of their
    owner ids (the same on every rank)."""

    def __init__(self, owner: np.ndarray):
        self.order = np.argsort(owner, kind="stable")
        _, self.start, self.count = np.unique(owner[self.order], return_index=True, return_counts=True)

    def __len__(self) -> int:
        return len(self.start)

    def blocks(self, j: int) -> np.ndarray:
        return self.order[self.start[j]:self.start[j] + self.count[j]]


def individual_batch(owners: Owners, phase: Phase, seed: int, epoch: int, step: int, pi: int,
                     cap: int) -> list[np.ndarray]:
    """The step's individuals over all ranks, each as its block indices: Poisson sampling
    of individuals at the phase's rate (the accountant's unit), then all of an
    individual's blocks, or a seeded draw of ``cap`` of them. Rank r takes ``[r::world]``,
    so an individual's blocks stay on one rank, where they are clipped together."""
    rng = np.random.default_rng([seed, pi, epoch, step])
    out = []
    for j in np.flatnonzero(rng.random(len(owners)) < phase.sample_rate):
        b = owners.blocks(int(j))
        if len(b) > cap:
            b = np.sort(np.random.default_rng([seed, pi, epoch, step, int(j)]).choice(b, cap, replace=False))
        out.append(b)
    return out


class MaskedLMLoss:
    """Per-example mean of the next-token loss over its target tokens (``IGNORE`` elsewhere),
    reduced over the batch as ``reduction`` says ("none" gives one loss per example, what
    Opacus' ghost clipping needs). A plain and a DP step reduce the same way, so with no
    clipping and no noise they take the same step."""

    def __init__(self, reduction: str = "mean"):
        self.reduction = reduction

    def __call__(self, logits, targets):
        import torch.nn.functional as F

        b, t, v = logits.shape
        tok = F.cross_entropy(logits.reshape(-1, v).float(), targets.reshape(-1), ignore_index=IGNORE,
                              reduction="none").view(b, t)
        per = tok.sum(1) / (targets != IGNORE).sum(1).clamp(min=1)
        if self.reduction == "none":
            return per
        return per.mean() if self.reduction == "mean" else per.sum()


def make_batch(ids, loss, idx: np.ndarray, device):
    """(inputs, targets) tensors for these examples; an empty share becomes one example
    with no targets."""
    import torch

    if len(idx) == 0:
        x = torch.as_tensor(ids[:1].astype(np.int64))
        return x.to(device), torch.full_like(x[:, 1:], IGNORE).to(device)
    x = torch.as_tensor(ids[idx].astype(np.int64))
    y = x[:, 1:].clone()
    y[torch.as_tensor(loss[idx][:, 1:] == 0)] = IGNORE
    return x.to(device), y.to(device)


def mlm_batch(ids, loss, idx: np.ndarray, mlm: MLMPlan, seed: int, epoch: int, step: int, device):
    """(inputs, targets) for a masked-LM step: each target token (``loss`` 1) is chosen
    with probability ``mlm.probability``, drawn per example from (seed, epoch, step,
    example), so a resumed run, or one with another number of workers, draws the same; a
    chosen token becomes ``<MASK>`` (80%), a random token (10%) or stays (10%), and is the
    only target."""
    import torch

    if len(idx) == 0:
        x = torch.as_tensor(ids[:1].astype(np.int64))
        return x.to(device), torch.full_like(x, IGNORE).to(device)
    x = ids[idx].astype(np.int64)
    y = np.full_like(x, IGNORE)
    for row, i in enumerate(idx):
        rng = np.random.default_rng([seed, epoch, step, int(i)])
        u, how = rng.random(x.shape[1]), rng.random(x.shape[1])
        chosen = (u < mlm.probability) & (loss[i] == 1)
        y[row, chosen] = x[row, chosen]
        x[row, chosen & (how < 0.8)] = mlm.mask_id
        rand = chosen & (how >= 0.8) & (how < 0.9)
        x[row, rand] = rng.integers(0, mlm.vocab_size, int(rand.sum()))
    return torch.as_tensor(x).to(device), torch.as_tensor(y).to(device)
