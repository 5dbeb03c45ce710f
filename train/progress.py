"""What a run shows while it goes: the metrics actor the workers report to (it writes
``metrics.jsonl`` and ``workers.jsonl`` in the run folder) and the driver's progress bar."""

from __future__ import annotations

import json
import os
import time

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
"""A run's result files: its metrics, one JSON line per report, and its summary, written last."""
WORKERS = "workers.jsonl"


def sink_class():
    import ray

    @ray.remote(num_cpus=0)
    class MetricsSink:
        """Appends the workers' metrics to files in the run folder (an actor on the driver's
        node, so the files are where the driver is, on any cluster)."""

        def __init__(self, folder: str, show: bool):
            self.folder, self.show = folder, show
            self.finals: list[dict] = []
            self.workers: list[dict] = []
            self.last: dict = {}

        def _append(self, name: str, rec: dict) -> None:
            with open(os.path.join(self.folder, name), "a") as f:
                f.write(json.dumps(rec) + "\n")

        def write(self, rec: dict) -> None:
            rec = {"time": time.time(), **rec}
            self.last = rec
            self._append(METRICS, rec)

        def worker(self, rec: dict) -> None:
            self.workers.append(rec)
            self._append(WORKERS, {"time": time.time(), **rec})

        def final(self, rec: dict) -> None:
            self.finals.append(rec)

        def state(self) -> dict:
            return {"finals": self.finals, "workers": self.workers, "last": self.last}

    return MetricsSink


class ProgressBar:
    """A tqdm bar of steps (loss, epsilon) fed from the metrics actor while ``fit`` runs."""

    def __init__(self, sink, total: int, on: bool):
        self.sink, self.total, self.on = sink, total, on
        self.stop = None

    def __enter__(self):
        if not self.on:
            return self
        import threading

        from tqdm import tqdm

        self.stop = threading.Event()
        self.bar = tqdm(total=self.total, unit="step", desc="training", dynamic_ncols=True)

        def poll():
            import ray

            while not self.stop.wait(2.0):
                try:
                    last = ray.get(self.sink.state.remote(), timeout=5)["last"]
                except Exception:  # noqa: BLE001 - the bar is best effort; the run reports its own errors
                    continue
                if last:
                    self.bar.n = last["step"]
                    post = {"loss": f"{last['loss']:.3f}"}
                    if "epsilon" in last:
                        post["eps"] = f"{last['epsilon']:.2f}"
                    self.bar.set_postfix(post, refresh=True)

        self.thread = threading.Thread(target=poll, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, exc_type, *exc):
        if self.stop is not None:
            self.stop.set()
            self.thread.join(timeout=10)
            if exc_type is None:
                self.bar.n = self.total
            self.bar.close()
        return False
