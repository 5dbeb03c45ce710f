"""A job ends once: a client's poll and the background reconciler can both find it
finished on Ray and both call ``_finish``; only the first records the outcome (under
PostgreSQL both did: two ``job.succeeded`` audit events for one job)."""

from sqlalchemy import select

from services.context import build_context
from services.db import session_scope
from services.jobs import _finish
from services.models import AuditEvent, Corpus, Job
from services.settings import Settings
from services.tenants import create_tenant


def test_two_reconcilers_finishing_one_job_record_it_once(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVATIZE_ENV", "development")
    ctx = build_context(Settings())
    with session_scope(ctx.sessions) as s:
        tenant, _, _ = create_tenant(s, "t", storage_limit_bytes=10**9, max_concurrent_jobs=2)
        corpus = Corpus(tenant_id=tenant.id, name="c", format="jsonl", bytes=1, records=1, sha256="0" * 64,
                        storage_path="x")
        s.add(corpus)
        s.flush()
        job = Job(tenant_id=tenant.id, corpus_id=corpus.id, status="running", spec={"version": 1, "stages": []},
                  spec_sha256="0" * 64, key_ids=[], output_path=f"tenants/{tenant.id}/jobs/j/out")
        s.add(job)
        s.flush()
        job_id = job.id
    # both read the job while it runs ...
    first, second = ctx.sessions(), ctx.sessions()
    try:
        a, b = first.get(Job, job_id), second.get(Job, job_id)
        assert a.status == b.status == "running"
        # ... the poll finishes it first (its summary, then what settling adds to it); the
        # background pass then finds nothing to do, and its own copy of the summary, read
        # before, does not overwrite the first's (the ledger's figures were lost that way)
        _finish(ctx, a, "succeeded", None, counts={"steps": 4})
        a.counts = dict(a.counts, ledger={"epsilon": 2.5})
        first.commit()
        _finish(ctx, b, "succeeded", "late", counts={"steps": 4})
        second.commit()
    finally:
        first.close()
        second.close()
    with session_scope(ctx.sessions) as s:
        assert s.get(Job, job_id).status == "succeeded"
        assert s.get(Job, job_id).counts == {"steps": 4, "ledger": {"epsilon": 2.5}}
        events = s.scalars(select(AuditEvent.action).where(AuditEvent.resource_id == job_id)).all()
        assert events == ["job.succeeded"]
