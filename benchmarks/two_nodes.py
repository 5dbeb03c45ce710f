"""The CRT recipe with redaction on a real two-node Ray cluster (a head and a worker, one
CPU each, separate raylets: ``ray.cluster_utils.Cluster``) against the in-process runner
on one local core, on the same corpus in the same run.

Before issue 24 this plan never finished on two one-CPU nodes (the CPU budget was
computed on cluster totals: each node's redaction actor left 0.25 CPU, the 0.5-CPU tasks
waited forever), and a one-file corpus was one block, so one actor did all the work.
Target: the two nodes finish, byte-identical, faster than one local core.

    python benchmarks/two_nodes.py [--docs 4000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import save_result  # noqa: E402

SPEC = {"stages": [{"kind": "split"}, {"kind": "dedup", "min_length": 20}, {"kind": "redact"},
                   {"kind": "split_private"}, {"kind": "encrypt_text", "key": "file:keys/text.key"}],
        "output": {"num_shards": 4}}
NAMES = ["Alice Johnson", "Bruno Diaz", "Chen Wei", "Dana Smith", "Emeka Obi", "Farah Khan", "Goran Petrov"]


def write_corpus(path: Path, n: int) -> float:
    """Booking dialogues with names, phone numbers, e-mail addresses and repeated lines."""
    with open(path, "w", encoding="utf-8") as fh:
        for k in range(n):
            text = (f"Hello, this is {NAMES[k % 7]} calling about booking {k}. "
                    f"Please call me back on 020 7946 {k % 10000:04d} or write to guest{k}@example.com. "
                    f"I would like a table for {2 + k % 5} people on Friday at the restaurant near the station. "
                    "Thank you for your help with the reservation today.")
            fh.write(json.dumps({"id": f"d{k}", "text": text}) + "\n")
    return path.stat().st_size / 1e6


def shard_hashes(out: Path) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "shards").iterdir())]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=4000)
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.cluster_utils import Cluster

    from privatize import run
    from privatize.ray import local_init_args
    from privatize.keys import new_key, write_key_file
    from privatize.spec import parse_spec

    work = Path(tempfile.mkdtemp(prefix="two-nodes-"))
    write_key_file(new_key("vigenere", length=40), work / "keys" / "text.key")
    corpus = work / "dialogues.jsonl"
    mb = write_corpus(corpus, args.docs)
    spec = parse_spec(SPEC)

    aff = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {sorted(aff)[0]})  # the baseline: one local core
    t = time.perf_counter()
    run(spec, corpus, work / "local", spec_dir=str(work))
    local = time.perf_counter() - t
    os.sched_setaffinity(0, aff)

    store = 300 * 1024 * 1024
    # the worker-process limit a node of one CPU needs (privatize.ray.local_init_args; the
    # default, the node's CPU count, kills and restarts workers all through a run)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                            "include_dashboard": False, **local_init_args(1)})
    cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).parents[1])}})
    try:
        t = time.perf_counter()
        m = run(spec, corpus, work / "ray", runner="ray", spec_dir=str(work), stall_timeout_s=300)
        two = time.perf_counter() - t
    finally:
        ray.shutdown()
        cluster.shutdown()
    same = shard_hashes(work / "local") == shard_hashes(work / "ray")
    print(f"CRT recipe with redaction, {args.docs} dialogues ({mb:.2f} MB, one file); "
          f"{platform.machine()} {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}")
    print(f"  in-process, one local core:          {local:6.1f} s")
    print(f"  Ray, two one-CPU nodes (head+worker): {two:6.1f} s  (cluster start excluded, actor start and "
          f"model load included)")
    for st in m["stages"]:
        print(f"    stage {st['index']} {st['kind']:<13} {st['records_in']:>6} -> {st['records_out']:>6} records, "
              f"{st['seconds']:6.1f} s in workers")
    print(f"  speed-up: {local / two:.2f}x (target > 1: {'met' if local / two > 1 else 'NOT met'}); "
          f"shards byte-identical: {same}; records out: {m['counts']['output_records']}")
    save_result("two_nodes", {"docs": args.docs, "mb": mb, "in_process_s": local, "two_nodes_s": two,
                              "speedup": local / two, "met": local / two > 1, "shards_identical": same,
                              "records_out": m["counts"]["output_records"]})


if __name__ == "__main__":
    main()
