"""A small HTTP client for the service (``privatize submit``, the demo, tests and the upload
benchmark use it): the generic methods reach every job kind the service lists (``submit``,
``get``, ``list``, ``download_outputs``). Uploads and downloads stream in chunks."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import httpx

from privatize.errors import PrivatizeError

TERMINAL = ("succeeded", "failed", "cancelled")
UPLOAD_CHUNK = 1 << 20


class ApiError(PrivatizeError, RuntimeError):
    """The service answered with an error status; the message is its ``detail``."""

    def __init__(self, status: int, detail: str, body: dict | None = None):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.body = body or {}


def _inside(what: str, names: list[str]) -> list[PurePosixPath]:
    """File names a service listed for download, each a relative path that stays inside the
    download folder on any system (no ``..``, no root, no drive or backslash, not empty);
    every name is checked before anything is downloaded."""
    out = []
    for n in names:
        p = PurePosixPath(n) if isinstance(n, str) else None
        if p is None or not p.parts or p.is_absolute() or ".." in p.parts or "\\" in n or ":" in n:
            raise PrivatizeError(f"{what}: the service lists {n!r} for download, not a path inside the download "
                                 "folder; nothing downloaded")
        out.append(p)
    return out


def _file_chunks(path: Path, chunk: int = UPLOAD_CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while True:
            b = fh.read(chunk)
            if not b:
                return
            yield b


def pack_model(folder: Path, archive: Path) -> Path:
    """``folder``'s files as a ``.tar.gz`` at ``archive``, under one top folder ``model/``
    (links stay links: the service refuses them, naming the file)."""
    import tarfile

    with tarfile.open(archive, "w:gz") as tf:
        tf.add(folder, arcname="model", recursive=True)
    return archive


class ServiceClient:
    def __init__(self, url: str, token: str, *, timeout: float = 600.0):
        if not url:
            raise PrivatizeError("no service URL: pass --url or set PRIVATIZE_URL")
        if not token:
            raise PrivatizeError("no API token: pass --token or set PRIVATIZE_TOKEN")
        self.url = url.rstrip("/")
        self._kinds: dict[str, dict] | None = None
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"},
                                  timeout=httpx.Timeout(timeout, connect=10.0))

    def __repr__(self) -> str:  # never the token
        return f"ServiceClient({self.url!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- plumbing ---------------------------------------------------------------------
    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            try:
                body = r.json()
                detail = body.get("detail") if isinstance(body, dict) else None
                if not isinstance(detail, str):
                    detail = json.dumps(detail)
            except ValueError:
                body, detail = None, r.text[:500]
            raise ApiError(r.status_code, detail or r.reason_phrase, body if isinstance(body, dict) else None)
        return r

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            return self._check(self._http.request(method, path, **kw))
        except httpx.TransportError as exc:
            raise PrivatizeError(f"cannot reach the service at {self.url}: {type(exc).__name__}") from None

    # ---- corpora ----------------------------------------------------------------------
    def upload_corpus(self, path: str | os.PathLike, *, name: str | None = None, fmt: str | None = None) -> dict:
        p = Path(path)
        params = {"name": name or p.name, "filename": p.name}
        if fmt:
            params["format"] = fmt
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(p.stat().st_size)}
        return self.request("POST", "/v1/corpora", params=params, headers=headers,
                            content=_file_chunks(p)).json()

    def corpora(self) -> list[dict]:
        return self.request("GET", "/v1/corpora").json()

    def corpus_privacy(self, corpus_id: str) -> dict:
        """The corpus's privacy ledger (``GET /v1/corpora/{id}/privacy``)."""
        return self.request("GET", f"/v1/corpora/{corpus_id}/privacy").json()

    def delete_corpus(self, corpus_id: str) -> None:
        self.request("DELETE", f"/v1/corpora/{corpus_id}")

    # ---- base models --------------------------------------------------------------------
    def models(self) -> list[dict]:
        """The base models you may fine-tune (``GET /v1/models``): the service's catalog and
        your uploads, each with the ``ref`` a training config names it by
        (``model.checkpoint: base:NAME``)."""
        return self.request("GET", "/v1/models").json()

    def upload_model(self, path: str | os.PathLike, name: str) -> dict:
        """Upload a model as ``name`` (``POST /v1/models``): a Hugging Face causal-LM folder
        (``config.json``, ``*.safetensors``, its tokenizer), packed here into a ``.tar.gz``
        in a temporary file, or such a ``.tar.gz`` itself; streamed. The service checks it
        (no pickle files, no links) and counts it in your storage."""
        p = Path(path)
        if not p.exists():
            raise PrivatizeError(f"{p}: no such file or folder")
        if not p.is_dir():
            return self._upload_archive(p, name)
        import tempfile

        with tempfile.TemporaryDirectory(prefix="privatize-model-") as tmp:
            archive = Path(tmp) / "model.tar.gz"
            pack_model(p, archive)
            return self._upload_archive(archive, name)

    def _upload_archive(self, archive: Path, name: str) -> dict:
        headers = {"Content-Type": "application/gzip", "Content-Length": str(archive.stat().st_size)}
        return self.request("POST", "/v1/models", params={"name": name}, headers=headers,
                            content=_file_chunks(archive)).json()

    def delete_model(self, name: str) -> None:
        """Delete one of your uploads (``DELETE /v1/models/{name}``; 409 while a training reads it)."""
        from urllib.parse import quote

        self.request("DELETE", f"/v1/models/{quote(name, safe='')}")

    # ---- keys -------------------------------------------------------------------------
    def create_key(self, kind: str, **kw) -> dict:
        return self.request("POST", "/v1/keys", json={"kind": kind, **kw}).json()

    def export_key(self, key_id: str) -> dict:
        return self.request("POST", f"/v1/keys/{key_id}/export").json()

    def decrypt(self, key: str, text: str) -> dict:
        return self.request("POST", "/v1/decrypt", json={"key": key, "text": text}).json()

    # ---- jobs -------------------------------------------------------------------------
    def create_job(self, corpus_id: str, spec: dict) -> dict:
        return self.request("POST", "/v1/jobs", json={"corpus_id": corpus_id, "spec": spec}).json()

    def job(self, job_id: str) -> dict:
        return self.request("GET", f"/v1/jobs/{job_id}").json()

    def wait(self, job_id: str, *, timeout: float = 3600.0, poll: float = 1.0, on_change=None, get=None) -> dict:
        """Poll until the job ends (``get``: how to read it, default :meth:`job`)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            j = (get or self.job)(job_id)
            if j["status"] != last and on_change is not None:
                on_change(j)
            last = j["status"]
            if j["status"] in TERMINAL:
                return j
            if time.monotonic() > deadline:
                raise PrivatizeError(f"job {job_id} still {j['status']} after {timeout:.0f}s")
            time.sleep(poll)

    def cancel(self, job_id: str) -> dict:
        return self.request("POST", f"/v1/jobs/{job_id}/cancel").json()

    def logs(self, job_id: str) -> str:
        return self.request("GET", f"/v1/jobs/{job_id}/logs").text

    def results(self, job_id: str) -> dict:
        return self.request("GET", f"/v1/jobs/{job_id}/results").json()

    def download(self, job_id: str, name: str, dest: str | os.PathLike) -> Path:
        """Stream one result file to ``dest`` (written under a temporary name, then renamed)."""
        return self._stream_to(f"/v1/jobs/{job_id}/results/{name}", dest)

    def download_all(self, job_id: str, dest_dir: str | os.PathLike) -> list[Path]:
        names = _inside(f"job {job_id}", [f["name"] for f in self.results(job_id)["files"]])
        return [self.download(job_id, str(n), Path(dest_dir) / n) for n in names]

    def _stream_to(self, url: str, dest: str | os.PathLike) -> Path:
        d = Path(dest)
        d.parent.mkdir(parents=True, exist_ok=True)
        tmp = d.with_name(f".{d.name}.part")
        try:
            with self._http.stream("GET", url) as r:
                if r.status_code >= 400:
                    r.read()
                    self._check(r)
                with open(tmp, "wb") as fh:
                    for chunk in r.iter_bytes(UPLOAD_CHUNK):
                        fh.write(chunk)
            os.replace(tmp, d)
        finally:
            tmp.unlink(missing_ok=True)
        return d

    # ---- every job kind with a resource (GET /v1/kinds) ---------------------------------
    def kinds(self) -> dict[str, dict]:
        """The service's job kinds by name (``noun``, ``resource``, ``reads``, ``downloads``,
        ``listing``, ``body``: the JSON schema of a create request), read once."""
        if self._kinds is None:
            self._kinds = {k["name"]: k for k in self.request("GET", "/v1/kinds").json()}
        return self._kinds

    def _resource(self, kind: str) -> str:
        info = self.kinds().get(kind)
        if info is None:
            raise PrivatizeError(f"unknown job kind {kind!r} on {self.url} (known: {', '.join(sorted(self.kinds()))})")
        if info["resource"] is None:
            raise PrivatizeError(f"{kind} jobs have no resource on {self.url}: they are not created through the API")
        return f"/v1/{info['resource']}"

    def submit(self, kind: str, **body) -> dict:
        """Create a job of ``kind``: ``config=...`` and what it reads (``corpus_id=`` or
        ``job_id=``, as its ``reads`` says)."""
        return self.request("POST", self._resource(kind), json=body).json()

    def get(self, kind: str, job_id: str) -> dict:
        return self.request("GET", f"{self._resource(kind)}/{job_id}").json()

    def list(self, kind: str) -> list[dict]:
        return self.request("GET", self._resource(kind)).json()

    def download_outputs(self, kind: str, job_id: str, dest_dir: str | os.PathLike, *,
                         extract: bool = False) -> list[Path]:
        """Every file the kind serves for a succeeded job into ``dest_dir``: its ``downloads``,
        then what its ``listing`` lists (a privatization's manifest and shards); with
        ``extract``, a ``.tar.gz`` among them is unpacked there instead (a training's
        ``model.tar.gz`` becomes ``dest_dir/model``) and its top-level entries are returned."""
        base, info = f"{self._resource(kind)}/{job_id}", self.kinds()[kind]
        # every name checked before the first byte is fetched: (path, file name) pairs
        fixed = list(zip((d["path"] for d in info["downloads"]),
                         _inside(f"{kind} {job_id}", [d["file"] for d in info["downloads"]])))
        if info.get("listing"):
            listed = self.request("GET", f"{base}/{info['listing']}").json()["files"]
            fixed += [(f"{info['listing']}/{n}", n) for n in _inside(f"{kind} {job_id}", [f["name"] for f in listed])]
        out: list[Path] = []
        for path, name in fixed:
            if extract and name.name.endswith(".tar.gz"):
                out += self._unpack_to(f"{base}/{path}", Path(dest_dir))
            else:
                out.append(self._stream_to(f"{base}/{path}", Path(dest_dir) / name))
        return out

    def _unpack_to(self, url: str, dest: Path) -> list[Path]:
        """Stream an archive into a temporary folder inside ``dest``, unpack it there and
        move its top-level entries into ``dest``. Only folders and regular files are taken
        (the ``data`` filter, and no links: one inside the archive could point beside
        ``dest`` once moved); an entry that exists in ``dest`` already is refused before
        anything is unpacked."""
        import tarfile
        import tempfile

        def files_only(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo:
            if member.issym() or member.islnk():
                raise PrivatizeError(f"{url}: the archive holds a link ({member.name}); refused")
            return tarfile.data_filter(member, path)

        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=dest, prefix=".unpack-") as tmp:
            archive = self._stream_to(url, Path(tmp) / "archive.tar.gz")
            with tarfile.open(archive, "r:gz") as tf:
                top = sorted({PurePosixPath(n).parts[0] for n in tf.getnames() if PurePosixPath(n).parts})
                if clash := [dest / n for n in top if os.path.lexists(dest / n)]:
                    raise PrivatizeError(f"{clash[0]} exists; choose another folder")
                tf.extractall(Path(tmp) / "x", filter=files_only)
            for n in top:
                os.replace(Path(tmp) / "x" / n, dest / n)
        return [dest / n for n in top]
