"""schemathesis against the running service's own OpenAPI document (both back ends).

1. With a valid token, every operation, generated valid and invalid inputs: no 5xx.
2. With another tenant's token and the owner's real ids in every path parameter (plus
   fuzzed query and body): never a 2xx, never a 5xx; the owner's ids in a body
   (``corpus_id``, ``key``) are refused the same way; list endpoints never show them.
3. Every state-changing call of 1 and 2 has its audit entry (same request id, same
   status, the caller's tenant).

Fixed seed, no example database: a failure reproduces.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.server, pytest.mark.ray, pytest.mark.slow]

EXAMPLES = 12


def _run(operation, mode, examples, fn, **strategy_kw):
    from hypothesis import HealthCheck, given, seed, settings

    @seed(20261122)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(operation.as_strategy(mode, **strategy_kw))
    def go(case):
        fn(case)

    go()


def _operations(schema):
    ops = []
    for result in schema.get_all_operations():
        ops.append(result.ok())
    return ops


def test_fuzz_with_own_and_other_tenants_tokens(service, crt_run, acme):
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    ops = _operations(schema)
    paths = {(op.method.upper(), op.path) for op in ops}
    assert ("POST", "/v1/jobs") in paths and ("GET", "/v1/audit") in paths and len(paths) >= 20
    owner = acme
    other = service.new_tenant("fuzzer")
    sent = []  # (tenant, method, path, status, request id)
    server_errors = []

    def call(tenant, case):
        r = case.call(base_url=service.url, headers={"Authorization": f"Bearer {tenant.token}"}, timeout=60)
        rid = r.headers.get("x-request-id")
        sent.append((tenant, case.method.upper(), case.formatted_path, r.status_code,
                     rid[0] if isinstance(rid, list) else rid))
        if r.status_code >= 500:
            server_errors.append(f"{case.method} {case.formatted_path} -> {r.status_code}: {r.text[:200]}")
        return r

    # 1. the tenant's own token, valid and invalid inputs
    from hypothesis.errors import Unsatisfiable

    positive = []
    for op in ops:
        _run(op, GenerationMode.POSITIVE, EXAMPLES, lambda case: positive.append(call(other, case).status_code))
        try:
            _run(op, GenerationMode.NEGATIVE, EXAMPLES, lambda case: call(other, case))
        except Unsatisfiable:  # nothing in this operation can be made invalid (no parameters, no body)
            assert not list(op.iter_parameters()), op.label
    assert not server_errors, server_errors[:5]
    # valid inputs went through with the token (negative mode also sends broken Authorization headers)
    assert sum(st != 401 for st in positive) >= 0.95 * len(positive), "the token was not used"
    assert sum(200 <= st < 300 for st in positive) >= 0.15 * len(positive), "too few valid calls"  # ids are random

    # 2. another tenant's token on the owner's resources
    ids = {"corpus_id": crt_run["corpus"]["id"], "key_id": crt_run["keys"]["siv"]["id"],
           "job_id": crt_run["job"]["id"], "name": "manifest.json"}
    leaked = []

    def cross(case):
        r = call(other, case)
        if 200 <= r.status_code < 300:
            leaked.append(f"{case.method} {case.formatted_path} -> {r.status_code}: {r.text[:200]}")

    for op in ops:
        names = {p.name for p in op.path_parameters}
        if names:
            assert names <= set(ids), names
            _run(op, GenerationMode.POSITIVE, EXAMPLES, cross, path_parameters={n: ids[n] for n in names})
    assert not server_errors, server_errors[:5]
    assert not leaked, leaked[:5]
    by_body = [other.http.post("/v1/jobs", json={"corpus_id": ids["corpus_id"],
                                                 "spec": {"version": 1, "stages": [
                                                     {"kind": "encrypt_text",
                                                      "key": crt_run["keys"]["text"]["ref"]}]}}),
               other.http.post("/v1/decrypt", json={"key": crt_run["keys"]["siv"]["ref"], "text": "x"})]
    assert [r.status_code for r in by_body] == [404, 404]
    for r in by_body:
        sent.append((other, "POST", r.request.url.path, r.status_code, r.headers["x-request-id"]))
    listed = " ".join(other.http.get(p).text for p in ("/v1/corpora", "/v1/keys", "/v1/jobs"))
    assert not [v for k, v in ids.items() if k != "name" and v in listed]
    # its audit log names the owner's ids only as its own refused attempts
    attempts = [e for e in other.http.get("/v1/audit", params={"limit": 1000}).json()["events"]
                if e["resource_id"] in ids.values()]
    assert attempts and all(400 <= e["status"] < 500 for e in attempts)
    assert owner.http.get(f"/v1/corpora/{ids['corpus_id']}").status_code == 200  # still there, untouched

    # 3. an audit entry for every state-changing call that reached a route, with its status and tenant
    routes = _route_table()
    changing = [(t, path, st, rid) for (t, m, path, st, rid) in sent if m not in ("GET", "HEAD", "OPTIONS")]
    routed = {rid for (t, m, path, st, rid) in sent
              if m not in ("GET", "HEAD", "OPTIONS") and any(rx.fullmatch(path) and m in ms for ms, rx in routes)}
    assert len(changing) > 50 and len(routed) > 50
    rows = {}
    rids = [rid for (_, _, _, rid) in changing]
    for i in range(0, len(rids), 500):
        chunk = rids[i:i + 500]
        marks = ", ".join(f":r{j}" for j in range(len(chunk)))
        for rid, tid, status in service.query(
                f"select request_id, tenant_id, status from audit_events where request_id in ({marks})",  # noqa: S608
                **{f"r{j}": r for j, r in enumerate(chunk)}):
            rows[rid] = (tid, status)
    assert set(rows) == routed, ([c for c in changing if c[3] in routed - set(rows)][:5],
                                 [c for c in changing if c[3] in set(rows) - routed][:5])
    for t, path, st, rid in changing:
        if rid in rows:
            # 401: a generated bad Authorization header, nobody authenticated. 400/422: FastAPI
            # validates the body before it runs the auth dependency, so a refused body may carry
            # no tenant; when it does, it must be the caller's own.
            allowed = {None} if st == 401 else {None, t.id} if st in (400, 422) else {t.id}
            assert rows[rid][0] in allowed and rows[rid][1] == st, (path, rows[rid], st)


NESTED = b"[" * 3000 + b"]" * 3000

EDGE_CASES = [
    # (method, path, query, raw body or JSON, what it was before issue 23)
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"\\ud800"}\n', "500, connection dropped"),
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"ok"}\n{"text":"\\udfff x"}\n', "500"),
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"ok","x":' + NESTED + b"}\n", "500"),
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"a","x":NaN}\n', "201"),
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"a","x":-Infinity}\n', "201"),
    ("POST", "/v1/corpora", {"format": "jsonl"}, b'{"text":"a","id":' + b"9" * 5000 + b"}\n", "-"),
    ("POST", "/v1/corpora", {"format": "parquet"}, b"PAR1" + b"\x00" * 64 + b"PAR1", "-"),
    ("POST", "/v1/corpora", {"format": "text"}, b"\xed\xa0\x80\n", "-"),
    ("GET", "/v1/audit", {"before": "9223372036854775808"}, None, "500"),
    ("GET", "/v1/audit", {"before": str(10**40)}, None, "500"),
    ("POST", "/v1/jobs", None, "wrong-kind", "201, the job failed on the worker"),
]


def test_edge_cases_answer_4xx_with_a_message_on_one_connection(service):
    """The inputs issue 23 found, as explicit examples: no 5xx, every refusal a 4xx with a
    message, and the client's keep-alive connection still the one it started with."""
    t = service.new_tenant("edges")
    corpus = t.http.post("/v1/corpora", params={"format": "jsonl"}, content=b'{"text": "one line"}\n').json()
    siv = t.http.post("/v1/keys", json={"kind": "aes-siv"}).json()
    wrong_kind = {"corpus_id": corpus["id"], "spec": {"stages": [{"kind": "encrypt_text", "key": siv["ref"]}]}}
    ports = set()
    for method, path, query, body, before in EDGE_CASES:
        kw = {"json": wrong_kind} if body == "wrong-kind" else {"content": body} if body is not None else {}
        r = t.http.request(method, path, params=query, **kw)
        ports.add(r.extensions["network_stream"].get_extra_info("client_addr")[1])
        assert 400 <= r.status_code < 500, (method, path, query, before, r.status_code, r.text[:300])
        detail = r.json()["detail"]
        assert detail and (isinstance(detail, str) or all(e.get("msg") and e.get("loc") for e in detail)), r.text
    assert len(ports) == 1, "a refusal dropped the keep-alive connection"
    assert [c["id"] for c in t.http.get("/v1/corpora").json()] == [corpus["id"]]
    assert t.http.get("/v1/jobs").json() == []


def _route_table():
    """(methods, path regex) of every API route, from the router itself."""
    from services.api import build_router

    router = build_router()

    return [(r.methods, r.path_regex) for r in router.routes if getattr(r, "methods", None)]
