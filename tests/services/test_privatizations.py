"""Issue 49: the privatization is an ordinary job kind. ``/v1/privatizations`` is generated
like every kind's resource (create, list, get with its progress) with its own results routes;
the client's ``download_outputs`` fetches its manifest and shards through its listing and
``privatize submit privatize SPEC`` runs it, while ``/v1/jobs`` stays the view of every kind
(and ``POST /v1/jobs`` still creates one).

The Ray Jobs API is the one thing replaced: :class:`PipelineInProcess` (a TEST DOUBLE for
Ray, labelled as such) runs the spec the service wrote on the input it located, with
privatize's local runner, in this process. That the Ray runner writes the same output is
``tests/integration/test_ray_parity.py``'s business; that the service runs real Ray jobs,
``tests/services/test_server.py``'s."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from tests.services.conftest import JobsInProcess

TEXTS = ["the cat sat on the mat", "a dog ran in the park", "the cat sat on the mat", "birds sing at dawn"]
SPEC = {"version": 1, "stages": [{"kind": "dedup", "unit": "document", "action": "drop"}],
        "output": {"num_shards": 2}}
"""Four documents, one a repeat: three come out (the second copy dropped), in two shards."""


class PipelineInProcess(JobsInProcess):
    """TEST DOUBLE for the Ray Jobs API: runs the entrypoint's pipeline here."""

    kind = "privatize"

    def run(self, spec_location: str, input: str, output: str) -> None:
        from privatize.api import run
        from privatize.job import load_spec_any

        spec, spec_dir = load_spec_any(spec_location)
        run(spec, input, output, runner="local", spec_dir=spec_dir)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.services.conftest import in_process_service

    tmp = tmp_path_factory.mktemp("privatizations")
    corpus = tmp / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    cluster = PipelineInProcess()
    with in_process_service(tmp, cluster, tenant="owner") as (url, token, ctx):
        yield SimpleNamespace(url=url, token=token, ctx=ctx, corpus=corpus, tmp=tmp, cluster=cluster)


@pytest.fixture(scope="module")
def client(server):
    from services.client import ServiceClient

    with ServiceClient(server.url, server.token) as c:
        yield c


def _texts(paths) -> list[str]:
    return sorted(t for p in paths if p.suffix == ".parquet" for t in pq.read_table(p).column("text").to_pylist())


def test_a_privatization_through_its_generated_resource(server, client, tmp_path):
    from services.client import ApiError

    corpus = client.upload_corpus(server.corpus, fmt="jsonl")
    with pytest.raises(ApiError) as refused:  # the kind's validation, with the field's path under config
        client.submit("privatize", corpus_id=corpus["id"], config={**SPEC, "stages": [{"kind": "nosuch"}]})
    assert refused.value.status == 422 and refused.value.body["errors"][0]["path"].startswith("stages.0")
    job = client.submit("privatize", corpus_id=corpus["id"], config=SPEC)
    assert (job["kind"], job["corpus_id"]) == ("privatize", corpus["id"])
    assert job["id"] in server.cluster.submitted  # it went to the (double of the) cluster
    done = client.wait(job["id"], timeout=30, poll=0.1, get=lambda i: client.get("privatize", i))
    assert done["status"] == "succeeded", done["message"]
    s = done["summary"]
    assert (s["input_records"], s["output_records"], s["dropped"], s["shards"]) == (4, 3, 1, 2)
    assert [(st["kind"], st["records_in"], st["records_out"], st["dropped"]) for st in s["stages"]] == [("dedup", 4, 3, 1)]
    assert done["progress"]["corpus_records"] == 4 and done["progress"]["output_records"] == 3
    assert [j["id"] for j in client.list("privatize")] == [job["id"]]
    # /v1/jobs: the same job, with the names it first answered with
    as_job = client.job(job["id"])
    assert (as_job["kind"], as_job["spec"], as_job["spec_sha256"]) == ("privatize", done["config"],
                                                                         done["config_sha256"])
    assert as_job["progress"] == done["progress"] and as_job["summary"] == done["summary"]
    # its manifest and shards through the kind's listing, and the same under /v1/jobs
    got = client.download_outputs("privatize", job["id"], tmp_path / "dl")
    manifest = json.loads((tmp_path / "dl" / "manifest.json").read_text())
    assert sorted(str(p.relative_to(tmp_path / "dl")) for p in got) == sorted(
        ["manifest.json", *(s["file"] for s in manifest["shards"])])
    for s in manifest["shards"]:
        assert hashlib.sha256((tmp_path / "dl" / s["file"]).read_bytes()).hexdigest() == s["sha256"]
    assert _texts(got) == sorted(set(TEXTS))
    listing = client.request("GET", f"/v1/privatizations/{job['id']}/results").json()
    assert [f["name"] for f in listing["files"]] == ["manifest.json", *(s["file"] for s in manifest["shards"])]
    assert [f["sha256"] for f in listing["files"][1:]] == [s["sha256"] for s in manifest["shards"]]
    assert listing == client.results(job["id"])  # the same under /v1/jobs
    # another kind's resource does not answer for it, nor it for an unknown id
    for path, noun in ((f"/v1/trainings/{job['id']}", "training"),
                       (f"/v1/privatizations/{'0' * 16}", "privatization"),
                       (f"/v1/privatizations/{'0' * 16}/results", "privatization")):
        with pytest.raises(ApiError) as other:
            client.request("GET", path)
        assert other.value.status == 404 and f"no {noun}" in other.value.detail, path
    # created through the generated route: audited under the kind's own action
    events = client.request("GET", "/v1/audit", params={"resource_id": job["id"]}).json()["events"]
    assert [e["action"] for e in events if e["action"].endswith(".create")] == ["privatization.create"]


def test_post_v1_jobs_still_creates_one(server, client):
    corpus = client.upload_corpus(server.corpus, fmt="jsonl")
    job = client.create_job(corpus["id"], SPEC)
    done = client.wait(job["id"], timeout=30, poll=0.1)
    assert (done["kind"], done["status"], done["summary"]["output_records"]) == ("privatize", "succeeded", 3)
    assert client.get("privatize", job["id"])["summary"] == done["summary"]
    events = client.request("GET", "/v1/audit", params={"resource_id": job["id"]}).json()["events"]
    assert [e["action"] for e in events if e["action"].endswith(".create")] == ["job.create"]


def test_privatize_submit_privatize_runs_it_from_the_cli(server, capsys, tmp_path):
    import yaml

    from services.cli import main

    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    rc = main(["submit", "privatize", str(tmp_path / "spec.yaml"), "--corpus", str(server.corpus), "--url",
               server.url, "--token", server.token, "--wait", "--poll", "0.1", "--timeout", "30", "--download",
               str(tmp_path / "out")])
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert rc == 0, out.err
    assert (summary["kind"], summary["status"], summary["summary"]["output_records"]) == ("privatize", "succeeded", 3)
    assert f"submitted privatization {summary['id']}" in out.err
    assert _texts(map(__import__("pathlib").Path, summary["downloaded"])) == sorted(set(TEXTS))


@pytest.mark.parametrize("name", ["../up.parquet", "/etc/passwd", "shards/../../x", "", ".", "c:evil", "a\\b"])
def test_a_listed_name_outside_the_folder_is_refused_before_anything_downloads(server, client, tmp_path,
                                                                                monkeypatch, name):
    """What a service lists is checked, every name before the first download (a server is
    not trusted to keep its names inside the folder the user chose): the results of
    ``/v1/jobs`` and a kind's listing, after its fixed downloads."""
    from privatize.errors import PrivatizeError

    fetched = []
    files = {"files": [{"name": "manifest.json"}, {"name": name}]}
    monkeypatch.setattr(client, "results", lambda job_id: files)
    monkeypatch.setattr(client, "_stream_to", lambda url, dest: fetched.append(url))
    with pytest.raises(PrivatizeError, match=r"^job j1: the service lists .* for download, not a path inside"):
        client.download_all("j1", tmp_path / "dl")
    kinds = {**client.kinds(), "toy": {"resource": "toys", "downloads": [{"path": "a", "file": "a.json"}],
                                       "listing": "results"}}
    monkeypatch.setattr(client, "kinds", lambda: kinds)
    monkeypatch.setattr(client, "request", lambda method, url: SimpleNamespace(json=lambda: files))
    with pytest.raises(PrivatizeError, match=r"^toy j1: the service lists .* for download, not a path inside"):
        client.download_outputs("toy", "j1", tmp_path / "dl")
    kinds["toy"] = {**kinds["toy"], "downloads": [{"path": "a", "file": name}], "listing": None}
    with pytest.raises(PrivatizeError, match=r"^toy j1: the service lists .* for download, not a path inside"):
        client.download_outputs("toy", "j1", tmp_path / "dl")
    assert fetched == [] and not (tmp_path / "dl").exists()


def test_a_refused_submission_deletes_the_corpus_it_uploaded(server, client, capsys, tmp_path):
    """``privatize submit privatize SPEC --corpus FILE`` uploads the corpus first; when the
    service then refuses the job (422), the upload is deleted again (exit 2, the field on
    stderr), and a corpus given by ``--corpus-id`` is never deleted."""
    import yaml

    from services.cli import main

    before = {c["id"] for c in client.corpora()}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**SPEC, "stages": [{"kind": "nosuch"}]}))
    common = ["--url", server.url, "--token", server.token]
    rc = main(["submit", "privatize", str(tmp_path / "bad.yaml"), "--corpus", str(server.corpus), *common])
    err = capsys.readouterr().err
    assert rc == 2 and "privatize: stages.0" in err and "deleted corpus " in err, err
    assert {c["id"] for c in client.corpora()} == before
    kept = client.upload_corpus(server.corpus, fmt="jsonl")
    rc = main(["submit", "privatize", str(tmp_path / "bad.yaml"), "--corpus-id", kept["id"], *common])
    assert rc == 2 and "deleted corpus" not in capsys.readouterr().err
    assert kept["id"] in {c["id"] for c in client.corpora()}


def test_another_tenant_gets_404_for_a_privatization_and_its_results(server, client):
    from services.client import ApiError, ServiceClient
    from services.db import session_scope
    from services.tenants import create_tenant

    corpus = client.upload_corpus(server.corpus, fmt="jsonl")
    job = client.submit("privatize", corpus_id=corpus["id"], config=SPEC)
    assert client.wait(job["id"], timeout=30, poll=0.1, get=lambda i: client.get("privatize", i))["status"] == "succeeded"
    with session_scope(server.ctx.sessions) as s:
        _, _, token = create_tenant(s, "other", storage_limit_bytes=1 << 20, max_concurrent_jobs=1)
    with ServiceClient(server.url, token) as other:
        for path in (f"/v1/privatizations/{job['id']}", f"/v1/privatizations/{job['id']}/results",
                     f"/v1/privatizations/{job['id']}/results/manifest.json", f"/v1/jobs/{job['id']}"):
            with pytest.raises(ApiError) as refused:
                other.request("GET", path)
            assert refused.value.status == 404, path
        assert other.list("privatize") == []
    assert client.request("GET", f"/v1/privatizations/{job['id']}/results/manifest.json").status_code == 200
