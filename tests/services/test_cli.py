"""The service's subcommands plug into the one ``privatize`` CLI through the
``privatize.commands`` entry point declared in pyproject.toml."""

from __future__ import annotations

import json
import stat
import tomllib
from importlib.metadata import EntryPoint

import pytest

import privatize.cli as pcli
from tests.conftest import ROOT


@pytest.fixture
def with_entry_point(monkeypatch):
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    value = meta["project"]["entry-points"]["privatize.commands"]["services"]
    assert value == "services.cli:register"
    ep = EntryPoint(name="services", value=value, group="privatize.commands")
    monkeypatch.setattr(pcli, "entry_points", lambda group: [ep] if group == "privatize.commands" else [])


def test_commands_are_registered(with_entry_point):
    p = pcli.build_parser()
    a = p.parse_args(["submit", "spec.yaml", "--corpus", "c.jsonl", "--wait"])
    assert (a.args, a.corpus, a.wait) == (["spec.yaml"], "c.jsonl", True)
    a = p.parse_args(["admin", "tenant", "create", "acme", "--max-jobs", "3"])
    assert (a.name, a.max_jobs) == ("acme", 3)
    assert p.parse_args(["serve", "--port", "9000"]).port == 9000
    assert p.parse_args(["admin", "ray", "stop"]).action == "stop"


def test_admin_through_the_privatize_cli(with_entry_point, tmp_path, capsys, monkeypatch):
    for k in ("PRIVATIZE_MASTER_KEY", "PRIVATIZE_MASTER_KEY_FILE", "PRIVATIZE_DATABASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "data"))
    from services.settings import get_settings

    get_settings.cache_clear()
    try:
        assert pcli.main(["admin", "master-key", "new", "--out", str(tmp_path / "mk")]) == 0
        assert stat.S_IMODE((tmp_path / "mk").stat().st_mode) == 0o600
        assert pcli.main(["admin", "master-key", "new", "--out", str(tmp_path / "mk")]) == 2  # never overwrites
        capsys.readouterr()
        assert pcli.main(["admin", "tenant", "create", "acme", "--storage-limit", "1000"]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert out["name"] == "acme" and out["token"].startswith("pvt_") and out["storage_limit_bytes"] == 1000
        assert pcli.main(["admin", "tenant", "create", "acme"]) == 2  # exists
        assert "exists" in capsys.readouterr().err
        assert pcli.main(["admin", "token", "rotate", "nobody"]) == 2
        assert pcli.main(["admin", "tenant", "list"]) == 0
        listed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert listed["name"] == "acme" and out["token"] not in json.dumps(listed)
    finally:
        get_settings.cache_clear()


def test_serve_refuses_to_start_without_a_master_key(with_entry_point, tmp_path, capsys, monkeypatch):
    for k in ("PRIVATIZE_MASTER_KEY", "PRIVATIZE_MASTER_KEY_FILE", "PRIVATIZE_ENV"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "data"))
    from services.settings import get_settings

    get_settings.cache_clear()
    try:
        assert pcli.main(["serve", "--port", "1"]) == 2
        assert "no master key" in capsys.readouterr().err
    finally:
        get_settings.cache_clear()
