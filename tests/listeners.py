"""What network listeners Ray Train's worker processes open while a run goes (issue 36: the
training's process group must not listen beyond loopback on one machine, nor on every
interface on a cluster)."""

from __future__ import annotations

import os
import threading


class Listeners(threading.Thread):
    """While a run goes (every 0.1 s): the TCP sockets Ray Train worker processes listen on.
    ``wildcard``: the most listeners at a wildcard address (every interface) one process
    had; ``beyond_loopback``: any listener at a specific address that is not loopback.

    ``gcs_address``: only the workers of that Ray cluster (their ``RAY_RAYLET_PID`` is one of
    its raylets), not another cluster's on the machine (a service's head, another test run);
    None: every Ray Train worker on the machine."""

    def __init__(self, gcs_address: str | None = None):
        super().__init__(daemon=True)
        self.stop, self.seen_workers, self.wildcard, self.beyond_loopback = threading.Event(), set(), 0, set()
        self.gcs_address = gcs_address

    def _raylets(self, procs) -> set[str] | None:
        """The pids (as text) of the raylets of ``gcs_address``'s cluster among ``procs``, or
        None for any."""
        if self.gcs_address is None:
            return None
        flag = f"--gcs-address={self.gcs_address}"
        return {str(p.info["pid"]) for p in procs
                if (cmd := p.info["cmdline"] or ()) and os.path.basename(cmd[0]) == "raylet" and flag in cmd}

    @staticmethod
    def listening(pid: int) -> list[tuple[str, int]]:
        import psutil

        return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN]

    def run(self):
        import ipaddress

        import psutil

        while not self.stop.is_set():
            procs = list(psutil.process_iter(["pid", "cmdline"]))  # one pass: raylets and workers
            raylets = self._raylets(procs)
            for proc in procs:
                try:
                    if "RayTrainWorker" not in " ".join(proc.info["cmdline"] or ()):
                        continue
                    if raylets is not None and proc.environ().get("RAY_RAYLET_PID") not in raylets:
                        continue  # another cluster's worker
                    self.seen_workers.add(proc.info["pid"])
                    socks = self.listening(proc.info["pid"])
                except (psutil.Error, OSError):
                    continue
                self.wildcard = max(self.wildcard, sum(ip in ("0.0.0.0", "::") for ip, _ in socks))
                self.beyond_loopback |= {(ip, port) for ip, port in socks if ip not in ("0.0.0.0", "::")
                                         and not _loopback(ipaddress.ip_address(ip.split("%")[0]))}
            self.stop.wait(0.1)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.join()


def ray_worker_wildcard_listeners(ray) -> int:
    """How many wildcard listeners a plain Ray worker process has in this session (Ray's own
    gRPC server): the baseline a training worker may not exceed."""

    @ray.remote(num_cpus=0)
    class Plain:
        def pid(self):
            return os.getpid()

    a = Plain.remote()
    n = sum(ip in ("0.0.0.0", "::") for ip, _ in Listeners.listening(ray.get(a.pid.remote())))
    ray.kill(a)
    return n


def _loopback(addr) -> bool:
    """Loopback, an IPv4-mapped IPv6 loopback (``::ffff:127.0.0.1``, a dual-stack socket
    bound to 127.0.0.1) included."""
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback
