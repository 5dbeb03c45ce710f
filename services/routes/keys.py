"""``/v1/keys`` (create, list, disable, enable, destroy, export) and ``/v1/decrypt``."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter, Body, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from privatize.ciphers import decrypt_texts
from services import audit as audit_mod
from services import keys as keys_mod
from services.context import ServiceContext
from services.db import checkpoint_sqlite, session_scope
from services.errors import Conflict, InvalidRequest
from services.models import Key
from services.dependencies import Out, TenantRef, clean_request, current_tenant, get_ctx


router = APIRouter(dependencies=[Depends(clean_request)])


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["vigenere", "aes-siv", "hmac", "aes-ecb", "api-key"]
    material: SecretStr | None = None
    """An ``api-key`` key's value (an LLM provider's API key: sealed at once, never shown
    again, never exported); the other kinds are generated here."""
    length: int | None = None
    alphabet: Literal["letters52", "latin"] | None = None
    label: str | None = Field(None, max_length=256)


class KeyOut(Out):
    id: str
    ref: str
    kind: str
    alphabet: str | None
    length: int | None
    label: str | None
    status: str
    created_at: dt.datetime
    disabled_at: dt.datetime | None
    destroyed_at: dt.datetime | None

    @classmethod
    def of(cls, k: Key) -> "KeyOut":
        return cls(id=k.id, ref=f"keystore:{k.id}", kind=k.kind, alphabet=k.alphabet, length=k.length,
                   label=k.label, status=k.status, created_at=k.created_at, disabled_at=k.disabled_at,
                   destroyed_at=k.destroyed_at)



class DecryptIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="keystore:<id> or the bare key id")
    text: str | None = None
    texts: list[str] | None = None



# ---- keys -----------------------------------------------------------------------------

@router.post("/v1/keys", status_code=201, response_model=KeyOut)
def create_key(body: KeyCreate, request: Request, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        k = keys_mod.create_key(s, ctx.master, tenant.id, kind=body.kind, length=body.length,
                                alphabet=body.alphabet, label=body.label,
                                material=body.material.get_secret_value() if body.material is not None else None)
        out = KeyOut.of(k)
    audit_mod.note(request, out.id, kind=out.kind)
    return out


@router.get("/v1/keys", response_model=list[KeyOut])
def list_keys(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return [KeyOut.of(k) for k in keys_mod.list_keys(s, tenant.id)]


@router.get("/v1/keys/{key_id}", response_model=KeyOut)
def get_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.get_key(s, tenant.id, key_id))


@router.post("/v1/keys/{key_id}/disable", response_model=KeyOut)
def disable_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.set_enabled(s, tenant.id, key_id, False))


@router.post("/v1/keys/{key_id}/enable", response_model=KeyOut)
def enable_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return KeyOut.of(keys_mod.set_enabled(s, tenant.id, key_id, True))


@router.delete("/v1/keys/{key_id}", response_model=KeyOut)
def destroy_key(key_id: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Destroy the key (crypto-shredding): its material is deleted for good; the record
    stays, with status ``destroyed``, so manifests naming it stay explainable."""
    with ctx.admission, session_scope(ctx.sessions) as s:
        out = KeyOut.of(keys_mod.destroy_key(s, ctx.storage, tenant.id, key_id))
    checkpoint_sqlite(ctx.engine)
    return out


@router.post("/v1/keys/{key_id}/export")
def export_key(key_id: str, response: Response, tenant: TenantRef = Depends(current_tenant),
               ctx: ServiceContext = Depends(get_ctx)):
    """The key file (``privatize-key/1`` JSON, as ``privatize keys new`` writes) for its
    owner: the only response that ever carries key material."""
    with session_scope(ctx.sessions) as s:
        row = keys_mod.get_key(s, tenant.id, key_id)
        if row.kind in keys_mod.WRITE_ONLY_KINDS:
            raise Conflict(f"key {key_id} is an {row.kind} key: its owner holds it already, the service never "
                           "gives it out")
        km = keys_mod.material(ctx.master, row)
    response.headers["Cache-Control"] = "no-store"
    return km.to_json()


@router.post("/v1/decrypt")
def decrypt(body: DecryptIn = Body(...), tenant: TenantRef = Depends(current_tenant),
            ctx: ServiceContext = Depends(get_ctx)):
    """Decrypt text (``vigenere``: the whole-text cipher) or entity tokens (``aes-siv``:
    each token reported ``ok``, ``revised`` or ``invalid``) with one of the tenant's
    own keys."""
    if (body.text is None) == (body.texts is None):
        raise InvalidRequest("give exactly one of text or texts")
    texts = [body.text] if body.text is not None else list(body.texts or [])
    size = sum(len(t) for t in texts)
    if size > ctx.settings.max_decrypt_bytes:
        raise InvalidRequest(f"at most {ctx.settings.max_decrypt_bytes} characters per request")
    key_id = body.key.removeprefix("keystore:")
    with session_scope(ctx.sessions) as s:
        row = keys_mod.get_key(s, tenant.id, key_id)
        km = keys_mod.usable_material(ctx.master, row)
    try:
        outs, report = decrypt_texts(km, texts)
    except LookupError as exc:
        raise Conflict(str(exc)) from None
    out: dict = {"key_id": key_id, "kind": km.kind}
    if body.text is not None:
        out["text"] = outs[0]
    else:
        out["texts"] = outs
    if report is not None:
        out["report"] = {"ok": report.ok, "revised": report.revised, "invalid": report.invalid,
                         "tokens": report.tokens}
    return out
