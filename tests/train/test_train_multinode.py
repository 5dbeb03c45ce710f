"""Issue 36's actor store: the rendezvous Ray Train's workers use on a cluster of several
nodes (no store listens anywhere). The two-node run itself, where the workers meet through
it and gloo binds to each node's own address, is
``tests/integration/test_ray_multinode.py``'s (one two-node cluster for the data and the
training)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


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
