"""Service jobs: admission, submission to Ray Jobs, reconciliation, cancel, logs and
results.

A job's id is its Ray ``submission_id``: submitting it again (after a crash between
recording and submitting, say) is refused by Ray, never run twice. The database is
the service's memory, Ray the truth about execution: ``reconcile`` reads Ray's status
into the row, on every read of an active job and from a background task, so a service
that was killed and started again picks up its running jobs where Ray has them.

What differs between kinds of job (privatization, training, evaluation) is one entry of
``services.jobkinds``: how a spec is validated and admitted, what it reads (its corpus;
the output of a succeeded job: a training reads a privatization job's; or what its spec
names: an evaluation reads trainings, corpora and privatization outputs), which module
the Ray job runs and how its results are read. The service chooses every location (a
tenant never supplies a path) and hands them to ``python -m services.jobrun KIND SPEC
INPUT OUTPUT`` (which runs the kind's module: ``privatize.job`` for privatization,
``train.job`` for training, ``attacks.job`` for evaluation).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Collection

from sqlalchemy import Connection, Row, bindparam, func, select, update
from sqlalchemy.orm import Session, object_session

from services import audit
from services.context import ServiceContext
from services.db import session_scope
from services.errors import ClusterUnavailable, Conflict, LimitExceeded, NotFound, StorageLimitExceeded
from privatize.jobio import redact_paths
from services.jobkinds import PRIVATIZE, RootPath, job_kind
from services.keystore import bundle_json
from services.keys import sealed_of
from services.models import ACTIVE_JOB_STATES, TERMINAL_JOB_STATES, Corpus, Job, Key, Tenant, new_id, utcnow
from services.storage import job_dir, tenant_prefix
from services.tenants import storage_used

log = logging.getLogger(__name__)

SETUP_HOOK = "services.keystore.install_worker_keystore"
_RAY_STATUS = {"PENDING": "pending", "RUNNING": "running", "SUCCEEDED": "succeeded", "FAILED": "failed",
               "STOPPED": "cancelled"}


def spec_rel(job: Job) -> str:
    return f"{job_dir(job.tenant_id, job.id)}/spec.json"


def bundle_rel(job: Job) -> str:
    return f"{job_dir(job.tenant_id, job.id)}/keys.json"


def quarantine_rel(job: Job) -> str:
    return f"{job.output_path}.quarantine.jsonl"


def get_job(s: Session, tenant_id: str, job_id: str) -> Job:
    j = s.get(Job, job_id)
    if j is None or j.tenant_id != tenant_id:
        raise NotFound(f"no job {job_id!r}")
    return j


def list_jobs(s: Session, tenant_id: str, corpus_id: str | None = None, kind: str | None = None, *,
              with_corpus_records: bool = False) -> list[Job]:
    """The tenant's jobs, oldest first; ``with_corpus_records``: each also carries its
    corpus's ``corpus_records`` (one query for all, not one a job: :func:`corpus_records`)."""
    q = select(Job).where(Job.tenant_id == tenant_id)
    if corpus_id is not None:
        q = q.where(Job.corpus_id == corpus_id)
    if kind is not None:
        q = q.where(Job.kind == kind)
    jobs = list(s.scalars(q.order_by(Job.created_at, Job.id)))
    if with_corpus_records:
        ids = {j.corpus_id for j in jobs if j.corpus_id}
        records = dict(s.execute(select(Corpus.id, Corpus.records).where(Corpus.id.in_(ids))).all()) if ids else {}
        for j in jobs:
            j.corpus_records = records.get(j.corpus_id)  # not a column: an attribute of this answer
    return jobs


def corpus_records(ctx: ServiceContext, job) -> int | None:
    """The records of the corpus a job reads (a polled row carries them; else one read)."""
    if not job.corpus_id:
        return None
    if hasattr(job, "corpus_records"):  # a polled row, or a listed job (None: its corpus is gone)
        return job.corpus_records
    with session_scope(ctx.sessions) as s:
        c = s.get(Corpus, job.corpus_id)
        return c.records if c else None


def job_progress(job, corpus_records: int | None, live: dict | None = None) -> dict:
    """A job's ``progress``: its corpus's records; while it runs what it reports (``live``,
    :meth:`JobKind.live_progress`), its share of the corpus told here when the run could
    not (the Ray runner streams its input); once it ended, its row's counts."""
    progress: dict = {"corpus_records": corpus_records}
    if live:
        progress.update(live)
        if progress.get("records_total") is None and corpus_records and live.get("records_read") is not None:
            share = min(1.0, live["records_read"] / corpus_records)
            el = live.get("elapsed_s")
            progress.update(records_total=corpus_records, percent=round(100 * share, 1),
                            eta_s=round(el * (1 - share) / share, 1) if share and el is not None else None)
    if job.counts:
        progress.update(job.counts)
    return progress


# ---- admission and submission ---------------------------------------------------------

def create_job(ctx: ServiceContext, tenant_id: str, corpus_id: str | None, spec_data, *, kind: str = PRIVATIZE,
               input_job_id: str | None = None) -> Job:
    """Validate (once: the spec object is reused from here on) and bound by the service's
    settings, admit against the tenant's limits, record, write the spec and key bundle,
    and submit. A kind that reads another job's output names it as ``input_job_id`` (its
    corpus is that job's); a kind that reads what its spec names has neither. A cluster
    that cannot be reached leaves the job ``queued``; the reconciler submits it later."""
    jk = job_kind(kind)
    if jk.inputs is not None:
        if corpus_id is not None or input_job_id is not None:
            raise ValueError(f"a {kind} job reads what its spec names, not a corpus or a job")
    elif (jk.input_kind is None) != (input_job_id is None):
        raise ValueError(f"a {kind} job reads {'a ' + jk.input_kind + ' job' if jk.input_kind else 'a corpus'}")
    spec = jk.validate(spec_data)
    jk.limits(ctx.settings, spec)
    spec = jk.plan(ctx, tenant_id, input_job_id, spec)
    with ctx.admission, session_scope(ctx.sessions) as s:
        tenant = s.get(Tenant, tenant_id)
        if input_job_id is not None:
            corpus_id = input_job(ctx, s, tenant_id, input_job_id, jk.input_kind).corpus_id
        corpus = s.get(Corpus, corpus_id) if corpus_id else None
        if jk.inputs is None and (corpus is None or corpus.tenant_id != tenant_id):
            raise NotFound(f"no corpus {corpus_id!r}")
        spec, key_ids = jk.prepare(s, tenant_id, corpus, spec)
        held, queued = slots_held(s, tenant_id)
        if held >= tenant.max_concurrent_jobs:
            raise LimitExceeded(f"tenant has {held} running job(s), its limit is {tenant.max_concurrent_jobs}; "
                                "wait for one to finish or cancel one", retry_after=30)
        if queued >= ctx.settings.max_queued_jobs:
            raise LimitExceeded(f"tenant has {queued} queued job(s) waiting for the Ray cluster or a free slot, "
                                f"at most {ctx.settings.max_queued_jobs} may wait; wait for them to start or "
                                "cancel one", retry_after=30)
        used = storage_used(s, tenant_id) + ctx.reserved.get(tenant_id, 0)
        if used >= tenant.storage_limit_bytes:
            raise StorageLimitExceeded(f"storage limit reached ({used} of {tenant.storage_limit_bytes} bytes "
                                       "used); delete corpora or job outputs first")
        jid, spec_dict = new_id(), spec.to_dict()
        job = Job(id=jid, tenant_id=tenant_id, corpus_id=corpus_id, kind=jk.name, input_job_id=input_job_id,
                  status="queued", spec=spec_dict, spec_sha256=spec.sha256(), key_ids=key_ids,
                  output_path=f"{job_dir(tenant_id, jid)}/output",
                  input_bytes=corpus.bytes if corpus is not None and input_job_id is None else 0)
        jk.admit(s, tenant_id, corpus, job, spec)
        keys = [s.get(Key, k) for k in key_ids]
        ctx.storage.write_bytes(spec_rel(job), json.dumps(spec_dict, indent=2).encode("utf-8"))
        if keys:
            bundle = bundle_json(tenant_id, [{"id": k.id, "kind": k.kind, **_sealed_dict(k)} for k in keys])
            ctx.storage.write_bytes(bundle_rel(job), bundle, private=True)
        s.add(job)
    on = f"job {input_job_id}" if input_job_id else f"corpus {corpus_id}" if corpus_id else "its spec's inputs"
    log.info("tenant %s: %s job %s created on %s (%d stage(s), %d key(s))", tenant_id, jk.name, job.id, on,
             len(getattr(spec, "stages", ())), len(key_ids))
    submit(ctx, job.id)
    with session_scope(ctx.sessions) as s:
        return s.get(Job, job.id)


RUNNING_JOB_STATES = ("pending", "running")
"""The states of a job given to Ray: each holds one of its tenant's ``max_concurrent_jobs``
slots. A ``queued`` job (not yet given to Ray: the cluster cannot be reached, or the
tenant's slots are taken) holds none; ``max_queued_jobs`` bounds how many wait."""


def slots_held(s: Session, tenant_id: str) -> tuple[int, int]:
    """The tenant's jobs given to Ray (each holding a slot) and its queued ones."""
    counts = dict(s.execute(select(Job.status, func.count()).where(
        Job.tenant_id == tenant_id, Job.status.in_(ACTIVE_JOB_STATES)).group_by(Job.status)).all())
    return sum(counts.get(k, 0) for k in RUNNING_JOB_STATES), counts.get("queued", 0)


def _no_slot(s: Session, job: Job) -> str | None:
    """Why the queued ``job`` may not be given to Ray yet, or None: its tenant's slots are
    taken by its jobs given to Ray and its queued jobs admitted before it (first come,
    first served: a job admitted later never takes a slot an earlier one waits for)."""
    tenant = s.get(Tenant, job.tenant_id)
    held = s.scalar(select(func.count()).select_from(Job).where(
        Job.tenant_id == job.tenant_id, Job.status.in_(RUNNING_JOB_STATES)))
    ahead = s.scalar(select(func.count()).select_from(Job).where(
        Job.tenant_id == job.tenant_id, Job.status == "queued", Job.id != job.id,
        (Job.created_at < job.created_at) | ((Job.created_at == job.created_at) & (Job.id < job.id))))
    if tenant is None or held + ahead < tenant.max_concurrent_jobs:
        return None
    return (f"waiting for a free slot: {held} job(s) running, {ahead} queued before it, "
            f"the limit is {tenant.max_concurrent_jobs}")


def input_job(ctx: ServiceContext, s: Session, tenant_id: str, job_id: str, kind: str) -> Job:
    """The job whose output a new job will read: the tenant's own (else NotFound, as for
    an id that does not exist), of ``kind``, succeeded, its output still there (else
    Conflict, saying which)."""
    src = s.get(Job, job_id)
    if src is None or src.tenant_id != tenant_id:
        raise NotFound(f"no job {job_id!r}")
    if src.kind != kind:
        raise Conflict(f"job {job_id} is a {src.kind} job; give a {kind} job")
    if src.status != "succeeded":
        raise Conflict(f"job {job_id} is {src.status}; give a job that has succeeded")
    if src.corpus_id is None or not ctx.storage.exists(f"{src.output_path}/{job_kind(kind).result_file}"):
        raise Conflict(f"job {job_id} has no output any more")
    return src


def input_rel(job: Job, corpus: Corpus | None) -> str:
    """What the job reads, relative to the storage root: its corpus, the output folder of
    its input job, or (a kind that reads what its spec names) its tenant's folder."""
    if job.input_job_id:
        return f"{job_dir(job.tenant_id, job.input_job_id)}/output"
    if job_kind(job.kind).inputs is not None:
        return tenant_prefix(job.tenant_id)
    return corpus.storage_path


def _sealed_dict(k: Key) -> dict:
    sealed = sealed_of(k)
    return {"master_key_id": sealed.master_key_id, "wrapped_dek": sealed.wrapped_dek,
            "material_ct": sealed.material_ct}


def entrypoint_for(ctx: ServiceContext, job: Job, corpus: Corpus | None) -> str:
    """``python -m services.jobrun KIND SPEC INPUT OUTPUT`` (locations only; LookupError
    for a kind this service does not know)."""
    st, jk = ctx.storage, job_kind(job.kind)
    extra = [a for flag, rel in (jk.options(job.spec) if jk.options else [])
             for a in (flag, st.location(storage_rel(job.tenant_id, rel)))]
    return jk.entrypoint(st.location(spec_rel(job)), st.location(input_rel(job, corpus)),
                         st.location(job.output_path), tuple(extra))


def storage_rel(tenant_id: str, rel: str) -> str:
    """A kind's location relative to the storage root: a :class:`services.jobkinds.RootPath`
    as it is, any other relative to the tenant's folder."""
    return str(rel) if isinstance(rel, RootPath) else f"{tenant_prefix(tenant_id)}/{rel}"


def runtime_env_for(ctx: ServiceContext, job: Job) -> dict:
    """The job's id (what its results may be named by; not a secret) and the location of
    its key bundle, never key material."""
    env = {"RAY_USAGE_STATS_ENABLED": "0", "PRIVATIZE_JOB_ID": job.id}
    if job.key_ids:
        env["PRIVATIZE_KEY_BUNDLE"] = ctx.storage.location(bundle_rel(job))
    jk = job_kind(job.kind)
    models = jk.models(job.spec) if jk.models else {}
    if models:  # the models the spec names by reference, where every worker finds them
        from privatize.refs import MODELS_ENV

        env[MODELS_ENV] = json.dumps({ref: ctx.storage.location(storage_rel(job.tenant_id, rel))
                                      for ref, rel in sorted(models.items())})
    return {"env_vars": env, "worker_process_setup_hook": SETUP_HOOK}


def submit(ctx: ServiceContext, job_id: str) -> None:
    """Submit a queued job to Ray (idempotent: the submission id is the job id; within
    this process, one submission of a job at a time)."""
    with ctx.admission:
        if job_id in ctx.submitting:
            return
        ctx.submitting.add(job_id)
    try:
        _submit(ctx, job_id)
    finally:
        with ctx.admission:
            ctx.submitting.discard(job_id)


def _submit(ctx: ServiceContext, job_id: str) -> None:
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job is None or job.status != "queued":
            return
        try:
            reads_spec = job_kind(job.kind).inputs is not None
        except LookupError as exc:
            _finish(ctx, job, "failed", str(exc))
            return
        corpus = s.get(Corpus, job.corpus_id) if job.corpus_id else None
        if corpus is None and not reads_spec:
            _finish(ctx, job, "failed", "the corpus was deleted before the job started")
            return
        if job.input_job_id:
            src = s.get(Job, job.input_job_id)
            if src is None or src.status != "succeeded":
                _finish(ctx, job, "failed", f"job {job.input_job_id} (its input) was deleted before the job started")
                return
        if (why := _no_slot(s, job)) is not None:
            job.message = why
            return
        try:
            entrypoint = entrypoint_for(ctx, job, corpus)
        except LookupError as exc:
            _finish(ctx, job, "failed", str(exc))
            return
        runtime_env = runtime_env_for(ctx, job)
        metadata = {"privatize_tenant": job.tenant_id, "privatize_job": job.id, "privatize_kind": job.kind,
                    "privatize_spec_sha256": job.spec_sha256}
        if corpus is not None:
            metadata["privatize_corpus"] = corpus.id
        if job.input_job_id:
            metadata["privatize_input_job"] = job.input_job_id
        job.submit_attempts += 1
    try:
        fresh = ctx.cluster.submit(submission_id=job_id, entrypoint=entrypoint, runtime_env=runtime_env,
                                   metadata=metadata)
    except ClusterUnavailable as exc:
        with session_scope(ctx.sessions) as s:
            job = s.get(Job, job_id)
            if job is not None and job.status == "queued":
                job.message = f"waiting for the Ray cluster: {exc.message}"
        log.warning("job %s: not submitted yet (%s)", job_id, exc.message)
        return
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job is not None and job.status == "queued":
            job.status = "pending"
            job.message = None
            job.submitted_at = utcnow()
    log.info("job %s: %s to Ray", job_id, "submitted" if fresh else "already known")


# ---- reconciliation -------------------------------------------------------------------

def _ms(ts) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(ts / 1000, dt.UTC) if ts else None


def reconcile(ctx: ServiceContext, job_id: str) -> None:
    """Bring one active job's row up to date with Ray."""
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job is None or job.status not in ACTIVE_JOB_STATES:
            return
        queued = job.status == "queued"
    if queued:
        submit(ctx, job_id)
        return
    info = ctx.cluster.info(job_id)
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job is None or job.status not in ACTIVE_JOB_STATES:
            return
        if info is None:
            _finish(ctx, job, "failed", f"{LOST} (the cluster no longer knows this job: it was restarted)")
            return
        ray_status = str(getattr(info.status, "value", info.status))
        job.ray_status = ray_status
        status = _RAY_STATUS.get(ray_status, job.status)
        if info.start_time and job.started_at is None and status != "pending":
            job.started_at = _ms(info.start_time)
        if status in ("pending", "running"):
            if status != job.status:
                log.info("job %s: %s", job.id, status)
            job.status = status
            return
        message = (info.message or "").strip()[:2000] or None
        if status == "succeeded":
            jk = job_kind(job.kind)
            counts = jk.read_results(ctx.storage, job.output_path)
            if counts is None:
                _finish(ctx, job, "failed", f"the job exited 0 but wrote no {jk.result_file}", _ms(info.end_time))
                return
            # set by the finisher that claims the job (_finish): a poll and the reconciler may
            # both get here, and the one that loses must not write its copy over the winner's
            _finish(ctx, job, status, message, _ms(info.end_time), counts=counts)
            return
        _finish(ctx, job, status, message, _ms(info.end_time))


def _finish(ctx: ServiceContext, job: Job, status: str, message: str | None,
            finished_at: dt.datetime | None = None, counts: dict | None = None) -> None:
    """Terminal state: record it, count the output against the tenant's storage, and
    remove the job's key bundle (the job no longer needs it). Only one caller finishes a
    job: a client's poll and the background reconciler may both find it ended, and the
    one whose conditional update no longer matches an active row leaves it as the other
    recorded it (under PostgreSQL both recorded it: two ``job.succeeded`` events). The
    job's ``counts`` (its summary) are written here, after the claim, for the same reason."""
    s = object_session(job)
    if s is not None:
        claimed = s.execute(update(Job).where(Job.id == job.id, Job.status.in_(ACTIVE_JOB_STATES))
                            .values(status=status).execution_options(synchronize_session=False)).rowcount
        if not claimed:
            s.refresh(job)
            return
    job.status = status
    job.message = message
    job.finished_at = finished_at or utcnow()
    if counts is not None:
        job.counts = counts
        job.quarantined_records = int(counts.get("quarantined") or 0)
    ctx.storage.delete_file(bundle_rel(job))
    # what an interrupted output writer left (privatize.output writes into a temporary
    # sibling directory and renames it into place)
    out_name = job.output_path.rsplit("/", 1)[-1]
    ctx.storage.delete_children(job_dir(job.tenant_id, job.id), f".{out_name}.")
    if status != "succeeded":
        try:
            discard = job_kind(job.kind).discard_unless_succeeded
        except LookupError:
            discard = ()
        for rel in discard:
            ctx.storage.delete_tree(f"{job.output_path}/{rel}")
    job.output_bytes = ctx.storage.tree_bytes(job_dir(job.tenant_id, job.id))
    if s is not None:
        try:
            job_kind(job.kind).settle(ctx, s, job)
        except LookupError:
            pass
        audit.record(s, actor="system", action=f"job.{status}", tenant_id=job.tenant_id, resource_type="job",
                     resource_id=job.id, detail={"output_bytes": job.output_bytes})
    log.info("job %s: %s", job.id, status, extra={"job_id": job.id, "tenant_id": job.tenant_id})


def reconcile_active(ctx: ServiceContext) -> int:
    """One pass of the background reconciler over every active job; returns how many.
    ClusterUnavailable ends the pass and reaches the caller (the reconciler then says
    Ray is unavailable, instead of logging it every pass and carrying on)."""
    with session_scope(ctx.sessions) as s:
        ids = list(s.scalars(select(Job.id).where(Job.status.in_(ACTIVE_JOB_STATES)).order_by(Job.created_at)))
    for jid in ids:
        reconcile(ctx, jid)
    return len(ids)


LOST = "the Ray cluster was lost while this ran"
"""The message of a job (or training) whose cluster went away under it."""


def fail_lost(ctx: ServiceContext, message: str = LOST) -> list[str]:
    """Every job that was submitted to Ray (``pending`` or ``running``) marked failed with
    ``message``: called when the embedded head's process is gone, which takes every job
    it ran with it, so none of them holds its tenant's slot while nothing runs. Queued jobs
    stay queued (they were never submitted) and are submitted once a head is back.
    Returns the ids it failed.

    First the head's orphans go (:func:`services.raycluster.reap_lost_head`): the job drivers
    it started survive it (adopted by init, each holding its memory); every process on this
    host that names the dead head's address as its cluster is terminated (SIGTERM, SIGKILL
    after a grace period), so none writes into a job's folder after it is marked failed.
    Only for the embedded head, never an external cluster's."""
    from services.raycluster import reap_lost_head

    if not ctx.settings.ray_address:
        reap_lost_head(ctx.settings)
    with session_scope(ctx.sessions) as s:
        ids = list(s.scalars(select(Job.id).where(Job.status.in_(("pending", "running")))
                             .order_by(Job.created_at)))
    failed = []
    for jid in ids:
        with session_scope(ctx.sessions) as s:
            job = s.get(Job, jid)
            if job is None or job.status not in ("pending", "running"):
                continue
            _finish(ctx, job, "failed", message)
            if job.status == "failed" and job.message == message:
                failed.append(jid)
    if failed:
        log.warning("the Ray cluster was lost: %d job(s) marked failed (%s)", len(failed), ", ".join(failed))
    return failed


# ---- tenant operations ----------------------------------------------------------------

def cancel(ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    with session_scope(ctx.sessions) as s:
        job = get_job(s, tenant_id, job_id)
        if job.status in TERMINAL_JOB_STATES:
            raise Conflict(f"job {job_id} already {job.status}")
        queued = job.status == "queued"
        if queued:
            _finish(ctx, job, "cancelled", "cancelled before it was submitted")
            if job.submit_attempts == 0:
                return job
    if queued:
        # a submission whose answer never came (a timeout) may have reached Ray: stopped
        # there too, or it would run on outside the tenant's slots
        try:
            ctx.cluster.stop(job_id)
        except ClusterUnavailable as exc:
            log.warning("job %s: cancelled while queued; Ray could not be asked to stop it (%s)", job_id,
                        exc.message)
        return job
    try:
        ctx.cluster.stop(job_id)
    except ClusterUnavailable:
        # the embedded head is gone, and the job with it: nothing is left to stop
        if not ctx.ray_health.check(fresh=True).lost:
            raise
        fail_lost(ctx)
        with session_scope(ctx.sessions) as s:
            return s.get(Job, job_id)
    reconcile(ctx, job_id)
    with session_scope(ctx.sessions) as s:
        job = s.get(Job, job_id)
        if job.status in ACTIVE_JOB_STATES:
            job.message = "cancel requested"
        return job


def job_of_kind(s: Session, kind, tenant_id: str, job_id: str, path: str | None = None) -> Job:
    """The tenant's job ``job_id`` of ``kind`` (a :class:`services.jobkinds.JobKind`), as
    stored; NotFound ("no training ...", at the request's field ``path`` when given) for
    another tenant's, another kind's or none."""
    j = s.get(Job, job_id)
    if j is None or j.tenant_id != tenant_id or j.kind != kind.name:
        raise NotFound(f"no {kind.noun} {job_id!r}", **({"path": path} if path is not None else {}))
    return j


def succeeded_job(s: Session, kind: str, tenant_id: str, job_id: str, path: str, why: str) -> Job:
    """The tenant's job ``job_id`` of ``kind`` (NotFound at ``path`` for another tenant's, an
    unknown id or a job of another kind), which has succeeded (Conflict at ``path``, with
    ``why``): a job another one names by reference (``training:<id>``)."""
    jk = job_kind(kind)
    j = job_of_kind(s, jk, tenant_id, job_id, path)
    if j.status != "succeeded":
        raise Conflict(f"{jk.noun} {job_id} is {j.status}; {why}", path=path)
    return j


def fresh_job(ctx: ServiceContext, tenant_id: str, job_id: str) -> Job:
    """The job, reconciled with Ray first when it is still active (at most once a second
    per job; the background reconciler covers the rest)."""
    return job_status(ctx, tenant_id, job_id)[0]


_JOB_ROW = (select(*Job.__table__.c, Corpus.records.label("corpus_records"))
            .outerjoin(Corpus, Corpus.id == Job.corpus_id).where(Job.id == bindparam("job_id")))


def job_row(conn: Connection, tenant_id: str, job_id: str) -> Row:
    """The job as stored (not reconciled) with its corpus's record count
    (``corpus_records``), as a plain row: one prepared Core query, for polling."""
    row = conn.execute(_JOB_ROW, {"job_id": job_id}).first()
    if row is None or row.tenant_id != tenant_id:
        raise NotFound(f"no job {job_id!r}")
    return row


def job_status(ctx: ServiceContext, tenant_id: str, job_id: str) -> tuple[Job, int | None]:
    """:func:`fresh_job` and its corpus's record count (None once the corpus is deleted),
    in one query: this is what clients poll, so a finished job costs one round trip."""
    def load() -> tuple[Job, int | None]:
        with session_scope(ctx.sessions) as s:
            row = s.execute(select(Job, Corpus.records).outerjoin(Corpus, Corpus.id == Job.corpus_id)
                            .where(Job.id == job_id)).first()
            if row is None or row[0].tenant_id != tenant_id:
                raise NotFound(f"no job {job_id!r}")
            return row[0], row[1]

    job, records = load()
    if job.status in ACTIVE_JOB_STATES and ctx.should_ask_ray(job_id):
        try:
            reconcile(ctx, job_id)
        except ClusterUnavailable as exc:
            log.warning("job %s: not reconciled (%s)", job_id, exc.message)
        job, records = load()
    return job, records


def logs(ctx: ServiceContext, tenant_id: str, job_id: str) -> str:
    with session_scope(ctx.sessions) as s:
        job = get_job(s, tenant_id, job_id)
        if job.status == "queued" or job.submit_attempts == 0:
            return ""
    return storage_relative(ctx, tenant_id, ctx.cluster.logs(job_id))


def storage_relative(ctx: ServiceContext, tenant_id: str, text: str) -> str:
    """``text`` (a job's log) with the server's locations as a tenant knows them: the
    tenant's folder becomes relative paths (``jobs/<id>/output/model``), the rest of the
    storage ``<storage>``, the service's data folder ``<data>``, the embedded Ray head's
    session folder ``<ray>``, the service's Python (its site-packages and standard
    library) ``<python>`` and its source tree ``<service>``."""
    st = ctx.storage
    names = {str(ctx.settings.data_path): "<data>", **_server_locations(ctx.settings)}
    # every location with and without its scheme (Ray and Arrow print s3 paths without it)
    for root in (st.location("x")[:-2], st.root):
        names.update({f"{root}/tenants/{tenant_id}/": "", f"{root}/tenants/{tenant_id}": ".", root: "<storage>"})
    return redact_paths(text, names)


def _server_locations(settings) -> dict[str, str]:
    """The service's own folders a job's log may name (Ray's session folder, the venv, the
    interpreter's standard library, the source tree), each with what a tenant sees."""
    import sys

    from services.raycluster import PROJECT_ROOT, read_state

    names = {str(PROJECT_ROOT): "<service>", sys.prefix: "<python>",
             f"{sys.base_prefix.rstrip('/')}/lib/": "<python>/lib/"}
    head = read_state(settings.data_path) if not settings.ray_address else None
    if head is not None:
        names[head.temp_dir] = "<ray>"
    return {k: v for k, v in names.items() if len(k) > 1}


def delete_job(ctx: ServiceContext, tenant_id: str, job_id: str) -> None:
    """Delete a finished job and its output; not while an active job reads that output
    (under the admission lock, so no such job is admitted meanwhile)."""
    with ctx.admission, session_scope(ctx.sessions) as s:
        job = get_job(s, tenant_id, job_id)
        if job.status in ACTIVE_JOB_STATES:
            raise Conflict(f"job {job_id} is {job.status}; cancel it first")
        readers = active_readers(s, tenant_id, {job_id})
        if readers:
            raise Conflict(f"job {job_id}'s output is the input of active job(s) {', '.join(readers)}; "
                           "wait for them or cancel them first")
        delete_job_data(ctx, job)
        s.delete(job)
    log.info("tenant %s: job %s deleted", tenant_id, job_id)


def active_readers(s: Session, tenant_id: str, resource_ids: Collection[str]) -> list[str]:
    """Ids of the tenant's active jobs that read any of ``resource_ids`` (job outputs or
    corpora): as their input job, or named in their spec (kinds with ``inputs`` or
    ``also_reads``: a continued training's base training). A tenant
    has a few active jobs at most, so their specs are read here rather than indexed."""
    wanted = set(resource_ids)
    out = []
    for j in s.scalars(select(Job).where(Job.tenant_id == tenant_id, Job.status.in_(ACTIVE_JOB_STATES))
                       .order_by(Job.created_at, Job.id)):
        try:
            inputs = job_kind(j.kind).inputs
            also = job_kind(j.kind).also_reads
        except LookupError:
            inputs = also = None
        if j.input_job_id in wanted or (inputs is not None and wanted & inputs(j.spec)) or \
                (also is not None and wanted & also(j.spec)):
            out.append(j.id)
    return out


def delete_job_data(ctx: ServiceContext, job: Job) -> None:
    ctx.storage.delete_file(quarantine_rel(job))
    ctx.storage.delete_tree(job_dir(job.tenant_id, job.id))
