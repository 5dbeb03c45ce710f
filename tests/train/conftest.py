"""Data and Ray for the training tests: a privatized customersim sample (the CRT recipe,
in-process), and small plain and ciphertext (key length 10) samples of squality_gutenberg."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def _train_ray_session():
    """The session's Ray (the integration suite's, when it ran first), else a local one
    with 2 CPUs: enough for two Ray Train workers."""
    import ray

    if not ray.is_initialized():
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        from privatize.ray import local_init_args

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, **local_init_args(2))
    return ray


def all_cpus_free(ray):
    """Ray, once every CPU is free: a Ray Train run starts only once what earlier tests ran
    has released its CPUs (up to 60 s), and the test fails naming the actors still holding
    them rather than waiting behind them."""
    import time

    total = ray.cluster_resources().get("CPU", 0)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    if ray.available_resources().get("CPU", 0) < total:
        from ray._private.state import actors  # the GCS's table: this cluster runs no dashboard

        alive = [f"{a['ActorClassName']} (pid {a['Pid']})" for a in actors().values() if a["State"] == "ALIVE"]
        pytest.fail(f"{ray.available_resources().get('CPU', 0):g} of {total:g} CPUs free after 60 s; "
                    f"alive actors: {', '.join(alive) or 'none'}")
    return ray


@pytest.fixture()
def train_ray(_train_ray_session):
    """Ray, with every CPU free (:func:`all_cpus_free`)."""
    return all_cpus_free(_train_ray_session)


def _privatize(spec: Path, corpus: Path, out: Path) -> Path:
    from privatize.api import run

    run(str(spec), str(corpus), str(out), runner="local", spec_dir=str(spec.parent))
    return out


@pytest.fixture(scope="session")
def crt_shards(shared_data, tmp_path_factory) -> Path:
    """The CRT recipe (split, redact with AES-SIV entity tokens, dedup, split_private) on
    100 customersim dialogues of 25 customers (``individual_id``, pseudonymised)."""
    from privatize.keys import new_key, write_key_file

    d = tmp_path_factory.mktemp("crt")
    (d / "keys").mkdir()
    write_key_file(new_key("aes-siv"), d / "keys" / "entity.key")
    write_key_file(new_key("hmac"), d / "keys" / "pseudonym.key")
    shutil.copy(ROOT / "privatize" / "specs" / "crt.yaml", d / "spec.yaml")
    with open(shared_data / "customersim" / "train.jsonl", encoding="utf-8") as fh, \
            open(d / "corpus.jsonl", "w", encoding="utf-8") as out:
        for i, line in enumerate(fh):
            r = json.loads(line)
            if r["kind"] != "canary":
                out.write(json.dumps({"doc_id": r["id"], "individual_id": f"customer-{i % 25}", "text": r["text"]})
                          + "\n")
            if i >= 110:
                break
    return _privatize(d / "spec.yaml", d / "corpus.jsonl", d / "out")


@pytest.fixture(scope="session")
def stories(shared_data, tmp_path_factory) -> dict:
    """Four squality stories as plaintext JSONL, and the same through the encrypt_text
    stage with a key of length 10 (Parquet shards)."""
    from privatize.keys import new_key, write_key_file

    d = tmp_path_factory.mktemp("stories")
    with open(shared_data / "squality_gutenberg" / "dev.jsonl", encoding="utf-8") as fh, \
            open(d / "plain.jsonl", "w", encoding="utf-8") as out:
        for i, line in zip(range(4), fh):
            out.write(json.dumps({"doc_id": f"s{i}", "text": json.loads(line)["document"][:20000]}) + "\n")
    (d / "keys").mkdir()
    write_key_file(new_key("vigenere", length=10), d / "keys" / "text.key")
    shutil.copy(ROOT / "privatize" / "specs" / "cipher.yaml", d / "spec.yaml")
    return {"plain": d / "plain.jsonl", "cipher": _privatize(d / "spec.yaml", d / "plain.jsonl", d / "cipher")}
