"""The job-kind registry: a kind is one entry (validator, module, result reader); the
privatization kind submits and reads results as before, another kind gets its own
entrypoint and reader, and no entrypoint ever carries key material."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from services import jobkinds, jobrun
from services.context import build_context
from services.db import session_scope
from services.jobkinds import PRIVATIZE, JobKind, job_kind, register_job_kind
from services.jobs import create_job, entrypoint_for, reconcile, spec_rel
from services.keys import create_key, material
from services.models import Corpus, Job
from services.settings import Settings
from services.tenants import create_tenant
from tests.secrets_scan import leaks

MANIFEST = {"counts": {"input_records": 3, "output_records": 2, "quarantined": 1, "dropped": 0},
            "shards": [{"file": "shards/part-00000-of-00002.parquet"}, {"file": "shards/part-00001-of-00002.parquet"}],
            "stages": [{"index": 0, "kind": "encrypt_text", "records_in": 3, "records_out": 2, "quarantined": 1,
                        "dropped": 0, "stats": {"chars": 99}}]}


class FakeCluster:
    """What the service asks Ray, answered from memory."""

    def __init__(self):
        self.submitted: dict[str, dict] = {}
        self.status = "RUNNING"

    def submit(self, *, submission_id, entrypoint, runtime_env, metadata):
        self.submitted[submission_id] = {"entrypoint": entrypoint, "runtime_env": runtime_env, "metadata": metadata}
        return True

    def info(self, submission_id):
        if submission_id not in self.submitted:
            return None
        return SimpleNamespace(status=self.status, start_time=1_000, end_time=2_000, message="")


@pytest.fixture
def registry():
    """Kinds a test registers are gone afterwards."""
    restore = jobkinds.KINDS.snapshot()
    yield
    restore()


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVATIZE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PRIVATIZE_ENV", "development")
    c = build_context(Settings())
    c.cluster = FakeCluster()
    return c


@pytest.fixture
def corpus(ctx) -> Corpus:
    with session_scope(ctx.sessions) as s:
        tenant, _, _ = create_tenant(s, "t", storage_limit_bytes=10**9, max_concurrent_jobs=5)
        c = Corpus(tenant_id=tenant.id, name="c", format="jsonl", bytes=10, records=3, sha256="0" * 64,
                   storage_path=f"tenants/{tenant.id}/corpora/c/data.jsonl")
        s.add(c)
        s.flush()
        s.expunge(c)
        return c


def _job(ctx, corpus: Corpus, kind: str) -> Job:
    with session_scope(ctx.sessions) as s:
        job = Job(tenant_id=corpus.tenant_id, corpus_id=corpus.id, kind=kind, status="queued",
                  spec={"version": 1, "stages": []}, spec_sha256="0" * 64, key_ids=[],
                  output_path=f"tenants/{corpus.tenant_id}/jobs/j-{kind}/output")
        s.add(job)
        s.flush()
        s.expunge(job)
        return job


class ECHO(JobKind):
    name = "echo"
    module = "tests_echo_job"
    result_file = "summary.json"

    def validate(self, data):
        return dict(data)

    def read_results(self, storage, output_path: str) -> dict | None:
        try:
            return json.loads(storage.read_bytes(f"{output_path}/summary.json"))
        except (OSError, ValueError):
            return None


def test_the_privatize_kind_runs_privatize_job_with_locations_only(ctx, corpus):
    job = _job(ctx, corpus, PRIVATIZE)
    st = ctx.storage
    args = shlex.split(entrypoint_for(ctx, job, corpus))
    assert args == ["python", "-m", "services.jobrun", "privatize", st.location(spec_rel(job)),
                    st.location(corpus.storage_path), st.location(job.output_path)]
    assert job_kind(PRIVATIZE).module == "privatize.job"


def test_a_second_kind_is_one_registration_with_its_own_entrypoint_and_results(ctx, corpus, registry):
    register_job_kind(ECHO)
    assert jobkinds.job_kinds() == ["adapt", "echo", "evaluate", "privatize", "train"]
    job = _job(ctx, corpus, "echo")
    args = shlex.split(entrypoint_for(ctx, job, corpus))
    assert args[:4] == ["python", "-m", "services.jobrun", "echo"]
    assert args[4:] == [ctx.storage.location(spec_rel(job)), ctx.storage.location(corpus.storage_path),
                        ctx.storage.location(job.output_path)]
    # submitted, then succeeded on Ray: the kind's reader fills the row
    reconcile(ctx, job.id)
    assert ctx.cluster.submitted[job.id]["entrypoint"].startswith("python -m services.jobrun echo ")
    ctx.cluster.status = "SUCCEEDED"
    ctx.storage.write_bytes(f"{job.output_path}/summary.json", json.dumps({"steps": 7, "quarantined": 2}).encode())
    reconcile(ctx, job.id)
    with session_scope(ctx.sessions) as s:
        row = s.get(Job, job.id)
        assert (row.status, row.counts, row.quarantined_records) == ("succeeded", {"steps": 7, "quarantined": 2}, 2)


def test_a_kind_without_its_result_file_fails_naming_it(ctx, corpus, registry):
    register_job_kind(ECHO)
    job = _job(ctx, corpus, "echo")
    reconcile(ctx, job.id)
    ctx.cluster.status = "SUCCEEDED"
    reconcile(ctx, job.id)
    with session_scope(ctx.sessions) as s:
        row = s.get(Job, job.id)
        assert (row.status, row.message) == ("failed", "the job exited 0 but wrote no summary.json")


def test_privatize_results_are_the_manifest_counts_as_before(ctx, corpus):
    job = _job(ctx, corpus, PRIVATIZE)
    reconcile(ctx, job.id)
    ctx.cluster.status = "SUCCEEDED"
    ctx.storage.write_bytes(f"{job.output_path}/manifest.json", json.dumps(MANIFEST).encode())
    reconcile(ctx, job.id)
    with session_scope(ctx.sessions) as s:
        row = s.get(Job, job.id)
        assert row.status == "succeeded" and row.quarantined_records == 1
        assert row.counts == {"input_records": 3, "output_records": 2, "quarantined": 1, "dropped": 0, "shards": 2,
                              "stages": [{"index": 0, "kind": "encrypt_text", "records_in": 3, "records_out": 2,
                                          "quarantined": 1, "dropped": 0}]}


def test_an_unknown_kind_fails_the_job_instead_of_submitting_it(ctx, corpus):
    job = _job(ctx, corpus, "not-a-kind")
    reconcile(ctx, job.id)
    with session_scope(ctx.sessions) as s:
        row = s.get(Job, job.id)
        assert row.status == "failed" and "unknown job kind 'not-a-kind'" in row.message
    assert ctx.cluster.submitted == {}


def test_registration_refuses_a_taken_name_and_odd_names(registry):
    register_job_kind(ECHO)
    register_job_kind(ECHO)  # the same entry again is harmless
    with pytest.raises(ValueError, match="registered already"):
        register_job_kind(type("Other", (ECHO,), {"module": "other"}))
    with pytest.raises(ValueError, match="job kind name"):
        register_job_kind(type("Odd", (ECHO,), {"name": "Echo job"}))
    with pytest.raises(ValueError, match="not a path segment"):
        register_job_kind(type("Slashed", (ECHO,), {"name": "slashed", "resource": "a/b"}))
    with pytest.raises(ValueError, match="job kind 'quiet': no result_file"):  # every kind names its own
        register_job_kind(type("Quiet", (JobKind,), {"name": "quiet", "module": "quiet"}))
    with pytest.raises(LookupError, match="unknown job kind 'nope'"):
        job_kind("nope")


def test_no_key_material_in_the_entrypoint_runtime_env_or_metadata(ctx, corpus):
    with session_scope(ctx.sessions) as s:
        rows = [create_key(s, ctx.master, corpus.tenant_id, kind="vigenere", length=64),
                create_key(s, ctx.master, corpus.tenant_id, kind="hmac")]
        secrets = [material(ctx.master, r).secret for r in rows]
        secrets += [r.wrapped_dek for r in rows] + [r.material_ct for r in rows] + [ctx.master]
        text_key, pseudo_key = (r.id for r in rows)
    spec = {"version": 1, "stages": [{"kind": "encrypt_text", "key": f"keystore:{text_key}"}],
            "output": {"pseudonym_key": f"keystore:{pseudo_key}"}}
    job = create_job(ctx, corpus.tenant_id, corpus.id, spec)
    assert job.kind == PRIVATIZE and sorted(job.key_ids) == sorted([text_key, pseudo_key])
    sent = ctx.cluster.submitted[job.id]
    assert shlex.split(sent["entrypoint"])[3] == "privatize"
    assert sent["runtime_env"]["env_vars"]["PRIVATIZE_KEY_BUNDLE"].endswith("/keys.json")
    blob = json.dumps(sent).encode()
    for secret in secrets:
        assert not leaks(blob, secret)
    # the spec the job runs is the validated one, input format fixed to the corpus's
    written = json.loads(ctx.storage.read_bytes(spec_rel(job)))
    assert written == job.spec and written["input"]["format"] == "jsonl"


def test_jobrun_runs_the_kinds_module_with_the_locations(tmp_path, monkeypatch, registry):
    (tmp_path / "tests_echo_job.py").write_text(
        "import json, sys\n"
        "open(sys.argv[3], 'w').write(json.dumps({'argv': sys.argv, 'main': __name__}))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.delenv("PRIVATIZE_KEY_BUNDLE", raising=False)
    register_job_kind(ECHO)
    out = tmp_path / "out.json"
    jobrun.main(["echo", "s3://b/spec.json", "s3://b/in.jsonl", str(out)])
    assert json.loads(out.read_text()) == {"argv": [str(tmp_path / "tests_echo_job.py"), "s3://b/spec.json",
                                                    "s3://b/in.jsonl", str(out)], "main": "__main__"}


@pytest.mark.parametrize("body, status, err", [
    ("open(sys.argv[3], 'w').write('done')", 0, None),
    ("sys.exit(3)", 3, None),
    ("raise RuntimeError('the kind failed')", 1, "RuntimeError: the kind failed"),
])
def test_the_jobrun_process_exits_with_its_kinds_status_and_output(tmp_path, body, status, err):
    """``python -m services.jobrun`` as Ray Jobs runs it: the kind module's exit status, its
    output flushed and an unhandled error's traceback, though the process skips Python's
    teardown (``exit_now``)."""
    import subprocess
    import textwrap

    (tmp_path / "tests_echo_job.py").write_text(f"import sys\nprint('kind ran', flush=False)\n{body}\n")
    boot = textwrap.dedent(f"""
        import runpy, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from services.jobkinds import register_job_kind
        from tests.services.test_jobkinds import ECHO
        register_job_kind(ECHO)
        sys.argv = ["jobrun", "echo", "spec", "in", {str(tmp_path / "out.txt")!r}]
        runpy.run_module("services.jobrun", run_name="__main__")
        print("not reached")
    """)
    env = {k: v for k, v in os.environ.items() if k not in (jobrun.CLUSTER_ENV, "PRIVATIZE_KEY_BUNDLE")}
    r = subprocess.run([sys.executable, "-c", boot], capture_output=True, text=True, env=env, timeout=120,
                       cwd=str(Path(__file__).resolve().parents[2]))
    assert r.returncode == status, r.stderr
    assert r.stdout.splitlines() == ["kind ran"]  # flushed at exit; nothing after jobrun ran
    assert (tmp_path / "out.txt").exists() == (status == 0)
    assert (err is None and "Traceback" not in r.stderr) or (err in r.stderr and "Traceback" in r.stderr)


@pytest.mark.parametrize("argv", [[], ["nope", "a", "b", "c"]])
def test_jobrun_without_a_known_kind_exits_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        jobrun.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("services.jobrun: error:") and len(err.splitlines()) == 1


def test_jobs_recorded_before_kinds_existed_are_privatizations(tmp_path):
    from alembic import command

    from services.db import alembic_config, make_engine, migrate

    engine = make_engine(f"sqlite:///{tmp_path / 'm.db'}")
    cfg = alembic_config()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO tenants (id, name, created_at, storage_limit_bytes, max_concurrent_jobs) "
                             "VALUES ('t', 't', '2026-01-01', 1, 1)")
        conn.exec_driver_sql("INSERT INTO jobs (id, tenant_id, status, spec, spec_sha256, key_ids, output_path, "
                             "submit_attempts, output_bytes, created_at) "
                             "VALUES ('j', 't', 'succeeded', '{}', '0', '[]', 'x', 1, 0, '2026-01-01')")
    migrate(engine)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT kind FROM jobs WHERE id = 'j'").scalar() == PRIVATIZE


def test_a_cancelled_training_loses_its_checkpoints_and_keeps_the_rest(api):
    """Issue 36: a cancelled training kept its checkpoints (30 MB against the quota); a
    training's kind discards them when it ends any way but succeeded, and the job's
    output bytes count what is left."""
    from services import jobs as jobs_mod
    from services.db import session_scope
    from services.models import Job, Tenant

    client, _, _, _ = api
    ctx = client.app.state.ctx
    with session_scope(ctx.sessions) as s:
        tenant_id = s.query(Tenant).one().id
        rows = {}
        for status in ("cancelled", "succeeded"):
            job = Job(tenant_id=tenant_id, kind="train", status="running", spec={}, spec_sha256="0" * 64,
                      output_path="")
            s.add(job)
            s.flush()
            job.output_path = f"{jobs_mod.job_dir(tenant_id, job.id)}/output"
            for rel, size in (("checkpoints/ckpt_1/model.pt", 3000), ("metrics.jsonl", 100)):
                ctx.storage.write_bytes(f"{job.output_path}/{rel}", b"x" * size)
            rows[status] = job
        for status, job in rows.items():
            jobs_mod._finish(ctx, job, status, None)
        for status, job in rows.items():
            has_ckpt = ctx.storage.exists(f"{job.output_path}/checkpoints/ckpt_1/model.pt")
            assert has_ckpt == (status == "succeeded"), status
            assert ctx.storage.exists(f"{job.output_path}/metrics.jsonl")
            assert job.output_bytes == (3100 if status == "succeeded" else 100), (status, job.output_bytes)


def test_job_logs_show_locations_as_the_tenant_knows_them(api):
    """Issue 36: job logs showed the server's paths. The tenant's folder becomes relative
    paths; another tenant's, the storage root and the data folder are named, not shown."""
    from services.jobs import storage_relative

    client, _, settings, _ = api
    ctx = client.app.state.ctx
    st = ctx.storage
    log = (f"trained dp: 4 steps; model in {st.location('tenants/T1/jobs/J/output/model')}\n"
           f"reading {st.location('tenants/T2/jobs/K/output')} and {settings.data_path}/spool/x\n"
           f"Saving checkpoint to {st.root}/tenants/T1/jobs/J/output/checkpoints")
    out = storage_relative(ctx, "T1", log)
    assert out == ("trained dp: 4 steps; model in jobs/J/output/model\n"
                   "reading <storage>/tenants/T2/jobs/K/output and <data>/spool/x\n"
                   "Saving checkpoint to jobs/J/output/checkpoints")
    assert str(settings.data_path) not in out
    # an S3 location as Ray prints it, without its scheme
    from types import SimpleNamespace

    s3 = SimpleNamespace(storage=SimpleNamespace(root="bucket/pre", location=lambda rel: f"s3://bucket/pre/{rel}"),
                         settings=settings)
    assert storage_relative(s3, "T1", "path=bucket/pre/tenants/T1/jobs/J/output/checkpoints, s3://bucket/pre/"
                                      "tenants/T1/jobs/J/output and bucket/pre/tenants/T2/x") == \
        "path=jobs/J/output/checkpoints, jobs/J/output and <storage>/tenants/T2/x"


class StoppingCluster(FakeCluster):
    def __init__(self):
        super().__init__()
        self.stopped: list[str] = []

    def stop(self, submission_id):
        self.stopped.append(submission_id)
        return True


@pytest.mark.parametrize("attempts", [0, 1])
def test_cancelling_a_queued_job_stops_it_in_ray_when_a_submission_may_have_reached_it(ctx, corpus, attempts):
    """A queued job whose submission timed out (``submit_attempts`` > 0) may be in Ray:
    cancelling it stops it there too; one never submitted asks Ray nothing."""
    from services.jobs import cancel

    ctx.cluster = StoppingCluster()
    job = _job(ctx, corpus, PRIVATIZE)
    with session_scope(ctx.sessions) as s:
        s.get(Job, job.id).submit_attempts = attempts
    got = cancel(ctx, corpus.tenant_id, job.id)
    assert got.status == "cancelled"
    assert ctx.cluster.stopped == ([job.id] if attempts else [])
    with session_scope(ctx.sessions) as s:
        assert s.get(Job, job.id).status == "cancelled"
