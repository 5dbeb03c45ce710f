"""Synthesis through the service: a tenant's ``synthesize`` stage calls one of the LLM
endpoints the operator lists (``PRIVATIZE_LLM_BASE_URLS``), with the tenant's own API key
stored as a sealed ``api-key`` key and named ``keystore:<id>``.

What must hold: the key is taken once (``POST /v1/keys`` with its material), never shown
or exported again; a spec naming the server's environment or files as the key, a cache
folder, an endpoint the service does not list, or a key of another kind answers 422 with
the field; a job with the tenant's key runs on Ray, sends the key to the endpoint and
nothing else: not the job's row, its stored spec, the Ray job, its logs, its output or
any answer; the job keeps no answers on disk. The LLM endpoint is the scripted server of
``tests/llm_double.py`` (the paid API is the boundary this project does not own).
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from tests.privatize.test_synthesize_stage import ARTICLES
from tests.secrets_scan import leaks
from tests.services.test_trainings import _job_columns, server_test


def _spec(url: str, api_key: str | None, **extra) -> dict:
    llm = {"base_url": url, "model": "scripted", **({"api_key": api_key} if api_key else {})}
    return {"version": 1, "stages": [{"kind": "synthesize", "allow_plaintext": True, "llm": llm,
                                      "max_requests": 500, **extra}], "output": {"num_shards": 1}}


@server_test
def test_a_synthesis_job_with_the_tenants_own_api_key(service, llm_double, tmp_path):
    t = service.new_tenant("synthesis")
    src = tmp_path / "articles.jsonl"
    src.write_text("".join(json.dumps(a) + "\n" for a in ARTICLES), encoding="utf-8")
    corpus = t.upload(src).json()
    secret = "sk-tenant-" + "Q7" * 20
    r = t.http.post("/v1/keys", json={"kind": "api-key", "material": secret, "label": "provider"})
    assert r.status_code == 201, r.text
    key = r.json()
    assert key["kind"] == "api-key" and secret not in r.text
    r = t.http.post(f"/v1/keys/{key['id']}/export")
    assert r.status_code == 409 and secret not in r.text
    for body, field in (({"kind": "api-key"}, "material"), ({"kind": "hmac", "material": secret}, "material"),
                        ({"kind": "api-key", "material": "has a space in it"}, "material")):
        r = t.http.post("/v1/keys", json=body)
        assert r.status_code == 422 and r.json()["detail"].startswith(f"{field}: ") and secret not in r.text, r.text
    hmac_key = t.http.post("/v1/keys", json={"kind": "hmac"}).json()

    def post(spec):
        return t.http.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": spec})

    url = llm_double.url
    refused = [(_spec(url, "env:OPENAI_API_KEY"), "stages.0.synthesize.llm.api_key"),
               (_spec(url, "file:/etc/llm.key"), "stages.0.synthesize.llm.api_key"),
               (_spec(url, f"keystore:{key['id']}", cache="/srv/cache"), "stages.0.synthesize.cache"),
               (_spec("http://169.254.169.254/latest", f"keystore:{key['id']}"), "stages.0.llm.base_url"),
               (_spec(url, f"keystore:{hmac_key['id']}"), "stages.0.llm.api_key")]
    for spec, path in refused:
        r = post(spec)
        assert r.status_code == 422, (path, r.text)
        assert [e["path"] for e in r.json()["errors"]] == [path], r.json()
    assert t.http.get("/v1/jobs").json() == []  # nothing was created

    sent = len(llm_double.requests)
    r = post(_spec(url, key["ref"]))
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"])
    assert job["status"] == "succeeded", (job["message"], t.http.get(f"/v1/jobs/{job['id']}/logs").text[-3000:])
    mine = llm_double.requests[sent:]
    assert mine and {q["auth"] for q in mine} == {f"Bearer {secret}"}
    st = job["progress"]["stages"][0]
    assert st["kind"] == "synthesize" and st["records_out"] > st["records_in"] == len(ARTICLES)
    # the stored spec is what ran: no cache on disk, the key by reference
    stored = json.loads(service.files.read(f"tenants/{t.id}/jobs/{job['id']}/spec.json"))
    assert stored["stages"][0]["cache"] is None and stored["stages"][0]["llm"]["api_key"] == key["ref"]
    assert not [p for p in service.data.rglob("*") if ".llm-cache" in p.parts]
    # the synthetic samples are in the output
    shards = service.files.list(f"tenants/{t.id}/jobs/{job['id']}/output/shards")
    rows = [x for p in shards for x in pq.read_table(service.files.fs.open_input_file(
        f"{service.files.root}/{p}")).to_pylist()]
    assert len([x for x in rows if x["synthesis_source"]]) == st["records_out"] - len(ARTICLES)
    # the key appears nowhere but in the requests to the endpoint
    info = service.ray_jobs().get_job_info(job["id"])
    row = service.query("select * from jobs where id = :id", id=job["id"])
    assert json.loads(dict(zip(_job_columns(service), row[0]))["key_ids"]) == [key["id"]]
    blobs = {"job row": json.dumps(row, default=str).encode(),
             "key row": json.dumps(service.query("select * from keys where id = :id", id=key["id"]),
                                   default=str).encode(),
             "audit": json.dumps(service.query("select * from audit_events"), default=str).encode(),
             "spec.json": json.dumps(stored).encode(),
             "ray job": json.dumps({"entrypoint": info.entrypoint, "metadata": info.metadata,
                                    "runtime_env": info.runtime_env}).encode(),
             "logs": t.http.get(f"/v1/jobs/{job['id']}/logs").content,
             "service log": service.log_path.read_bytes(),
             "output": b"".join(service.files.read(p) for p in shards),
             "answers": b"\n".join(t.responses)}
    for where, blob in blobs.items():
        assert not leaks(blob, secret.encode()), where
