"""The Ray cluster a run uses: joining or starting it, the CPU budget per node, the one
place tasks and Ray Data maps are made, errors brought back as one line, and the guard
that fails a run which stops making progress."""

from __future__ import annotations

import _thread
import logging
import math
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from privatize.errors import PrivatizeError

log = logging.getLogger(__name__)


class RunStalled(PrivatizeError):
    """A Ray run in which nothing finished for ``stall_timeout_s`` (resources no node can
    give, or a cluster that lost its nodes)."""


# ---- the CPU budget ---------------------------------------------------------------------

@dataclass
class Budget:
    """CPUs per task and per actor, and actors per pool, so that every actor of the plan
    plus one task fit on *each node* at once: reads and writes never wait behind actors.
    (Budgeted on cluster totals, two one-CPU nodes gave each 0.75-CPU actor a node and
    left 0.25 CPU per node for 0.5-CPU tasks: the run waited forever.)"""

    cpus: float
    task_cpus: float
    actor_cpus: float
    max_actors: int
    nodes: int = 1

    @classmethod
    def for_nodes(cls, node_cpus: list[float], pools: int) -> "Budget":
        """``node_cpus``: the CPUs of each alive node; ``pools``: the plan's actor-pool
        stages (0: tasks only). With no actors a task takes a whole CPU: one core then
        runs one task at a time (four quarter-CPU tasks time-sliced on one core, each with
        its own 30-60 MB block, ran a 1 GB cipher-only spec in 28-33 s instead of 25)."""
        node_cpus = [c for c in node_cpus if c > 0] or [0.1]
        smallest = max(min(node_cpus), 0.1)
        per_node = max(1, int(smallest))  # actors of each pool on every node
        task_cpus = min(1.0, smallest) if pools == 0 else min(1.0, smallest / 4)
        actor_cpus = min(1.0, (smallest - task_cpus) / (max(1, pools) * per_node))
        return cls(float(sum(node_cpus)), task_cpus, math.floor(actor_cpus * 1e4) / 1e4, per_node * len(node_cpus),
                   len(node_cpus))

    @classmethod
    def for_cluster(cls, pools: int) -> "Budget":
        import ray

        cpus = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
        return cls.for_nodes(cpus, pools)

    @property
    def slots(self) -> int:
        """How many pieces of work run at once (actors of one pool, or tasks)."""
        return max(1, int(self.cpus / self.task_cpus)) if self.max_actors <= 1 else self.max_actors

    def pool_size(self, blocks: int | None = None) -> int:
        """Actors a pool starts with: ``max_actors``, but never more than the ``blocks`` the
        stage will see (when known): an actor beyond them would load its model for nothing,
        and Ray Data tears down a pool whose input ended while an actor was still starting.
        The pool may still grow to ``max_actors`` when work waits (a stage that splits its
        blocks further)."""
        return self.max_actors if blocks is None else max(1, min(self.max_actors, blocks))

    def map_args(self, actor: bool, blocks: int | None = None) -> dict:
        if actor:
            import ray.data

            n = self.pool_size(blocks)
            return {"compute": ray.data.ActorPoolStrategy(min_size=n, max_size=self.max_actors),
                    "num_cpus": self.actor_cpus}
        return {"num_cpus": self.task_cpus}


# ---- joining a cluster --------------------------------------------------------------------

def _runtime_env() -> dict | None:
    """Workers of an embedded cluster import ``privatize`` from where this process did."""
    root = str(Path(__file__).resolve().parents[2])  # the folder holding the privatize package
    if "site-packages" in root or "dist-packages" in root:
        return None
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def local_init_args(num_cpus: float | None = None) -> dict:
    """``ray.init`` arguments for an embedded local cluster, beyond its size.

    Ray keeps idle worker processes only up to ``num_workers_soft_limit`` (default: the
    node's CPU count) and kills the rest after a second of idleness. The plan runs
    fractional-CPU tasks (four at once on one CPU, see :class:`Budget`) beside its
    actors, so on a small node the default limit kills and restarts workers all through a
    run, each restart re-importing Ray, Arrow and the stages (about 1.5 s of CPU). The
    limit here keeps one worker per concurrent task and actor. (Nodes of four or more CPUs
    run whole-CPU tasks, for which Ray's default fits; a long-lived cluster of smaller
    nodes sets ``RAY_num_workers_soft_limit`` on them likewise.)"""
    cpus = num_cpus if num_cpus is not None else (os.cpu_count() or 1)
    b = Budget.for_nodes([cpus], 1)
    # every task that can run at once, plus the actors of two actor-pool stages
    return {"_system_config": {"num_workers_soft_limit": math.ceil(cpus / b.task_cpus) + 2 * b.max_actors}}


def connect(address: str | None = None, *, num_cpus: float | None = None,
            object_store_memory: int | None = None) -> bool:
    """Join the current Ray session, or the cluster at ``address`` (or ``RAY_ADDRESS``:
    the only place it is read), or start an embedded local one. Returns whether this call
    connected (and so should disconnect)."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address is None:
        ctx = ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, runtime_env=_runtime_env(),
                       **local_init_args(num_cpus))
    else:
        ctx = ray.init(address=address)
    url = getattr(ctx, "dashboard_url", None)
    if url:  # operators watch the run there (jobs, Ray Data operators, workers)
        print(f"privatize: Ray dashboard at http://{url}", file=sys.stderr)
    return True


# ---- tasks, maps, errors ------------------------------------------------------------------

def task(fn, **options):
    """Every Ray core task of the plan is made here (one place to audit what is shipped
    to workers: settings and key references, never key bytes)."""
    import ray

    return ray.remote(fn).options(**options)


def map_batches(ds, fn, **kwargs):
    """Every ``map_batches`` of the plan goes through here (the same audit point)."""
    return ds.map_batches(fn, **kwargs)


def block_pieces(ds, fn, n: int, task_cpus: float, *args, guard=None, on_piece=None) -> list:
    """``fn(block, *args, bounds)`` -> ``n`` objects, for every block of ``ds`` as it is
    produced: the map side of a one-pass shuffle in Ray core tasks. ``on_piece``, if given,
    is called with each block's ``n`` references as they are made."""
    t = task(fn, num_returns=n, num_cpus=task_cpus)
    pieces = []
    for bundle in ds.iter_internal_ref_bundles():
        if guard is not None:
            guard.tick()
        slices = bundle.slices or [None] * len(bundle.block_refs)
        for ref, sl in zip(bundle.block_refs, slices):
            pieces.append(t.remote(ref, *args, None if sl is None else (sl.start_offset, sl.end_offset)))
            if on_piece is not None:
                on_piece(pieces[-1])
    return pieces


def in_bounds(block, bounds: tuple[int, int] | None):
    """The rows of ``block`` a :func:`block_pieces` task was given (``bounds``: a slice)."""
    return block if bounds is None else block.slice(bounds[0], bounds[1] - bounds[0])


def find_privatize_error(exc: BaseException) -> PrivatizeError | None:
    seen = set()
    todo = [exc]
    found = None
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, PrivatizeError) and type(e).__module__.startswith("privatize"):
            found = e
        todo.extend([getattr(e, "cause", None), e.__cause__, e.__context__])
    return found


def message(err: BaseException) -> str:
    # the error's own one line (Ray Data appends its retry advice to the message)
    return (str(err).splitlines() or [""])[0]


def get(refs, guard: "StallGuard | None" = None):
    """``ray.get``, a worker's privatize error raised again here as one line."""
    import ray

    try:
        out = ray.get(refs)
    except Exception as exc:
        err = find_privatize_error(exc)
        if err is not None:
            raise type(err)(message(err)) from None
        raise
    if guard is not None:
        guard.tick()
    return out


def windowed(fn, arg_lists: list[tuple], window: int, guard: "StallGuard | None" = None) -> list:
    """``fn.remote(*args)`` for each of ``arg_lists``, at most ``window`` in flight (what
    can run at once); the results in order. Submitting all at once queued them, and Ray
    starts a worker process for every queued task it expects to run (three more at 1 CPU
    for a 1 GB input's 16 ranges: 1.5 s of imports each)."""
    import ray

    results: list = [None] * len(arg_lists)
    pending: dict = {}
    todo = iter(enumerate(arg_lists))
    while True:
        for i, args in todo:
            pending[fn.remote(*args)] = i
            if len(pending) >= window:
                break
        if not pending:
            return results
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            results[pending.pop(ref)] = get(ref, guard)


# ---- the stall guard ----------------------------------------------------------------------

class Stalled(BaseException):
    """Raised in the main thread by a :class:`StallGuard` that fired (a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on the way swallows it)."""


class StallGuard:
    """Fails a run in which the driver sees nothing finish for ``timeout`` seconds: no
    block out of an operator, no task result. A watcher thread interrupts the main
    thread, and :meth:`check` turns the interrupt into :class:`RunStalled` with what the
    cluster waits for (its pending resource demands, from the autoscaler's view).
    Only armed on the main thread (where an interrupt can land).

    The first interrupt is a simulated SIGINT (it also ends a blocking wait). It is lost
    where SIGINT's handler is not Python's default (a library or a host may have replaced
    or ignored it) or where code on the way swallows KeyboardInterrupt, so until the run
    has ended the guard raises :class:`Stalled` in the main thread every ``REPEAT_S``
    seconds (an asynchronous exception, delivered at the thread's next bytecode)."""

    REPEAT_S = 5.0

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.last = time.monotonic()
        self.fired: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # no Stalled is raised once the run has ended
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StallGuard":
        if self.timeout and threading.current_thread() is threading.main_thread():
            self._thread = threading.Thread(target=self._watch, name="privatize-stall-guard", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._stop.set()

    def tick(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        poll = min(5.0, self.timeout / 4)
        while not self._stop.wait(poll):
            idle = time.monotonic() - self.last
            if idle >= self.timeout:
                self.fired = (f"the Ray run made no progress for {idle:.0f}s (stall_timeout_s={self.timeout:g}); "
                              f"{pending_demands()}")
                log.error("%s", self.fired)
                _thread.interrupt_main()
                while not self._stop.wait(self.REPEAT_S):
                    with self._lock:
                        if not self._stop.is_set():
                            _raise_in_main(Stalled)
                return

    def check(self, exc: BaseException) -> None:
        """Raise :class:`RunStalled` if ``exc`` is this guard's interrupt."""
        if self.fired and isinstance(exc, (KeyboardInterrupt, Stalled)):
            with self._lock:
                self._stop.set()
            raise RunStalled(self.fired) from None


def _raise_in_main(exc_type: type[BaseException]) -> None:
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.main_thread().ident),
                                               ctypes.py_object(exc_type))


def pending_demands() -> str:
    """What the cluster's pending tasks and actors ask for, and what each node has free."""
    try:
        import ray
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(ray.get_runtime_context().gcs_address)
        wants = [f"{d.count} x {d.bundle}" for dem in status.resource_demands.ray_task_actor_demand
                 for d in dem.bundles_by_count]
        free = [{k: round(v, 2) for k, v in ray.available_resources().items() if k == "CPU"}]
        per_node = [{"node": n["NodeManagerAddress"], "CPU": n["Resources"].get("CPU", 0)} for n in ray.nodes()
                    if n.get("Alive")]
        return (f"pending demands: {', '.join(wants) or 'none'}; free: {free[0]}; nodes: {per_node}")
    except Exception as exc:  # a diagnosis, never the cause of a second failure
        return f"(cluster status unavailable: {type(exc).__name__})"
