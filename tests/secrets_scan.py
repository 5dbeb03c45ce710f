"""Find key material in text and files: raw, hex, Base64 and Base64url forms."""

from __future__ import annotations

import base64
from pathlib import Path

import pyarrow.parquet as pq


def forms(secret: bytes) -> list[bytes]:
    out = {secret, secret.hex().encode(), secret.hex().upper().encode(),
           base64.b64encode(secret), base64.urlsafe_b64encode(secret)}
    out |= {f.rstrip(b"=") for f in list(out)}
    # any 16-byte window of a long key is already a leak
    if len(secret) >= 32:
        out |= {secret[:16], secret[-16:], secret[:16].hex().encode()}
    return sorted(out)


def leaks(blob: bytes, secret: bytes) -> list[bytes]:
    return [f for f in forms(secret) if f and f in blob]


def scan_tree(root: Path, secret: bytes) -> list[str]:
    """Files under ``root`` containing a form of ``secret`` (Parquet checked decompressed too)."""
    found = []
    for p in sorted(Path(root).rglob("*")):
        if not p.is_file():
            continue
        blob = p.read_bytes()
        if p.suffix == ".parquet":
            blob += pq.read_table(p).to_pandas().to_csv().encode("utf-8")
        if leaks(blob, secret):
            found.append(str(p))
    return found
