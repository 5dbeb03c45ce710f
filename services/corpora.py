"""Corpora: streamed upload, validation, listing, deletion.

An upload is read from the request body in chunks (never whole into memory) into a
file under a temporary name in the spool, hashed as it goes, validated with
``privatize.records``' rules, and only then renamed into place and recorded. A client
that disconnects mid-upload, a size or storage limit hit, or a failed validation leaves
nothing behind: the spool file is removed and no row is written. Spool files a crash
left are removed at startup.

Deleting a corpus deletes its data and everything derived from it: its jobs, their
outputs and quarantines.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
from pathlib import Path

import anyio
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.requests import ClientDisconnect, Request

from services import validation
from services.context import ServiceContext
from services.db import session_scope
from services.errors import Conflict, CorpusInvalid, InvalidRequest, NotFound, StorageLimitExceeded
from services.jobs import active_readers, delete_job_data
from services.models import ACTIVE_JOB_STATES, CatalogModel, Corpus, Job, Tenant, new_id
from services.storage import corpus_dir
from services.tenants import storage_used
from services.validation import EXTENSIONS, JsonlScreen, Utf8Checker, format_for, validate_corpus

log = logging.getLogger(__name__)


class _Sink:
    """Hashes, UTF-8-checks and writes chunks (in a worker thread, while the event loop
    receives the next chunk). A JSONL upload past ``EXACT_LIMIT`` bytes (validated by the
    fast path) is also screened as it comes (``JsonlScreen``), from its first byte."""

    def __init__(self, path: Path, fmt: str):
        self.path = path
        self.fh = open(path, "xb")
        self.sha = hashlib.sha256()
        self.utf8 = Utf8Checker() if fmt in ("jsonl", "text") else None
        self._screen = JsonlScreen() if fmt == "jsonl" else None
        self._screening = False
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.sha.update(data)
        if self.utf8 is not None:
            self.utf8.feed(data)
        if self._screen is not None and self.bytes + len(data) > validation.EXACT_LIMIT:
            if not self._screening:  # the first bytes, read back once
                self._screening = True
                self.fh.flush()
                with open(self.path, "rb") as back:
                    while chunk := back.read(4 << 20):
                        self._screen.feed(chunk)
            self._screen.feed(data)
        self.fh.write(data)
        self.bytes += len(data)

    @property
    def screen(self) -> JsonlScreen | None:
        """The finished screen of the whole upload, when it ran (after ``close``)."""
        return self._screen if self._screening and self.fh.closed else None

    def close(self) -> None:
        if not self.fh.closed:
            if self.utf8 is not None:
                self.utf8.finish()
            if self._screening:
                self._screen.finish()
            self.fh.close()


def get_corpus(s: Session, tenant_id: str, corpus_id: str) -> Corpus:
    c = s.get(Corpus, corpus_id)
    if c is None or c.tenant_id != tenant_id:
        raise NotFound(f"no corpus {corpus_id!r}")
    return c


def list_corpora(s: Session, tenant_id: str) -> list[Corpus]:
    return list(s.scalars(select(Corpus).where(Corpus.tenant_id == tenant_id).order_by(Corpus.created_at,
                                                                                        Corpus.id)))


def _admit(ctx: ServiceContext, tenant_id: str, declared: int | None) -> int:
    """Bytes this upload may use; reserves the declared length against the limit."""
    with ctx.admission, session_scope(ctx.sessions) as s:
        t = s.get(Tenant, tenant_id)
        used = storage_used(s, tenant_id) + ctx.reserved.get(tenant_id, 0)
        room = max(0, t.storage_limit_bytes - used)
        allowed = min(room, ctx.settings.max_upload_bytes)
        if declared is not None and declared > allowed:
            if declared > ctx.settings.max_upload_bytes:
                raise StorageLimitExceeded(f"upload of {declared} bytes is over the service's limit of "
                                           f"{ctx.settings.max_upload_bytes} bytes")
            raise StorageLimitExceeded(f"upload of {declared} bytes does not fit the tenant's storage limit "
                                       f"({used} of {t.storage_limit_bytes} bytes used)")
        ctx.reserved[tenant_id] = ctx.reserved.get(tenant_id, 0) + (declared or 0)
        return allowed


def _release(ctx: ServiceContext, tenant_id: str, declared: int | None) -> None:
    with ctx.admission:
        left = ctx.reserved.get(tenant_id, 0) - (declared or 0)
        if left > 0:
            ctx.reserved[tenant_id] = left
        else:
            ctx.reserved.pop(tenant_id, None)


async def admit_upload(ctx: ServiceContext, tenant_id: str, request: Request) -> tuple[int, int | None]:
    """Admit an upload of the request's declared ``Content-Length`` (422 when it is not a
    number) against the tenant's storage: (the bytes it may send, :func:`_admit`; the
    declared length, which :func:`_release` gives back when it ends)."""
    declared = request.headers.get("content-length")
    try:
        declared_n = int(declared) if declared is not None else None
    except ValueError:
        raise InvalidRequest("Content-Length is not a number") from None
    return await anyio.to_thread.run_sync(_admit, ctx, tenant_id, declared_n), declared_n


async def receive_upload(ctx: ServiceContext, tenant_id: str, request: Request, *, name: str | None,
                         fmt: str | None, filename: str | None) -> Corpus:
    fmt = format_for(fmt, filename or name)
    name = (name or filename or f"corpus{EXTENSIONS[fmt]}").strip()
    if not name or len(name) > 256:
        raise InvalidRequest("name: 1 to 256 characters")
    allowed, declared_n = await admit_upload(ctx, tenant_id, request)
    cid = new_id()
    spool_path = ctx.spool / f".upload-{cid}{EXTENSIONS[fmt]}"  # the temporary name
    stored_rel = f"{corpus_dir(tenant_id, cid)}/data{EXTENSIONS[fmt]}"
    sink: _Sink | None = None
    writing: asyncio.Task | None = None  # at most one chunk in the writer thread
    stored = False
    try:
        sink = await anyio.to_thread.run_sync(_Sink, spool_path, fmt)
        pending: list[bytes] = []
        pending_n = 0
        total = 0
        chunk_bytes = ctx.settings.upload_chunk_bytes
        async for chunk in request.stream():
            if not chunk:
                continue
            total += len(chunk)
            if total > allowed:
                raise StorageLimitExceeded(f"upload exceeds the {allowed} bytes this tenant may still store")
            pending.append(chunk)
            pending_n += len(chunk)
            if pending_n >= chunk_bytes:
                if writing is not None:
                    await writing
                writing = asyncio.ensure_future(anyio.to_thread.run_sync(sink.write, b"".join(pending)))
                pending, pending_n = [], 0
        if writing is not None:
            await writing
            writing = None
        if pending:
            await anyio.to_thread.run_sync(sink.write, b"".join(pending))
        await anyio.to_thread.run_sync(sink.close)
        if sink.bytes == 0:
            raise CorpusInvalid("file is empty", line=None, problem="file is empty")
        validated = await anyio.to_thread.run_sync(
            functools.partial(validate_corpus, spool_path, fmt, ctx.spool, utf8=sink.utf8, screen=sink.screen))
        await anyio.to_thread.run_sync(ctx.storage.put_file, spool_path, stored_rel)
        stored = True
        corpus = Corpus(id=cid, tenant_id=tenant_id, name=name, format=fmt, bytes=sink.bytes,
                        records=validated.records, sha256=sink.sha.hexdigest(), storage_path=stored_rel)

        def record():
            with session_scope(ctx.sessions) as s:
                s.add(corpus)

        await anyio.to_thread.run_sync(record)
        log.info("tenant %s: corpus %s stored (%s, %d bytes, %d records)", tenant_id, cid, fmt, sink.bytes,
                 validated.records)
        return corpus
    except ClientDisconnect:
        log.info("tenant %s: upload %s interrupted by the client; discarded", tenant_id, cid)
        raise
    finally:
        if writing is not None:  # let the thread finish with the file before closing it
            with contextlib.suppress(Exception):
                await asyncio.shield(writing)
        if sink is not None:
            sink.close()
        spool_path.unlink(missing_ok=True)
        if not _committed(ctx, cid) and stored:
            ctx.storage.delete_tree(corpus_dir(tenant_id, cid))
        _release(ctx, tenant_id, declared_n)


def _committed(ctx: ServiceContext, corpus_id: str) -> bool:
    with session_scope(ctx.sessions) as s:
        return s.get(Corpus, corpus_id) is not None


def delete_corpus(ctx: ServiceContext, tenant_id: str, corpus_id: str) -> int:
    """Delete the corpus, its jobs and their outputs; returns the number of jobs removed."""
    with ctx.admission, session_scope(ctx.sessions) as s:
        corpus = get_corpus(s, tenant_id, corpus_id)
        jobs = list(s.scalars(select(Job).where(Job.corpus_id == corpus_id)))
        active = [j.id for j in jobs if j.status in ACTIVE_JOB_STATES]
        if active:
            raise Conflict(f"corpus {corpus_id} has active job(s) {', '.join(active)}; cancel them first")
        readers = active_readers(s, tenant_id, {corpus_id, *(j.id for j in jobs)})
        if readers:
            raise Conflict(f"corpus {corpus_id} or its jobs' output is read by active job(s) {', '.join(readers)}; "
                           "wait for them or cancel them first")
        for j in jobs:
            delete_job_data(ctx, j)
            s.delete(j)
        ctx.storage.delete_tree(corpus_dir(tenant_id, corpus_id))
        s.delete(corpus)
    log.info("tenant %s: corpus %s deleted with %d job(s)", tenant_id, corpus_id, len(jobs))
    return len(jobs)


def sweep_orphans(ctx: ServiceContext) -> int:
    """Remove storage a crash left without a database row (run at startup, before any
    request): corpus, job and uploaded-model directories nothing refers to."""
    import pyarrow.fs as pafs

    st = ctx.storage
    removed = 0
    with session_scope(ctx.sessions) as s:
        corpora = set(s.scalars(select(Corpus.id)))
        jobs = set(s.scalars(select(Job.id)))
        tenants = set(s.scalars(select(Tenant.id)))
        models = set(s.scalars(select(CatalogModel.id)))
    for tenant_info in st.fs.get_file_info(pafs.FileSelector(f"{st.root}/tenants", allow_not_found=True)):
        if tenant_info.type != pafs.FileType.Directory:
            continue
        tid = tenant_info.base_name
        for kind, known in (("corpora", corpora), ("jobs", jobs), ("models", models)):
            sel = pafs.FileSelector(f"{tenant_info.path}/{kind}", allow_not_found=True)
            for info in st.fs.get_file_info(sel):
                name = info.base_name
                if tid not in tenants or name not in known:
                    rel = f"tenants/{tid}/{kind}/{name}"
                    if info.type == pafs.FileType.Directory:
                        st.delete_tree(rel)
                    else:
                        st.delete_file(rel)
                    removed += 1
    if removed:
        log.info("removed %d orphaned storage entries", removed)
    return removed
