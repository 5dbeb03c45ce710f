"""Operator commands, run on the service's host against its database::

    privatize admin migrate
    privatize admin tenant create NAME [--storage-limit BYTES] [--max-jobs N] [--max-epsilon-per-corpus X]
    privatize admin tenant list
    privatize admin tenant limits NAME [--storage-limit BYTES] [--max-jobs N] [--max-epsilon-per-corpus X |
                                        --no-epsilon-limit]
    privatize admin token rotate NAME [--keep-old]
    privatize admin token revoke NAME [--token-id ID]
    privatize admin model add NAME LOCATION
    privatize admin model list
    privatize admin model remove NAME
    privatize admin master-key new --out FILE
    privatize admin ray status|start|stop

(or ``python -m services.admin ...``). ``tenant create`` and ``token rotate`` print the
new API token once, in a one-line JSON object; only its SHA-256 is stored. ``model add``
checks a Hugging Face causal-LM folder (a local folder or an ``s3://`` URI; a ``privatize
base`` output or a run folder: its ``model/``) and copies it into the service's storage as
the catalog's ``NAME``, which every tenant's training may name as ``model.checkpoint:
base:NAME`` (``services.catalog``).
"""

from __future__ import annotations

import json
import sys

from privatize.errors import PrivatizeError


def _settings():
    from services.settings import get_settings

    return get_settings()


def _sessions(run_migrations: bool = True):
    from services.db import make_engine, migrate, session_factory

    engine = make_engine(_settings().effective_database_url)
    if run_migrations:
        migrate(engine)
    return session_factory(engine)


def _storage():
    from services.storage import Storage

    return Storage(_settings().effective_storage_uri)


def _wrap(fn):
    """Service errors surface as PrivatizeError: one line, exit 2."""

    def run(args):
        from services.errors import ServiceError

        try:
            return fn(args)
        except ServiceError as exc:
            raise PrivatizeError(exc.message) from None

    return run


def _print(obj) -> None:
    print(json.dumps(obj, default=str))


def _migrate(args) -> int:
    from services.db import current_revision, make_engine, migrate

    engine = make_engine(_settings().effective_database_url)
    migrate(engine, args.revision)
    _print({"database": engine.url.render_as_string(hide_password=True), "revision": current_revision(engine)})
    return 0


def _audit(s, action: str, tenant_id: str | None, *, resource_type: str, resource_id: str | None, **detail) -> None:
    """An audit entry for an operator command (actor ``admin:<OS user>``)."""
    import getpass

    from services.audit import record

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    record(s, actor=f"admin:{user}"[:64], action=action, tenant_id=tenant_id, resource_type=resource_type,
           resource_id=resource_id, detail=detail)


def _tenant_create(args) -> int:
    from services.db import session_scope
    from services.tenants import create_tenant

    st = _settings()
    with session_scope(_sessions()) as s:
        t, tok_id, tok = create_tenant(
            s, args.name,
            storage_limit_bytes=st.default_storage_limit_bytes if args.storage_limit is None else args.storage_limit,
            max_concurrent_jobs=st.default_max_concurrent_jobs if args.max_jobs is None else args.max_jobs,
            max_epsilon_per_corpus=args.max_epsilon_per_corpus)
        _audit(s, "tenant.create", t.id, resource_type="tenant", resource_id=t.id, token_id=tok_id,
               max_epsilon_per_corpus=t.max_epsilon_per_corpus)
        out = {"tenant_id": t.id, "name": t.name, "token_id": tok_id, "token": tok,
               "storage_limit_bytes": t.storage_limit_bytes, "max_concurrent_jobs": t.max_concurrent_jobs,
               "max_epsilon_per_corpus": t.max_epsilon_per_corpus}
    _print(out)
    print("privatize: the token is shown once; store it now", file=sys.stderr)
    return 0


def _tenant_list(args) -> int:
    from sqlalchemy import select

    from services.db import session_scope
    from services.models import Tenant
    from services.tenants import active_tokens, storage_used

    with session_scope(_sessions()) as s:
        for t in s.scalars(select(Tenant).order_by(Tenant.name)):
            _print({"tenant_id": t.id, "name": t.name, "storage_used_bytes": storage_used(s, t.id),
                    "storage_limit_bytes": t.storage_limit_bytes, "max_concurrent_jobs": t.max_concurrent_jobs,
                    "max_epsilon_per_corpus": t.max_epsilon_per_corpus,
                    "active_tokens": [k.id for k in active_tokens(s, t.id)]})
    return 0


def _tenant_limits(args) -> int:
    from services.db import session_scope
    from services.tenants import set_limits

    with session_scope(_sessions()) as s:
        t = set_limits(s, args.name, storage_limit_bytes=args.storage_limit, max_concurrent_jobs=args.max_jobs,
                       max_epsilon_per_corpus=args.max_epsilon_per_corpus, no_epsilon_limit=args.no_epsilon_limit)
        _audit(s, "tenant.limits", t.id, resource_type="tenant", resource_id=t.id,
               storage_limit_bytes=t.storage_limit_bytes, max_concurrent_jobs=t.max_concurrent_jobs,
               max_epsilon_per_corpus=t.max_epsilon_per_corpus)
        _print({"tenant_id": t.id, "name": t.name, "storage_limit_bytes": t.storage_limit_bytes,
                "max_concurrent_jobs": t.max_concurrent_jobs, "max_epsilon_per_corpus": t.max_epsilon_per_corpus})
    return 0


def _token_rotate(args) -> int:
    from services.db import session_scope
    from services.tenants import get_tenant, rotate_token

    with session_scope(_sessions()) as s:
        tok_id, tok, revoked = rotate_token(s, args.name, keep_old=args.keep_old)
        _audit(s, "token.rotate", get_tenant(s, args.name).id, resource_type="token", resource_id=tok_id,
               revoked=revoked)
    _print({"name": args.name, "token_id": tok_id, "token": tok, "revoked": revoked})
    print("privatize: the token is shown once; store it now", file=sys.stderr)
    return 0


def _token_revoke(args) -> int:
    from services.db import session_scope
    from services.tenants import get_tenant, revoke_tokens

    with session_scope(_sessions()) as s:
        n = revoke_tokens(s, args.name, args.token_id)
        _audit(s, "token.revoke", get_tenant(s, args.name).id, resource_type="token", resource_id=args.token_id,
               revoked=n)
    _print({"name": args.name, "revoked": n})
    return 0


def _model_add(args) -> int:
    from services.catalog import add_catalog_model
    from services.db import session_scope

    storage = _storage()
    with session_scope(_sessions()) as s:
        m = add_catalog_model(s, storage, args.name, args.location)
        _audit(s, "model.add", None, resource_type="model", resource_id=m.id, name=m.name, bytes=m.bytes,
               files=m.files, source=m.source)
        out = {"name": m.name, "ref": f"base:{m.name}", "id": m.id, "architecture": m.architecture,
               "bytes": m.bytes, "files": m.files, "storage": storage.location(m.storage_path), "source": m.source}
    _print(out)
    return 0


def _model_list(args) -> int:
    from sqlalchemy import select

    from services.db import session_scope
    from services.models import CatalogModel, Tenant

    storage = _storage()
    with session_scope(_sessions()) as s:
        q = select(CatalogModel).order_by(CatalogModel.tenant_id.is_not(None), CatalogModel.name)
        if not args.uploads:
            q = q.where(CatalogModel.tenant_id.is_(None))
        for m in s.scalars(q):
            t = s.get(Tenant, m.tenant_id) if m.tenant_id else None
            _print({"name": m.name, "ref": f"base:{m.name}", "id": m.id,
                    "owner": "catalog" if t is None else f"tenant:{t.name}", "architecture": m.architecture,
                    "bytes": m.bytes, "files": m.files, "storage": storage.location(m.storage_path),
                    "source": m.source, "created_at": m.created_at})
    return 0


def _model_remove(args) -> int:
    from services.catalog import remove_catalog_model
    from services.db import session_scope

    storage = _storage()
    with session_scope(_sessions()) as s:
        m = remove_catalog_model(s, storage, args.name)
        _audit(s, "model.remove", None, resource_type="model", resource_id=m.id, name=m.name)
    _print({"name": args.name, "removed": True})
    return 0


def _master_key_new(args) -> int:
    from services.settings import write_master_key_file

    try:
        p = write_master_key_file(args.out)
    except FileExistsError:
        raise PrivatizeError(f"{args.out}: exists; refusing to overwrite a master key") from None
    _print({"master_key_file": str(p)})
    print("privatize: set PRIVATIZE_MASTER_KEY_FILE to this file on the service and on every Ray node",
          file=sys.stderr)
    return 0


def _ray(args) -> int:
    from services import raycluster

    st = _settings()
    if st.ray_address:
        raise PrivatizeError(f"PRIVATIZE_RAY_ADDRESS is set ({st.ray_address}): the service uses that cluster, "
                             "not an embedded head")
    if args.action == "stop":
        _print({"stopped": raycluster.stop_head(st)})
    elif args.action == "start":
        from services.settings import check_secrets

        check_secrets(st)  # the head's workers need the master key file
        h = raycluster.ensure_head(st)
        _print({"pid": h.pid, "dashboard": h.dashboard_url, "auth_token_file": str(raycluster.auth_token_path(st))})
    else:
        h = raycluster.find_head(st)
        _print({"running": h is not None, **({"pid": h.pid, "dashboard": h.dashboard_url,
                                              "auth_token_file": str(raycluster.auth_token_path(st))} if h else {})})
    return 0


def _epsilon(text: str) -> float:
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and 0 < v <= 100):
        raise argparse.ArgumentTypeError(f"{text}: an epsilon in (0, 100]")
    return v


def register_admin(sub) -> None:
    adm = sub.add_parser("admin", help="operator commands on the service's database and Ray head")
    asub = adm.add_subparsers(dest="admin_command", required=True)

    m = asub.add_parser("migrate", help="apply the database migrations")
    m.add_argument("--revision", default="head")
    m.set_defaults(func=_wrap(_migrate))

    tenant = asub.add_parser("tenant", help="create, list or limit tenants")
    tsub = tenant.add_subparsers(dest="tenant_command", required=True)
    tc = tsub.add_parser("create", help="create a tenant and print its API token (once)")
    tc.add_argument("name")
    tc.add_argument("--storage-limit", type=int, default=None, help="bytes (default: the service setting)")
    tc.add_argument("--max-jobs", type=int, default=None, help="concurrent jobs (default: the service setting)")
    tc.add_argument("--max-epsilon-per-corpus", type=_epsilon, default=None, metavar="X",
                    help="the most epsilon the trainings on one uploaded corpus may spend together (default: none)")
    tc.set_defaults(func=_wrap(_tenant_create))
    tl = tsub.add_parser("list", help="one JSON line per tenant")
    tl.set_defaults(func=_wrap(_tenant_list))
    tli = tsub.add_parser("limits", help="change a tenant's limits")
    tli.add_argument("name")
    tli.add_argument("--storage-limit", type=int, default=None)
    tli.add_argument("--max-jobs", type=int, default=None)
    eps = tli.add_mutually_exclusive_group()
    eps.add_argument("--max-epsilon-per-corpus", type=_epsilon, default=None, metavar="X",
                     help="the most epsilon the trainings on one uploaded corpus may spend together; what was "
                          "spent stays spent")
    eps.add_argument("--no-epsilon-limit", action="store_true", help="remove the limit (the ledger is still kept)")
    tli.set_defaults(func=_wrap(_tenant_limits))

    token = asub.add_parser("token", help="rotate or revoke API tokens")
    ksub = token.add_subparsers(dest="token_command", required=True)
    kr = ksub.add_parser("rotate", help="issue a new token (printed once) and revoke the others")
    kr.add_argument("name")
    kr.add_argument("--keep-old", action="store_true", help="keep the tenant's other tokens valid")
    kr.set_defaults(func=_wrap(_token_rotate))
    kv = ksub.add_parser("revoke", help="revoke the tenant's tokens (or one, by id)")
    kv.add_argument("name")
    kv.add_argument("--token-id", default=None)
    kv.set_defaults(func=_wrap(_token_revoke))

    model = asub.add_parser("model", help="the base-model catalog: models every tenant may fine-tune (base:NAME)")
    msub = model.add_subparsers(dest="model_command", required=True)
    ma = msub.add_parser("add", help="check a Hugging Face causal-LM folder and copy it into the catalog")
    ma.add_argument("name", help="what trainings name it by: model.checkpoint: base:NAME")
    ma.add_argument("location", help="a local folder or an s3:// URI (config.json, *.safetensors, tokenizer; a "
                                     "`privatize base` output or a run folder: its model/)")
    ma.set_defaults(func=_wrap(_model_add))
    ml = msub.add_parser("list", help="one JSON line per catalogued model")
    ml.add_argument("--uploads", action="store_true", help="the tenants' own uploads as well")
    ml.set_defaults(func=_wrap(_model_list))
    mr = msub.add_parser("remove", help="remove a model from the catalog (not while a training reads it)")
    mr.add_argument("name")
    mr.set_defaults(func=_wrap(_model_remove))

    mk = asub.add_parser("master-key", help="make a master key file")
    mksub = mk.add_subparsers(dest="mk_command", required=True)
    mn = mksub.add_parser("new", help="32 random bytes, Base64, mode 0600")
    mn.add_argument("--out", required=True)
    mn.set_defaults(func=_wrap(_master_key_new))

    r = asub.add_parser("ray", help="the embedded Ray head (status, start, stop)")
    r.add_argument("action", choices=["status", "start", "stop"])
    r.set_defaults(func=_wrap(_ray))


def main(argv: list[str] | None = None) -> int:
    from privatize.cli import run_standalone

    return run_standalone(register_admin, argv, prefix=["admin"])


if __name__ == "__main__":
    sys.exit(main())
