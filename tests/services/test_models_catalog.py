"""Issue 54, item 3: the base-model catalog. In process (FastAPI's TestClient on SQLite, a
Ray address nothing answers on: an admitted training stays queued): the operator adds,
lists and removes models (``privatize admin model``); ``GET /v1/models`` lists the catalog
and the tenant's own uploads, without a server location; a training names one as
``model.checkpoint: base:NAME`` (continue, DP-LoRA: planned from the model's config and
tokenizer) and its job gets the model's folder as ``--checkpoint``; a tenant's upload
(``POST /v1/models``, a ``.tar.gz``) is counted in its storage and invisible to another
tenant (404); a pickle file, a link or a path leaving the folder is refused naming the
file; an upload read by an active training is not deleted (409). Through a real service:
a tiny training from ``base:NAME``."""

from __future__ import annotations

import io
import math
import json
import tarfile
from pathlib import Path

import pytest

from tests.services.test_ledger import CORPUS, ledger_api  # noqa: F401  (the fixture)

TEXTS = [f"Record {i}: the quick brown fox jumps over the lazy dog, again and again." for i in range(60)]


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory) -> Path:
    """A tiny Hugging Face causal LM folder: config.json, model.safetensors, its tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from train.tokenizer import train_tokenizer

    d = tmp_path_factory.mktemp("hf") / "tiny-llama"
    tok = train_tokenizer(TEXTS, 300)
    tok.save_pretrained(d)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=128)
    LlamaForCausalLM(cfg).save_pretrained(d)
    assert (d / "config.json").exists() and list(d.glob("*.safetensors"))
    return d


def tar_gz(folder: Path | None = None, root: str = "model", extra: dict[str, bytes] | None = None,
           members: list[tarfile.TarInfo] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        if folder is not None:
            for p in sorted(folder.iterdir()):
                tf.add(p, arcname=f"{root}/{p.name}" if root else p.name)
        for name, data in (extra or {}).items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for ti in members or []:
            tf.addfile(ti)
    return buf.getvalue()


def _admin(monkeypatch, settings, *argv: str, capsys=None) -> tuple[int, list[dict], str]:
    from services import admin

    monkeypatch.setattr(admin, "_settings", lambda: settings)
    rc = admin.main(list(argv))
    if capsys is None:
        return rc, [], ""
    out = capsys.readouterr()
    return rc, [json.loads(x) for x in out.out.splitlines() if x.strip()], out.err


def _post(client, job: str, config: dict):
    return client.post("/v1/trainings", json={"job_id": job, "config": config})


def _continue(ref: str, **extra) -> dict:
    return {"version": 1, "kind": "continue", "data": {"seq_len": 32},
            "model": {"preset": None, "checkpoint": ref, **extra},
            "optim": {"batch_size": 4, "max_steps": 4}, "workers": {"num_workers": 1}}


def _dp_lora(ref: str) -> dict:
    return {"version": 1, "kind": "dp", "data": {"seq_len": 32},
            "model": {"preset": None, "checkpoint": ref, "lora": {"r": 2, "target_modules": ["q_proj", "v_proj"]}},
            "optim": {"batch_size": 8, "epochs": 1}, "workers": {"num_workers": 1},
            "dp": {"target_epsilon": 4.0, "accountant": "rdp"}}


def _end(sessions, job_id: str, status: str = "failed") -> None:
    from services.db import session_scope
    from services.models import Job

    with session_scope(sessions) as s:
        s.get(Job, job_id).status = status


def _no_limit(ledger_api) -> None:  # noqa: F811
    """The ledger fixture's tenant without its epsilon limit (a training without DP is admitted)."""
    from services.db import session_scope
    from services.models import Tenant

    with session_scope(ledger_api["sessions"]) as s:
        s.get(Tenant, ledger_api["tenant"]).max_epsilon_per_corpus = None


def _settings_of(client):
    return client.app.state.ctx.settings


def _other_tenant(ledger_api, name: str = "other"):  # noqa: F811
    """A second tenant with a corpus and a succeeded privatization job of its own."""
    from fastapi.testclient import TestClient

    from services.db import session_scope
    from services.models import Job
    from services.storage import job_dir
    from services.tenants import create_tenant

    ctx = ledger_api["ctx"]
    with session_scope(ledger_api["sessions"]) as s:
        t, _, token = create_tenant(s, name, storage_limit_bytes=1 << 30, max_concurrent_jobs=8)
        tid = t.id
    other = TestClient(ledger_api["client"].app)
    other.headers["Authorization"] = f"Bearer {token}"
    corpus = other.post("/v1/corpora?format=jsonl&name=c", content=CORPUS).json()
    out = f"{job_dir(tid, 'q' * 16)}/output"
    ctx.storage.write_bytes(f"{out}/manifest.json", b'{"records": 120}')
    with session_scope(ledger_api["sessions"]) as s:
        s.add(Job(id="q" * 16, tenant_id=tid, corpus_id=corpus["id"], kind="privatize", status="succeeded",
                  spec={}, spec_sha256="0" * 64, key_ids=[], output_path=out))
    return other, tid


def test_the_operator_adds_lists_and_removes_a_model_a_training_names_it_base_name(
        ledger_api, hf_model, monkeypatch, capsys, tmp_path):  # noqa: F811
    from services.db import session_scope
    from services.jobs import entrypoint_for, runtime_env_for
    from services.models import Job

    c, job, ctx = ledger_api["client"], ledger_api["job"], ledger_api["ctx"]
    settings = _settings_of(c)
    _no_limit(ledger_api)
    # a `privatize base` output (a run folder): its model/ is what is added
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    for p in hf_model.iterdir():
        (run / "model" / p.name).write_bytes(p.read_bytes())
    (run / "summary.json").write_text("{}")
    rc, (added,), _ = _admin(monkeypatch, settings, "model", "add", "tiny-llama", str(run), capsys=capsys)
    assert rc == 0 and added["ref"] == "base:tiny-llama" and added["architecture"] == "LlamaForCausalLM"
    assert sorted(n for n, _ in ctx.storage.list_files(f"models/{added['id']}")) == sorted(
        p.name for p in hf_model.iterdir())
    rc, _, err = _admin(monkeypatch, settings, "model", "add", "tiny-llama", str(hf_model), capsys=capsys)
    assert rc == 2 and "already" in err
    rc, listed, _ = _admin(monkeypatch, settings, "model", "list", capsys=capsys)
    assert [m["name"] for m in listed] == ["tiny-llama"] and listed[0]["owner"] == "catalog"

    # a tenant sees it, without any location
    r = c.get("/v1/models")
    assert r.status_code == 200
    (m,) = r.json()
    assert (m["name"], m["ref"], m["owner"]) == ("tiny-llama", "base:tiny-llama", "catalog")
    assert str(settings.data_path) not in r.text and "models/" not in r.text and "storage" not in r.text
    assert c.get("/v1/models/tiny-llama").json()["owner"] == "catalog"

    # a training names it: continue, and DP-LoRA (planned from its config and tokenizer)
    r = _post(c, job, _continue("base:tiny-llama"))
    assert r.status_code == 201, r.text
    cont = r.json()
    assert cont["config"]["base_model"] == {"name": "tiny-llama", "id": added["id"], "owner": "catalog"}
    assert str(settings.data_path) not in r.text
    r = _post(c, job, _dp_lora("base:tiny-llama"))
    assert r.status_code == 201, r.text
    dp = r.json()
    plan = dp["config"]["admitted_plan"]
    assert plan["noise_multiplier"] > 0 and plan["planned_epsilon"] <= 4.0
    # the job reads the model's folder in the catalog (the storage's own location)
    with session_scope(ledger_api["sessions"]) as s:
        row = s.get(Job, cont["id"])
        entry = entrypoint_for(ctx, row, None)
    assert f"--checkpoint {ctx.storage.location('models/' + added['id'])}" in entry, entry
    # an evaluation attacks it as it attacks a training (models: [{model: base:NAME}]): its
    # config names it by reference, which every worker resolves (PRIVATIZE_MODELS) to the
    # catalog's folder; no location reaches the tenant
    ev_cfg = {"version": 1, "models": [{"name": "base", "model": "base:tiny-llama"}],
              "perplexity": {"data": {"job_id": job}, "limit": 10}}
    r = c.post("/v1/evaluations", json={"config": ev_cfg})
    assert r.status_code == 201, r.text
    ev = r.json()
    assert ev["training_ids"] == [None] and str(settings.data_path) not in r.text
    with session_scope(ledger_api["sessions"]) as s:
        row = s.get(Job, ev["id"])
        assert row.spec["models"][0]["path"] == f"catalog:{added['id']}"
        env = runtime_env_for(ctx, row)["env_vars"]
    assert json.loads(env["PRIVATIZE_MODELS"]) == {f"catalog:{added['id']}":
                                                   ctx.storage.location(f"models/{added['id']}")}
    for model, path, status in (({"model": "base:nope"}, "models.0.model", 404),
                                ({"model": "training:0123456789abcdef"}, "models.0.model", 422),
                                ({"model": "base:tiny-llama", "training_id": "0" * 16}, "models.0.model", 422)):
        r = c.post("/v1/evaluations", json={"config": {**ev_cfg, "models": [{"name": "m", **model}]}})
        body = r.json()
        assert r.status_code == status and (body.get("path") or body["errors"][0]["path"]) == path, r.text
    # a tenant may not say where the catalog's model is
    r = _post(c, job, {**_continue("base:tiny-llama"), "base_model": {"name": "x", "id": "0" * 16,
                                                                     "owner": "catalog"}})
    assert r.status_code == 422 and r.json()["errors"][0]["path"] == "base_model"
    # an unknown name answers 404 at model.checkpoint, as an unknown training does
    for ref in ("base:nope", "base:nope-dp"):
        r = _post(c, job, _continue(ref) if ref == "base:nope" else _dp_lora(ref))
        assert r.status_code == 404 and r.json()["path"] == "model.checkpoint", r.text
    for bad in ("base:", "base:../x", "base:a/b", "base:" + "x" * 65):
        r = _post(c, job, _continue(bad))
        assert r.status_code == 422 and r.json()["errors"][0]["path"] == "model.checkpoint", bad

    # not removed while a training reads it
    rc, _, err = _admin(monkeypatch, settings, "model", "remove", "tiny-llama", capsys=capsys)
    assert rc == 2 and cont["id"] in err and dp["id"] in err and ev["id"] in err
    _end(ledger_api["sessions"], cont["id"])
    _end(ledger_api["sessions"], dp["id"], "cancelled")
    _end(ledger_api["sessions"], ev["id"], "cancelled")
    rc, _, _ = _admin(monkeypatch, settings, "model", "remove", "tiny-llama", capsys=capsys)
    assert rc == 0
    assert ctx.storage.list_files(f"models/{added['id']}") == []
    assert c.get("/v1/models").json() == []
    r = _post(c, job, _continue("base:tiny-llama"))
    assert r.status_code == 404 and r.json()["path"] == "model.checkpoint"
    with session_scope(ledger_api["sessions"]) as s:
        from sqlalchemy import select

        from services.models import AuditEvent

        actions = [e.action for e in s.scalars(select(AuditEvent).where(AuditEvent.resource_id == added["id"]))]
    assert actions == ["model.add", "model.remove"]


def test_an_upload_is_its_tenants_alone_counted_and_not_deleted_while_read(ledger_api, hf_model):  # noqa: F811
    from services.db import session_scope
    from services.tenants import storage_used

    c, job, ctx, tenant = ledger_api["client"], ledger_api["job"], ledger_api["ctx"], ledger_api["tenant"]
    with session_scope(ledger_api["sessions"]) as s:
        before = storage_used(s, tenant)
    r = c.post("/v1/models?name=mine", content=tar_gz(hf_model), headers={"Content-Type": "application/gzip"})
    assert r.status_code == 201, r.text
    up = r.json()
    size = sum(p.stat().st_size for p in hf_model.iterdir())
    assert (up["name"], up["owner"], up["bytes"], up["files"]) == ("mine", "tenant", size, len(list(hf_model.iterdir())))
    with session_scope(ledger_api["sessions"]) as s:
        assert storage_used(s, tenant) == before + size
    assert [m["name"] for m in c.get("/v1/models").json()] == ["mine"]
    r = c.post("/v1/models?name=mine", content=tar_gz(hf_model))
    assert r.status_code == 409

    # another tenant: not listed, 404 by name, 404 at model.checkpoint, 404 on delete
    other, _ = _other_tenant(ledger_api)
    assert other.get("/v1/models").json() == []
    assert other.get("/v1/models/mine").status_code == 404
    r = _post(other, "q" * 16, _continue("base:mine"))
    assert r.status_code == 404 and r.json()["path"] == "model.checkpoint", r.text
    assert other.delete("/v1/models/mine").status_code == 404
    ev_cfg = {"version": 1, "models": [{"name": "base", "model": "base:mine"}],
              "perplexity": {"data": {"job_id": "q" * 16}, "limit": 10}}
    r = other.post("/v1/evaluations", json={"config": ev_cfg})
    assert r.status_code == 404 and r.json()["path"] == "models.0.model", r.text

    # its owner evaluates it: a job reads it in the tenant's own folder, and it is not deleted meanwhile
    r = c.post("/v1/evaluations", json={"config": {**ev_cfg, "perplexity": {"data": {"job_id": job}, "limit": 10}}})
    assert r.status_code == 201, r.text
    ev = r.json()
    with session_scope(ledger_api["sessions"]) as s:
        from services.models import Job

        path = s.get(Job, ev["id"]).spec["models"][0]["path"]
    assert path.startswith("models/") and ctx.storage.list_files(f"tenants/{tenant}/{path}"), path
    r = c.delete("/v1/models/mine")
    assert r.status_code == 409 and ev["id"] in r.json()["detail"]
    _end(ledger_api["sessions"], ev["id"], "cancelled")

    # its owner trains from it (DP-LoRA too); while that training is active it stays
    r = _post(c, job, _dp_lora("base:mine"))
    assert r.status_code == 201, r.text
    tr = r.json()
    assert tr["config"]["base_model"]["owner"] == "tenant"
    r = c.delete("/v1/models/mine")
    assert r.status_code == 409 and tr["id"] in r.json()["detail"]
    _end(ledger_api["sessions"], tr["id"])
    assert c.delete("/v1/models/mine").status_code == 204
    assert c.get("/v1/models").json() == []
    assert ctx.storage.list_files(f"tenants/{tenant}/models") == []
    with session_scope(ledger_api["sessions"]) as s:
        assert storage_used(s, tenant) == before


def _client_of(test_client):
    """A :class:`services.client.ServiceClient` whose HTTP goes to the app in process (the
    TestClient, with the tenant's token); closing it leaves the TestClient open."""
    from services.client import ServiceClient

    c = ServiceClient("http://testserver", "unused")
    c._http.close()
    c._http = test_client
    c.close = lambda: None
    return c


def test_the_client_and_privatize_models_list_upload_and_delete(ledger_api, hf_model, tmp_path, capsys,
                                                                 monkeypatch):  # noqa: F811
    """``ServiceClient.models/upload_model/delete_model`` and ``privatize models
    list|upload|delete`` against the app in process: a folder is packed and uploaded, a
    ``.tar.gz`` as it is; a refusal is exit 2 naming the file; a deleted name is gone."""
    import services.cli as scli
    from services.client import ApiError

    c = _client_of(ledger_api["client"])
    assert c.models() == []
    up = c.upload_model(hf_model, "folder")  # a folder: packed here
    assert (up["name"], up["ref"], up["owner"]) == ("folder", "base:folder", "tenant"), up
    assert up["files"] == len(list(hf_model.iterdir()))
    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(tar_gz(hf_model))
    assert c.upload_model(archive, "archive")["bytes"] == up["bytes"]  # a .tar.gz: as it is
    assert [m["name"] for m in c.models()] == ["archive", "folder"]
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in hf_model.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ApiError) as e:
        c.upload_model(bad, "bad")
    assert e.value.status == 422 and "pytorch_model.bin" in e.value.detail
    c.delete_model("archive")
    assert [m["name"] for m in c.models()] == ["folder"]
    with pytest.raises(ApiError) as e:
        c.delete_model("archive")
    assert e.value.status == 404

    # the same through the CLI (its client is this one)
    monkeypatch.setattr(scli, "_client", lambda args: c)

    err = []

    def cli(*argv: str) -> tuple[int, list[dict]]:
        capsys.readouterr()
        try:
            rc = scli.main(["models", *argv])
        except SystemExit as exc:  # argparse
            rc = exc.code
        got = capsys.readouterr()
        err[:] = [got.err]
        return rc, [json.loads(line) for line in got.out.splitlines() if line.startswith("{")]

    rc, out = cli("upload", "mine", str(hf_model), "-q")
    assert rc == 0 and out[0]["ref"] == "base:mine", out
    rc, out = cli("list")
    assert rc == 0 and [m["name"] for m in out] == ["folder", "mine"], out
    rc, _ = cli("upload", "bad", str(bad))
    assert rc == 2 and "pytorch_model.bin" in err[0], err
    rc, out = cli("delete", "mine")
    assert rc == 0 and out == [{"name": "mine", "deleted": True}]
    rc, out = cli("delete", "mine")
    assert rc == 2
    assert [m["name"] for m in c.models()] == ["folder"]


def test_a_pickle_a_link_or_a_path_leaving_the_folder_is_refused_naming_the_file(
        ledger_api, hf_model, monkeypatch, capsys, tmp_path):  # noqa: F811
    c, ctx, tenant = ledger_api["client"], ledger_api["ctx"], ledger_api["tenant"]

    def refused(body: bytes, name: str, status: int = 422):
        r = c.post("/v1/models?name=bad", content=body)
        assert r.status_code == status, (name, r.text)
        assert name in r.json()["detail"], r.text
        return r.json()

    assert refused(tar_gz(hf_model, extra={"model/pytorch_model.bin": b"\x80\x04K\x01."}),
                   "pytorch_model.bin")["file"] == "model/pytorch_model.bin"
    for name in ("model/sub/opt.pt", "model/x.pth", "model/state.pkl", "model/last.ckpt"):
        refused(tar_gz(hf_model, extra={name: b"\x80\x04."}), name)
    refused(tar_gz(hf_model, extra={"model/../../evil.json": b"{}"}), "../../evil.json")
    refused(tar_gz(hf_model, extra={"/etc/evil.json": b"{}"}), "/etc/evil.json")
    link = tarfile.TarInfo("model/link.json")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    refused(tar_gz(hf_model, members=[link]), "model/link.json")
    hard = tarfile.TarInfo("model/hard.json")
    hard.type, hard.linkname = tarfile.LNKTYPE, "model/config.json"
    refused(tar_gz(hf_model, members=[hard]), "model/hard.json")
    # what a model folder must hold
    no_weights = tmp_path / "no-weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((hf_model / "config.json").read_text())
    refused(tar_gz(no_weights), "safetensors")
    mlm = tmp_path / "mlm"
    mlm.mkdir()
    for p in hf_model.iterdir():
        (mlm / p.name).write_bytes(p.read_bytes())
    (mlm / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    refused(tar_gz(mlm), "causal")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "config.json").write_text((hf_model / "config.json").read_text())
    (fake / "model.safetensors").write_bytes(b"\x80\x04\x95 not a safetensors file at all")
    refused(tar_gz(fake), "model.safetensors")
    refused(b"not an archive", "archive")
    # over the tenant's storage: 413, nothing kept
    from services.db import session_scope
    from services.models import Tenant

    with session_scope(ledger_api["sessions"]) as s:
        s.get(Tenant, tenant).storage_limit_bytes = 100_000
    r = c.post("/v1/models?name=big", content=tar_gz(hf_model))
    assert r.status_code == 413, r.text
    # nothing of them is left: no row, no file in storage or in the spool
    assert c.get("/v1/models").json() == []
    assert ctx.storage.list_files(f"tenants/{tenant}/models") == []
    assert [p for p in ctx.spool.rglob("*") if p.name.startswith(".model-")] == []
    # the operator's folder holding a pickle file is refused the same way
    (mlm / "config.json").write_text((hf_model / "config.json").read_text())
    (mlm / "training_args.bin").write_bytes(b"\x80\x04.")
    rc, _, err = _admin(monkeypatch, _settings_of(c), "model", "add", "pickled", str(mlm), capsys=capsys)
    assert rc == 2 and "training_args.bin" in err and "pickle" in err
    assert ctx.storage.list_files("models") == []
    rc, _, err = _admin(monkeypatch, _settings_of(c), "model", "add", "../x", str(hf_model), capsys=capsys)
    assert rc == 2 and "name" in err


# ---- through a real service ---------------------------------------------------------------

@pytest.mark.server
@pytest.mark.ray
@pytest.mark.slow
def test_a_training_from_a_catalogued_base_through_the_service(service, tiny_training):
    """The tiny training's model, added to the catalog from the service's storage, is the
    base of a continued training (``model.checkpoint: base:NAME``) that runs on Ray."""
    import secrets

    t = tiny_training["tenant"]
    tid = tiny_training["training"]["id"]
    folder = f"tenants/{t.id}/jobs/{tid}/output"  # a run folder: its model/ is taken
    location = f"{service.storage_uri}/{folder}" if service.storage_uri else str(service.data / "storage" / folder)
    name = f"tiny-{secrets.token_hex(3)}"
    out = json.loads(service.cli("admin", "model", "add", name, location).stdout.strip().splitlines()[-1])
    assert out["ref"] == f"base:{name}"
    models = t.http.get("/v1/models").json()
    assert name in [m["name"] for m in models if m["owner"] == "catalog"]
    config = {"version": 1, "kind": "continue", "data": {"seq_len": 32},
              "model": {"preset": None, "checkpoint": f"base:{name}"},
              "optim": {"batch_size": 4, "max_steps": 4}, "workers": {"num_workers": 1},
              "checkpoint_every": 4, "report_every": 4}
    r = t.http.post("/v1/trainings", json={"job_id": tiny_training["job"]["id"], "config": config})
    assert r.status_code == 201, r.text
    job = t.wait(r.json()["id"], timeout=420)
    logs = t.http.get(f"/v1/jobs/{job['id']}/logs").text
    assert job["status"] == "succeeded", (job["message"], logs[-4000:])
    tr = t.http.get(f"/v1/trainings/{job['id']}").json()
    assert tr["progress"]["step"] == 4 and tr["config"]["base_model"]["name"] == name
    assert str(service.data) not in logs
    # an evaluation of the catalogued base beside the training: its job finds the model by
    # reference (the catalog is outside the tenant's folder)
    ev_cfg = {"version": 1, "models": [{"name": "base", "model": f"base:{name}"},
                                       {"name": "tuned", "training_id": job["id"]}],
              "perplexity": {"data": {"job_id": tiny_training["job"]["id"]}, "limit": 20}}
    r = t.http.post("/v1/evaluations", json={"config": ev_cfg})
    assert r.status_code == 201, r.text
    ev = t.wait(r.json()["id"], timeout=420)
    assert ev["status"] == "succeeded", (ev["message"], t.http.get(f"/v1/jobs/{ev['id']}/logs").text[-4000:])
    got = t.http.get(f"/v1/evaluations/{ev['id']}/report.json").json()
    ppl = {m["name"]: m["attacks"]["perplexity"]["perplexity"] for m in got["models"]}
    # the base never saw this text; the continued training did (4 steps from the same weights)
    assert set(ppl) == {"base", "tuned"} and all(math.isfinite(v) and v > 1 for v in ppl.values()), ppl
    assert got["models"][0]["path"].startswith("catalog:") and str(service.data) not in json.dumps(got)
    assert t.http.delete(f"/v1/jobs/{ev['id']}").status_code == 204
    # removed once nothing reads it
    service.cli("admin", "model", "remove", name)
    assert name not in [m["name"] for m in t.http.get("/v1/models").json()]
    # the shared tenant's trainings are as the other tests expect them: this one goes
    assert t.http.delete(f"/v1/jobs/{job['id']}").status_code == 204
