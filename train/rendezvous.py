"""Ray Train's process group with no network listener where none is needed.

Ray Train's own torch backend makes rank 0 host a ``TCPStore`` for the rendezvous, and
torch's store listens on every interface with no authentication, for the whole run; gloo
then opens its pair sockets on the interface the host name resolves to. On one machine
(the embedded default) nothing has to cross the network, so :class:`LoopbackTorchConfig`
replaces both: the rendezvous is a ``FileStore`` in a private temporary folder, and gloo's
(and NCCL's) sockets are on the loopback interface. On a cluster of several nodes Ray
Train's backend is kept (torch's store cannot be bound to one address; see README).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from ray.train.torch import TorchConfig
from ray.train.torch.config import _set_torch_distributed_env_vars, _setup_torch_process_group, _TorchBackend

LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


def _loopback_env() -> None:
    os.environ.update(LOOPBACK_ENV)


class _FileStoreBackend(_TorchBackend):
    def on_start(self, worker_group, backend_config: "LoopbackTorchConfig"):
        import ray

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


def single_node() -> bool:
    """True when the connected Ray cluster has one live node."""
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive")) == 1


@contextmanager
def torch_config(backend: str):
    """The run's ``TorchConfig``: loopback on one node, Ray Train's own on a cluster."""
    if not single_node():
        yield TorchConfig(backend=backend)
        return
    d = tempfile.mkdtemp(prefix="privatize-rendezvous-")  # mode 0700
    try:
        yield LoopbackTorchConfig(backend=backend, store_dir=d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
