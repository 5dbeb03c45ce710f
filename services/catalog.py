"""The base-model catalog: models a training names as ``model.checkpoint: base:<name>``.

Two sources, one table (``catalog_models``):

* the operator's catalog, offered to every tenant: ``privatize admin model add NAME
  LOCATION`` copies a Hugging Face causal-LM folder (a local folder or an ``s3://`` URI; a
  ``privatize base`` output or a run folder, whose ``model/`` it takes) into the service's
  storage under ``models/<id>/``; ``admin model list|remove``;
* a tenant's own uploads: ``POST /v1/models?name=NAME`` with the folder as a ``.tar.gz``
  archive (streamed, within the tenant's storage limit, counted in its storage), stored
  under ``tenants/<tenant>/models/<id>/``, visible to that tenant alone (another tenant's
  name answers 404, as a name that does not exist); ``DELETE /v1/models/{name}``, refused
  (409) while an active training reads it.

``GET /v1/models`` lists what a tenant may use: the catalog and its own uploads (a name
of its own shadows a catalogued one; an upload may not take a catalogued name). No
server location is ever in an answer.

Every model is checked before it is recorded (:func:`check_files`, :func:`check_folder`):
``config.json`` naming a causal LM (an architecture ``...ForCausalLM`` or
``...LMHeadModel``), weights in ``*.safetensors`` only (their headers read), and no file
that could hold a pickle (``.bin``, ``.pt``, ``.pth``, ``.pkl``, ``.ckpt``...: loading one
runs code) nor weights of other formats; an archive's members are regular files and
folders under one root (no absolute path, no ``..``, no links). Each refusal names the
file.

A training names a model by name; admission resolves it (:func:`resolve`) and the config
keeps what it resolved to as ``base_model`` (its id and owner, set by the service), from
which the job's ``--checkpoint`` is made (``services.trainings``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.errors import Conflict, InvalidRequest, NotFound, StorageLimitExceeded
from services.models import CatalogModel, new_id

log = logging.getLogger(__name__)

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A model's name (``base:<name>``): a letter or digit, then letters, digits, ``.``, ``_``, ``-``."""
BASE_REF = re.compile(r"base:([A-Za-z0-9][A-Za-z0-9._-]{0,63})")
"""``model.checkpoint: base:<name>``: a model of the catalog or one of the tenant's uploads."""
CATALOG_PREFIX = "models"
"""The operator's models, under the storage root (``models/<id>/``)."""

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz", ".dill")
"""Files that hold (or may hold) a Python pickle: loading one runs code."""
OTHER_WEIGHTS = (".h5", ".msgpack", ".onnx", ".gguf", ".ggml", ".tflite", ".ot", ".mlmodel", ".keras")
"""Weights in formats other than safetensors."""
MAX_SAFETENSORS_HEADER = 100 << 20
MAX_CONFIG_BYTES = 1 << 20


class ModelInvalid(InvalidRequest):
    """A model folder or archive failed its checks; the message names the file."""

    code = "invalid_model"


def check_name(name: str | None, what: str = "name") -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidRequest(f"{what}: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit "
                             f"(got {name!r})")
    return name


def base_name(config: dict) -> str | None:
    """The name a stored or submitted config's ``model.checkpoint: base:<name>`` gives, or None."""
    ckpt = (config.get("model") or {}).get("checkpoint") if isinstance(config, dict) else None
    m = BASE_REF.fullmatch(ckpt) if isinstance(ckpt, str) else None
    return m.group(1) if m else None


# ---- the checks -----------------------------------------------------------------------

def _hidden(name: str) -> bool:
    return any(p.startswith(".") for p in PurePosixPath(name).parts)


def check_files(names: list[str]) -> None:
    """ModelInvalid naming the first file that may not be in a model folder (a pickle,
    weights of another format), or what is missing (``config.json``, safetensors weights)."""
    for n in names:
        check_files_one(n)
    if "config.json" not in names:
        raise ModelInvalid("no config.json at the model folder's top (a Hugging Face model folder)")
    if not any(n.lower().endswith(".safetensors") for n in names):
        raise ModelInvalid("no *.safetensors weights in the model folder")


def check_config(data: bytes, where: str = "config.json") -> str:
    """The architecture of a causal LM's ``config.json`` (ModelInvalid otherwise)."""
    try:
        cfg = json.loads(data)
    except ValueError:
        raise ModelInvalid(f"{where}: not JSON", file=where) from None
    if not isinstance(cfg, dict):
        raise ModelInvalid(f"{where}: not a JSON object", file=where)
    archs = cfg.get("architectures")
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    causal = [a for a in archs if a.endswith(("ForCausalLM", "LMHeadModel"))]
    if not causal:
        raise ModelInvalid(f"{where}: not a causal language model (architectures: {archs or 'none'}; "
                           "want ...ForCausalLM)", file=where)
    return causal[0][:128]


def check_safetensors_header(head: bytes, name: str, size: int) -> None:
    """The first bytes of a ``.safetensors`` file: an 8-byte length, then that much JSON."""
    if len(head) < 8:
        raise ModelInvalid(f"{name}: not a safetensors file (too short)", file=name)
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_SAFETENSORS_HEADER or 8 + n > size:
        raise ModelInvalid(f"{name}: not a safetensors file (header length {n})", file=name)
    if len(head) >= 8 + n:
        try:
            ok = isinstance(json.loads(head[8:8 + n]), dict)
        except ValueError:
            ok = False
        if not ok:
            raise ModelInvalid(f"{name}: not a safetensors file (its header is not a JSON object)", file=name)


def check_folder(folder: Path) -> tuple[list[tuple[str, int]], str]:
    """(files, architecture) of a local model folder that passed every check. Files and
    folders whose names start with '.' (a hub download's ``.cache``) are left out."""
    files = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f.startswith("."):
                continue
            p = Path(dirpath) / f
            rel = p.relative_to(folder).as_posix()
            if not p.is_file():
                raise ModelInvalid(f"{rel}: not a regular file", file=rel)
            files.append((rel, p.stat().st_size))
    check_files([n for n, _ in files])
    cfg = folder / "config.json"
    if cfg.stat().st_size > MAX_CONFIG_BYTES:
        raise ModelInvalid("config.json: over 1 MiB", file="config.json")
    arch = check_config(cfg.read_bytes())
    for n, size in files:
        if n.lower().endswith(".safetensors"):
            with open(folder / n, "rb") as fh:
                head = fh.read(8)
                if len(head) == 8:
                    head += fh.read(min(struct.unpack("<Q", head)[0], MAX_SAFETENSORS_HEADER + 1))
            check_safetensors_header(head, n, size)
    return files, arch


def _member_name(raw: str) -> str:
    """An archive member's name, or ModelInvalid for one that leaves the folder."""
    name = raw.replace("\\", "/")
    p = PurePosixPath(name)
    if not name or name.startswith("/") or p.is_absolute() or re.match(r"^[A-Za-z]:", name) or ".." in p.parts \
            or "\x00" in name:
        raise ModelInvalid(f"{raw}: a path outside the model folder (absolute or with '..')", file=raw)
    return "/".join(x for x in p.parts if x not in ("", "."))


def extract_archive(archive: Path, dest: Path, max_bytes: int) -> None:
    """Unpack a model archive (``.tar.gz``, ``.tar``) into ``dest``, checking every member
    before a byte of it is written: regular files and folders only, no path leaving the
    folder, no pickle; at most ``max_bytes`` unpacked. One top folder holding
    ``config.json`` (``model/config.json``) is taken as the model folder."""
    try:
        tf = tarfile.open(archive, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ModelInvalid(f"not a .tar.gz archive ({exc})") from None
    total = 0
    names: list[str] = []
    with tf:
        try:
            for m in tf:
                name = _member_name(m.name)
                if m.isdir() or not name:
                    continue
                if not m.isfile():
                    kind = "a link" if m.issym() or m.islnk() else "not a regular file"
                    raise ModelInvalid(f"{m.name}: {kind}; a model archive holds regular files only", file=m.name)
                check_files_one(name)
                total += m.size
                if total > max_bytes:
                    raise StorageLimitExceeded(f"the unpacked model exceeds the {max_bytes} bytes this tenant "
                                               "may still store")
                target = dest / name
                if target.exists():
                    raise ModelInvalid(f"{m.name}: twice in the archive", file=m.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                with open(target, "xb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
                names.append(name)
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            raise ModelInvalid(f"the archive is damaged ({exc})") from None
    _lift_single_root(dest, names)


def check_files_one(name: str) -> None:
    low = name.lower()
    if low.endswith(PICKLE_SUFFIXES):
        raise ModelInvalid(f"{name}: a pickle file (loading it runs code); give the weights as safetensors only",
                           file=name)
    if low.endswith(OTHER_WEIGHTS):
        raise ModelInvalid(f"{name}: weights in a format other than safetensors; give safetensors only", file=name)


def _lift_single_root(dest: Path, names: list[str]) -> None:
    """``model/config.json``... -> ``config.json``... when everything is under one folder."""
    if not names or "config.json" in names:
        return
    tops = {n.split("/", 1)[0] for n in names if not _hidden(n)}
    if len(tops) != 1 or not all("/" in n for n in names):
        return
    (top,) = tops
    inner = dest / top
    if not (inner / "config.json").is_file():
        return
    tmp = dest.parent / f"{dest.name}.lift"
    inner.rename(tmp)
    shutil.rmtree(dest)
    tmp.rename(dest)


# ---- resolving and listing --------------------------------------------------------------

def visible(s: Session, tenant_id: str) -> list[CatalogModel]:
    """The models a tenant may use: its own, then the catalog's it does not shadow, by name."""
    own = list(s.scalars(select(CatalogModel).where(CatalogModel.tenant_id == tenant_id)))
    names = {m.name for m in own}
    cat = [m for m in s.scalars(select(CatalogModel).where(CatalogModel.tenant_id.is_(None))) if m.name not in names]
    return sorted(own + cat, key=lambda m: (m.name, m.tenant_id is None))


def resolve(s: Session, tenant_id: str, name: str, path: str | None = None) -> CatalogModel:
    """The model ``base:<name>`` names for this tenant: its own upload of that name, else
    the catalog's; NotFound (at ``path``) otherwise, as for another tenant's upload."""
    for owner in (CatalogModel.tenant_id == tenant_id, CatalogModel.tenant_id.is_(None)):
        m = s.scalars(select(CatalogModel).where(owner, CatalogModel.name == name)
                      .order_by(CatalogModel.created_at.desc())).first()
        if m is not None:
            return m
    raise NotFound(f"no model {name!r} (GET /v1/models lists the models you may use)",
                   **({"path": path} if path else {}))


def catalog_entry(s: Session, name: str) -> CatalogModel | None:
    return s.scalars(select(CatalogModel).where(CatalogModel.tenant_id.is_(None), CatalogModel.name == name)).first()


def own_model(s: Session, tenant_id: str, name: str) -> CatalogModel:
    m = s.scalars(select(CatalogModel).where(CatalogModel.tenant_id == tenant_id, CatalogModel.name == name)).first()
    if m is None:
        raise NotFound(f"no model {name!r} of yours")
    return m


def ref_of(m: CatalogModel) -> dict:
    """What a training's config keeps of the model it names (``base_model``): no location."""
    return {"name": m.name, "id": m.id, "owner": "catalog" if m.tenant_id is None else "tenant"}


def folder_of(ref: dict, tenant_id: str) -> str:
    """The storage folder (relative to the root) of a ``base_model`` reference."""
    if ref.get("owner") == "catalog":
        return f"{CATALOG_PREFIX}/{ref['id']}"
    from services.storage import tenant_prefix

    return f"{tenant_prefix(tenant_id)}/{CATALOG_PREFIX}/{ref['id']}"


def public(m: CatalogModel) -> dict:
    """A model as a tenant sees it (``GET /v1/models``): no location."""
    return {"name": m.name, "ref": f"base:{m.name}", "owner": "catalog" if m.tenant_id is None else "tenant",
            "architecture": m.architecture, "bytes": m.bytes, "files": m.files, "created_at": m.created_at}


def readers(s: Session, model_id: str, tenant_id: str | None = None) -> list[str]:
    """Active trainings (the tenant's, or any tenant's) whose config resolved to this model."""
    from services.jobs import active_readers
    from services.models import ACTIVE_JOB_STATES, Job

    if tenant_id is not None:
        return active_readers(s, tenant_id, {model_id})
    tenants = set(s.scalars(select(Job.tenant_id).where(Job.status.in_(ACTIVE_JOB_STATES))))
    return [j for t in sorted(tenants) for j in active_readers(s, t, {model_id})]


# ---- the operator's catalog ----------------------------------------------------------------

@dataclass
class Source:
    """A model folder to copy in: a local folder or a folder at a URI (``s3://``)."""

    location: str
    fs: object
    root: str

    @classmethod
    def open(cls, location: str) -> "Source":
        import pyarrow.fs as pafs

        if "://" in location and not location.startswith("file://"):
            fs, root = pafs.FileSystem.from_uri(location)
        else:
            fs, root = pafs.LocalFileSystem(), str(Path(location.removeprefix("file://")).expanduser().resolve())
        src = cls(location, fs, root.rstrip("/"))
        if src.kind("") != "dir":
            raise ModelInvalid(f"{location}: no such folder")
        if src.kind("config.json") != "file" and src.kind("model/config.json") == "file":
            src.root = f"{src.root}/model"  # a `privatize base` output or a run folder: its model
        return src

    def kind(self, rel: str) -> str | None:
        import pyarrow.fs as pafs

        info = self.fs.get_file_info(f"{self.root}/{rel}".rstrip("/"))
        return {pafs.FileType.File: "file", pafs.FileType.Directory: "dir"}.get(info.type)

    def files(self) -> list[tuple[str, int]]:
        import pyarrow.fs as pafs

        sel = pafs.FileSelector(self.root, recursive=True)
        out = [(i.path[len(self.root) + 1:], i.size or 0) for i in self.fs.get_file_info(sel)
               if i.type == pafs.FileType.File]
        return sorted((n, z) for n, z in out if not _hidden(n))

    def read(self, rel: str, n: int | None = None) -> bytes:
        with self.fs.open_input_stream(f"{self.root}/{rel}", compression=None) as f:
            return f.read(n) if n is not None else f.read()

    def chunks(self, rel: str) -> Iterator[bytes]:
        with self.fs.open_input_stream(f"{self.root}/{rel}", compression=None) as f:
            while b := f.read(1 << 20):
                yield b


def check_source(src: Source) -> tuple[list[tuple[str, int]], str]:
    files = src.files()
    check_files([n for n, _ in files])
    sizes = dict(files)
    if sizes["config.json"] > MAX_CONFIG_BYTES:
        raise ModelInvalid("config.json: over 1 MiB", file="config.json")
    arch = check_config(src.read("config.json"))
    for n, size in files:
        if n.lower().endswith(".safetensors"):
            head = src.read(n, 8)
            if len(head) == 8:
                head = src.read(n, 8 + min(struct.unpack("<Q", head)[0], MAX_SAFETENSORS_HEADER + 1))
            check_safetensors_header(head, n, size)
    return files, arch


def add_catalog_model(s: Session, storage, name: str, location: str) -> CatalogModel:
    """Check the folder at ``location`` and copy it into storage (``models/<id>/``) as the
    catalog's ``name``; Conflict when the catalog has that name already."""
    check_name(name)
    if catalog_entry(s, name) is not None:
        raise Conflict(f"the catalog has a model {name!r} already; remove it first")
    src = Source.open(location)
    files, arch = check_source(src)
    mid = new_id()
    rel = f"{CATALOG_PREFIX}/{mid}"
    try:
        for n, _ in files:
            storage.write_stream(f"{rel}/{n}", src.chunks(n))
    except BaseException:
        storage.delete_tree(rel)
        raise
    m = CatalogModel(id=mid, tenant_id=None, name=name, storage_path=rel, bytes=sum(z for _, z in files),
                     files=len(files), architecture=arch, source=location[:1024])
    s.add(m)
    s.flush()
    return m


def remove_catalog_model(s: Session, storage, name: str) -> CatalogModel:
    m = catalog_entry(s, name)
    if m is None:
        raise NotFound(f"the catalog has no model {name!r}")
    busy = readers(s, m.id)
    if busy:
        raise Conflict(f"model {name!r} is read by active training(s) {', '.join(busy)}; wait for them or "
                       "cancel them first")
    storage.delete_tree(m.storage_path)
    s.delete(m)
    return m


# ---- a tenant's uploads -----------------------------------------------------------------------

async def receive_model(ctx, tenant_id: str, request, name: str) -> CatalogModel:
    """A tenant's model folder as a ``.tar.gz`` request body: streamed into the spool
    (within the tenant's storage limit), unpacked with every member checked, the folder
    checked, moved into storage and recorded; nothing is left behind when any step fails."""
    import anyio
    from starlette.requests import ClientDisconnect

    from services.corpora import _release, admit_upload
    from services.db import session_scope
    from services.models import Tenant
    from services.tenants import storage_used

    check_name(name)

    def taken():
        with session_scope(ctx.sessions) as s:
            if catalog_entry(s, name) is not None:
                raise Conflict(f"{name!r} is a model of the service's catalog; choose another name")
            if s.scalars(select(CatalogModel.id).where(CatalogModel.tenant_id == tenant_id,
                                                       CatalogModel.name == name)).first():
                raise Conflict(f"you have a model {name!r} already; delete it first")

    await anyio.to_thread.run_sync(taken)
    allowed, declared_n = await admit_upload(ctx, tenant_id, request)
    mid = new_id()
    work = ctx.spool / f".model-{mid}"
    archive = ctx.spool / f".model-{mid}.tar.gz"
    rel = f"tenants/{tenant_id}/{CATALOG_PREFIX}/{mid}"
    stored = False
    try:
        total = 0
        fh = await anyio.to_thread.run_sync(open, archive, "xb")
        try:
            async for chunk in request.stream():
                total += len(chunk)
                if total > allowed:
                    raise StorageLimitExceeded(f"upload exceeds the {allowed} bytes this tenant may still store")
                await anyio.to_thread.run_sync(fh.write, chunk)
        finally:
            fh.close()
        if total == 0:
            raise ModelInvalid("the archive is empty")
        work.mkdir()
        await anyio.to_thread.run_sync(extract_archive, archive, work, allowed)
        archive.unlink(missing_ok=True)
        files, arch = await anyio.to_thread.run_sync(check_folder, work)
        size = sum(z for _, z in files)

        def put():
            for n, _ in files:
                ctx.storage.put_file(work / n, f"{rel}/{n}")

        stored = True
        await anyio.to_thread.run_sync(put)
        model = CatalogModel(id=mid, tenant_id=tenant_id, name=name, storage_path=rel, bytes=size, files=len(files),
                             architecture=arch)

        def record():
            with ctx.admission, session_scope(ctx.sessions) as s:
                t = s.get(Tenant, tenant_id)
                used = storage_used(s, tenant_id)
                if used + size > t.storage_limit_bytes:
                    raise StorageLimitExceeded(f"the model's {size} bytes do not fit the tenant's storage limit "
                                               f"({used} of {t.storage_limit_bytes} bytes used)")
                taken()
                s.add(model)

        await anyio.to_thread.run_sync(record)
        log.info("tenant %s: model %s (%s) stored, %d files, %d bytes", tenant_id, mid, name, len(files), size)
        return model
    except ClientDisconnect:
        log.info("tenant %s: model upload %s interrupted by the client; discarded", tenant_id, mid)
        raise
    finally:
        archive.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(f"{work}.lift", ignore_errors=True)
        if stored and not _committed(ctx, mid):
            ctx.storage.delete_tree(rel)
        _release(ctx, tenant_id, declared_n)


def _committed(ctx, model_id: str) -> bool:
    from services.db import session_scope

    with session_scope(ctx.sessions) as s:
        return s.get(CatalogModel, model_id) is not None


def delete_model(ctx, tenant_id: str, name: str) -> str:
    """Delete one of the tenant's uploads (not a catalogued model: 404 as for none); 409
    while an active training reads it. Returns its id."""
    from services.db import session_scope

    with ctx.admission, session_scope(ctx.sessions) as s:
        m = own_model(s, tenant_id, name)
        busy = readers(s, m.id, tenant_id)
        if busy:
            raise Conflict(f"model {name!r} is read by active training(s) {', '.join(busy)}; wait for them or "
                           "cancel them first")
        ctx.storage.delete_tree(m.storage_path)
        s.delete(m)
        return m.id
