"""Issue 36 on a cluster of several nodes: Ray Train's workers meet through the actor store
(no store listens anywhere), and gloo binds to the node's own address, never to every
interface. ``ray.cluster_utils.Cluster`` starts a one-CPU head and a one-CPU node in a
separate process, so the two workers land on two nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.data]

SCRIPT = textwrap.dedent("""
    import json, sys
    import ray
    from ray.cluster_utils import Cluster

    out, data = sys.argv[1:]
    store = 150 * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    from tests.listeners import Listeners, ray_worker_wildcard_listeners
    from tests.train.test_train_ray import _cfg
    from train.config import parse_config
    from train.run import run_training

    cfg = parse_config(_cfg(kind="dp", data={"path": data}, dp={"noise_multiplier": 1.0}, optim={"max_steps": 3},
                            workers={"num_workers": 2}, output=out))
    with Listeners(cluster.address) as seen:
        s = run_training(cfg, progress=False)
    print(json.dumps({"ranks": s["workers"]["ranks"], "digests": s["workers"]["final_param_digests"],
                      "workers": len(seen.seen_workers), "wildcard": seen.wildcard,
                      "ray_wildcard": ray_worker_wildcard_listeners(ray),
                      "beyond_loopback": sorted(ip for ip, _ in seen.beyond_loopback),
                      "node_ips": sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}),
                      "nodes": len([n for n in ray.nodes() if n["Alive"]])}))
    ray.shutdown()
    cluster.shutdown()
""")


def test_workers_on_two_nodes_meet_through_the_actor_store_and_bind_to_the_node_address(stories, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "run"), str(stories["plain"])], env=env,
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["nodes"] == 2 and got["ranks"] == [0, 1] and len(got["digests"]) == 1 and got["workers"] == 2
    lines = [json.loads(x) for x in (tmp_path / "run" / "workers.jsonl").read_text().splitlines()]
    assert len({w["node"] for w in lines}) == 2  # one worker on each node
    assert all(w["rendezvous"]["store"] == "ActorStore" and w["rendezvous"]["gloo_ifname"] for w in lines), lines
    # gloo listens at the node's address only; no wildcard listener beside Ray's own
    assert got["beyond_loopback"] and set(got["beyond_loopback"]) <= set(got["node_ips"]), got
    assert got["wildcard"] <= got["ray_wildcard"], got


def test_the_actor_store_keeps_c10d_store_semantics(train_ray):
    """What gloo's and NCCL's bootstrap rely on, checked by hand: ``get`` blocks until
    another client sets the key, ``add`` counts from 0, ``compare_set`` swaps only on a
    match (an absent key matching b""), ``wait`` on a key nobody sets fails after its
    timeout, and a torch ``PrefixStore`` over it works as over torch's own stores."""
    import threading
    import time
    from datetime import timedelta

    import torch.distributed as dist

    from train.rendezvous import ActorStore, _StoreActor

    actor = _StoreActor.remote()
    a, b = ActorStore(actor, 30), ActorStore(actor, 30)
    threading.Timer(0.3, lambda: b.set("k", b"v")).start()
    t0 = time.monotonic()
    assert a.get("k") == b"v" and time.monotonic() - t0 >= 0.25
    assert a.add("n", 2) == 2 and b.add("n", 3) == 5 and a.get("n") == b"5"
    assert a.compare_set("c", b"", b"x") == b"x"  # absent, expected empty: set
    assert a.compare_set("c", b"y", b"z") == b"x" and a.get("c") == b"x"  # no match: unchanged
    assert a.compare_set("c", b"x", b"z") == b"z" and a.check(["c", "k"]) and not a.check(["nope"])
    t0 = time.monotonic()
    with pytest.raises(dist.DistStoreError, match="not set within 0.5 s"):
        a.wait(["nope"], timedelta(seconds=0.5))
    assert 0.4 < time.monotonic() - t0 < 10
    p = dist.PrefixStore("run", a)
    p.set("x", "1")
    assert b.get("run/x") == b"1" and p.get("x") == b"1" and a.num_keys() == 4
    assert a.delete_key("run/x") and not a.check(["run/x"])
