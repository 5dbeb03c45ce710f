"""The service's errors. Domain code raises these; ``services.app`` maps them to HTTP
status codes in one place (``STATUS``), so ``HTTPException`` appears nowhere else.
Messages are one line and never carry key bytes, tokens or document text."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error the service raises on purpose."""

    code = "error"

    def __init__(self, message: str, **extra):
        super().__init__(message)
        self.message = message
        self.extra = extra


class ConfigError(ServiceError, ValueError):
    """The service's configuration cannot be used (missing or default secrets...)."""

    code = "config"


class Unauthorized(ServiceError):
    code = "unauthorized"


class NotFound(ServiceError, LookupError):
    """No such resource *for this tenant*: another tenant's ids answer the same."""

    code = "not_found"


class InvalidRequest(ServiceError, ValueError):
    """The request is well-formed HTTP but its content is unusable (422)."""

    code = "invalid"


class CorpusInvalid(InvalidRequest):
    """An uploaded corpus failed validation; the message names the problem and line."""

    code = "invalid_corpus"


class SpecInvalid(InvalidRequest):
    """The pipeline spec failed validation; ``errors`` lists field paths."""

    code = "invalid_spec"


class Conflict(ServiceError):
    """The resource's state forbids the operation (a disabled key, a running job)."""

    code = "conflict"


class LimitExceeded(ServiceError):
    """A per-tenant limit on concurrent jobs (429)."""

    code = "limit_exceeded"


class StorageLimitExceeded(ServiceError):
    """A per-tenant storage limit or the upload size limit (413)."""

    code = "storage_limit"


class BudgetExceeded(ServiceError):
    """A training would take its data's privacy ledger past the tenant's limit (403); the
    body has ``budget`` (limit, spent, asked, the composed figure) and ``path``."""

    code = "privacy_budget_exceeded"


class UnsupportedFormat(ServiceError, ValueError):
    code = "unsupported_format"


class ClusterUnavailable(ServiceError):
    """The Ray cluster cannot be reached (503)."""

    code = "cluster_unavailable"


def config_invalid(errors: list[tuple[str, str]]) -> SpecInvalid:
    """422 for a config in a request body (``{"config": ...}``): one entry per (field
    path, message), its ``loc`` the path in the body (list indexes as integers)."""
    def loc(path: str) -> list:
        return ["body", "config", *(int(p) if p.isdigit() else p for p in path.split(".") if p)]

    return SpecInvalid("; ".join(f"{p}: {m}" if p else m for p, m in errors),
                       errors=[{"path": p, "loc": loc(p), "message": m} for p, m in errors])


def config_error(exc: Exception) -> SpecInvalid:
    """:func:`config_invalid` for the one-line ``"config: <field path>: <message>"`` error
    of a config parser (``train.config``, ``attacks.config``; ``(config)`` is the whole)."""
    rest = str(exc).removeprefix("config: ")
    path, sep, msg = rest.partition(": ")
    if not sep:
        path, msg = "", rest
    return config_invalid([("" if path == "(config)" else path, msg)])
