"""Data and Ray for the training tests: a privatized customersim sample (the CRT recipe,
in-process), and small plain and ciphertext (key length 10) samples of squality_gutenberg."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import all_cpus_free

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


@pytest.fixture()
def train_ray(_train_ray_session):
    """Ray, with every CPU free (:func:`tests.conftest.all_cpus_free`)."""
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
