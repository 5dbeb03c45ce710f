"""Ray Train's process group with no network listener where none is needed.

Ray Train's own torch backend makes rank 0 host a ``TCPStore`` for the rendezvous, and
torch's store listens on every interface with no authentication, for the whole run; gloo
then opens its pair sockets on the interface the host name resolves to. Neither is kept:

* on one machine (the embedded default) nothing has to cross the network, so
  :class:`LoopbackTorchConfig` makes the rendezvous a ``FileStore`` in a private
  temporary folder, and gloo's (and NCCL's) sockets use the loopback interface;
* on a cluster of several nodes (:class:`NodeTorchConfig`) the rendezvous is
  :class:`ActorStore`, a torch ``Store`` whose keys live in a Ray actor: the workers
  reach it through Ray's own connections (authenticated, already open), so no store
  listens anywhere; gloo's and NCCL's sockets use the interface that holds the worker
  node's Ray address, never every interface.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import ray
import torch.distributed as dist

from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend

LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def _loopback_env() -> None:
    os.environ.update(LOOPBACK_ENV)


class _FileStoreBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config: "LoopbackTorchConfig"):
        worker_group.execute(_loopback_env)
        worker_group.execute(_set_torch_distributed_env_vars)
        store = os.path.join(backend_config.store_dir, f"store-{uuid.uuid4().hex}")
        futures = [worker_group.execute_single_async(i, _setup_torch_process_group,
                                                     backend=backend_config.backend or "gloo", world_rank=i,
                                                     world_size=len(worker_group), init_method=f"file://{store}",
                                                     timeout_s=backend_config.timeout_s)
                   for i in range(len(worker_group))]
        ray.get(futures)


@dataclass
class LoopbackTorchConfig(TorchConfig):
    """``TorchConfig`` for workers that all run on this machine: a ``FileStore`` in
    ``store_dir`` (a folder only this user can enter) and loopback sockets."""

    store_dir: str = ""

    @property
    def backend_cls(self):
        return _FileStoreBackend


# ---- several nodes: a store in a Ray actor, sockets on the node's own interface ----------

@ray.remote(num_cpus=0)
class _StoreActor:
    """The keys of one run's rendezvous (c10d's store semantics: ``get`` and ``wait`` block
    until the keys are set or the timeout passes)."""

    def __init__(self):
        self.d: dict[str, bytes] = {}
        self.changed = asyncio.Condition()

    async def _until(self, keys: list[str], timeout_s: float) -> bool:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(lambda: all(k in self.d for k in keys)), timeout_s)
                return True
            except asyncio.TimeoutError:
                return False

    async def _put(self, key: str, value: bytes) -> None:
        async with self.changed:
            self.d[key] = value
            self.changed.notify_all()

    async def set(self, key: str, value: bytes) -> None:
        await self._put(key, value)

    async def get(self, key: str, timeout_s: float) -> bytes | None:
        return self.d[key] if await self._until([key], timeout_s) else None

    async def wait(self, keys: list[str], timeout_s: float) -> bool:
        return await self._until(keys, timeout_s)

    async def add(self, key: str, n: int) -> int:
        v = int(self.d.get(key, b"0")) + n
        await self._put(key, str(v).encode())
        return v

    async def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        cur = self.d.get(key)
        if (cur is None and expected == b"") or (cur is not None and cur == expected):
            await self._put(key, desired)
            return desired
        return expected if cur is None else cur

    def check(self, keys: list[str]) -> bool:
        return all(k in self.d for k in keys)

    def delete_key(self, key: str) -> bool:
        return self.d.pop(key, None) is not None

    def num_keys(self) -> int:
        return len(self.d)


def _b(v) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


class ActorStore(dist.Store):
    """A torch distributed ``Store`` backed by a :class:`_StoreActor` (see the module
    docstring): what ``init_process_group(store=...)`` and gloo's and NCCL's bootstrap use."""

    def __init__(self, actor, timeout_s: float):
        super().__init__()
        self.actor, self.timeout_s = actor, float(timeout_s)

    def _left(self, timeout) -> float:
        return timeout.total_seconds() if isinstance(timeout, timedelta) else self.timeout_s

    def set(self, key, value) -> None:
        ray.get(self.actor.set.remote(key, _b(value)))

    def get(self, key) -> bytes:
        v = ray.get(self.actor.get.remote(key, self.timeout_s))
        if v is None:
            raise dist.DistStoreError(f"rendezvous: key {key!r} not set within {self.timeout_s:g} s")
        return v

    def wait(self, keys, timeout=None) -> None:
        t = self._left(timeout)
        if not ray.get(self.actor.wait.remote(list(keys), t)):
            raise dist.DistStoreError(f"rendezvous: keys {list(keys)!r} not set within {t:g} s")

    def add(self, key, n: int) -> int:
        return ray.get(self.actor.add.remote(key, int(n)))

    def compare_set(self, key, expected, desired) -> bytes:
        return ray.get(self.actor.compare_set.remote(key, _b(expected), _b(desired)))

    def check(self, keys) -> bool:
        return ray.get(self.actor.check.remote(list(keys)))

    def delete_key(self, key) -> bool:
        return ray.get(self.actor.delete_key.remote(key))

    def num_keys(self) -> int:
        return ray.get(self.actor.num_keys.remote())


def node_interface() -> str:
    """The network interface holding this node's Ray address; gloo and NCCL are told to
    use it (their sockets then bind to that address, not every interface)."""
    import psutil

    ip = ray.util.get_node_ip_address()
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == ip for a in addrs):
            os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = name
            return name
    raise RuntimeError(f"rendezvous: no network interface holds this node's address {ip}")


def _join(actor, backend: str, world_rank: int, world_size: int, timeout_s: float) -> None:
    if backend == "nccl":  # as Ray Train's own setup: fail on a collective that times out
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    store = ActorStore(actor, timeout_s)
    dist.init_process_group(backend=backend, store=store, rank=world_rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))
    store.set(ACTOR_STORE_KEY, b"1")
    _JOINED[:] = [store]  # torch holds the C++ side only: the Python side must outlive the group


_JOINED: list = []


ACTOR_STORE_KEY = "privatize/actor-store"
"""Set in the actor store once joined: how a worker tells, from the process group's store
(torch hands a Python store back as its base type), that it is the actor's."""


class _ActorStoreBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config: "NodeTorchConfig"):
        self.store = _StoreActor.remote()
        worker_group.execute(node_interface)
        worker_group.execute(_set_torch_distributed_env_vars)
        futures = [worker_group.execute_single_async(i, _join, self.store, backend_config.backend or "gloo", i,
                                                     len(worker_group), backend_config.timeout_s)
                   for i in range(len(worker_group))]
        ray.get(futures)

    def on_shutdown(self, worker_group, backend_config) -> None:
        super().on_shutdown(worker_group, backend_config)
        store = getattr(self, "store", None)
        if store is not None:
            ray.kill(store)
            self.store = None


@dataclass
class NodeTorchConfig(TorchConfig):
    """``TorchConfig`` for workers on several nodes: :class:`ActorStore` and each node's
    own interface."""

    @property
    def backend_cls(self):
        return _ActorStoreBackend


def single_node() -> bool:
    """True when the connected Ray cluster has one live node."""
    return sum(1 for n in ray.nodes() if n.get("Alive")) == 1


@contextmanager
def torch_config(backend: str):
    """The run's ``TorchConfig``: loopback on one node; on a cluster, the actor store and
    each node's own interface."""
    if not single_node():
        yield NodeTorchConfig(backend=backend)
        return
    d = tempfile.mkdtemp(prefix="privatize-rendezvous-")  # mode 0700
    try:
        yield LoopbackTorchConfig(backend=backend, store_dir=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
