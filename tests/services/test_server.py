"""The service end to end: a real uvicorn process, a real embedded Ray head, on both back
ends (SQLite + local files, PostgreSQL + S3; see conftest).

What must hold: upload -> job -> download; another tenant's ids answer 404 everywhere; a
bad spec answers 422 with the field path; an upload cut off midway leaves nothing;
deleting a corpus deletes its outputs; a service killed with SIGKILL while a job runs
finds the job again after a restart, and the job runs once; key material shows up in
no database column, log line, Ray job metadata or API response but the export.
"""

from __future__ import annotations

import base64
import json
import hashlib
import socket
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privatize.ciphers.entity import EntityCipher
from privatize.ciphers.vigenere import Vigenere
from privatize.keys import key_from_json
from privatize.output import verify
from tests.secrets_scan import leaks, scan_tree
from tests.services.conftest import crt_spec

pytestmark = [pytest.mark.server, pytest.mark.ray, pytest.mark.slow]


def _corpus_docs(path: Path) -> dict[str, str]:
    return {json.loads(line)["id"]: json.loads(line)["text"] for line in path.read_text().splitlines()}


# ---- upload -> job -> download ---------------------------------------------------------

def test_upload_job_download(crt_run, acme, corpus_file):
    corpus, job, dest = crt_run["corpus"], crt_run["job"], crt_run["dest"]
    docs = _corpus_docs(corpus_file)
    assert corpus["records"] == len(docs) == 120
    assert corpus["bytes"] == corpus_file.stat().st_size
    assert job["progress"]["input_records"] == 120
    assert job["submit_attempts"] == 1
    # what was downloaded is intact: every shard matches the manifest's SHA-256 and counts
    assert verify(dest) == []
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["counts"]["output_records"] == job["progress"]["output_records"] > 120  # sentences
    assert {f["name"] for f in crt_run["listing"]["files"]} == \
        {"manifest.json", *(s["file"] for s in manifest["shards"])}
    assert manifest["key_ids"]["stages.3.key"] == crt_run["keys"]["text"]["id"]
    # the text is enciphered; decrypting with the exported key gives back sentences of the
    # uploaded documents (the oracle: the corpus file itself)
    km = key_from_json(acme.http.post(f"/v1/keys/{crt_run['keys']['text']['id']}/export").json(), "export")
    table = pa.concat_tables([pq.read_table(dest / s["file"]) for s in manifest["shards"]])
    rows = table.slice(0, 50).to_pylist()
    cipher = Vigenere.from_key(km)
    checked = 0
    for row in rows:
        parent = row["doc_id"].split("#")[0]
        plain = cipher.decrypt(row["text"])
        if "<MASK>" in plain:  # a duplicate, masked by dedup (the cipher copies the token)
            continue
        assert row["text"] != plain
        assert plain in docs[parent], row["doc_id"]
        checked += 1
    assert checked > 10
    # the service's decrypt endpoint agrees with the local decryption
    r = acme.http.post("/v1/decrypt", json={"key": crt_run["keys"]["text"]["ref"], "text": rows[0]["text"]})
    assert r.status_code == 200 and r.json()["text"] == cipher.decrypt(rows[0]["text"])
    # individual_id is a keyed pseudonym, never the raw value
    assert not set(table["individual_id"].to_pylist()) & {json.loads(x)["individual_id"]
                                                          for x in corpus_file.read_text().splitlines()}


def test_quarantine_is_never_served(crt_run, acme):
    jid = crt_run["job"]["id"]
    for name in ("../output.quarantine.jsonl", "output.quarantine.jsonl", "../spec.json", "../keys.json",
                 "shards/../../output.quarantine.jsonl", "shards/nope.parquet"):
        assert acme.http.get(f"/v1/jobs/{jid}/results/{name}").status_code == 404, name


def test_decrypt_entity_tokens(crt_run, acme):
    key = crt_run["keys"]["siv"]
    km = key_from_json(acme.http.post(f"/v1/keys/{key['id']}/export").json(), "export")
    text = "Please call Alice Smith on 555-0100."
    enc = EntityCipher(km).encrypt_spans(text, [{"start": 12, "end": 23, "entity_type": "PERSON"},
                                                {"start": 27, "end": 35, "entity_type": "PHONE_NUMBER"}])
    assert "Alice" not in enc
    r = acme.http.post("/v1/decrypt", json={"key": key["ref"], "text": enc})
    assert r.status_code == 200, r.text
    assert r.json()["text"] == text
    assert r.json()["report"]["ok"] == 2 and r.json()["report"]["invalid"] == 0
    # a token moved to another entity type fails authentication and is left as it was
    moved = enc.replace("Person_[", "Location_[")
    r = acme.http.post("/v1/decrypt", json={"key": key["ref"], "text": moved})
    assert r.json()["report"]["invalid"] == 1 and "Location_[" in r.json()["text"]


# ---- tenancy ------------------------------------------------------------------------------

def test_cross_tenant_access_answers_404(service, crt_run, acme):
    other = service.new_tenant("umbrella")
    cid, jid = crt_run["corpus"]["id"], crt_run["job"]["id"]
    kid = crt_run["keys"]["siv"]["id"]
    shard = crt_run["listing"]["files"][1]["name"]
    calls = [
        ("GET", f"/v1/corpora/{cid}", None), ("DELETE", f"/v1/corpora/{cid}", None),
        ("GET", f"/v1/keys/{kid}", None), ("POST", f"/v1/keys/{kid}/disable", None),
        ("POST", f"/v1/keys/{kid}/enable", None), ("POST", f"/v1/keys/{kid}/export", None),
        ("DELETE", f"/v1/keys/{kid}", None),
        ("POST", "/v1/decrypt", {"key": f"keystore:{kid}", "text": "x"}),
        ("GET", f"/v1/jobs/{jid}", None), ("GET", f"/v1/jobs/{jid}/logs", None),
        ("GET", f"/v1/jobs/{jid}/results", None), ("GET", f"/v1/jobs/{jid}/results/manifest.json", None),
        ("GET", f"/v1/jobs/{jid}/results/{shard}", None), ("POST", f"/v1/jobs/{jid}/cancel", None),
        ("DELETE", f"/v1/jobs/{jid}", None),
        ("POST", "/v1/jobs", {"corpus_id": cid, "spec": crt_spec("keystore:whatever")}),
    ]
    for method, path, body in calls:
        r = other.http.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.status_code, r.text)
        # and exactly what a nonexistent id answers
        ghost = path.replace(cid, "0" * 16).replace(jid, "0" * 16).replace(kid, "0" * 16)
        body2 = json.loads(json.dumps(body).replace(cid, "0" * 16).replace(kid, "0" * 16)) if body else None
        r2 = other.http.request(method, ghost, json=body2)
        assert r2.status_code == 404 and r2.json()["code"] == r.json()["code"]
    # naming another tenant's key in a spec: the same 422 as a key that does not exist
    own = other.upload(crt_run["dest"] / "manifest.json", filename="m.txt").json()
    r = other.http.post("/v1/jobs", json={"corpus_id": own["id"], "spec": crt_spec(f"keystore:{kid}")})
    ghost = other.http.post("/v1/jobs", json={"corpus_id": own["id"], "spec": crt_spec("keystore:" + "0" * 16)})
    assert r.status_code == ghost.status_code == 422
    assert r.json()["errors"][0]["path"] == "stages.3.key"
    assert r.json()["detail"].replace(kid, "X") == ghost.json()["detail"].replace("0" * 16, "X")
    # lists show only one's own
    assert [c["id"] for c in other.http.get("/v1/corpora").json()] == [own["id"]]
    assert other.http.get("/v1/keys").json() == [] and other.http.get("/v1/jobs").json() == []
    # and nothing of acme's changed
    assert acme.http.get(f"/v1/corpora/{cid}").status_code == 200
    assert acme.http.get(f"/v1/keys/{kid}").json()["status"] == "enabled"
    assert acme.http.get(f"/v1/jobs/{jid}").json()["status"] == "succeeded"


def test_unauthenticated_and_revoked_tokens(service):
    t = service.new_tenant("rotator")
    assert t.http.get("/v1/corpora", headers={"Authorization": ""}).status_code == 401
    assert t.http.get("/v1/corpora", headers={"Authorization": "Bearer pvt_nope"}).status_code == 401
    assert t.http.get("/v1/corpora").status_code == 200
    rot = json.loads(service.cli("admin", "token", "rotate", t.name).stdout.strip().splitlines()[-1])
    assert t.http.get("/v1/corpora").status_code == 401  # the old token is revoked
    t.http.headers["Authorization"] = f"Bearer {rot['token']}"
    assert t.http.get("/v1/corpora").status_code == 200
    service.cli("admin", "token", "revoke", t.name)
    assert t.http.get("/v1/corpora").status_code == 401
    # only the hash is stored
    stored = json.dumps([list(map(str, r)) for r in service.query("select * from api_tokens")])
    assert rot["token"] not in stored and t.token not in stored
    assert hashlib.sha256(rot["token"].encode()).hexdigest() in stored


def test_limits(service, corpus_file):
    busy = service.new_tenant("nojobs", "--max-jobs", "0")
    c = busy.upload(corpus_file).json()
    k = busy.http.post("/v1/keys", json={"kind": "vigenere"}).json()
    r = busy.http.post("/v1/jobs", json={"corpus_id": c["id"], "spec": crt_spec(k["ref"])})
    assert r.status_code == 429 and "limit is 0" in r.json()["detail"]
    small = service.new_tenant("tiny", "--storage-limit", "1000")
    r = small.upload(corpus_file)
    assert r.status_code == 413 and "storage limit" in r.json()["detail"]

    def chunks():  # no Content-Length: the limit is enforced while streaming
        data = corpus_file.read_bytes()
        for i in range(0, len(data), 4096):
            yield data[i:i + 4096]

    r = small.http.post("/v1/corpora", params={"format": "jsonl"}, content=chunks())
    assert r.status_code == 413
    assert small.http.get("/v1/corpora").json() == []
    assert not [p for p in service.files.list(f"tenants/{small.id}") if p.endswith(".jsonl")]
    assert small.http.get("/v1/tenant").json()["storage_used_bytes"] == 0


# ---- specs ----------------------------------------------------------------------------------

def test_bad_spec_answers_422_with_the_field_path(crt_run, acme):
    cid = crt_run["corpus"]["id"]
    ref = crt_run["keys"]["text"]["ref"]
    cases = [
        ({"stages": [{"kind": "split"}, {"kind": "dedup", "method": "md5"}]}, "stages.1.dedup.method"),
        ({"stages": [{"kind": "split", "unit": "sentence", "colour": 1}]}, "stages.0.split.colour"),
        ({"stages": [{"kind": "encrypt_text", "key": ref}, {"kind": "split"}, {"kind": "dedup"}]}, "stages.1"),
        ({"stages": [{"kind": "split"}], "output": {"num_shards": 0}}, "output.num_shards"),
        ({"stages": []}, "stages"),
        (crt_spec("file:/etc/passwd"), "stages.3.key"),
        (crt_spec(ref, "file:keys/p.key"), "output.pseudonym_key"),
        ({**crt_spec(ref), "input": {"format": "parquet"}}, "input.format"),
    ]
    for spec, path in cases:
        r = acme.http.post("/v1/jobs", json={"corpus_id": cid, "spec": spec})
        assert r.status_code == 422, (spec, r.text)
        body = r.json()
        assert path in [e["path"] for e in body["errors"]], (path, body)
        assert body["detail"].startswith(path) or f"; {path}" in body["detail"] or path in body["detail"]
    assert [j["id"] for j in acme.http.get("/v1/jobs").json()] == [crt_run["job"]["id"]]  # none was created


def test_disabled_and_destroyed_keys(service, acme, crt_run):
    cid = crt_run["corpus"]["id"]
    k = acme.http.post("/v1/keys", json={"kind": "vigenere", "length": 64}).json()
    assert acme.http.post(f"/v1/keys/{k['id']}/disable").json()["status"] == "disabled"
    r = acme.http.post("/v1/jobs", json={"corpus_id": cid, "spec": crt_spec(k["ref"])})
    assert r.status_code == 422 and r.json()["errors"][0]["message"] == f"key {k['id']} is disabled"
    assert acme.http.post("/v1/decrypt", json={"key": k["ref"], "text": "abc"}).status_code == 409
    assert acme.http.post(f"/v1/keys/{k['id']}/enable").json()["status"] == "enabled"
    # destroy: crypto-shredding
    sql = "select wrapped_dek, material_ct from keys where id = :id"
    dek, ct = (bytes(v) for v in service.query(sql, id=k["id"])[0])
    assert dek and ct
    r = acme.http.delete(f"/v1/keys/{k['id']}")
    assert r.status_code == 200 and r.json()["status"] == "destroyed"
    assert service.query(sql, id=k["id"]) == [(None, None)]
    if service.sqlite:
        for f in service.data.glob("privatize.db*"):  # the file and its WAL: no old page holds the blobs
            blob = f.read_bytes()
            assert dek[12:40] not in blob and ct[12:40] not in blob, f
    assert acme.http.post(f"/v1/keys/{k['id']}/export").status_code == 409
    assert acme.http.post("/v1/decrypt", json={"key": k["ref"], "text": "abc"}).status_code == 409
    r = acme.http.post("/v1/jobs", json={"corpus_id": cid, "spec": crt_spec(k["ref"])})
    assert r.status_code == 422 and "destroyed" in r.json()["detail"]
    assert acme.http.post("/v1/keys", json={"kind": "aes-ecb"}).status_code == 422


# ---- uploads --------------------------------------------------------------------------------

def test_upload_validation_names_problem_and_line(service, tmp_path):
    t = service.new_tenant("uploader")
    cases = {
        "bad_json.jsonl": (b'{"text": "a"}\n{"text": "b"}\n{"text": "c",\n', 422, "line 3: invalid JSON"),
        "no_text.jsonl": (b'{"text": "a"}\n\n{"body": "b"}\n', 422, "line 3: no text field"),
        "latin1.jsonl": (b'{"text": "a"}\n{"text": "caf\xe9"}\n', 422, "line 2: line is not UTF-8"),
        "latin1.txt": (b"fine\nstill fine\ncaf\xe9\n", 422, "line 3: not UTF-8"),
        "empty.jsonl": (b"", 422, "file is empty"),
        "blank.txt": (b"  \n\n", 422, "file is empty"),
        "data.csv": (b"a,b\n", 415, "format"),
    }
    for name, (data, status, msg) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        r = t.upload(p)
        assert r.status_code == status, (name, r.text)
        assert msg in r.json()["detail"], (name, r.json())
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "nocol.parquet")
    r = t.upload(tmp_path / "nocol.parquet")
    assert r.status_code == 422 and "no 'text' column" in r.json()["detail"]
    pq.write_table(pa.table({"text": ["one", "two", None]}), tmp_path / "nulls.parquet")
    r = t.upload(tmp_path / "nulls.parquet")
    assert r.status_code == 422 and r.json()["detail"].startswith("row 3: ")
    assert t.http.get("/v1/corpora").json() == []
    # good ones, in each format
    pq.write_table(pa.table({"text": ["one", "two"], "id": ["a", "b"]}), tmp_path / "ok.parquet")
    (tmp_path / "ok.txt").write_text("first line\n\nsecond line\n")
    for name, fmt, records in (("ok.parquet", "parquet", 2), ("ok.txt", "text", 2)):
        r = t.upload(tmp_path / name)
        assert r.status_code == 201, r.text
        assert (r.json()["format"], r.json()["records"]) == (fmt, records)
    assert not service.spooled()


def _local_port(r) -> int:
    """The client-side port of the connection a response came on: the same port on two
    responses means the keep-alive connection was reused, not dropped."""
    return r.extensions["network_stream"].get_extra_info("client_addr")[1]


def _assert_nothing_stored(service, t) -> None:
    assert t.http.get("/v1/corpora").json() == []
    assert service.query("select count(*) from corpora where tenant_id = :t", t=t.id) == [(0,)]
    assert service.files.list(f"tenants/{t.id}") == []
    assert not service.spooled()


def test_hostile_uploads_answer_422_naming_the_line_and_keep_the_connection(service):
    """issue 23, items 1, 2 and 7: a lone surrogate (was a 500 from Arrow and a dropped
    connection), 3,000 nested arrays (was a 500: RecursionError), NaN/Infinity (was
    accepted). Each is a 422 naming the line; nothing is stored; the same connection
    answers the next request."""
    t = service.new_tenant("hostile")
    good = b'{"text": "a fine line"}\n'
    cases = [
        (b'{"text":"\\ud800"}\n', "line 1: not a JSONL file (invalid JSON: string holds a lone surrogate (\\ud800)"),
        (good + b'{"text":"\\ud800"}\n', "line 2: invalid JSON: string holds a lone surrogate (\\ud800)"),
        (good + b'{"text": "a", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}\n", "line 2: invalid JSON: nested deeper"),
        (good + good + b'{"text":"a","x":NaN}\n', "line 3: invalid JSON: NaN is not JSON"),
        (good + b'{"text":"a","x":[Infinity, -Infinity]}\n', "line 2: invalid JSON: Infinity is not JSON"),
        (good + b'{"text":"a","x":1e999}\n', "line 2: invalid JSON: a number is out of range"),
    ]
    first = t.http.get("/v1/tenant")
    assert first.status_code == 200
    port = _local_port(first)
    for data, msg in cases:
        r = t.http.post("/v1/corpora", params={"format": "jsonl"}, content=data,
                        headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 422, (data[:60], r.status_code, r.text[:300])
        body = r.json()
        assert body["code"] == "invalid_corpus" and body["detail"].startswith(msg), (msg, body)
        assert r.headers.get("connection") != "close"
        nxt = t.http.get("/v1/corpora")
        assert nxt.status_code == 200 and nxt.json() == []
        assert _local_port(r) == _local_port(nxt) == port, "the keep-alive connection was dropped"
    _assert_nothing_stored(service, t)
    assert "Traceback" not in service.log_text() and "UnicodeEncodeError" not in service.log_text()


def test_audit_cursor_past_64_bits_answers_422_naming_the_parameter(service):
    """issue 23, item 3: ``before`` past a signed 64-bit integer was a 500 from SQLite."""
    t = service.new_tenant("cursor")
    port = None
    for before in ("9223372036854775808", str(10**30), "0", "-1", "1e3"):
        r = t.http.get("/v1/audit", params={"before": before})
        assert r.status_code == 422, (before, r.text)
        assert [e["loc"] for e in r.json()["detail"]] == [["query", "before"]] and r.json()["detail"][0]["msg"]
        port = port or _local_port(r)
        assert _local_port(r) == port
    r = t.http.get("/v1/audit", params={"before": str(2**63 - 1)})
    assert r.status_code == 200 and r.json()["next_before"] is None and _local_port(r) == port


def test_a_key_of_the_wrong_kind_answers_422_at_job_creation(service, corpus_file):
    """issue 23, item 4: an aes-siv key for encrypt_text was accepted (201) and the job
    failed on the worker. The kind a field takes is what its stage's settings declare."""
    t = service.new_tenant("kinds")
    cid = t.upload(corpus_file).json()["id"]
    k = {kind: t.http.post("/v1/keys", json={"kind": kind}).json() for kind in ("vigenere", "aes-siv", "hmac")}
    redact = {"stages": [{"kind": "split"}, {"kind": "redact", "operator": "encrypt", "key": k["vigenere"]["ref"]}]}
    cases = [(crt_spec(k["aes-siv"]["ref"]), "stages.3.key", "aes-siv", "vigenere"),
             (crt_spec(k["hmac"]["ref"]), "stages.3.key", "hmac", "vigenere"),
             (crt_spec(k["vigenere"]["ref"], k["aes-siv"]["ref"]), "output.pseudonym_key", "aes-siv", "hmac"),
             (redact, "stages.1.key", "vigenere", "aes-siv or aes-ecb")]
    for spec, path, kind, takes in cases:
        r = t.http.post("/v1/jobs", json={"corpus_id": cid, "spec": spec})
        assert r.status_code == 422, (path, r.text)
        (err,) = r.json()["errors"]
        assert err["path"] == path and err["message"] == \
            f"key {k[kind]['id']} is a {kind} key; this field takes {takes} keys"
        assert r.json()["detail"].startswith(f"{path}: ")
    assert t.http.get("/v1/jobs").json() == []
    assert service.query("select count(*) from jobs where tenant_id = :t", t=t.id) == [(0,)]


def test_interrupted_upload_leaves_nothing(service):
    t = service.new_tenant("cutoff")
    body = b'{"text": "a sentence that is long enough to matter here."}\n' * 40000  # ~2.3 MB
    declared = len(body) * 4
    with socket.create_connection(("127.0.0.1", service.port)) as s:
        s.sendall((f"POST /v1/corpora?format=jsonl&name=cut HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                   f"Authorization: Bearer {t.token}\r\nContent-Type: application/octet-stream\r\n"
                   f"Content-Length: {declared}\r\n\r\n").encode())
        s.sendall(body)
        time.sleep(0.5)  # the server has the partial file in its spool now
        assert service.spooled(), "the upload never reached the spool"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and service.spooled():
        time.sleep(0.1)
    assert not service.spooled()
    assert t.http.get("/v1/corpora").json() == []
    assert service.files.list(f"tenants/{t.id}/corpora") == []
    assert t.http.get("/v1/tenant").json()["storage_used_bytes"] == 0


# ---- deletion -------------------------------------------------------------------------------

def test_deleting_a_corpus_deletes_its_outputs(service, corpus_file):
    t = service.new_tenant("deleter")
    c = t.upload(corpus_file).json()
    k = t.http.post("/v1/keys", json={"kind": "vigenere"}).json()
    job = t.wait(t.http.post("/v1/jobs", json={"corpus_id": c["id"], "spec": crt_spec(k["ref"])}).json()["id"])
    assert job["status"] == "succeeded", job["message"]
    tdir = f"tenants/{t.id}"
    out = service.files.list(f"{tdir}/jobs/{job['id']}/output")
    assert f"{tdir}/jobs/{job['id']}/output/manifest.json" in out and [p for p in out if p.endswith(".parquet")]
    used = t.http.get("/v1/tenant").json()["storage_used_bytes"]
    assert used > c["bytes"]  # the output counts against the tenant's storage
    assert t.http.delete(f"/v1/corpora/{c['id']}").status_code == 204
    assert t.http.get(f"/v1/corpora/{c['id']}").status_code == 404
    assert t.http.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert t.http.get(f"/v1/jobs/{job['id']}/results/manifest.json").status_code == 404
    assert service.files.list(tdir) == []
    assert t.http.get("/v1/tenant").json()["storage_used_bytes"] == 0


# ---- the CLI for CI pipelines ---------------------------------------------------------------

def test_cli_submit_wait(service, corpus_file, tmp_path):
    t = service.new_tenant("ci")
    k = t.http.post("/v1/keys", json={"kind": "vigenere"}).json()
    h = t.http.post("/v1/keys", json={"kind": "hmac"}).json()
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\nstages:\n  - kind: split\n  - kind: dedup\n  - kind: split_private\n"
                    f"  - kind: encrypt_text\n    key: {k['ref']}\noutput:\n  num_shards: 2\n")
    env = {"PRIVATIZE_URL": service.url, "PRIVATIZE_TOKEN": t.token}
    r = service.cli("submit", str(spec), "--corpus", str(corpus_file), "--wait", "--poll", "0.3",
                    "--download", str(tmp_path / "out"), env=env, check=False, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded" and summary["progress"]["input_records"] == 120
    assert verify(tmp_path / "out") == []
    # a hmac key for the text cipher: refused at creation (it used to fail on the cluster),
    # exit 2 with the field path
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace(k["ref"], h["ref"]))
    r = service.cli("submit", str(bad), "--corpus-id", summary["corpus_id"], "--wait", "--poll", "0.3",
                    env=env, check=False, timeout=300)
    assert r.returncode == 2 and "stages.3.key" in r.stderr, (r.stdout, r.stderr)
    # a spec the service refuses: exit 2, the field path on stderr
    worse = tmp_path / "worse.yaml"
    worse.write_text(spec.read_text().replace("kind: dedup", "kind: dedup\n    method: md5"))
    r = service.cli("submit", str(worse), "--corpus-id", summary["corpus_id"], env=env, check=False)
    assert r.returncode == 2 and "stages.1.dedup.method" in r.stderr
    # no token: exit 2
    r = service.cli("submit", str(spec), "--corpus-id", summary["corpus_id"], "--url", service.url,
                    env={"PRIVATIZE_TOKEN": ""}, check=False)
    assert r.returncode == 2 and "token" in r.stderr


# ---- restart while a job runs -----------------------------------------------------------------

def test_sigkill_while_running_then_restart(service, tmp_path):
    from privatize.corpus import make_corpus

    t = service.new_tenant("survivor")
    big = tmp_path / "big.jsonl"
    make_corpus(big, n_docs=4000, seed=3)
    c = t.upload(big).json()
    k = t.http.post("/v1/keys", json={"kind": "vigenere"}).json()
    jid = t.http.post("/v1/jobs", json={"corpus_id": c["id"], "spec": crt_spec(k["ref"])}).json()["id"]
    deadline = time.monotonic() + 120
    status = None
    while time.monotonic() < deadline:
        status = t.http.get(f"/v1/jobs/{jid}").json()["status"]
        if status != "pending":
            break
        time.sleep(0.05)
    assert status == "running", status
    killed_at = time.time()
    service.kill()
    ray = service.ray_jobs()
    assert str(ray.get_job_info(jid).status) in ("RUNNING", "JobStatus.RUNNING")  # it goes on without us
    service.start()
    job = t.wait(jid, timeout=300)
    assert job["status"] == "succeeded", job["message"]
    info = ray.get_job_info(jid)
    assert info.end_time / 1000 > killed_at  # it was still running when the service died
    runs = [j for j in ray.list_jobs() if (j.metadata or {}).get("privatize_job") == jid]
    assert len(runs) == 1
    assert ray.get_job_logs(jid).count("Running entrypoint for job") == 1
    assert job["submit_attempts"] == 1
    assert service.files.exists(f"tenants/{t.id}/jobs/{jid}/output/manifest.json")


# ---- key material appears nowhere but in the export ---------------------------------------------

def test_key_material_appears_nowhere_but_the_export(service, crt_run, acme):
    secrets = []
    for k in crt_run["keys"].values():
        r = acme.http.post(f"/v1/keys/{k['id']}/export")
        assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
        km = key_from_json(r.json(), "export")
        secrets.append(km.secret)
        assert leaks(r.content, km.secret)  # the export does carry it (the scan can find it)
    assert len(secrets[0]) == 3000 and len(secrets[1]) == 32 and len(secrets[2]) == 64
    # every column of every table
    from sqlalchemy import create_engine, inspect

    tables = inspect(create_engine(service.database_url)).get_table_names()
    dump = b""
    for tname in tables:
        for row in service.query(f'select * from "{tname}"'):  # noqa: S608 - names from the inspector
            for v in row:
                dump += (bytes(v) if isinstance(v, (bytes, memoryview)) else str(v).encode()) + b"\n"
    assert {"keys", "jobs", "tenants", "api_tokens", "corpora"} <= set(tables) and dump
    # the service's log, the Ray head's log, every Ray job's entrypoint, metadata, runtime env and logs
    ray = service.ray_jobs()
    ray_blob = b""
    for j in ray.list_jobs():
        ray_blob += json.dumps({"entrypoint": j.entrypoint, "metadata": j.metadata,
                                "runtime_env": j.runtime_env}).encode()
        ray_blob += ray.get_job_logs(j.submission_id).encode()
    assert b"services.jobrun" in ray_blob
    responses = b"\n".join(acme.responses)
    assert len(acme.responses) > 10
    for secret in secrets:
        for where, blob in (("database", dump), ("service log", service.log_text().encode()),
                            ("ray jobs", ray_blob), ("api responses", responses)):
            assert not leaks(blob, secret), where
        # nor anywhere in the service's files: database file, storage (specs, bundles, outputs), logs
        assert scan_tree(service.data, secret) == []
        if service.storage_uri:  # the S3 bucket: every object
            objects = service.files.list()
            assert objects
            assert [p for p in objects if leaks(_plain(p, service.files.read(p)), secret)] == []
    assert base64.b64encode(secrets[2])[:20] not in dump


def _plain(name: str, blob: bytes) -> bytes:
    """An object's bytes, and a Parquet object's values as text too."""
    if name.endswith(".parquet"):
        return blob + pq.read_table(pa.BufferReader(blob)).to_pandas().to_csv().encode("utf-8")
    return blob


def test_cancel_a_running_job(service, tmp_path):
    from privatize.corpus import make_corpus

    t = service.new_tenant("canceller")
    big = tmp_path / "big.jsonl"
    make_corpus(big, n_docs=4000, seed=5)
    c = t.upload(big).json()
    k = t.http.post("/v1/keys", json={"kind": "vigenere"}).json()
    jid = t.http.post("/v1/jobs", json={"corpus_id": c["id"], "spec": crt_spec(k["ref"])}).json()["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and t.http.get(f"/v1/jobs/{jid}").json()["status"] == "pending":
        time.sleep(0.05)
    r = t.http.post(f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 200, r.text
    job = t.wait(jid)
    assert job["status"] == "cancelled", job
    assert t.http.get(f"/v1/jobs/{jid}/results").status_code == 409
    assert t.http.post(f"/v1/jobs/{jid}/cancel").status_code == 409
    jdir = f"tenants/{t.id}/jobs/{jid}"
    left = [p[len(jdir) + 1:] for p in service.files.list(jdir)]
    assert "spec.json" in left, left
    assert not [p for p in left if p.startswith(("output/", ".output", "keys.json"))], left
    assert t.http.delete(f"/v1/jobs/{jid}").status_code == 204
    assert service.files.list(jdir) == []
