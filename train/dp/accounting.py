"""Planning's privacy accounting, bounded in memory and time.

Opacus' PRV accountant builds a grid whose size grows with 1/sigma^2 and with the sample
rate: 0.4 GB at sigma 0.3, 8 GB at sigma 0.5 with every example in every step, 706 GiB
at sigma 0.001; a target-epsilon search evaluates it dozens of times. RDP costs
milliseconds and is an upper bound. So planning

1. accounts with RDP first, in process: an infinite epsilon is refused here;
2. with ``accountant: prv``, sizes PRV's grid by Opacus' own domain rule: a small grid
   is computed in process; a large one (the search: at half RDP's noise) in a child
   process under ``PRV_MEMORY_BYTES`` of data and ``PRV_SECONDS``; past either, the plan
   keeps RDP's figures and says so (``accountant`` in the plan is the one whose figure
   was used, and the workers account with it).

The child is ``python -m train.dp.accounting`` (JSON on stdin and stdout).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from dataclasses import dataclass

log = logging.getLogger(__name__)

PRV_MEMORY_BYTES = 2 << 30
PRV_SECONDS = 120.0
IN_PROCESS_POINTS = 500_000
"""PRV grids up to this many points (about 170 bytes each, measured: 85 MB) are computed in
process; larger ones in the bounded child (which costs a fresh import of torch)."""


History = list[tuple[float, float, int]]
"""(noise multiplier, sample rate, steps) of each Poisson-sampled Gaussian mechanism run on
the same data, as Opacus' accountants keep it."""


def prv_grid_points(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                    eps_error: float = 0.01) -> float | None:
    """The size of the grid Opacus' PRV accountant will build, from its own domain rule
    (Gopi et al.'s safe domain over its mesh); None if this Opacus cannot say."""
    return history_grid_points([(noise_multiplier, sample_rate, steps)], delta, eps_error)


def history_grid_points(history: History, delta: float, eps_error: float = 0.01) -> float | None:
    """:func:`prv_grid_points` of the composition of every mechanism in ``history``."""
    try:
        from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV, compute_safe_domain_size

        delta_error = delta / 1000  # Opacus' default in get_epsilon
        total = sum(steps for _, _, steps in history)
        half = compute_safe_domain_size(prvs=[PoissonSubsampledGaussianPRV(q, sigma) for sigma, q, _ in history],
                                        max_self_compositions=[steps for _, _, steps in history],
                                        eps_error=eps_error, delta_error=delta_error)
        mesh = eps_error / math.sqrt(total * math.log(12 / delta_error) / 2)
        return 2 * float(half) / mesh
    except Exception:  # noqa: BLE001 - an internal of Opacus; the child is the safe answer
        return None


def _small(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> bool:
    return _small_history([(noise_multiplier, sample_rate, steps)], delta)


def _small_history(history: History, delta: float) -> bool:
    if any(sigma <= 0 for sigma, _, _ in history):
        return False
    points = history_grid_points(history, delta)
    return points is not None and math.isfinite(points) and points <= IN_PROCESS_POINTS


@dataclass(frozen=True)
class Accounted:
    """A figure (epsilon or noise multiplier) and the accountant that produced it; ``note``
    says why PRV was not used when it was asked for."""

    value: float
    accountant: str
    note: str | None = None
    epsilon: float | None = None
    """For a noise multiplier: the epsilon the search computed at it with ``accountant`` (what
    :func:`bounded_epsilon` would give, without accounting it again); None when not known."""


def _prv_in_child(request: dict, memory_bytes: int, seconds: float) -> tuple[float | None, str | None, float | None]:
    request = dict(request, memory_bytes=memory_bytes)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        r = subprocess.run([sys.executable, "-m", "train.dp.accounting"], input=json.dumps(request), text=True,
                           capture_output=True, timeout=seconds, env=env)
    except subprocess.TimeoutExpired:
        return None, f"PRV took over {seconds:g} s", None
    out = r.stdout.strip().splitlines()
    if r.returncode != 0 or not out:
        if "MemoryError" in r.stderr:
            return None, f"PRV needed over {memory_bytes / 2**30:g} GiB", None
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"PRV failed ({last[:200]})", None
    answer = json.loads(out[-1])
    value = answer["value"]
    if value is None or not math.isfinite(value):
        return None, "PRV gave no finite figure", None
    return float(value), None, answer.get("epsilon")


def _prv_or_rdp(rdp: float, what: str, small: bool, in_process, request: dict, memory_bytes: int,
                seconds: float, rdp_epsilon: float | None = None) -> Accounted:
    """PRV's figure, in process when its grid is ``small``, else from the bounded child;
    RDP's figure (``what`` it is, in the note) when the child passes its budget.
    ``in_process`` answers (figure, epsilon at it or None); for a noise, ``rdp_epsilon`` is
    RDP's epsilon at ``rdp``."""
    if small:
        value, eps = in_process()
        return Accounted(value, "prv", epsilon=eps)
    prv, why, eps = _prv_in_child(request, memory_bytes, seconds)
    if prv is None:
        return Accounted(rdp, "rdp", f"{why}: RDP's {what} is used instead", rdp_epsilon)
    return Accounted(prv, "prv", epsilon=eps)


def bounded_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str, *,
                    memory_bytes: int = PRV_MEMORY_BYTES, seconds: float = PRV_SECONDS) -> Accounted:
    """Epsilon of ``steps`` Poisson-sampled Gaussian steps; RDP's (an upper bound) where PRV
    would pass its budget. ``inf`` when RDP finds no finite bound (the caller refuses it)."""
    from train.dp.accountant import epsilon

    rdp = epsilon(noise_multiplier, sample_rate, steps, delta, "rdp")
    if accountant == "rdp" or not math.isfinite(rdp) or steps <= 0:
        return Accounted(rdp, "rdp")
    return _prv_or_rdp(rdp, "bound", _small(noise_multiplier, sample_rate, steps, delta),
                       lambda: (epsilon(noise_multiplier, sample_rate, steps, delta, "prv"), None),
                       {"op": "epsilon", "sigma": noise_multiplier, "q": sample_rate, "steps": steps, "delta": delta},
                       memory_bytes, seconds)


def bounded_composition(history: History, delta: float, accountant: str = "prv", *,
                        memory_bytes: int = PRV_MEMORY_BYTES, seconds: float = PRV_SECONDS) -> Accounted:
    """Epsilon at ``delta`` of every mechanism of ``history`` run on the same data: PRV over
    the joint history (bounded as :func:`bounded_epsilon`), RDP's joint bound where PRV
    would pass its budget, and the sum of each mechanism's own epsilon (basic composition,
    the loosest) only where both fail."""
    from train.dp.accountant import composed_epsilon

    history = [(float(s), float(q), int(t)) for s, q, t in history if t > 0]
    if not history:
        return Accounted(0.0, accountant)
    try:
        rdp = composed_epsilon(history, delta, "rdp")
    except Exception as exc:  # noqa: BLE001 - Opacus' RDP failing is what the sum is for
        total = sum(composed_epsilon([h], delta, "prv") for h in history)
        return Accounted(total, "sum", f"RDP failed ({str(exc)[:200]}): the sum of each training's epsilon")
    if accountant == "rdp" or not math.isfinite(rdp):
        return Accounted(rdp, "rdp")
    return _prv_or_rdp(rdp, "bound", _small_history(history, delta),
                       lambda: (composed_epsilon(history, delta, "prv"), None),
                       {"op": "compose", "history": history, "delta": delta}, memory_bytes, seconds)


def bounded_noise(target_epsilon: float, delta: float, sample_rate: float, steps: int, accountant: str, *,
                  memory_bytes: int = PRV_MEMORY_BYTES, seconds: float = PRV_SECONDS) -> Accounted:
    """The smallest noise multiplier within ``target_epsilon``: RDP's (more noise than
    needed, never less) where PRV's search would pass its budget, always with the epsilon the
    search computed at it (``epsilon``: planning need not account it again). A ValueError
    when no noise meets the target."""
    from train.dp.accountant import noise_and_epsilon

    rdp, rdp_eps = noise_and_epsilon(target_epsilon, delta, sample_rate, steps, "rdp")
    if accountant == "rdp":
        return Accounted(rdp, "rdp", epsilon=rdp_eps)
    # PRV's answer is below RDP's: the search starts there and probes no lower than half of
    # it, which bounds the grid
    return _prv_or_rdp(rdp, "noise", _small(rdp / 2, sample_rate, steps, delta),
                       lambda: noise_and_epsilon(target_epsilon, delta, sample_rate, steps, "prv", start=rdp,
                                                 floor=rdp / 2),
                       {"op": "noise", "target": target_epsilon, "q": sample_rate, "steps": steps, "delta": delta,
                        "start": rdp, "floor": rdp / 2},
                       memory_bytes, seconds, rdp_eps)


def _child() -> None:
    import resource

    req = json.loads(sys.stdin.read())
    # the child limits itself before it imports anything large: its data segment, numpy's
    # arrays included (preexec_fn is unsafe in a parent with threads, as Ray's driver is)
    resource.setrlimit(resource.RLIMIT_DATA, (req["memory_bytes"], req["memory_bytes"]))
    from train.dp.accountant import composed_epsilon, epsilon, noise_and_epsilon

    eps = None
    if req["op"] == "compose":
        value = composed_epsilon([tuple(h) for h in req["history"]], req["delta"], "prv")
    elif req["op"] == "epsilon":
        value = epsilon(req["sigma"], req["q"], req["steps"], req["delta"], "prv")
    else:
        value, eps = noise_and_epsilon(req["target"], req["delta"], req["q"], req["steps"], "prv",
                                       start=req["start"], floor=req["floor"])
    print(json.dumps({"value": value if math.isfinite(value) else None,
                      "epsilon": eps if eps is not None and math.isfinite(eps) else None}))


if __name__ == "__main__":
    _child()
