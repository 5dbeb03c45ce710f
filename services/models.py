"""SQLAlchemy 2 models. Every corpus, key and job row carries its ``tenant_id``; every
query the API makes filters on it. Schema changes go through Alembic
(``services/migrations``); keep this file and the latest revision in step."""

from __future__ import annotations

import datetime as dt
import json
import secrets

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    """16 hex characters from the CSPRNG (the same shape as a key file's ``key_id``)."""
    return secrets.token_hex(8)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class UTCDateTime(TypeDecorator):
    """Timezone-aware UTC datetimes on every backend (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    storage_limit_bytes: Mapped[int] = mapped_column(BigInteger)
    max_concurrent_jobs: Mapped[int] = mapped_column(Integer)
    max_epsilon_per_corpus: Mapped[float | None] = mapped_column(Float, nullable=True)
    """The most epsilon the trainings on one uploaded corpus may spend together (its
    privacy ledger, ``services.ledger``); None: no limit, the ledger is still kept."""
    disabled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class ApiToken(Base):
    """Only the SHA-256 of a token is stored; the token is shown once, at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class Corpus(Base):
    __tablename__ = "corpora"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    format: Mapped[str] = mapped_column(String(16))
    bytes: Mapped[int] = mapped_column(BigInteger)
    records: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    storage_path: Mapped[str] = mapped_column(String(1024))
    """Relative to the storage root."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Key(Base):
    """A tenant's key. The material is enveloped: ``material_ct`` is AES-256-GCM under a
    per-key data key, ``wrapped_dek`` that data key under the master key. Destroying a
    key deletes both (crypto-shredding); the row stays as a tombstone."""

    __tablename__ = "keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    alphabet: Mapped[str | None] = mapped_column(String(16), nullable=True)
    length: Mapped[int | None] = mapped_column(Integer, nullable=True)
    label: Mapped[str | None] = mapped_column(String(256), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default="enabled")  # enabled | disabled | destroyed
    master_key_id: Mapped[str | None] = mapped_column(String(16), nullable=True)
    wrapped_dek: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    material_ct: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    destroyed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class JSONText(TypeDecorator):
    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else json.dumps(value, sort_keys=True)

    def process_result_value(self, value, dialect):
        return None if value is None else json.loads(value)


ACTIVE_JOB_STATES = ("queued", "pending", "running")
TERMINAL_JOB_STATES = ("succeeded", "failed", "cancelled")


class Job(Base):
    """A job of one of the kinds in ``services.jobkinds`` (privatization, training). ``id``
    is also the Ray Jobs ``submission_id``, so a re-submission of the same job is refused
    by Ray instead of running twice."""

    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    corpus_id: Mapped[str | None] = mapped_column(ForeignKey("corpora.id", ondelete="SET NULL"), index=True,
                                                  nullable=True)
    kind: Mapped[str] = mapped_column(String(32), default="privatize", server_default="privatize")
    """Its entry in ``services.jobkinds``: the spec it takes, the module it runs, its results."""
    input_job_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    """The succeeded job whose output this job reads (a training's privatization job); None
    for a job that reads its corpus. Kept after that job is deleted (what it was made from)."""
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    ray_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    spec: Mapped[dict] = mapped_column(JSONText)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    key_ids: Mapped[list] = mapped_column(JSONText, default=list)
    """``keystore:`` key ids the spec references."""
    output_path: Mapped[str] = mapped_column(String(1024))
    """Relative to the storage root; ``manifest.json`` and ``shards/`` live under it."""
    submit_attempts: Mapped[int] = mapped_column(Integer, default=0)
    counts: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
    output_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    input_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    """The corpus's size when the job was created (``privatize_processed_bytes_total``)."""
    quarantined_records: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    submitted_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class PrivacySpend(Base):
    """One training's entry in the privacy ledger of the corpus its data came from, keyed on
    the upload's content (``corpus_sha256``): deleting the corpus or the training and
    uploading the same file again keeps it (spent is spent). ``state``: ``reserved`` from
    admission until the training ends (its planned steps), then ``spent`` (the DP steps it
    took). A training without DP has no noise: the ledger has no guarantee."""

    __tablename__ = "privacy_spends"

    job_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    corpus_sha256: Mapped[str] = mapped_column(String(64), index=True)
    corpus_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """The corpus it was admitted on (kept after that corpus is deleted: where it came from)."""
    base_training_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    """The training whose checkpoint it continues (lineage of the model)."""
    state: Mapped[str] = mapped_column(String(16), default="reserved")
    noise_multiplier: Mapped[float | None] = mapped_column(Float, nullable=True)
    sample_rate: Mapped[float] = mapped_column(Float, default=0.0)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    """Planned DP steps while reserved; the steps taken once spent."""
    planned_steps: Mapped[int] = mapped_column(Integer, default=0)
    delta: Mapped[float] = mapped_column(Float, default=0.0)
    unit_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    unit: Mapped[str] = mapped_column(String(16), default="sequence")
    group_size: Mapped[int] = mapped_column(Integer, default=1)
    accountant: Mapped[str] = mapped_column(String(8), default="prv")
    """The accountant its plan used; the ledger composes with RDP when any training did
    (PRV's tighter figure beside RDP's own would read as less than a training spent)."""
    epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    """Its own epsilon (the unit's) at the steps in ``steps``."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    settled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime, nullable=True)


class CatalogModel(Base):
    """A base model a training may name as ``model.checkpoint: base:<name>``
    (``services.catalog``): the operator's catalog (``tenant_id`` None, added with ``privatize
    admin model add``, stored under ``models/<id>/``), or a tenant's own upload (visible to it
    alone, stored under ``tenants/<tenant>/models/<id>/``, counted in its storage). A Hugging
    Face causal-LM folder with ``config.json`` and safetensors weights, never a pickle."""

    __tablename__ = "catalog_models"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True,
                                                  nullable=True)
    """None: the operator's catalog, offered to every tenant."""
    name: Mapped[str] = mapped_column(String(64), index=True)
    storage_path: Mapped[str] = mapped_column(String(1024))
    """The model folder, relative to the storage root."""
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    architecture: Mapped[str | None] = mapped_column(String(128), nullable=True)
    """``config.json``'s first architecture (``LlamaForCausalLM``)."""
    source: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    """Where the operator added it from (never shown to tenants); None for an upload."""
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class AuditEvent(Base):
    """Who did what to which resource, and how it ended: one row per state-changing API
    call (successful or refused), admin command and job outcome. Ids, action names and
    status codes only: never document text, tokens or key material."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
                                    autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    tenant_id: Mapped[str | None] = mapped_column(String(32), nullable=True, index=True)
    """The tenant acting (API) or acted on (admin); none for unauthenticated calls."""
    actor: Mapped[str] = mapped_column(String(64))
    """``token:<token id>``, ``admin``, ``system`` or ``anonymous``."""
    action: Mapped[str] = mapped_column(String(64))
    resource_type: Mapped[str | None] = mapped_column(String(16), nullable=True)
    resource_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The HTTP status answered (API calls)."""
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    client: Mapped[str | None] = mapped_column(String(64), nullable=True)
    detail: Mapped[dict | None] = mapped_column(JSONText, nullable=True)
