"""The service's settings: the one place that reads the environment.

Every setting is an environment variable with the ``PRIVATIZE_`` prefix (or a field of
a ``.env`` file named by ``PRIVATIZE_ENV_FILE``). The defaults give the embedded
deployment: SQLite and local files under ``PRIVATIZE_DATA_DIR``, and a local Ray head
the service starts and supervises itself.

``get_settings()`` is cached; FastAPI injects it with ``Depends`` and tests build their
own ``Settings`` and hand it to ``create_app``.

Outside development mode (``PRIVATIZE_ENV=production``, the default), ``check_secrets``
refuses to start without a master key, with a master key that is a well-known default,
or with a database URL whose password is one (the FastAPI full-stack template's rule).
In development mode a master key is generated once under the data directory.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from services.errors import ConfigError

MASTER_KEY_BYTES = 32
_DEFAULT_SECRETS = {"changethis", "changeme", "change-me", "secret", "password", "postgres", "admin", "default",
                    "privatize", "test", ""}
GiB = 1 << 30


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PRIVATIZE_", extra="ignore", frozen=True)

    env: Literal["production", "development"] = "production"
    """``development`` generates a master key under the data directory and relaxes the
    secret checks; never use it for real data."""

    data_dir: Path = Path("privatize-data")
    database_url: str | None = None
    """SQLAlchemy URL; default ``sqlite:///<data_dir>/privatize.db``. PostgreSQL:
    ``postgresql+psycopg://user:password@host/db``."""
    database_pool_size: int = Field(40, ge=1, le=1000)
    """Connections kept open per process (opened on demand). The API runs its handlers on
    a pool of 40 threads; a smaller pool makes busy threads open and close a connection per
    request (on PostgreSQL, a TCP connect and authentication each time)."""
    sqlite_busy_timeout_s: float = Field(30.0, gt=0, le=3600)
    """SQLite: how long a write waits for another connection's lock before it fails (a
    failed write is retried by the reconciler; a request answers 503)."""
    storage_uri: str | None = None
    """A local directory or a ``pyarrow.fs`` URI (``s3://bucket/prefix``); default
    ``<data_dir>/storage``."""
    master_key: SecretStr | None = None
    """32 bytes, Base64 or hex. Prefer ``master_key_file``."""
    master_key_file: Path | None = None

    ray_address: str | None = None
    """Ray dashboard (Jobs API) URL of an existing cluster, e.g. ``http://ray-head:8265``.
    Unset: the service starts and supervises an embedded local head."""
    ray_num_cpus: int | None = Field(None, ge=1)
    ray_temp_dir: Path | None = None
    """Ray's session directory root for the embedded head (kept short: Ray puts Unix
    sockets under it). Default ``/tmp/privatize-ray-<hash of data_dir>``."""
    ray_start_timeout_s: float = 90.0
    ray_api_timeout_s: float = Field(60.0, gt=0)
    """How long one request to the Ray Jobs API may take (connecting: at most 10 s of it)
    before the cluster counts as unavailable for it. Ray's client sets no timeout: a
    dashboard that accepts and never answers held the request, and every other behind the
    client's lock, for good."""
    ray_auth_token_file: Path | None = None
    """Ray's token (``RAY_AUTH_MODE=token``). For the embedded head: where it is made once
    (mode 0600); default ``ray-auth-token`` beside the master key file (else in the data
    directory). With ``ray_address``: the cluster's token, sent to its Jobs API as
    ``Authorization: Bearer`` (unset: no token is sent)."""

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = Field(1, ge=1, le=64)
    """API processes on one host (uvicorn workers). The API is CPU-bound Python, one core
    per process; on Kubernetes prefer more replicas of one worker each. Each worker keeps
    its own HTTP request counters in ``/metrics`` (the job and byte gauges come from the
    database and agree)."""
    poll_interval_s: float = Field(2.0, gt=0)
    """How often the reconciler asks Ray about active jobs."""
    auto_migrate: bool = True
    """Run the Alembic migrations at startup (else: ``privatize admin migrate``)."""

    default_storage_limit_bytes: int = Field(10 * GiB, ge=0)
    default_max_concurrent_jobs: int = Field(2, ge=0)
    max_queued_jobs: int = Field(8, ge=0)
    """Jobs a tenant may have waiting (``queued``: admitted, not yet given to Ray, while the
    cluster cannot be reached or the tenant's slots are taken), beyond the
    ``max_concurrent_jobs`` Ray runs for it; a waiting job holds no slot."""
    max_upload_bytes: int = Field(100 * GiB, ge=1)
    upload_chunk_bytes: int = Field(4 << 20, ge=1 << 16)
    max_decrypt_bytes: int = Field(16 << 20, ge=1)
    max_json_body_bytes: int = Field(1 << 20, ge=1 << 12, le=64 << 20)
    """A JSON request body over this is refused with 413 before it is read whole."""
    max_json_string_chars: int = Field(16_384, ge=256, le=1 << 20)
    """A string in a JSON request's configuration (not /v1/decrypt's texts) over this is refused with 422."""
    max_json_depth: int = Field(64, ge=8, le=512)
    """Arrays and objects in a JSON request body nested deeper than this are refused with 422
    before it is parsed (the parsers recurse; Python's gives up near 1000)."""
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    """One JSON object per log line (with the request id), or plain text."""

    # ---- pipelines: the most a tenant's privatization spec may ask for (422 beyond) ---
    pipeline_max_bloom_bytes: int = Field(1 * GiB, ge=1 << 20, le=80 * 10**9)
    """The Bloom filters of a job's ``dedup`` stages (``method: bloom``), computed from
    ``bloom_capacity`` and ``bloom_fp_rate`` (all partitions' filters, summed over the
    stages). 1 GiB holds about 3*10^8 distinct records at ``bloom_fp_rate`` 10^-6."""
    pipeline_max_shards: int = Field(256, ge=1, le=4096)
    """``output.num_shards`` (the spec's own bound is 4096)."""
    pipeline_max_stages: int = Field(16, ge=1, le=32)
    """Stages per spec (the spec's own bound is 32)."""
    pipeline_max_redact_batch_size: int = Field(1000, ge=1, le=10_000)
    """A ``redact`` stage's ``batch_size`` (texts per spaCy batch; the stage's own bound is
    10000)."""

    # ---- synthesis: where a tenant's synthesize stage may send its requests ---------
    llm_base_urls: str = ""
    """OpenAI-compatible endpoints (exact base URLs, comma-separated) a tenant's
    ``synthesize`` stage may call, with its own ``api-key`` key; empty: the service offers
    no synthesis (the server makes no request to an address a tenant chose)."""

    # ---- trainings: the most a tenant's training config may ask for (422 beyond) -----
    train_presets: str = "tiny,small"
    """Model presets tenants may train, comma-separated (``paper-551m``: the paper's 551M)."""
    # (each at most the bound ``train.config`` declares on the field it limits, and declared
    # there: ``Annotated[int, Quota("train_max_...")]``, checked by services.limits.field_quotas)
    train_max_workers: int = Field(2, ge=1, le=256)
    train_max_cpus_per_worker: float = Field(4.0, gt=0, le=64)
    train_allow_gpu: bool = False
    train_max_steps: int = Field(100_000, ge=1, le=10_000_000)
    train_max_epochs: int = Field(100, ge=1, le=1000)
    train_max_batch_size: int = Field(256, ge=1, le=4096)
    train_max_seq_len: int = Field(2048, ge=8, le=8192)
    train_max_vocab_size: int = Field(65_536, ge=300, le=262_144)
    detector_max_epochs: int = Field(20, ge=1, le=50)
    """Epochs a detector adaptation (``/v1/detectors``, ``privatize.adapt_job.AdaptConfig``)
    may ask for."""
    train_max_failures: int = Field(3, ge=0, le=100)
    """Ray Train restarts (from the last checkpoint) a tenant's run may ask for."""
    train_max_audit_canaries: int = Field(10_000, ge=8, le=100_000)
    """``audit.canaries``: blocks of ``data.seq_len`` tokens added to the DP split and scored
    after training."""
    train_max_lora_rank: int = Field(64, ge=1, le=1024)
    """``model.lora.r``: the adapters' rank (their weights, optimizer state and, under DP,
    per-example gradients grow with it)."""

    # ---- evaluations: the most a tenant's evaluation config may ask for (422 beyond) --
    eval_max_models: int = Field(8, ge=1, le=16)
    """Models attacked by one evaluation (the config's own bound is 16)."""
    eval_max_workers: int = Field(2, ge=0, le=64)
    """``scoring.workers``: Ray actors scoring membership examples."""
    eval_max_examples: int = Field(10_000, ge=10, le=1_000_000)
    """``mia.limit``, ``perplexity.limit``, ``extraction.count`` and ``canaries.sample``."""
    eval_max_exact_digits: int = Field(6, ge=1, le=7)
    """``canaries.digits`` with ``method: exact`` (every one of 10^digits candidates is scored)."""
    eval_max_canaries: int = Field(100, ge=1, le=1000)
    """``canaries.count`` and ``canaries.held_out`` (each canary's candidates are scored)."""
    eval_max_batch_tokens: int = Field(65_536, ge=256, le=1 << 22)
    """``scoring.batch_tokens``: tokens per scoring batch (its logits are batch_tokens x
    vocabulary floats)."""

    # ---- derived ------------------------------------------------------------------
    @property
    def dev(self) -> bool:
        return self.env == "development"

    @property
    def llm_base_url_list(self) -> list[str]:
        return [u.strip().rstrip("/") for u in self.llm_base_urls.split(",") if u.strip()]

    @property
    def train_preset_list(self) -> list[str]:
        return [p.strip() for p in self.train_presets.split(",") if p.strip()]

    @property
    def data_path(self) -> Path:
        return self.data_dir.expanduser().resolve()

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_path / 'privatize.db'}"

    @property
    def effective_storage_uri(self) -> str:
        return self.storage_uri or str(self.data_path / "storage")

    @property
    def dev_master_key_path(self) -> Path:
        return self.data_path / "master.key"

    @property
    def effective_master_key_file(self) -> Path | None:
        """The file workers read the master key from (``PRIVATIZE_MASTER_KEY_FILE``)."""
        if self.master_key_file is not None:
            return self.master_key_file.expanduser().resolve()
        if self.master_key is None and self.dev:
            return self.dev_master_key_path
        return None


class WorkerSettings(BaseSettings):
    """What a Ray worker needs to resolve ``keystore:`` references: the master key (a
    deployment secret set on the node) and the job's key bundle (set by the service in
    the job's runtime environment; a location, not a secret)."""

    model_config = SettingsConfigDict(env_prefix="PRIVATIZE_", extra="ignore", frozen=True)

    master_key: SecretStr | None = None
    master_key_file: Path | None = None
    key_bundle: str | None = None


@lru_cache
def get_settings() -> Settings:
    return Settings()


def get_worker_settings() -> WorkerSettings:
    return WorkerSettings()


def decode_master_key(text: str, where: str) -> bytes:
    """32 bytes from Base64 (standard or URL-safe) or hex text."""
    s = text.strip()
    raw: bytes | None = None
    if len(s) == 2 * MASTER_KEY_BYTES:
        try:
            raw = bytes.fromhex(s)
        except ValueError:
            raw = None
    if raw is None:
        try:
            raw = base64.b64decode(s.replace("-", "+").replace("_", "/") + "=" * (-len(s) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != MASTER_KEY_BYTES:
        raise ConfigError(f"{where}: the master key must be {MASTER_KEY_BYTES} bytes, Base64 or hex")
    if len(set(raw)) < 8:
        raise ConfigError(f"{where}: the master key looks like a default or test value (too few distinct bytes)")
    return raw


def read_master_key_file(path: Path) -> bytes:
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the master key file ({getattr(exc, 'strerror', None) or exc})") \
            from None
    return decode_master_key(text, str(path))


def new_master_key_text() -> str:
    return base64.b64encode(secrets.token_bytes(MASTER_KEY_BYTES)).decode("ascii")


def write_master_key_file(path: Path) -> Path:
    """A fresh master key, Base64, mode 0600; refuses to overwrite."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(new_master_key_text() + "\n")
    return path


def load_master_key(settings: Settings) -> bytes:
    """The master key the settings name; in development mode one is generated once."""
    if settings.master_key is not None and settings.master_key_file is not None:
        raise ConfigError("set PRIVATIZE_MASTER_KEY or PRIVATIZE_MASTER_KEY_FILE, not both")
    if settings.master_key is not None:
        return decode_master_key(settings.master_key.get_secret_value(), "PRIVATIZE_MASTER_KEY")
    if settings.master_key_file is not None:
        return read_master_key_file(settings.master_key_file.expanduser())
    if settings.dev:
        p = settings.dev_master_key_path
        if not p.exists():
            try:
                write_master_key_file(p)
            except FileExistsError:
                pass  # another process made it first
        return read_master_key_file(p)
    raise ConfigError("no master key: set PRIVATIZE_MASTER_KEY_FILE (a file holding 32 random bytes, Base64; "
                      "`privatize admin master-key new --out FILE` makes one), or PRIVATIZE_ENV=development")


def check_secrets(settings: Settings) -> bytes:
    """Refuse to start with missing or default secrets outside development mode.
    Returns the master key."""
    from sqlalchemy.engine import make_url

    key = load_master_key(settings)
    if not settings.dev:
        url = make_url(settings.effective_database_url)
        if url.password is not None and url.password.lower() in _DEFAULT_SECRETS:
            raise ConfigError("PRIVATIZE_DATABASE_URL: the database password is a well-known default; "
                              "set a real one (or PRIVATIZE_ENV=development)")
    return key


def load_worker_master_key(ws: WorkerSettings) -> bytes:
    if ws.master_key is not None:
        return decode_master_key(ws.master_key.get_secret_value(), "PRIVATIZE_MASTER_KEY")
    if ws.master_key_file is not None:
        return read_master_key_file(ws.master_key_file.expanduser())
    raise ConfigError("no master key on this node: set PRIVATIZE_MASTER_KEY_FILE in the Ray node's environment")


class ClientSettings(BaseSettings):
    """``privatize submit``'s defaults: ``PRIVATIZE_URL`` and ``PRIVATIZE_TOKEN``."""

    model_config = SettingsConfigDict(env_prefix="PRIVATIZE_", extra="ignore", frozen=True)

    url: str | None = None
    token: SecretStr | None = None


def get_client_settings() -> ClientSettings:
    return ClientSettings()
