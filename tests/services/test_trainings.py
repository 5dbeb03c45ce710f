"""Trainings through the service: ``POST /v1/trainings`` on a privatization job's output runs
``train.job`` on Ray (the ``train`` job kind), ``GET /v1/trainings/{id}`` shows its progress
and summary, ``GET /v1/trainings/{id}/model`` streams the model as a ``.tar.gz``, and
``privatize submit train`` drives it from a CI pipeline.

What must hold: a real tiny training on a real privatization job's output succeeds with
its figures on the job's row; the downloaded model loads with ``transformers``; a config
naming a path (the server's files) or asking for more than the service allows answers
422 with the field; another tenant's ids answer 404; a job that has not succeeded answers
409; the audit log has the training; no key material reaches the training's row, spec,
Ray job or answers. The first tests need no server (the pieces, in process).
"""

from __future__ import annotations

import io
import json
import math
import tarfile
import time
from pathlib import Path

import pytest

from services.errors import SpecInvalid
from tests.secrets_scan import leaks
from tests.services.conftest import TINY



def server_test(fn):
    """Marks of the tests that use the real service (as the other server tests have)."""
    for mark in (pytest.mark.server, pytest.mark.ray, pytest.mark.slow):
        fn = mark(fn)
    return fn



def _with(path: str, value, base: dict = TINY) -> dict:
    """``base`` with the dotted ``path`` set to ``value``."""
    out = json.loads(json.dumps(base))
    node = out
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


PATH_FIELDS = [("data.path", "/etc"), ("output", "/tmp/elsewhere"), ("storage", "s3://other-bucket/x"),
               ("model.checkpoint", "/srv/models/other-tenant"), ("tokenizer.path", "/srv/tok"),
               ("tokenizer.also_on", ["/srv/other/data.jsonl"])]
TOO_MUCH = [("workers.num_workers", 64), ("model.preset", "paper-551m"), ("optim.max_steps", 10_000_000),
            ("optim.epochs", 1000), ("workers.use_gpu", True), ("data.seq_len", 8192),
            ("optim.batch_size", 4096), ("workers.cpus_per_worker", 32)]


# ---- the pieces, in process ------------------------------------------------------------------

def _refusal(config, settings=None) -> list[str]:
    from services.settings import Settings
    from services.trainings import check_limits, validate_config

    with pytest.raises(SpecInvalid) as exc:
        check_limits(settings or Settings(), validate_config(config))
    return [e["path"] for e in exc.value.extra["errors"]]


@pytest.mark.parametrize("path,value", PATH_FIELDS)
def test_a_config_naming_a_path_is_refused_with_the_field(path, value):
    assert _refusal(_with(path, value)) == [path]


def test_every_path_field_is_named_and_unset_ones_pass():
    from services.settings import Settings
    from services.trainings import check_limits, validate_config

    cfg = TINY
    for path, value in PATH_FIELDS:
        cfg = _with(path, value, cfg)
    assert sorted(_refusal(cfg)) == sorted(p for p, _ in PATH_FIELDS)
    # a config as the train package writes it (its nulls and empty lists) is fine
    full = validate_config(TINY).to_dict()
    assert full["data"]["path"] is None and full["output"] is None and full["tokenizer"]["also_on"] == []
    spec = validate_config(full)
    check_limits(Settings(), spec)
    assert spec.sha256() == validate_config(TINY).sha256()


@pytest.mark.parametrize("path,value", TOO_MUCH)
def test_resource_settings_are_bounded_with_the_field(path, value):
    assert _refusal(_with(path, value)) == [path]


def test_bounds_come_from_the_service_settings():
    from services.settings import Settings
    from services.trainings import check_limits, validate_config

    big = _with("model.preset", "paper-551m", _with("workers.num_workers", 8))
    assert sorted(_refusal(big)) == ["model.preset", "workers.num_workers"]
    check_limits(Settings(train_presets="tiny,small,paper-551m", train_max_workers=8), validate_config(big))
    assert _refusal(TINY, Settings(train_presets="small")) == ["model.preset"]
    # dp.unit individual: one individual adds up to dp.max_blocks_per_individual blocks to a step
    per_person = _with("dp", {"target_epsilon": 3, "unit": "individual", "max_blocks_per_individual": 300},
                       _with("kind", "dp"))
    assert _refusal(per_person) == ["dp.max_blocks_per_individual"]
    check_limits(Settings(train_max_batch_size=300), validate_config(per_person))


def test_bad_configs_name_the_field_and_a_checkpoint_is_one_of_your_trainings():
    from services.trainings import base_training, validate_config

    assert _refusal(_with("optim.lr", 0)) == ["optim.lr"]
    assert _refusal(_with("optim.colour", 1)) == ["optim.colour"]
    assert _refusal(_with("kind", "continue")) == [""]  # continue needs model.checkpoint
    cont = _with("model", {"preset": None, "checkpoint": "training:0123456789abcdef"}, _with("kind", "continue"))
    assert base_training(validate_config(cont).to_dict()) == "0123456789abcdef"
    for bad in ("training:0123", "training:../../x", "jobs/0123456789abcdef/output/model", "file:/srv/m"):
        assert _refusal(_with("model.checkpoint", bad, cont)) == ["model.checkpoint"], bad
    assert _refusal({**TINY, "kind": "dp"}) == [""]  # the config as a whole: no 'dp' section
    assert _refusal([1, 2]) == [""]


def test_the_model_streams_as_a_tar_gz_of_its_folder(tmp_path):
    from services.storage import Storage
    from services.trainings import tar_gz

    st = Storage(str(tmp_path / "root"))
    files = {"config.json": b'{"a": 1}', "model.safetensors": bytes(range(256)) * 9000, "empty.txt": b"",
             "sub/block.bin": b"x" * 1024}
    for name, data in files.items():
        st.write_bytes(f"out/model/{name}", data)
    listed = st.list_files("out/model")
    assert listed == sorted((n, len(d)) for n, d in files.items())
    blob = b"".join(tar_gz(st, "out/model", listed, "model", mtime=1_700_000_000))
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tf:
        members = {m.name: m for m in tf.getmembers()}
        assert set(members) == {"model", *(f"model/{n}" for n in files)}
        for name, data in files.items():
            assert tf.extractfile(members[f"model/{name}"]).read() == data
        assert members["model"].isdir() and members["model/config.json"].mtime == 1_700_000_000


def test_progress_is_the_last_complete_metrics_line(tmp_path):
    from services.storage import Storage
    from services.trainings import latest_metrics, summary_counts

    st = Storage(str(tmp_path / "root"))
    assert latest_metrics(st, "out") is None
    lines = [json.dumps({"time": 1.0, "step": s, "loss": 5.0 - s, "tokens": 100 * s, "lr": 0.001}) for s in (1, 2)]
    st.write_bytes("out/metrics.jsonl", ("\n".join(lines) + '\n{"step": 3, "lo').encode())  # 3: half written
    assert latest_metrics(st, "out") == {"step": 2, "loss": 3.0, "tokens": 200, "lr": 0.001, "time": 1.0}
    st.write_bytes("out/metrics.jsonl", b'{"step": 4, "loss": NaN, "epsilon": 1.5}\n')
    assert latest_metrics(st, "out") == {"step": 4, "loss": None, "epsilon": 1.5}
    counts = summary_counts({"kind": "dp", "steps": 4, "final_loss": float("inf"), "tokens": 9, "epsilon": 2.0,
                             "delta": 1e-5, "config": {"data": {"path": "/srv/x"}},
                             "tokenizer": {"vocab_size": 300}, "workers": {"count": 1, "pids": [1]}})
    assert counts == {"kind": "dp", "steps": 4, "final_loss": None, "tokens": 9, "epsilon": 2.0, "delta": 1e-5,
                      "vocab_size": 300, "workers": 1}
    base = {"checkpoint": "7313011fcc7ce212", "kind": "pretrain", "trained_on": "public text"}
    assert summary_counts({"kind": "crt", "base": base, "lora": {"r": 8}})["base"] == base  # issue 37: named


def test_a_models_provenance_names_folders_not_server_paths():
    from pathlib import Path

    from train.final import _named

    assert _named(Path("/srv/data/tenants/t1/jobs/abc123/output/model")) == "abc123"
    assert _named(Path("/srv/data/tenants/t1/jobs/abc123/output")) == "abc123"
    assert _named(Path("runs/base-tiny/model")) == "base-tiny"
    assert _named(Path("demo-out/batch/result/shards")) == "result"
    assert _named(Path("corpus.jsonl")) == "corpus.jsonl"


def test_train_job_refuses_paths_in_the_config_and_an_input_that_is_no_privatization_output(tmp_path, capsys):
    from train.job import main

    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({**TINY, "output": "/somewhere"}))
    (tmp_path / "in").mkdir()
    assert main([str(cfg), str(tmp_path / "in"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "train: error: output: set by this command (INPUT and OUTPUT), not by the config"
    cfg.write_text(json.dumps(TINY))
    assert main([str(cfg), str(tmp_path / "in"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "input: no manifest.json" in err and str(tmp_path) not in err


def test_train_job_uploads_a_remote_run_and_mirrors_its_metrics(tmp_path):
    from train.job import _MetricsMirror, upload_run

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "model" / "config.json").write_text("{}")
    (run / "checkpoints" / "train" / "checkpoint_1").mkdir(parents=True)  # (with --keep-checkpoints)
    (run / "checkpoints" / "train" / "checkpoint_1" / "state.pt").write_bytes(b"x")
    (run / ".model-tmp").mkdir()
    (run / ".model-tmp" / "half.bin").write_bytes(b"x")
    (run / "summary.json").write_text('{"steps": 4}')
    remote = f"file://{tmp_path}/bucket/out"  # any pyarrow.fs URI: the same calls as for s3://
    mirror = _MetricsMirror(run, remote, every=0.05)
    mirror.start()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (tmp_path / "bucket/out/metrics.jsonl").exists():
        time.sleep(0.05)
    mirror.stop()
    assert (tmp_path / "bucket/out/metrics.jsonl").read_text() == '{"step": 1}\n'
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    upload_run(run, remote)
    got = sorted(str(p.relative_to(tmp_path / "bucket/out")) for p in (tmp_path / "bucket/out").rglob("*")
                 if p.is_file())
    assert got == ["checkpoints/train/checkpoint_1/state.pt", "metrics.jsonl", "model/config.json", "summary.json"]
    assert (tmp_path / "bucket/out/metrics.jsonl").read_text().count("step") == 2


# ---- through the real service ------------------------------------------------------------------

def _tiny_yaml(path: Path, **changes) -> Path:
    import yaml

    cfg = TINY
    for k, v in changes.items():
        cfg = _with(k.replace("__", "."), v, cfg)
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def trained(tiny_training):
    """The shared tiny training (``tests/services/conftest.py``): a privatization job with
    canaries, and a tiny training on its output run with ``privatize submit train --wait
    --download --extract``."""
    return tiny_training


@server_test
def test_a_tiny_training_on_a_privatization_output(service, trained):
    t, job, out = trained["tenant"], trained["job"], trained["cli"]
    tid = out["id"]
    assert (out["kind"], out["status"], out["input_job_id"]) == ("train", "succeeded", job["id"]), out
    s = out["summary"]
    assert s["kind"] == "pretrain" and s["steps"] == 4 and s["workers"] == 1 and s["seq_len"] == 32
    assert math.isfinite(s["final_loss"]) and 0 < s["final_loss"] < 20 and s["tokens"] > 0
    assert s["examples"]["train"] >= 4 and 300 <= s["vocab_size"] <= 4096
    assert "epsilon" not in s  # a plain pretrain spends no privacy budget
    assert out["progress"] == {"step": 4, "loss": s["final_loss"], "tokens": s["tokens"]}
    assert f"submitted training {tid}" in trained["stderr"]
    # the API's view agrees; the training is a job of kind train on the privatization job
    got = t.http.get(f"/v1/trainings/{tid}").json()
    assert (got["status"], got["summary"], got["job_id"]) == ("succeeded", s, job["id"])
    assert got["config"]["data"]["path"] is None and got["config"]["output"] is None
    assert got["config"]["optim"]["max_steps"] == 4
    as_job = t.http.get(f"/v1/jobs/{tid}").json()
    assert (as_job["kind"], as_job["input_job_id"], as_job["corpus_id"]) == ("train", job["id"], job["corpus_id"])
    assert [x["id"] for x in t.http.get("/v1/trainings").json()] == [tid]
    assert [x["id"] for x in t.http.get("/v1/jobs", params={"kind": "privatize"}).json()] == [job["id"]]
    r = t.http.get(f"/v1/jobs/{tid}/results")
    assert r.status_code == 404 and f"/v1/trainings/{tid}/model" in r.json()["detail"]
    # the run folder: model, tokenizer, metrics (the last line is the last report), summary;
    # Ray Train's checkpoints are gone once it succeeded
    base = f"tenants/{t.id}/jobs/{tid}/output"
    stored = [p[len(base) + 1:] for p in service.files.list(base)]
    assert {"summary.json", "metrics.jsonl", "workers.jsonl", "model/config.json", "model/model.safetensors",
            "model/tokenizer.json", "tokenizer/tokenizer.json"} <= set(stored), stored
    assert not [p for p in stored if p.startswith(("checkpoints/", "."))], stored
    # issue 36 (the red team's listener): the worker met its group through a file store and
    # gloo used loopback; while it trained, no training process listened beyond loopback
    workers = [json.loads(x) for x in service.files.read(f"{base}/workers.jsonl").decode().splitlines()]
    assert workers and all(w["rendezvous"] == {"store": "FileStore", "gloo_ifname": "lo"} for w in workers)
    seen = trained["listeners"]
    assert seen.seen_workers and not seen.beyond_loopback, seen.beyond_loopback
    last = json.loads(service.files.read(f"{base}/metrics.jsonl").decode().splitlines()[-1])
    assert last["step"] == 4 and last["loss"] == s["final_loss"]
    assert got["output_bytes"] >= sum(service.files.fs.get_file_info(f"{service.files.root}/{base}/{p}").size
                                      for p in stored)
    # the downloaded model is the stored one, and a Hugging Face checkpoint that loads and runs
    (dl,) = map(Path, out["downloaded"])  # --extract: the archive unpacked, nothing else beside it
    assert dl == (trained["dir"] / "dl" / "model").resolve()
    assert sorted(p.name for p in dl.parent.iterdir()) == ["model"]
    for p in stored:
        if p.startswith("model/"):
            assert (dl.parent / p).read_bytes() == service.files.read(f"{base}/{p}"), p
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(dl)
    tok = AutoTokenizer.from_pretrained(dl)
    ids = torch.tensor([tok("The quick brown fox")["input_ids"]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tok)) and torch.isfinite(logits).all()
    r = t.http.get(f"/v1/trainings/{tid}/model")
    assert r.status_code == 200 and r.headers["content-type"] == "application/gzip"
    assert f"training-{tid}-model.tar.gz" in r.headers["content-disposition"]
    # what the job ran: train.job on the privatization output, located by the service
    info = service.ray_jobs().get_job_info(tid)
    assert info.entrypoint.startswith("python -m services.jobrun train ")
    assert info.entrypoint.split()[-2].endswith(f"/jobs/{job['id']}/output")
    assert info.metadata["privatize_kind"] == "train" and info.metadata["privatize_input_job"] == job["id"]
    assert "PRIVATIZE_KEY_BUNDLE" not in info.runtime_env.get("env_vars", {})
    # Ray Train checkpointed into the training's own output (on S3 storage: straight to S3,
    # where every node of a cluster reaches it), and the checkpoints went once it succeeded
    assert f"jobs/{tid}/output/checkpoints/train/checkpoint_" in trained["logs"]
    # the logs name locations as the tenant knows them (issue 36: they showed server paths)
    assert str(service.data) not in trained["logs"] and f"tenants/{t.id}" not in trained["logs"]
    print(f"training through the service: {trained['seconds']:.1f} s (CLI submit to succeeded)")


@server_test
def test_the_audit_log_has_the_training(trained):
    t, tid = trained["tenant"], trained["cli"]["id"]
    events = t.http.get("/v1/audit", params={"resource_id": tid}).json()["events"]
    created = [e for e in events if e["action"] == "training.create"]
    assert len(created) == 1 and created[0]["status"] == 201 and created[0]["actor"].startswith("token:")
    assert created[0]["detail"]["input_job_id"] == trained["job"]["id"]
    assert created[0]["detail"]["config_sha256"] == t.http.get(f"/v1/trainings/{tid}").json()["config_sha256"]
    assert [e["action"] for e in events if e["actor"] == "system"] == ["job.succeeded"]


@server_test
def test_no_key_material_reaches_the_training(service, trained):
    from privatize.keys import key_from_json

    t, tid = trained["tenant"], trained["cli"]["id"]
    secret = key_from_json(t.http.post(f"/v1/keys/{trained['key']['id']}/export").json(), "export").secret
    assert len(secret) == 32
    row = service.query("select * from jobs where id = :id", id=tid)
    assert row and json.loads(dict(zip(_job_columns(service), row[0]))["key_ids"]) == []
    info = service.ray_jobs().get_job_info(tid)
    blobs = {"row": json.dumps(row, default=str).encode(),
             "spec.json": service.files.read(f"tenants/{t.id}/jobs/{tid}/spec.json"),
             "summary.json": service.files.read(f"tenants/{t.id}/jobs/{tid}/output/summary.json"),
             "ray job": json.dumps({"entrypoint": info.entrypoint, "metadata": info.metadata,
                                    "runtime_env": info.runtime_env}).encode(),
             "logs": trained["logs"].encode(), "answers": b"\n".join(t.responses)}
    for where, blob in blobs.items():
        assert not leaks(blob, secret), where


def _job_columns(service) -> list[str]:
    from sqlalchemy import create_engine, inspect

    return [c["name"] for c in inspect(create_engine(service.database_url)).get_columns("jobs")]


@server_test
def test_refusals(service, trained):
    t, job, tid = trained["tenant"], trained["job"], trained["cli"]["id"]

    def post(config, job_id=job["id"], who=t):
        return who.http.post("/v1/trainings", json={"job_id": job_id, "config": config})

    # paths and resources beyond the service's bounds: 422 naming the field, nothing created
    for path, value in PATH_FIELDS + TOO_MUCH + [("optim.lr", 0)]:
        r = post(_with(path, value))
        assert r.status_code == 422, (path, r.text)
        assert [e["path"] for e in r.json()["errors"]] == [path] and path in r.json()["detail"], r.json()
    assert post("not an object").status_code == 422
    assert t.http.post("/v1/trainings", json={"config": TINY}).status_code == 422  # no job_id
    # the job must be one of the tenant's privatization jobs that has succeeded
    ghost = post(TINY, "0" * 16)
    assert ghost.status_code == 404 and ghost.json()["detail"] == f"no job {'0' * 16!r}"
    r = post(TINY, tid)
    assert r.status_code == 409 and r.json()["detail"] == f"job {tid} is a train job; give a privatize job"
    busy = t.http.post("/v1/jobs", json={"corpus_id": job["corpus_id"], "spec": job["spec"]}).json()
    r = post(TINY, busy["id"])
    assert r.status_code == 409 and r.json()["detail"].startswith(f"job {busy['id']} is ") and \
        "has succeeded" in r.json()["detail"], r.json()
    t.http.post(f"/v1/jobs/{busy['id']}/cancel")
    # another tenant: the owner's job and training answer exactly as ids that do not exist
    other = service.new_tenant("snoop-trainings")
    r = post(TINY, job["id"], other)
    assert r.status_code == 404 and r.json()["detail"] == f"no job {job['id']!r}"
    for path in (f"/v1/trainings/{tid}", f"/v1/trainings/{tid}/model", f"/v1/jobs/{tid}", f"/v1/jobs/{tid}/logs"):
        r, r2 = other.http.get(path), other.http.get(path.replace(tid, "0" * 16))
        assert r.status_code == r2.status_code == 404, path
        assert r.json()["detail"].replace(tid, "X") == r2.json()["detail"].replace("0" * 16, "X")
    assert other.http.post(f"/v1/jobs/{tid}/cancel").status_code == 404
    assert other.http.delete(f"/v1/jobs/{tid}").status_code == 404
    assert other.http.get("/v1/trainings").json() == []
    # a privatization job is no training
    assert t.http.get(f"/v1/trainings/{job['id']}").json()["detail"] == f"no training {job['id']!r}"
    assert [x["id"] for x in t.http.get("/v1/trainings").json()] == [tid]
    assert t.wait(busy["id"])["status"] in ("cancelled", "succeeded")
    # the owner's training is untouched
    assert t.http.get(f"/v1/trainings/{tid}").json()["status"] == "succeeded"


@server_test
def test_cli_a_training_that_fails_exits_1_and_a_refused_one_2(service, trained):
    env, job, tmp = trained["env"], trained["job"], trained["dir"]
    # valid for the service, wrong for the data (the shards have no 'body' column): fails on Ray
    r = service.cli("submit", "train", str(_tiny_yaml(tmp / "body.yaml", data__text_column="body")), "--job",
                    job["id"], "--wait", "--poll", "0.5", env=env, check=False, timeout=300)
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "failed" and out["summary"] is None
    line = [ln for ln in out["message"].splitlines() if ln.startswith("train: error: ")]
    assert len(line) == 1 and line[0].startswith("train: error: data.text_column: <input>/shards/"), out["message"]
    assert "no column 'body'" in line[0] and str(service.data) not in line[0]  # no server path in the error
    # refused by the service: exit 2, the field path on stderr
    r = service.cli("submit", "train", str(_tiny_yaml(tmp / "bad.yaml", output="/etc")), "--job", job["id"],
                    env=env, check=False)
    assert r.returncode == 2 and "privatize: output: set by the service" in r.stderr, r.stderr
    r = service.cli("submit", "train", str(_tiny_yaml(tmp / "ok.yaml")), "--job", "0" * 16, env=env, check=False)
    assert r.returncode == 2 and "HTTP 404" in r.stderr



@pytest.fixture(scope="module")
def filler_training(tiny_training):
    """The refill test's filler: a tiny masked LM (kind ``mlm``) trained through the service
    on the shared privatization job. Submitted when the continual pre-training test starts,
    so the two trainings run side by side (the tenant's 2 slots, the head's 2 CPUs); its id."""
    t, job = tiny_training["tenant"], tiny_training["job"]
    r = t.http.post("/v1/trainings", json={"job_id": job["id"], "config": _with("kind", "mlm")})
    assert r.status_code == 201, r.text
    mid = r.json()["id"]
    yield mid
    t.wait(mid, timeout=480)  # (the refill test deselected: it holds no slot of later tests)


@server_test
def test_continual_pre_training_from_a_succeeded_training(service, trained, filler_training):
    """``kind: continue`` with ``model.checkpoint: training:<id>``: the job starts from that
    training's model (its location handed to ``train.job --checkpoint`` by the service,
    never written in the config), keeps its tokenizer, and the base training cannot be
    deleted while it runs; another tenant's or an unfinished training is refused at the
    field. (The refill test's filler trains beside it: ``filler_training``.)"""
    t, job, base = trained["tenant"], trained["job"], trained["cli"]["id"]
    cont = _with("model", {"preset": None, "checkpoint": f"training:{base}"}, _with("kind", "continue"))
    other = service.new_tenant("snoop-continue")
    r = other.http.post("/v1/trainings", json={"job_id": job["id"], "config": cont})
    assert r.status_code == 404  # (the job is not the snoop's either)
    for ref, status in ((f"training:{job['id']}", 404), ("training:" + "0" * 16, 404)):
        r = t.http.post("/v1/trainings", json={"job_id": job["id"], "config": _with("model.checkpoint", ref, cont)})
        assert r.status_code == status and r.json()["path"] == "model.checkpoint", r.text
    r = t.http.post("/v1/trainings", json={"job_id": job["id"], "config": cont})
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    assert r.json()["config"]["model"]["checkpoint"] == f"training:{base}"
    gone = t.http.delete(f"/v1/jobs/{base}")  # while the continued training is active: refused
    assert gone.status_code == 409 and cid in gone.json()["detail"], gone.text
    done = t.wait(cid, timeout=480)
    assert done["status"] == "succeeded", (done["message"], t.http.get(f"/v1/jobs/{cid}/logs").text[-4000:])
    got = t.http.get(f"/v1/trainings/{cid}").json()
    assert got["summary"]["kind"] == "continue" and got["summary"]["steps"] == 4
    info = service.ray_jobs().get_job_info(cid)
    flag, where = info.entrypoint.split()[-2:]
    assert flag == "--checkpoint" and where.endswith(f"tenants/{t.id}/jobs/{base}/output/model")
    # the continued model kept the base model's tokenizer (tokenizer.mode shared)
    base_tok = service.files.read(f"tenants/{t.id}/jobs/{base}/output/model/tokenizer.json")
    assert service.files.read(f"tenants/{t.id}/jobs/{cid}/output/model/tokenizer.json") == base_tok
    assert t.http.get(f"/v1/trainings/{base}").json()["status"] == "succeeded"


@server_test
def test_refill_with_a_filler_trained_through_the_service(service, trained, corpus_file, filler_training):
    """Issue 21 through the service: a tenant trains a tiny masked LM (kind ``mlm``) on a
    privatization job's output, then runs ``mask`` + ``refill`` with ``checkpoint:
    training:<id>``. The spec keeps the reference; every worker gets the model's storage
    location in the job's runtime environment; a path, another tenant's or an unknown
    training and a training of another kind are refused at the field; the filler cannot be
    deleted while the job runs."""
    t, job, pretrain, mid = trained["tenant"], trained["job"], trained["cli"]["id"], filler_training
    assert t.wait(mid, timeout=480)["status"] == "succeeded", t.http.get(f"/v1/jobs/{mid}/logs").text[-4000:]

    def spec(checkpoint: str) -> dict:
        return {"version": 1, "output": {"num_shards": 1},
                "stages": [{"kind": "mask", "technique": "allow_list"}, {"kind": "refill", "checkpoint": checkpoint}]}

    field = "stages.1.refill.checkpoint"
    for ckpt, status in (("/srv/models/filler", 422), (f"training:{pretrain}", 422), ("training:" + "0" * 16, 404),
                         (f"training:{job['id']}", 404)):
        r = t.http.post("/v1/jobs", json={"corpus_id": job["corpus_id"], "spec": spec(ckpt)})
        assert r.status_code == status, (ckpt, r.text)
        body = r.json()
        assert field in ([e["path"] for e in body.get("errors", [])] + [body.get("path")]), (ckpt, body)
    other = service.new_tenant("snoop-filler")
    theirs = other.upload(corpus_file)
    assert theirs.status_code == 201, theirs.text
    r = other.http.post("/v1/jobs", json={"corpus_id": theirs.json()["id"], "spec": spec(f"training:{mid}")})
    assert r.status_code == 404 and r.json()["path"] == field, r.text
    r = t.http.post("/v1/jobs", json={"corpus_id": job["corpus_id"], "spec": spec(f"training:{mid}")})
    assert r.status_code == 201, r.text
    rid = r.json()["id"]
    gone = t.http.delete(f"/v1/jobs/{mid}")  # the filler, while the refill job is active: refused
    assert gone.status_code == 409 and rid in gone.json()["detail"], gone.text
    done = t.wait(rid, timeout=480)
    assert done["status"] == "succeeded", (done["message"], t.http.get(f"/v1/jobs/{rid}/logs").text[-4000:])
    assert t.http.get(f"/v1/jobs/{rid}").json()["spec"]["stages"][1]["checkpoint"] == f"training:{mid}"
    env = service.ray_jobs().get_job_info(rid).runtime_env["env_vars"]
    assert json.loads(env["PRIVATIZE_MODELS"])[f"training:{mid}"].endswith(f"tenants/{t.id}/jobs/{mid}/output/model")
    manifest = json.loads(service.files.read(f"tenants/{t.id}/jobs/{rid}/output/manifest.json"))
    stats = {s["kind"]: s["stats"] for s in manifest["stages"]}
    assert stats["mask"]["masks"] > 0 and stats["refill"]["masks_filled"] == stats["mask"]["masks"]
