"""Issue 54, item 4: a running privatization's ``progress`` is what its run reports
(``privatize.progress``: the figures ``privatize.job`` keeps beside its output), with its
share of the corpus told from the corpus's record count; a finished one shows its counts.
In process (FastAPI's TestClient on SQLite, a Ray address nothing answers on)."""

from __future__ import annotations

import json

from tests.services.test_ledger import ledger_api  # noqa: F401  (the fixture)


def _set_status(ledger_api, job_id: str, status: str) -> None:  # noqa: F811
    from services.db import session_scope
    from services.models import Job

    with session_scope(ledger_api["sessions"]) as s:
        s.get(Job, job_id).status = status


def test_a_running_privatization_shows_what_its_run_reports(ledger_api):  # noqa: F811
    from privatize.job import progress_location
    from services.db import session_scope
    from services.models import Job

    c, ctx, corpus = ledger_api["client"], ledger_api["ctx"], ledger_api["corpus"]
    r = c.post("/v1/jobs", json={"corpus_id": corpus["id"], "spec": {"version": 1, "stages": [{"kind": "split"}]}})
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["progress"] == {"corpus_records": corpus["records"]}
    with session_scope(ledger_api["sessions"]) as s:
        out = s.get(Job, job["id"]).output_path
    _set_status(ledger_api, job["id"], "running")
    # nothing reported yet: the row's figures only
    assert c.get(f"/v1/jobs/{job['id']}").json()["progress"] == {"corpus_records": corpus["records"]}
    half = corpus["records"] // 2
    figures = {"elapsed_s": 8.0, "records_read": half, "records_total": None, "percent": None,
               "records_per_s": half / 8.0, "eta_s": None,
               "stages": [{"index": 0, "kind": "split", "records_in": half, "records_out": 3 * half}]}
    ctx.storage.write_bytes(progress_location(out), json.dumps(figures).encode())
    ctx.job_progress.clear()  # (read at most once a second per job)
    p = c.get(f"/v1/jobs/{job['id']}").json()["progress"]
    share = half / corpus["records"]
    assert p["records_read"] == half and p["stages"] == figures["stages"]
    assert p["records_total"] == corpus["records"] and p["percent"] == round(100 * share, 1)
    assert p["eta_s"] == round(8.0 * (1 - share) / share, 1)
    # the kind's own resource answers the same progress (and lists it without the live figures)
    assert c.get(f"/v1/privatizations/{job['id']}").json()["progress"] == p
    listed = {x["id"]: x for x in c.get("/v1/privatizations").json()}
    assert listed[job["id"]]["progress"] == {"corpus_records": corpus["records"]}
    # once it has ended, its row's counts; what it last reported is not shown
    _set_status(ledger_api, job["id"], "failed")
    assert c.get(f"/v1/jobs/{job['id']}").json()["progress"] == {"corpus_records": corpus["records"]}
    assert c.get(f"/v1/privatizations/{job['id']}").json()["progress"] == {"corpus_records": corpus["records"]}


def test_job_out_keeps_a_total_the_run_told():
    from services.models import Job, utcnow
    from services.routes.jobs import JobOut

    j = Job(id="a" * 16, tenant_id="t", kind="privatize", status="running", spec={}, spec_sha256="0" * 64,
            key_ids=[], output_path="x", submit_attempts=1, output_bytes=0, created_at=utcnow())
    out = JobOut.of(j, 10, {"records_read": 4, "records_total": 8, "percent": 50.0, "eta_s": 3.0})
    assert (out.progress["records_total"], out.progress["percent"], out.progress["eta_s"]) == (8, 50.0, 3.0)
