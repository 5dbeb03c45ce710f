"""Several Ray nodes, and one of them killed mid-run: the output is still byte-identical
to the in-process runner's. On two nodes, the CRT recipe with redaction and then a
two-worker DP training on its output (issue 36: the workers meet through the actor store
and gloo binds to each node's own address).

``ray.cluster_utils.Cluster`` starts a head and two worker nodes on this machine, in a
separate process (the suite's own Ray stays up). The stage probe (see ``conftest.py``)
records which node ran each stage call; a watcher kills whichever worker node (not the
head, where the driver reads the input) first shows stage work, while the run is in flight.
Every node has a warm worker process before the run, as on a long-lived cluster: a node
whose first worker starts late (3 nodes' processes share this machine's 2 cores) may
otherwise get its first stage task only near the end, or never.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import pytest

from privatize.keys import new_key, write_key_file
from privatize import run
from privatize.spec import parse_spec
from tests.conftest import ROOT
from tests.integration.conftest import ray_env
from tests.integration.test_ray_parity import CRT, doc_text

# the two-node fixture (a pipeline in process, then a subprocess of up to 480 s) runs in its
# first test's time
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

SCRIPT = textwrap.dedent("""
    import json, os, sys, threading, time
    from pathlib import Path
    import ray
    from ray.cluster_utils import Cluster
    from privatize import run
    from privatize.spec import parse_spec

    spec, corpus, out, spec_dir, probe, result = sys.argv[1:]
    store = 150 * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                            "include_dashboard": False,
                                                            # notice the dead node in about a second
                                                            "_system_config": {"health_check_period_ms": 300,
                                                                               "health_check_failure_threshold": 3}})
    workers = {n.node_id[:12]: n for n in (cluster.add_node(num_cpus=1, object_store_memory=store)
                                           for _ in range(2))}
    cluster.wait_for_nodes()
    ray.init(address=cluster.address,
             runtime_env={"worker_process_setup_hook": "tests.integration.conftest.install_probe"})

    @ray.remote(num_cpus=1)
    def warm():
        import privatize.ray.workers  # noqa: F401 - what a stage task imports first
        return ray.get_runtime_context().get_node_id()

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 3 and sorted(ray.get([warm.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote() for n in nodes])) == sorted(nodes)
    state = {"killed_at": None, "victim": None, "victim_work_seen": None}

    def watch():
        deadline = time.time() + 120
        while time.time() < deadline and state["killed_at"] is None:
            # work of the pipeline's own stages (after the read and the id check): the
            # victim then holds blocks that later steps need, so Ray must rebuild them
            seen = [p.name for p in Path(probe).iterdir()
                    if p.name.split("-")[1] in workers and "-_unique_ids." not in p.name]
            if seen:
                victim = sorted(seen)[0].split("-")[1]
                state["victim"] = victim
                state["victim_work_seen"] = sorted(n for n in seen if n.split("-")[1] == victim)
                cluster.remove_node(workers[victim], allow_graceful=False)
                state["killed_at"] = time.time()
                return
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.time()
    m = run(parse_spec(json.loads(spec)), corpus, out, runner="ray", spec_dir=spec_dir, batch_size=50,
            progress=False)
    done = time.time()
    nodes = sorted({p.name.split("-")[1] for p in Path(probe).iterdir()})
    # the GCS marks a killed node dead after its health checks fail (about a second):
    # give it that long when the run finished just after the kill
    for _ in range(100):
        alive = sum(1 for n in ray.nodes() if n["Alive"])
        if alive < 3:
            break
        time.sleep(0.1)
    Path(result).write_text(json.dumps({"started": t0, "finished": done, "killed_at": state["killed_at"],
                      "victim_work_seen": state["victim_work_seen"], "nodes_with_work": nodes,
                      "victim": state["victim"], "alive_nodes": alive, "shards": m["shards"], "counts": m["counts"]}))
    ray.shutdown()
    cluster.shutdown()
""")


def test_node_killed_mid_run_still_gives_identical_shards(tmp_path):
    keys = tmp_path / "keys"
    write_key_file(new_key("vigenere", length=40), keys / "text.key")
    write_key_file(new_key("hmac"), keys / "pseudo.key")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in range(3):
        with open(corpus / f"part{f}.jsonl", "w", encoding="utf-8") as fh:
            for k in range(f * 400, (f + 1) * 400):
                text = " ".join(doc_text(k + j) for j in range(6))
                fh.write(json.dumps({"id": f"doc{k}", "text": text, "individual_id": f"p{k % 50}"}) + "\n")
    spec = parse_spec(CRT)
    base = run(spec, corpus, tmp_path / "inproc", spec_dir=str(tmp_path))
    probe = tmp_path / "probe"
    probe.mkdir()
    out = tmp_path / "ray"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CRT), str(corpus), str(out), str(tmp_path),
                           str(probe), str(tmp_path / "result.json")], cwd=ROOT, env=ray_env(probe), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads((tmp_path / "result.json").read_text())
    # the kill landed: the victim had started stage work, was killed, and the run ended after
    assert got["victim_work_seen"], "no stage work reached the victim node before the run ended"
    assert got["killed_at"] is not None and got["started"] < got["killed_at"] < got["finished"]
    assert got["alive_nodes"] == 2
    assert len(got["nodes_with_work"]) >= 2
    assert got["counts"] == base["counts"]
    assert [s["sha256"] for s in got["shards"]] == [s["sha256"] for s in base["shards"]]
    for entry in base["shards"]:
        assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]


TWO_NODES = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import ray
    import ray.data
    from ray.cluster_utils import Cluster
    from privatize import run
    from privatize.spec import parse_spec

    spec, corpus, out, spec_dir, probe, result, train_out = sys.argv[1:]
    store = 150 * 1024 * 1024
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": store,
                                                            "include_dashboard": False})
    cluster.add_node(num_cpus=1, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address,
             runtime_env={"worker_process_setup_hook": "tests.integration.conftest.install_probe"})
    # every redaction actor loads its detector before the first block is handed out, as on
    # a long-lived cluster: on a loaded machine the second node's actor may otherwise come
    # up after the first has taken every block of this small input
    ray.data.DataContext.get_current().wait_for_min_actors_s = 120
    t0 = time.time()
    # a plan that cannot be scheduled fails within the stall timeout instead of waiting forever
    m = run(parse_spec(json.loads(spec)), corpus, out, runner="ray", spec_dir=spec_dir, batch_size=16,
            progress=False, stall_timeout_s=90)
    got = {"seconds": time.time() - t0, "shards": m["shards"], "counts": m["counts"], "stages": m["stages"]}

    # then a DP training on that output, two Ray Train workers, one a node (a new driver
    # job on the same cluster: its workers without the stage probe)
    ray.shutdown()
    ray.init(address=cluster.address)
    from tests.listeners import Listeners, ray_worker_wildcard_listeners
    from tests.train.test_train_ray import _cfg
    from train.config import parse_config
    from train.run import run_training

    cfg = parse_config(_cfg(kind="dp", data={"path": out}, dp={"noise_multiplier": 1.0}, optim={"max_steps": 3},
                            workers={"num_workers": 2}, output=train_out))
    with Listeners(cluster.address) as seen:
        s = run_training(cfg, progress=False)
    got["training"] = {"ranks": s["workers"]["ranks"], "digests": s["workers"]["final_param_digests"],
                       "workers": len(seen.seen_workers), "wildcard": seen.wildcard,
                       "ray_wildcard": ray_worker_wildcard_listeners(ray),
                       "beyond_loopback": sorted(ip for ip, _ in seen.beyond_loopback),
                       "node_ips": sorted({n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]}),
                       "nodes": len([n for n in ray.nodes() if n["Alive"]])}
    Path(result).write_text(json.dumps(got))
    ray.shutdown()
    cluster.shutdown()
""")

CRT_REDACT = {"stages": [{"kind": "split"}, {"kind": "dedup", "min_length": 20}, {"kind": "redact"},
                         {"kind": "split_private"}, {"kind": "encrypt_text", "key": "file:keys/text.key"}],
              "output": {"num_shards": 4}}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """Two one-CPU nodes (a head and a worker, separate raylets) in a separate process: the
    CRT recipe with redaction on about 150 KB of dialogues, then a two-worker DP training
    on its output. The work folder, the in-process run's manifest and what the process
    wrote."""
    tmp = tmp_path_factory.mktemp("two-nodes")
    write_key_file(new_key("vigenere", length=40), tmp / "keys" / "text.key")
    corpus = tmp / "dialogues.jsonl"
    names = ["Alice Johnson", "Bruno Diaz", "Chen Wei", "Dana Smith", "Emeka Obi"]
    with open(corpus, "w", encoding="utf-8") as fh:  # one file of about 150 KB
        for k in range(500):
            text = (f"Hello, this is {names[k % 5]} calling about booking {k}. "
                    f"Please call me back on 020 7946 {k % 10000:04d} or write to user{k}@example.com. "
                    f"{doc_text(k)} Thank you for your help with the reservation today.")
            fh.write(json.dumps({"id": f"d{k}", "text": text}) + "\n")
    base = run(parse_spec(CRT_REDACT), corpus, tmp / "inproc", spec_dir=str(tmp))
    probe = tmp / "probe"
    probe.mkdir()
    proc = subprocess.run([sys.executable, "-c", TWO_NODES, json.dumps(CRT_REDACT), str(corpus), str(tmp / "ray"),
                           str(tmp), str(probe), str(tmp / "result.json"), str(tmp / "train")], cwd=ROOT,
                          env=ray_env(probe), capture_output=True, text=True, timeout=480)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return tmp, base, json.loads((tmp / "result.json").read_text())


@pytest.mark.presidio
def test_crt_recipe_with_redaction_on_two_one_cpu_nodes(two_nodes):
    """Two one-CPU nodes: budgeted on cluster totals, each node's redaction actor left 0.25
    CPU beside it and the 0.5-CPU tasks waited forever. Budgeted per node it finishes,
    byte-identical to the in-process runner, and the one input file is cut so that both
    nodes' redaction actors get work."""
    tmp_path, base, got = two_nodes
    out, probe = tmp_path / "ray", tmp_path / "probe"
    assert got["counts"] == base["counts"]
    assert [s["sha256"] for s in got["shards"]] == [s["sha256"] for s in base["shards"]]
    for entry in base["shards"]:
        assert hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
    assert got["stages"][2]["kind"] == "redact" and got["stages"][2]["stats"] == base["stages"][2]["stats"]
    assert got["stages"][2]["records_out"] == base["stages"][2]["records_out"] > 0
    # redaction ran on both nodes (probe files are named <pid>-<node>-<stage.method>)
    redact_nodes = {p.name.split("-")[1] for p in probe.iterdir() if "redact.process_batch" in p.name}
    assert len(redact_nodes) == 2, sorted(p.name for p in probe.iterdir())


@pytest.mark.presidio
def test_training_workers_on_two_nodes_meet_through_the_actor_store_and_bind_to_the_node_address(two_nodes):
    """Issue 36 on a cluster of several nodes (the DP training on the two-node output):
    Ray Train's workers meet through the actor store (no store listens anywhere), one on
    each node, and gloo binds to the node's own address, never to every interface."""
    tmp_path, _, got = two_nodes
    got = got["training"]
    assert got["nodes"] == 2 and got["ranks"] == [0, 1] and len(got["digests"]) == 1 and got["workers"] == 2
    lines = [json.loads(x) for x in (tmp_path / "train" / "workers.jsonl").read_text().splitlines()]
    assert len({w["node"] for w in lines}) == 2  # one worker on each node
    assert all(w["rendezvous"]["store"] == "ActorStore" and w["rendezvous"]["gloo_ifname"] for w in lines), lines
    # gloo listens at the node's address only; no wildcard listener beside Ray's own
    assert got["beyond_loopback"] and set(got["beyond_loopback"]) <= set(got["node_ips"]), got
    assert got["wildcard"] <= got["ray_wildcard"], got
