"""Locations: a local path, a ``file://`` URI, or any URI ``pyarrow.fs`` opens (``s3://bucket/key``).

Everything a stage or an entrypoint needs to read from one: whether it is remote, its local path,
its filesystem, and a local copy of a remote input. Errors are one line naming the location.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from privatize.errors import InputError


def is_uri(location: str) -> bool:
    """Any URI, ``file://`` included."""
    return "://" in location


def is_remote(location: str) -> bool:
    """A URI that is not ``file://``: read and written through ``pyarrow.fs``."""
    return "://" in location and not location.startswith("file://")


def local_path(location: str) -> str:
    """The path of a local location (``file://`` stripped)."""
    return location[len("file://"):] if location.startswith("file://") else location


def open_location(location: str):
    """(filesystem, path) for a URI; an :class:`InputError` of one line when it cannot be opened."""
    import pyarrow.fs as pafs

    try:
        return pafs.FileSystem.from_uri(location)
    except (OSError, ValueError, TypeError) as exc:  # pyarrow raises ArrowInvalid (a ValueError)
        raise InputError(f"{location}: cannot open ({str(exc).splitlines()[0]})") from None


def localize_input(location: str, tmp: Path) -> str:
    """A local path holding the input: the path itself, or a copy of a remote file or
    folder under ``tmp`` (file names, and so default document ids, are kept)."""
    if not is_uri(location):
        return location
    if location.startswith("file://"):
        return location[len("file://"):]
    import pyarrow.fs as pafs

    fs, path = open_location(location)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"{location}: no such file or directory")
    dest = tmp / "input"
    dest.mkdir(parents=True)
    try:
        if info.type == pafs.FileType.Directory:
            pafs.copy_files(path, str(dest), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
            return str(dest)
        target = dest / PurePosixPath(path).name
        pafs.copy_files(path, str(target), source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        return str(target)
    except OSError as exc:
        raise InputError(f"{location}: cannot read: {str(exc).splitlines()[0]}") from None
