"""The red-team findings on JSON bodies, reproduced (issue 36): a lone surrogate in any
string field answered 500 and, once stored, made the tenant's lists answer 500; Infinity
was stored as non-standard JSON; bodies of any size were parsed whole before a 422. Each
now gets a 4xx naming the field (or the limit) before anything is stored.

In process (the ``api`` fixture: TestClient, SQLite, no Ray)."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.errors import InvalidRequest
from services.jsonguard import BodyLimitMiddleware, check_json_body
from services.settings import Settings

H = {"content-type": "application/json"}


def _jobs(engine) -> int:
    from sqlalchemy import text

    with engine.connect() as c:
        return c.execute(text("select count(*) from jobs")).scalar_one()


def _cases(corpus_id: str) -> list[tuple[str, str, str]]:
    """(route, raw JSON body with a lone surrogate, the field path the refusal names)"""
    s = '"\\ud800"'
    return [
        ("/v1/jobs", '{"corpus_id": "%s", "spec": {"stages": [{"kind": "split"}], "output": {"meta_keys": ["a", %s]}}}'
         % (corpus_id, s), "spec.output.meta_keys.1"),
        ("/v1/keys", '{"kind": "aes-siv", "label": %s}' % s, "label"),
        ("/v1/decrypt", '{"key": "k", "text": "ok \\udfff"}', "text"),
        ("/v1/trainings", '{"job_id": "j", "config": {"kind": "pretrain", "data": {"text_column": %s}}}' % s,
         "config.data.text_column"),
        ("/v1/evaluations", '{"models": ["m"], "config": {"mia": {"context": %s}}}' % s, "config.mia.context"),
        # in a key: the path stops at its object
        ("/v1/jobs", '{"corpus_id": "%s", "spec": {"output": {%s: 1}}}' % (corpus_id, s), "spec.output"),
    ]


def test_a_lone_surrogate_anywhere_is_a_422_at_its_field_and_nothing_is_stored(api):
    client, corpus_id, _, engine = api
    for route, body, path in _cases(corpus_id):
        r = client.post(route, content=body.encode(), headers=H)
        assert r.status_code == 422, (route, r.text)
        assert r.json()["errors"][0]["path"] == path and r.json()["detail"].startswith(f"{path}: a lone surrogate")
    assert _jobs(engine) == 0
    for route in ("/v1/jobs", "/v1/keys", "/v1/trainings", "/v1/evaluations", "/v1/corpora"):
        assert client.get(route).status_code == 200, route  # the lists answer as before


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_non_finite_numbers_are_a_422_at_their_field(api, number):
    client = api[0]
    body = '{"job_id": "j", "config": {"kind": "dp", "dp": {"noise_multiplier": 1.0, "max_grad_norm": %s}}}' % number
    r = client.post("/v1/trainings", content=body.encode(), headers=H)
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "config.dp.max_grad_norm", r.text
    assert "is not a JSON number" in r.json()["detail"]


def test_bodies_and_config_strings_are_bounded(api):
    client, corpus_id, settings, engine = api
    # over the body limit by Content-Length: 413 before the route runs
    big = json.dumps({"corpus_id": corpus_id, "spec": {"stages": [{"kind": "split"}]}, "pad": "x" * (2 << 20)})
    r = client.post("/v1/jobs", content=big.encode(), headers=H)
    assert r.status_code == 413 and r.json()["code"] == "body_too_large" and "1,048,576 bytes" in r.json()["detail"]
    assert _jobs(engine) == 0
    # a configuration string over max_json_string_chars, within the body limit
    long_key = "k" * (settings.max_json_string_chars + 1)
    r = client.post("/v1/jobs", json={"corpus_id": corpus_id, "spec": {"stages": [{"kind": "split"}],
                                                                        "output": {"meta_keys": [long_key]}}})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "spec.output.meta_keys.0", r.text
    assert f"{len(long_key):,} characters; at most {settings.max_json_string_chars:,}" in r.json()["detail"]
    # /v1/decrypt's texts are data: the string bound does not apply (the unknown key answers)
    r = client.post("/v1/decrypt", json={"key": "keystore:nope", "text": "x" * 100_000})
    assert r.status_code == 404, r.text


def test_the_body_limit_stops_reading_a_chunked_body_at_the_limit():
    """No Content-Length: the middleware reads chunks only until their sum passes the limit
    and answers 413 without calling the app."""
    settings = Settings(max_json_body_bytes=1 << 20)
    calls, sent, pulled = [], [], []

    async def app(scope, receive, send):
        calls.append(scope["path"])

    async def receive():
        pulled.append(1)
        return {"type": "http.request", "body": b"x" * 65536, "more_body": True}  # endless

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/v1/jobs", "method": "POST", "headers": []}
    asyncio.run(BodyLimitMiddleware(app, settings)(scope, receive, send))
    assert calls == [] and sent[0]["status"] == 413 and len(pulled) == (1 << 20) // 65536 + 1
    # within the limit, the app receives the body as it came, then what follows
    chunks = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
              {"type": "http.request", "body": b"1}", "more_body": False}, {"type": "http.disconnect"}]
    got = []

    async def app2(scope, receive, send):
        for _ in range(3):
            got.append(await receive())

    async def receive2():
        return chunks.pop(0)

    asyncio.run(BodyLimitMiddleware(app2, settings)(scope, receive2, send))
    assert [m.get("body") for m in got] == [b'{"a": ', b"1}", None]


@pytest.mark.parametrize("raw,path", [
    (b'{"a": [1, {"b": "\\ud83d"}]}', "a.1.b"),          # a high surrogate with no low one
    (b'{"a": "\\ud83d\\ude00"}', None),                  # a pair is one character (U+1F600): fine
    (b'[{"x": 1.5e308}, {"y": -1e309}]', "1.y"),
    (b'{"n": 10}', None),
    (b"not json", None),                                 # the route's own parser says so
])
def test_check_json_body_by_hand(raw, path):
    if path is None:
        check_json_body(raw, max_chars=100)
        return
    with pytest.raises(InvalidRequest) as ei:
        check_json_body(raw, max_chars=100)
    assert ei.value.extra["errors"][0]["path"] == path


# ---- issue 53, item 2: nesting depth on every route, NUL in any string ---------------------

DEEP = b"[" * 5000 + b"]" * 5000


def test_a_deep_body_is_a_422_on_every_post_route_with_a_body_or_without(api):
    """5,000 nested arrays sent to a route that takes no body was a 500 (the body check
    caught ValueError, the parser raised RecursionError); to one that takes a body, FastAPI's
    400 "There was an error parsing the body". Now every one is a 422 that says why, before
    any parser runs, and the key and the job are untouched."""
    client, corpus_id, settings, engine = api
    key = client.post("/v1/keys", json={"kind": "aes-siv"}).json()
    routes = [f"/v1/keys/{key['id']}/export", f"/v1/keys/{key['id']}/disable", f"/v1/keys/{key['id']}/enable",
              "/v1/jobs/0123456789abcdef/cancel", "/v1/keys", "/v1/jobs", "/v1/trainings", "/v1/evaluations",
              "/v1/decrypt"]
    for route in routes:
        for body in (DEEP, b'{"a": ' + DEEP + b"}", b'{"label": "x", "pad": ' + b"{\"k\": " * 3000 + b"1"
                     + b"}" * 3000 + b"}"):
            r = client.post(route, content=body, headers=H)
            assert r.status_code == 422, (route, r.status_code, r.text[:200])
            got = r.json()
            assert got["code"] == "invalid" and got["errors"][0]["path"] == "body", got
            assert f"nested deeper than {settings.max_json_depth} levels" in got["detail"], got
    assert client.get(f"/v1/keys/{key['id']}").json()["status"] == "enabled"
    assert _jobs(engine) == 0
    # at the bound itself a body is the route's to judge (here: no body wanted, so it is ignored)
    at_bound = b"[" * settings.max_json_depth + b"]" * settings.max_json_depth
    assert client.post(f"/v1/keys/{key['id']}/disable", content=at_bound, headers=H).status_code == 200


def test_brackets_inside_strings_do_not_count_and_the_depth_is_a_setting():
    from services.jsonguard import check_json_depth

    check_json_depth(b'{"a": "' + b"[" * 1000 + b'", "b": "\\"[[[[' + b"{" * 500 + b'"}', 64)
    check_json_depth(b"[" + b"[], " * 100_000 + b"[]]", 2)  # wide, not deep
    with pytest.raises(InvalidRequest):
        check_json_depth(b"[[[]]]", 2)
    with pytest.raises(InvalidRequest) as ei:
        check_json_body(DEEP, max_chars=100)
    assert ei.value.extra["errors"][0]["path"] == "body"


@pytest.mark.parametrize("raw,path", [
    (b'{"kind": "aes-siv", "label": "a\\u0000b"}', "label"),
    (b'{"a": [1, {"b": "\\u0000"}]}', "a.1.b"),
    (b'{"a": {"k\\u0000": 1}}', "a"),                    # in a key: the path stops at its object
])
def test_check_json_body_refuses_nul_at_its_field(raw, path):
    with pytest.raises(InvalidRequest) as ei:
        check_json_body(raw, max_chars=100)
    assert ei.value.extra["errors"][0]["path"] == path
    assert "a NUL character (\\u0000)" in ei.value.message


def test_a_nul_in_any_string_is_a_422_naming_the_field_and_nothing_is_stored(api):
    """PostgreSQL refuses NUL in a text column: a key label "a\\u0000b" was stored on SQLite
    (201) and a 500 on PostgreSQL. Every JSON string of a body is checked, at its path."""
    client, corpus_id, _, engine = api
    cases = [("/v1/keys", {"kind": "aes-siv", "label": "a\u0000b"}, "label"),
             ("/v1/jobs", {"corpus_id": corpus_id, "spec": {"stages": [{"kind": "split"}],
                                                            "output": {"meta_keys": ["ok", "m\u0000"]}}},
              "spec.output.meta_keys.1"),
             ("/v1/jobs", {"corpus_id": "ab\u0000cd", "spec": {"stages": [{"kind": "split"}]}}, "corpus_id"),
             ("/v1/trainings", {"job_id": "j", "config": {"kind": "pretrain", "data": {"text_column": "t\u0000"}}},
              "config.data.text_column"),
             ("/v1/decrypt", {"key": "keystore:k", "text": "x\u0000y"}, "text")]
    for route, body, path in cases:
        r = client.post(route, json=body)
        assert r.status_code == 422, (route, r.text)
        assert r.json()["errors"][0]["path"] == path and r.json()["detail"].startswith(f"{path}: a NUL"), r.json()
    assert client.get("/v1/keys").json() == [] and _jobs(engine) == 0
    # a NUL sent to a route that takes no body is refused all the same
    key = client.post("/v1/keys", json={"kind": "aes-siv", "label": "fine"}).json()
    r = client.post(f"/v1/keys/{key['id']}/export", content=b'{"x": "\\u0000"}', headers=H)
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "x", r.text
