"""The ``keystore:`` backend of ``privatize.keys.KeyResolver`` on Ray workers.

When the service submits a job it writes the job's *key bundle* next to the job: for
each ``keystore:<id>`` the spec names, the key's sealed blobs exactly as the database
holds them (wrapped under the master key; see ``services.envelope``). The bundle's
location reaches the job as ``PRIVATIZE_KEY_BUNDLE`` in its runtime environment (a
location, not a secret). The master key reaches the node as a deployment secret
(``PRIVATIZE_MASTER_KEY_FILE`` or ``PRIVATIZE_MASTER_KEY`` in the Ray node's
environment), never as a job argument.

``install_worker_keystore`` is the job's ``worker_process_setup_hook`` (every Ray worker
process of the job runs it) and the first thing the job's driver runs
(``services.jobrun``). It registers a lazy backend: nothing is read until a stage's
``setup()`` resolves a reference, and a missing master key is a clear
``KeyMaterialError`` there, not a crashed worker.

This module imports no web or database code: it runs on workers.
"""

from __future__ import annotations

import base64
import json
import logging
import threading

import pyarrow.fs as pafs

from privatize.errors import KeyMaterialError
from privatize.keys import KeyMaterial, register_keystore
from services.envelope import Sealed, open_key

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "privatize-keybundle/1"


def bundle_json(tenant_id: str, keys: list[dict]) -> bytes:
    """``keys``: dicts with id, kind, master_key_id, wrapped_dek, material_ct (bytes)."""
    return json.dumps({
        "format": BUNDLE_FORMAT,
        "tenant_id": tenant_id,
        "keys": {k["id"]: {"kind": k["kind"], "master_key_id": k["master_key_id"],
                           "wrapped_dek": base64.b64encode(k["wrapped_dek"]).decode("ascii"),
                           "material_ct": base64.b64encode(k["material_ct"]).decode("ascii")}
                 for k in keys},
    }, sort_keys=True).encode("utf-8")


def read_location(location: str) -> bytes:
    fs, path = pafs.FileSystem.from_uri(location)
    with fs.open_input_stream(path, compression=None) as f:  # the bytes as stored, whatever the name
        return f.read()


class BundleKeystore:
    """Resolves key ids from one job's bundle with the node's master key."""

    def __init__(self, bundle: bytes, master: bytes):
        try:
            data = json.loads(bundle)
        except ValueError:
            raise KeyMaterialError("key bundle is not JSON") from None
        if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
            raise KeyMaterialError(f"key bundle is not a {BUNDLE_FORMAT} file")
        self._tenant = data["tenant_id"]
        self._keys = data.get("keys", {})
        self._master = master
        self._cache: dict[str, KeyMaterial] = {}

    def __repr__(self) -> str:
        return f"BundleKeystore(tenant={self._tenant!r}, keys={sorted(self._keys)!r})"

    def __call__(self, key_id: str) -> KeyMaterial:
        km = self._cache.get(key_id)
        if km is not None:
            return km
        entry = self._keys.get(key_id)
        if entry is None:
            raise KeyMaterialError(f"keystore:{key_id}: not in this job's key bundle")
        sealed = Sealed(entry["master_key_id"], base64.b64decode(entry["wrapped_dek"]),
                        base64.b64decode(entry["material_ct"]))
        km = open_key(self._master, self._tenant, key_id, entry["kind"], sealed)
        self._cache[key_id] = km
        log.info("resolved keystore:%s (%s)", key_id, km.kind)
        return km


class _LazyWorkerKeystore:
    """Reads the master key and the bundle on first use, once per process."""

    def __init__(self, location: str):
        self._location = location
        self._lock = threading.Lock()
        self._store: BundleKeystore | None = None

    def __repr__(self) -> str:
        return f"_LazyWorkerKeystore({self._location!r})"

    def __call__(self, key_id: str) -> KeyMaterial:
        with self._lock:
            if self._store is None:
                from services.errors import ConfigError
                from services.settings import get_worker_settings, load_worker_master_key

                try:
                    master = load_worker_master_key(get_worker_settings())
                except ConfigError as exc:
                    raise KeyMaterialError(f"keystore:{key_id}: {exc}") from None
                try:
                    bundle = read_location(self._location)
                except OSError as exc:
                    raise KeyMaterialError(f"keystore:{key_id}: cannot read the job's key bundle "
                                           f"({str(exc).splitlines()[0]})") from None
                self._store = BundleKeystore(bundle, master)
        return self._store(key_id)


def install_worker_keystore() -> bool:
    """Register the ``keystore:`` backend for this process when the job has a key bundle.
    Never raises (a Ray setup hook that raises kills the worker)."""
    try:
        from services.settings import get_worker_settings

        location = get_worker_settings().key_bundle
    except Exception:  # noqa: BLE001 - a broken environment must not kill the worker here
        log.exception("could not read the worker settings; no keystore installed")
        return False
    if not location:
        return False
    register_keystore(_LazyWorkerKeystore(location))
    return True
