"""Settings: secrets are refused when missing or default outside development mode."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from services.errors import ConfigError
from services.settings import (Settings, check_secrets, decode_master_key, load_master_key, new_master_key_text,
                               write_master_key_file)


def _settings(tmp_path, **kw) -> Settings:
    return Settings(_env_file=None, data_dir=tmp_path / "data", **kw)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("PRIVATIZE_"):
            monkeypatch.delenv(k)


def test_production_refuses_a_missing_master_key(tmp_path):
    with pytest.raises(ConfigError, match="no master key"):
        check_secrets(_settings(tmp_path))


def test_production_refuses_default_or_malformed_keys(tmp_path):
    for bad in ("changethis", "", base64.b64encode(b"\0" * 32).decode(), "00" * 32,
                base64.b64encode(b"short").decode()):
        with pytest.raises(ConfigError):
            check_secrets(_settings(tmp_path, master_key=bad))


def test_production_refuses_a_default_database_password(tmp_path):
    key = new_master_key_text()
    with pytest.raises(ConfigError, match="well-known default"):
        check_secrets(_settings(tmp_path, master_key=key,
                                database_url="postgresql+psycopg://privatize:changethis@db/privatize"))
    check_secrets(_settings(tmp_path, master_key=key,
                            database_url="postgresql+psycopg://privatize:Zq8-long-random@db/privatize"))


def test_master_key_forms(tmp_path):
    raw = bytes(range(32))
    assert decode_master_key(base64.b64encode(raw).decode(), "x") == raw
    assert decode_master_key(base64.urlsafe_b64encode(raw).decode().rstrip("="), "x") == raw
    assert decode_master_key(raw.hex(), "x") == raw
    p = write_master_key_file(tmp_path / "mk")
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    with pytest.raises(FileExistsError):
        write_master_key_file(p)
    assert len(load_master_key(_settings(tmp_path, master_key_file=p))) == 32
    with pytest.raises(ConfigError, match="not both"):
        load_master_key(_settings(tmp_path, master_key_file=p, master_key=new_master_key_text()))


def test_development_generates_a_key_once(tmp_path):
    s = _settings(tmp_path, env="development")
    k1 = check_secrets(s)
    k2 = check_secrets(s)
    assert k1 == k2 and len(k1) == 32
    assert stat.S_IMODE(s.dev_master_key_path.stat().st_mode) == 0o600
    assert s.effective_master_key_file == s.dev_master_key_path


def test_environment_is_read_with_the_prefix(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("PRIVATIZE_RAY_ADDRESS", "http://head:8265")
    s = Settings(_env_file=None)
    assert s.data_path == (tmp_path / "d").resolve()
    assert s.effective_database_url == f"sqlite:///{(tmp_path / 'd').resolve() / 'privatize.db'}"
    assert s.ray_address == "http://head:8265"
