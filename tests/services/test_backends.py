"""What differs between the service's two back ends, tested on both (issue 49, part 1): the
end-to-end tests run on one (``tests/services/conftest.py``: PostgreSQL + S3 in CI), so

* the storage contract: the same calls of ``services.storage.Storage`` on local files and on
  an S3 bucket give the same answers (bytes, chunks, tails, listings, sizes, deletions, the
  refusal of a path leaving the root);
* one upload-to-download flow on the other back end (SQLite + local files in CI): a corpus
  uploaded, privatized with an enciphering stage, its shards downloaded and checked against
  the manifest and the corpus.

The migrations run on both databases in ``test_db``."""

from __future__ import annotations

import gzip
import json
import os
import secrets
from pathlib import Path

import pytest

from tests.services.conftest import need_pg_s3


def _s3_storage(monkeypatch):
    import pyarrow.fs as pafs

    from services.storage import Storage

    need_pg_s3()
    endpoint = os.environ["PRIVATIZE_TEST_S3_ENDPOINT"]
    scheme, _, host = endpoint.partition("://")
    bucket = f"privatize-contract-{secrets.token_hex(4)}"
    env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
           "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
           "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"), "AWS_EC2_METADATA_DISABLED": "true"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pafs.S3FileSystem(access_key=env["AWS_ACCESS_KEY_ID"], secret_key=env["AWS_SECRET_ACCESS_KEY"],
                      region=env["AWS_DEFAULT_REGION"], scheme=scheme, endpoint_override=host,
                      allow_bucket_creation=True).create_dir(bucket)
    return Storage(f"s3://{bucket}/root")


def _contract(st, tmp: Path) -> dict:
    """The same calls on one storage; what they answered."""
    out: dict = {}
    st.write_bytes("a/b/one.txt", b"hello world\n" * 1000)
    st.write_bytes("a/b/two.bin", bytes(range(256)), private=True)
    st.write_stream("a/c/streamed.txt", iter([b"x" * 70_000, b"y" * 10]))
    local = tmp / "put.txt"
    local.write_bytes(b"put me")
    st.put_file(local, "a/put.txt")
    out["read"] = st.read_bytes("a/b/two.bin") == bytes(range(256))
    # a name that looks compressed is stored and read byte for byte (pyarrow's streams would
    # otherwise gzip or gunzip by the extension: a model's .tar.gz came back a plain tar)
    packed = gzip.compress(b"a model archive " * 100)
    st.write_bytes("a/z/model.tar.gz", packed)
    st.write_stream("a/z/streamed.gz", iter([packed]))
    (tmp / "put.gz").write_bytes(b"not gzip at all")
    st.put_file(tmp / "put.gz", "a/z/put.gz")
    out["gz"] = (st.read_bytes("a/z/model.tar.gz") == packed, b"".join(st.open_chunks("a/z/streamed.gz")) == packed,
                 st.read_bytes("a/z/put.gz"), st.size("a/z/model.tar.gz") == len(packed))
    st.delete_tree("a/z")
    out["chunks"] = b"".join(st.open_chunks("a/c/streamed.txt", chunk=4096)) == b"x" * 70_000 + b"y" * 10
    out["tail"] = st.read_tail("a/b/one.txt", 24)
    out["list"] = sorted(st.list_files("a/b"))
    out["exists"] = (st.exists("a/put.txt"), st.exists("a/none.txt"))
    out["size"] = (st.size("a/b/one.txt"), st.size("a/none.txt"))
    out["tree"] = st.tree_bytes("a")
    out["children"] = st.delete_children("a", "b")
    st.delete_file("a/put.txt")
    st.delete_file("a/none.txt")  # quietly
    st.delete_tree("a/c")
    out["after"] = (st.exists("a/put.txt"), st.exists("a/c/streamed.txt"), st.tree_bytes("a"))
    with pytest.raises(ValueError):
        st.read_bytes("../outside")
    return out


def test_the_storage_contract_holds_on_local_files_and_s3(tmp_path, monkeypatch):
    from services.storage import Storage

    local = _contract(Storage(str(tmp_path / "root")), tmp_path)
    s3 = _contract(_s3_storage(monkeypatch), tmp_path)
    assert local == s3
    assert local["tail"] == b"hello world\nhello world\n" and local["list"] == [("one.txt", 12_000), ("two.bin", 256)]
    assert local["size"] == (12_000, None) and local["tree"] == 12_000 + 256 + 70_010 + 6
    assert local["children"] == 1 and local["after"] == (False, False, 0)
    assert local["gz"] == (True, True, b"not gzip at all", True)


@pytest.mark.server
@pytest.mark.ray
@pytest.mark.slow
def test_upload_privatize_download_on_the_other_back_end(other_service, corpus_file, tmp_path):
    from privatize.ciphers.vigenere import Vigenere
    from privatize.keys import key_from_json
    from privatize.output import verify

    svc = other_service
    t = svc.new_tenant("other-backend")
    corpus = t.upload(corpus_file).json()
    assert corpus["records"] == 120
    key = t.http.post("/v1/keys", json={"kind": "vigenere", "length": 20, "alphabet": "letters52"}).json()
    spec = {"version": 1, "stages": [{"kind": "encrypt_text", "key": key["ref"]}], "output": {"num_shards": 2}}
    r = t.http.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": spec})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"], timeout=300)
    assert job["status"] == "succeeded", (job["message"], t.http.get(f"/v1/jobs/{job['id']}/logs").text[-3000:])
    dest = tmp_path / "out"
    dest.mkdir()
    manifest = t.http.get(f"/v1/jobs/{job['id']}/results/manifest.json").json()
    (dest / "manifest.json").write_text(json.dumps(manifest))
    for s in manifest["shards"]:
        got = t.http.get(f"/v1/jobs/{job['id']}/results/{s['file']}")
        assert got.status_code == 200
        (dest / s["file"]).parent.mkdir(parents=True, exist_ok=True)
        (dest / s["file"]).write_bytes(got.content)
    assert verify(dest) == [] and manifest["counts"]["output_records"] == 120
    import pyarrow.parquet as pq

    km = key_from_json(t.http.post(f"/v1/keys/{key['id']}/export").json(), "export")
    plain = {json.loads(x)["text"] for x in corpus_file.read_text().splitlines()}
    texts = [row["text"] for s in manifest["shards"] for row in pq.read_table(dest / s["file"]).to_pylist()]
    assert len(texts) == 120 and not plain & set(texts)
    assert {Vigenere.from_key(km).decrypt(x) for x in texts} == plain
