"""What operators rely on, against the real service (both back ends): /readyz, Prometheus
/metrics, request ids in answers and structured log lines, and the audit log (every
state-changing call, refused ones included, readable by the tenant for itself only)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

pytestmark = [pytest.mark.server, pytest.mark.ray, pytest.mark.slow]


def scrape(service) -> dict[tuple[str, frozenset], float]:
    """The /metrics exposition as {(name, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{service.url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def metric(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def test_health_and_readiness(service):
    r = httpx.get(f"{service.url}/readyz", timeout=30)
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready", "checks": {"database": "ok", "storage": "ok", "ray": "ok"}}
    assert httpx.get(f"{service.url}/healthz", timeout=30).json()["status"] == "ok"


def test_metrics_count_requests_uploads_and_jobs(service, crt_run, acme, corpus_file):
    from services.metrics import METRIC_NAMES

    before = scrape(service)
    gets = metric(before, "privatize_http_requests_total", method="GET", route="/v1/corpora", status="200")
    for _ in range(3):
        assert acme.http.get("/v1/corpora").status_code == 200
    assert acme.http.get("/v1/corpora/nope").status_code == 404
    up = acme.upload(corpus_file)
    assert up.status_code == 201
    after = scrape(service)
    assert metric(after, "privatize_http_requests_total", method="GET", route="/v1/corpora", status="200") == gets + 3
    assert metric(after, "privatize_http_requests_total", route="/v1/corpora/{corpus_id}", status="404") >= 1
    # the route template is the label, never the id itself
    assert not any("nope" in str(ls) for (_, ls) in after)
    assert metric(after, "privatize_upload_bytes_total") - metric(before, "privatize_upload_bytes_total") \
        == corpus_file.stat().st_size
    assert metric(after, "privatize_http_request_duration_seconds_count", route="/v1/corpora") >= 3
    # jobs by state and bytes processed, from the database: the CRT job succeeded on this corpus
    n_ok = service.query("select count(*) from jobs where status = 'succeeded'")[0][0]
    assert n_ok >= 1 and metric(after, "privatize_jobs", state="succeeded") == n_ok
    assert metric(after, "privatize_processed_bytes_total") >= crt_run["corpus"]["bytes"]
    quarantined = sum(json.loads(c).get("quarantined", 0) for (c,) in
                      service.query("select counts from jobs where status = 'succeeded'"))
    assert metric(after, "privatize_quarantined_records_total") == quarantined
    assert metric(after, "privatize_ray_connected") == 1
    names = {n for (n, _) in after}
    for name in METRIC_NAMES:
        assert any(n == name or n.startswith(name + "_") for n in names), name


def test_request_ids_and_structured_logs(service, acme):
    r = acme.http.get("/v1/keys", headers={"X-Request-ID": "trace-abc.123"})
    assert r.headers["x-request-id"] == "trace-abc.123"
    bad = acme.http.get("/v1/keys", headers={"X-Request-ID": "no spaces or \"quotes\" please"})
    rid = bad.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", rid)  # replaced by a fresh one
    lines = [json.loads(line) for line in service.log_text().splitlines() if line.startswith("{")]
    access = [e for e in lines if e.get("logger") == "services.access" and e.get("request_id") == "trace-abc.123"]
    assert len(access) == 1
    e = access[0]
    assert (e["method"], e["route"], e["status"], e["tenant_id"]) == ("GET", "/v1/keys", 200, acme.id)
    assert e["duration_ms"] >= 0 and e["level"] == "INFO" and e["ts"].endswith("Z")
    # every line the service wrote since it started is one JSON object (uvicorn's included)
    text = [ln for ln in service.log_text().splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(text) if "privatize service up" in ln]
    assert starts
    tail = text[starts[-1]:]
    assert all(ln.startswith("{") for ln in tail), [ln for ln in tail if not ln.startswith("{")][:3]


def _audit(tenant) -> list[dict]:
    out, before = [], None
    while True:
        page = tenant.http.get("/v1/audit", params={"limit": 200, **({"before": before} if before else {})}).json()
        out += page["events"]
        before = page["next_before"]
        if not before:
            return out


def test_audit_log_records_every_state_change(service, corpus_file):
    a = service.new_tenant("audited")
    b = service.new_tenant("snoop")
    calls = []  # (request id, action, resource id, status)

    def do(tenant, method, path, action, **kw):
        r = tenant.http.request(method, path, **kw)
        calls.append((tenant, r.headers["x-request-id"], action, r.status_code, r))
        return r

    corpus = do(a, "POST", "/v1/corpora", "corpus.upload", params={"filename": corpus_file.name},
                content=corpus_file.read_bytes()).json()
    key = do(a, "POST", "/v1/keys", "key.create", json={"kind": "vigenere"}).json()
    do(a, "POST", f"/v1/keys/{key['id']}/disable", "key.disable")
    do(a, "POST", f"/v1/keys/{key['id']}/enable", "key.enable")
    do(a, "POST", "/v1/keys", "key.create", json={"kind": "nonsense"})  # 422: recorded too
    spec = {"version": 1, "stages": [{"kind": "encrypt_text", "key": key["ref"]}]}
    job = do(a, "POST", "/v1/jobs", "job.create", json={"corpus_id": corpus["id"], "spec": spec}).json()
    done = a.wait(job["id"])
    assert done["status"] == "succeeded", done["message"]
    # the other tenant tries A's resources: refused, and recorded as B's attempts
    do(b, "DELETE", f"/v1/corpora/{corpus['id']}", "corpus.delete")
    do(b, "POST", f"/v1/keys/{key['id']}/export", "key.export")
    do(b, "POST", "/v1/decrypt", "key.decrypt", json={"key": key["ref"], "text": "abc"})
    do(a, "POST", f"/v1/keys/{key['id']}/export", "key.export")
    do(a, "DELETE", f"/v1/jobs/{job['id']}", "job.delete")
    do(a, "DELETE", f"/v1/corpora/{corpus['id']}", "corpus.delete")
    do(a, "DELETE", f"/v1/keys/{key['id']}", "key.destroy")
    rot = json.loads(service.cli("admin", "token", "rotate", a.name).stdout.strip().splitlines()[-1])
    a.http.headers["Authorization"] = f"Bearer {rot['token']}"
    assert [c[3] for c in calls] == [201, 201, 200, 200, 422, 201, 404, 404, 404, 200, 204, 204, 200]

    rows = {r[0]: r for r in service.query(
        "select request_id, tenant_id, actor, action, resource_id, status, detail from audit_events "
        "where request_id is not null")}
    for tenant, rid, action, status, resp in calls:
        assert rid in rows, (action, status)
        _, tid, actor, got_action, resource, got_status, _detail = rows[rid]
        assert (tid, got_action, got_status) == (tenant.id, action, status)
        assert actor.startswith("token:")
        if resp.status_code in (200, 201) and resp.headers.get("content-type", "").startswith("application/json") \
                and action != "key.export":
            assert resource == resp.json().get("id", resource)
    # what A reads: its own calls, the system's job outcome and the admin's rotation; none of B's
    mine = _audit(a)
    assert {e["request_id"] for e in mine if e["request_id"]} == {c[1] for c in calls if c[0] is a}
    assert [e["action"] for e in mine if e["actor"] == "system"] == ["job.succeeded"]
    assert any(e["action"] == "token.rotate" and e["actor"].startswith("admin:") for e in mine)
    assert [e["id"] for e in mine] == sorted((e["id"] for e in mine), reverse=True)
    theirs = _audit(b)
    assert {e["action"] for e in theirs} >= {"corpus.delete", "key.export", "key.decrypt"}
    assert all(e["status"] == 404 for e in theirs if e["request_id"])
    assert corpus["id"] in {e["resource_id"] for e in theirs}  # B's attempt on A's corpus, in B's log
    # filters
    assert {e["action"] for e in a.http.get("/v1/audit", params={"action": "key.create"}).json()["events"]} \
        == {"key.create"}
    # no document text, token or key material in any entry
    blob = json.dumps(service.query("select * from audit_events"), default=str)
    assert corpus_file.read_text()[:40] not in blob
    assert not [t for t in (a.token, b.token, rot["token"]) if t in blob]


def test_unauthenticated_state_changes_are_recorded_anonymously(service):
    r = httpx.post(f"{service.url}/v1/keys", json={"kind": "hmac"}, timeout=30)
    assert r.status_code == 401
    rows = service.query("select tenant_id, actor, action, status from audit_events where request_id = :r",
                         r=r.headers["x-request-id"])
    assert rows == [(None, "anonymous", "key.create", 401)]
