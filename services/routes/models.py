"""``/v1/models``: the base models a tenant may fine-tune (``model.checkpoint: base:<name>``):
the operator's catalog and the tenant's own uploads (``services.catalog``)."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import Field
from starlette.requests import ClientDisconnect

from services import audit as audit_mod
from services import catalog as catalog_mod
from services.context import ServiceContext
from services.db import session_scope
from services.dependencies import Out, TenantRef, clean_request, current_tenant, get_ctx

router = APIRouter(dependencies=[Depends(clean_request)])


class ModelOut(Out):
    name: str
    ref: str = Field(description="what a training config names it by: model.checkpoint")
    owner: Literal["catalog", "tenant"] = Field(description="catalog: offered by the service to every tenant; "
                                                            "tenant: your upload, visible to you alone")
    architecture: str | None
    bytes: int
    files: int
    created_at: dt.datetime


@router.get("/v1/models", response_model=list[ModelOut])
def list_models(tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """The models you may fine-tune: the service's catalog and your uploads (one of yours
    of the same name comes first and is the one ``base:<name>`` names)."""
    with session_scope(ctx.sessions) as s:
        return [ModelOut.model_validate(catalog_mod.public(m)) for m in catalog_mod.visible(s, tenant.id)]


@router.get("/v1/models/{name}", response_model=ModelOut)
def get_model(name: str, tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    with session_scope(ctx.sessions) as s:
        return ModelOut.model_validate(catalog_mod.public(catalog_mod.resolve(s, tenant.id, name)))


@router.post("/v1/models", status_code=201, response_model=ModelOut)
async def upload_model(request: Request, name: str = Query(..., max_length=64),
                       tenant: TenantRef = Depends(current_tenant), ctx: ServiceContext = Depends(get_ctx)):
    """Upload a model folder (a Hugging Face causal LM: ``config.json``, ``*.safetensors``
    weights, its tokenizer) as a ``.tar.gz`` request body, streamed; within your storage
    limit and counted in it. A pickle file (``.bin``, ``.pt``, ``.pkl``...), a link or a
    path leaving the folder is refused with a 422 naming the file."""
    try:
        m = await catalog_mod.receive_model(ctx, tenant.id, request, name)
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is listening; the upload was discarded
    audit_mod.note(request, m.id, name=m.name, bytes=m.bytes, files=m.files)
    return ModelOut.model_validate(catalog_mod.public(m))


@router.delete("/v1/models/{name}", status_code=204)
def delete_model(name: str, request: Request, tenant: TenantRef = Depends(current_tenant),
                 ctx: ServiceContext = Depends(get_ctx)):
    """Delete one of your uploads; 409 while an active training reads it."""
    mid = catalog_mod.delete_model(ctx, tenant.id, name)
    audit_mod.note(request, mid, name=name)
    return Response(status_code=204)
