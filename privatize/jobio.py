"""What the job entrypoints (``python -m privatize.job``, ``privatize.adapt_job``, ``train.job``, ``attacks.job``)
share: localise the input, check or clear the output, upload a finished folder with its result
file last (a reader that finds the result finds everything it names), and one-line errors that
name storage-relative locations (``<input>``, ``<output>``) rather than this machine's paths.
"""

from __future__ import annotations

import logging
from pathlib import Path

from privatize.errors import OutputError
from privatize.io.locations import is_remote, is_uri, local_path, localize_input, open_location

__all__ = ["check_output", "clear_output", "delete_dir", "is_remote", "is_uri", "local_path", "localize_input",
           "open_location", "output_dir", "redact_paths", "upload_files"]

log = logging.getLogger(__name__)


def check_output(location: str, overwrite: bool) -> None:
    """A remote output must not exist, unless ``overwrite`` (it is replaced when uploaded)."""
    import pyarrow.fs as pafs

    fs, path = open_location(location)
    if fs.get_file_info(path).type != pafs.FileType.NotFound and not overwrite:
        raise OutputError(f"{location}: output exists (use --overwrite to replace it)")


def clear_output(location: str, overwrite: bool) -> None:
    """A remote output must not exist, unless ``overwrite`` (then it is deleted now)."""
    import pyarrow.fs as pafs

    fs, path = open_location(location)
    kind = fs.get_file_info(path).type
    if kind == pafs.FileType.NotFound:
        return
    if not overwrite:
        raise OutputError(f"{location}: output exists (use --overwrite to replace it)")
    if kind == pafs.FileType.Directory:
        fs.delete_dir(path)
    else:
        fs.delete_file(path)


def delete_dir(location: str) -> None:
    """Best effort: a leftover folder only costs space, so failure is a warning."""
    import pyarrow.fs as pafs

    fs, path = open_location(location)
    try:
        if fs.get_file_info(path).type == pafs.FileType.Directory:
            fs.delete_dir(path)
    except OSError as exc:
        log.warning("could not delete %s: %s", location, str(exc).splitlines()[0])


def upload_files(local: Path, location: str, files: list[str], *, last: str | None = None,
                 make_parents: bool = True) -> None:
    """Copy ``files`` (paths relative to ``local``; a folder is copied whole) to ``location``,
    ``last`` after all of them."""
    import pyarrow.fs as pafs

    fs, path = open_location(location)
    local_fs = pafs.LocalFileSystem()
    fs.create_dir(path, recursive=True)
    made = {path}
    for rel in [f for f in files if f != last] + ([last] if last else []):
        parent = f"{path}/{rel}".rsplit("/", 1)[0]
        if make_parents and parent not in made:  # implicit on object stores; a local destination needs it
            fs.create_dir(parent, recursive=True)
            made.add(parent)
        pafs.copy_files(str(local / rel), f"{path}/{rel}", source_filesystem=local_fs, destination_filesystem=fs)


def redact_paths(message: str, paths: dict[str, str]) -> str:
    """A one-line message with local paths replaced by what they stand for (longest first)."""
    for p, name in sorted(paths.items(), key=lambda kv: -len(kv[0])):
        if p:
            message = message.replace(p, name)
    return message


def output_dir(location: str, tmp: Path) -> Path:
    """Where a job writes its output locally: ``tmp/output`` for a remote location (uploaded
    when done), else the location's own path."""
    return tmp / "output" if is_remote(location) else Path(local_path(location))
