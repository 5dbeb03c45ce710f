"""Object storage through ``pyarrow.fs``: a local directory (embedded default) or any URI
``pyarrow.fs.FileSystem.from_uri`` understands (``s3://bucket/prefix``, MinIO through
S3 settings in the environment).

Paths handed around the service are relative to the storage root
(``tenants/<tenant>/corpora/<id>/data.jsonl``); a tenant never supplies one. Layout::

    tenants/<tenant>/corpora/<corpus>/data.<ext>
    tenants/<tenant>/jobs/<job>/spec.json
    tenants/<tenant>/jobs/<job>/keys.json              (wrapped keys; removed when the job ends)
    tenants/<tenant>/jobs/<job>/output/manifest.json
    tenants/<tenant>/jobs/<job>/output/shards/...
    tenants/<tenant>/jobs/<job>/output.quarantine.jsonl  (never served)
    tenants/<tenant>/jobs/<job>/output/{summary.json,metrics.jsonl,model/,...}  (a training)
    tenants/<tenant>/jobs/<job>/output/{report.html,evaluation.json}  (an evaluation)
    tenants/<tenant>/models/<model>/...                 (a tenant's uploaded base model)
    models/<model>/...                                  (the operator's catalog: services.catalog)
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


def _check_rel(rel: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not rel:
        raise ValueError(f"storage path must be relative and stay under the root: {rel!r}")
    return p.as_posix()


def _running(name: str) -> bool:
    """A spool directory's process is alive (its name is a pid on this host)."""
    if not name.isdigit():
        return False
    try:
        os.kill(int(name), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Storage:
    def __init__(self, uri: str):
        self.uri = uri
        if "://" in uri:
            self.fs, root = pafs.FileSystem.from_uri(uri)
            self.local_root: Path | None = None
        else:
            local = Path(uri).expanduser().resolve()
            local.mkdir(parents=True, exist_ok=True)
            self.fs, root = pafs.LocalFileSystem(), str(local)
            self.local_root = local
        self.root = root.rstrip("/")
        self.scheme = uri.split("://", 1)[0] if "://" in uri else "file"

    @property
    def is_local(self) -> bool:
        return self.local_root is not None

    def _full(self, rel: str) -> str:
        return f"{self.root}/{_check_rel(rel)}"

    def location(self, rel: str) -> str:
        """Where a worker finds ``rel``: an absolute path for local storage, else a URI."""
        if self.local_root is not None:
            return str(self.local_root / _check_rel(rel))
        return f"{self.scheme}://{self._full(rel)}"

    # ---- spool: where uploads land under a temporary name ---------------------------
    def spool_dir(self, fallback: Path) -> Path:
        """This process's spool. Local storage spools inside its own root (the final step
        is then a rename on one filesystem); remote storage spools in ``fallback`` on
        local disk. Each API process (``--workers``) has a directory of its own, named by
        its pid, so one that starts never removes another's uploads in flight."""
        d = ((self.local_root / ".spool") if self.local_root is not None else fallback) / str(os.getpid())
        d.mkdir(parents=True, exist_ok=True)
        return d

    def clear_spool(self, fallback: Path, own: Path | None = None) -> int:
        """Remove uploads a crash left behind: this process's spool and those of
        processes no longer running; returns how many entries went."""
        own = own or self.spool_dir(fallback)
        n = 0
        for p in [*own.iterdir(), *(q for q in own.parent.iterdir() if q != own and not _running(q.name))]:
            if p.is_dir():
                n += sum(1 for _ in p.iterdir())
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
                n += 1
        return n

    def put_file(self, local: Path, rel: str) -> None:
        """Move a finished local file into storage at ``rel`` (a rename when local)."""
        dest = self._full(rel)
        self.fs.create_dir(str(PurePosixPath(dest).parent), recursive=True)
        if self.local_root is not None:
            os.replace(local, dest)
            return
        tmp = f"{dest}.partial-{uuid.uuid4().hex[:8]}"
        try:
            with open(local, "rb") as src, self.fs.open_output_stream(tmp, compression=None) as out:
                shutil.copyfileobj(src, out, READ_CHUNK)
            self.fs.move(tmp, dest)
        except BaseException:
            self._delete_quietly(tmp)
            raise
        finally:
            Path(local).unlink(missing_ok=True)

    def write_stream(self, rel: str, chunks) -> None:
        """Write ``chunks`` (an iterable of bytes) to ``rel`` under a temporary name, then
        move it into place (a model's weights, copied in without being held whole)."""
        dest = self._full(rel)
        self.fs.create_dir(str(PurePosixPath(dest).parent), recursive=True)
        tmp = f"{dest}.partial-{uuid.uuid4().hex[:8]}"
        try:
            with self.fs.open_output_stream(tmp, compression=None) as out:
                for chunk in chunks:
                    out.write(chunk)
            self.fs.move(tmp, dest)
        except BaseException:
            self._delete_quietly(tmp)
            raise

    # ---- small files ------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes, *, private: bool = False) -> None:
        dest = self._full(rel)
        self.fs.create_dir(str(PurePosixPath(dest).parent), recursive=True)
        if self.local_root is not None:
            tmp = f"{dest}.tmp-{uuid.uuid4().hex[:8]}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            return
        with self.fs.open_output_stream(dest, compression=None) as out:
            out.write(data)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self._full(rel), compression=None) as f:
            return f.read()

    def open_chunks(self, rel: str, chunk: int = READ_CHUNK) -> Iterator[bytes]:
        with self.fs.open_input_stream(self._full(rel), compression=None) as f:
            while True:
                b = f.read(chunk)
                if not b:
                    return
                yield b

    def read_tail(self, rel: str, max_bytes: int) -> bytes:
        """The last ``max_bytes`` of a file (one ranged read); b"" when it does not exist."""
        try:
            with self.fs.open_input_file(self._full(rel)) as f:
                size = f.size()
                return f.read_at(min(size, max_bytes), max(0, size - max_bytes))
        except (FileNotFoundError, OSError):
            return b""

    def list_files(self, rel_dir: str) -> list[tuple[str, int]]:
        """(path under ``rel_dir``, size) of every file below it, sorted; [] when absent."""
        base = self._full(rel_dir)
        sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        return sorted((i.path[len(base) + 1:], i.size or 0) for i in self.fs.get_file_info(sel)
                      if i.type == pafs.FileType.File)

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self._full(rel)).type != pafs.FileType.NotFound

    def size(self, rel: str) -> int | None:
        info = self.fs.get_file_info(self._full(rel))
        return info.size if info.type == pafs.FileType.File else None

    def tree_bytes(self, rel: str) -> int:
        sel = pafs.FileSelector(self._full(rel), recursive=True, allow_not_found=True)
        return sum(i.size or 0 for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File)

    # ---- deletion ---------------------------------------------------------------------
    def delete_file(self, rel: str) -> None:
        self._delete_quietly(self._full(rel))

    def delete_tree(self, rel: str) -> None:
        full = self._full(rel)
        if self.fs.get_file_info(full).type == pafs.FileType.Directory:
            self.fs.delete_dir(full)

    def delete_children(self, rel_dir: str, prefix: str) -> int:
        """Delete the entries of ``rel_dir`` whose names start with ``prefix``."""
        sel = pafs.FileSelector(self._full(rel_dir), allow_not_found=True)
        n = 0
        for info in self.fs.get_file_info(sel):
            if info.base_name.startswith(prefix):
                if info.type == pafs.FileType.Directory:
                    self.fs.delete_dir(info.path)
                else:
                    self.fs.delete_file(info.path)
                n += 1
        return n

    def _delete_quietly(self, full: str) -> None:
        try:
            if self.fs.get_file_info(full).type == pafs.FileType.File:
                self.fs.delete_file(full)
        except OSError as exc:  # pragma: no cover - best effort
            log.warning("could not delete %s: %s", full, exc)


def tenant_prefix(tenant_id: str) -> str:
    return f"tenants/{tenant_id}"


def corpus_dir(tenant_id: str, corpus_id: str) -> str:
    return f"{tenant_prefix(tenant_id)}/corpora/{corpus_id}"


def job_dir(tenant_id: str, job_id: str) -> str:
    return f"{tenant_prefix(tenant_id)}/jobs/{job_id}"
