"""Issue 34: a new job kind is one file. This module defines a toy kind (a word count of a
corpus) and registers it, with no other edit anywhere, and the service then has its REST
resource (create, list, get, its own download route, its OpenAPI entries, its audit
action), the client's ``submit``/``get``/``list``/``download_outputs``, and ``privatize
submit wordcount CONFIG``, all over a real HTTP server.

The Ray Jobs API is the one thing replaced: :class:`RunsInProcess` (a test double for Ray,
labelled as such) runs the toy's job function in this process when the service submits
it, from the entrypoint the service built, and then reports the job SUCCEEDED. That the
kind's own pieces ran is checked by what they leave: the entrypoint names the kind and
its module, the result file is the toy's, the row's summary is what its reader returns.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services import jobkinds
from services.errors import config_invalid
from services.jobkinds import JobKind, register_job_kind
from tests.services.conftest import JobsInProcess

RESULT = "counts.json"
ARCHIVE = "top.tar.gz"
"""The toy's second download: ``top/words.txt`` packed, what ``--extract`` unpacks."""


class CountSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(1, ge=1, le=1)
    top: int = Field(3, ge=1, le=1000)

    def to_dict(self) -> dict:
        return self.model_dump()

    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()


def count_words(spec_path: str, input_path: str, output_path: str) -> None:
    """The toy's job: the ``top`` most common words of a JSONL corpus."""
    spec = json.loads(Path(spec_path).read_text())
    words: dict[str, int] = {}
    for line in Path(input_path).read_text().splitlines():
        for w in json.loads(line)["text"].lower().split():
            words[w] = words.get(w, 0) + 1
    top = sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[: spec["top"]]
    Path(output_path).mkdir(parents=True, exist_ok=True)
    listing = "".join(f"{w}\n" for w, _ in top).encode()
    with tarfile.open(Path(output_path, ARCHIVE), "w:gz") as tf:
        entry = tarfile.TarInfo("top/words.txt")
        entry.size = len(listing)
        tf.addfile(entry, io.BytesIO(listing))
    Path(output_path, RESULT).write_text(json.dumps({"top": top, "words": sum(words.values())}))


class WordCount(JobKind):
    """The toy kind: counts a corpus's words."""

    name = "wordcount"
    module = __name__
    noun = "count"
    resource = "counts"
    result_file = RESULT
    downloads = (("counts", RESULT), ("top", ARCHIVE))
    config_help = "{top: how many of the most common words}"

    def validate(self, data) -> CountSpec:
        try:
            return CountSpec.model_validate(data)
        except ValidationError as exc:
            raise config_invalid([(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]) from None

    def limits(self, settings, spec: CountSpec) -> None:
        if spec.top > 100:
            raise config_invalid([("top", f"at most 100 on this service (asked for {spec.top})")])

    def read_results(self, storage, output_path: str) -> dict | None:
        try:
            return {"words": json.loads(storage.read_bytes(f"{output_path}/{RESULT}"))["words"]}
        except (OSError, ValueError):
            return None

    def routes(self, router) -> None:
        from fastapi import Depends
        from fastapi.responses import Response

        from services.dependencies import current_tenant, fresh_job_of, get_ctx

        def count_file(job_id: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            job = fresh_job_of(self, ctx, tenant.id, job_id)
            return Response(ctx.storage.read_bytes(f"{job.output_path}/{RESULT}"), media_type="application/json")

        def top_archive(job_id: str, tenant=Depends(current_tenant), ctx=Depends(get_ctx)):
            job = fresh_job_of(self, ctx, tenant.id, job_id)
            return Response(ctx.storage.read_bytes(f"{job.output_path}/{ARCHIVE}"), media_type="application/gzip")

        router.add_api_route("/v1/counts/{job_id}/counts", count_file, methods=["GET"])
        router.add_api_route("/v1/counts/{job_id}/top", top_archive, methods=["GET"])


class RunsInProcess(JobsInProcess):
    """TEST DOUBLE for the Ray Jobs API: runs the toy's job function on the entrypoint's
    locations, here."""

    kind = WordCount.name

    def run(self, spec: str, input: str, output: str) -> None:
        assert jobkinds.job_kind(self.kind).module == __name__
        count_words(spec, input, output)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The service with the toy kind registered (only for this module), on a real port."""
    from tests.services.conftest import in_process_service

    restore = jobkinds.KINDS.snapshot()
    register_job_kind(WordCount)
    tmp = tmp_path_factory.mktemp("kinds")
    corpus = tmp / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("the cat sat", "the cat ran", "a dog")))
    try:
        with in_process_service(tmp, RunsInProcess()) as (url, token, ctx):
            yield SimpleNamespace(url=url, token=token, ctx=ctx, corpus=corpus, tmp=tmp)
    finally:
        restore()


@pytest.fixture(scope="module")
def client(server):
    from services.client import ServiceClient

    with ServiceClient(server.url, server.token) as c:
        yield c


def test_the_kind_has_its_routes_and_openapi_entries(server, client):
    info = client.kinds()["wordcount"]
    assert {k: info[k] for k in ("noun", "resource", "reads", "input_kind", "downloads")} == {
        "noun": "count", "resource": "counts", "reads": "corpus", "input_kind": None,
        "downloads": [{"path": "counts", "file": RESULT}, {"path": "top", "file": ARCHIVE}]}
    assert set(info["body"]["required"]) == {"corpus_id", "config"}
    paths = client.request("GET", "/openapi.json").json()["paths"]
    assert set(paths["/v1/counts"]) == {"get", "post"} and "get" in paths["/v1/counts/{job_id}"]
    assert "get" in paths["/v1/counts/{job_id}/counts"]
    # the service's own kinds are still there, privatize among them with its generated
    # resource and its listed results (and POST /v1/jobs, the route it was first created by)
    assert {"train", "evaluate", "privatize", "adapt"} <= set(client.kinds())
    privatize = client.kinds()["privatize"]
    assert (privatize["resource"], privatize["listing"], privatize["reads"]) == ("privatizations", "results", "corpus")
    assert {"/v1/privatizations", "/v1/privatizations/{job_id}/results", "/v1/jobs"} <= set(paths)
    assert "post" in paths["/v1/jobs"]


def test_the_client_submits_gets_and_lists_it(server, client):
    from privatize.errors import PrivatizeError
    from services.client import ApiError

    corpus = client.upload_corpus(server.corpus, fmt="jsonl")
    with pytest.raises(ApiError) as refused:  # the kind's limits, with the field's path
        client.submit("wordcount", corpus_id=corpus["id"], config={"top": 500})
    assert refused.value.status == 422 and refused.value.body["errors"][0]["path"] == "top"
    with pytest.raises(ApiError) as refused:  # its validation
        client.submit("wordcount", corpus_id=corpus["id"], config={"top": 2, "colour": "red"})
    assert refused.value.status == 422 and refused.value.body["errors"][0]["path"] == "colour"
    with pytest.raises(ApiError) as refused:  # the generated body: what it reads is required
        client.submit("wordcount", config={"top": 2})
    assert refused.value.status == 422
    job = client.submit("wordcount", corpus_id=corpus["id"], config={"top": 2})
    assert job["kind"] == "wordcount" and job["corpus_id"] == corpus["id"] and job["config"] == {"version": 1,
                                                                                                 "top": 2}
    done = client.wait(job["id"], timeout=30, poll=0.1, get=lambda i: client.get("wordcount", i))
    assert done["status"] == "succeeded" and done["summary"] == {"words": 8}
    assert job["id"] in [j["id"] for j in client.list("wordcount")]
    got = client.download_outputs("wordcount", job["id"], server.tmp / "dl")
    assert [p.name for p in got] == [RESULT, ARCHIVE]
    assert json.loads(got[0].read_text())["top"] == [["cat", 2], ["the", 2]]
    # extract: the archive unpacked in place of itself (its top-level folder returned), and
    # a second extraction into the same folder refused rather than merged
    got = client.download_outputs("wordcount", job["id"], server.tmp / "x", extract=True)
    assert got == [server.tmp / "x" / RESULT, server.tmp / "x" / "top"]
    assert (server.tmp / "x" / "top" / "words.txt").read_text() == "cat\nthe\n"
    assert sorted(p.name for p in (server.tmp / "x").iterdir()) == sorted([RESULT, "top"])
    with pytest.raises(PrivatizeError, match=r"x/top exists; choose another folder"):
        client.download_outputs("wordcount", job["id"], server.tmp / "x", extract=True)
    assert sorted(p.name for p in (server.tmp / "x").iterdir()) == sorted([RESULT, "top"])  # no temporary left
    # the generic job routes see it too, and another kind's resource does not
    assert client.job(job["id"])["kind"] == "wordcount"
    with pytest.raises(ApiError) as other:
        client.get("train", job["id"])
    assert other.value.status == 404 and "no training" in other.value.detail
    # its creation is audited under its own action
    events = client.request("GET", "/v1/audit", params={"resource_id": job["id"]}).json()["events"]
    created = [e for e in events if e["action"] == "count.create"]
    assert len(created) == 1 and created[0]["status"] == 201 and created[0]["detail"]["corpus_id"] == corpus["id"]


def test_privatize_submit_kind_runs_it_from_the_cli(server, capsys, tmp_path):
    from services.cli import main

    config = tmp_path / "count.yaml"
    config.write_text("top: 1\n")
    rc = main(["submit", "wordcount", str(config), "--corpus", str(server.corpus), "--url", server.url,
               "--token", server.token, "--wait", "--poll", "0.1", "--timeout", "30", "--download",
               str(tmp_path / "out"), "--extract"])
    out = capsys.readouterr()
    summary = json.loads(out.out.strip().splitlines()[-1])
    assert rc == 0, out.err
    assert (summary["kind"], summary["status"], summary["summary"]) == ("wordcount", "succeeded", {"words": 8})
    assert json.loads((tmp_path / "out" / RESULT).read_text())["top"] == [["cat", 2]]
    assert (tmp_path / "out" / "top" / "words.txt").read_text() == "cat\n"
    assert summary["downloaded"] == [str((tmp_path / "out" / n).resolve()) for n in (RESULT, "top")]
    assert summary["corpus_id"] and "progress" not in summary  # what it read; no training progress
    assert "submitted count" in out.err
    # a kind the service does not run: one line, exit 2
    rc = main(["submit", "nokind", str(config), "--corpus-id", "x", "--url", server.url, "--token", server.token])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("privatize")]  # not the server's
    assert rc == 2 and len(err) == 1 and "unknown job kind 'nokind'" in err[0], err


def _archive(path: Path, entries: dict[str, str | None], links: dict[str, str] = {}) -> Path:
    """A .tar.gz of files (name -> text) and symbolic links (name -> target)."""
    with tarfile.open(path, "w:gz") as tf:
        for name, text in entries.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in links.items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tf.addfile(info)
    return path


def test_extract_takes_files_only_and_refuses_an_existing_entry_before_unpacking(tmp_path, monkeypatch):
    """``download_outputs(extract=True)`` on archives a server could send: a link that stays
    inside the archive but would point beside the destination once moved is refused, and so
    is an entry the destination already has, with nothing left behind either way. The
    archive arrives through ``_stream_to`` (replaced here: the HTTP transfer is tested
    above), so this exercises the unpacking alone."""
    from privatize.errors import PrivatizeError
    from services.client import ServiceClient

    served: dict[str, Path] = {}

    def stream_to(url, dest):
        Path(dest).write_bytes(served["archive"].read_bytes())
        return Path(dest)

    c = ServiceClient("http://127.0.0.1:9", "pvt_unused")
    monkeypatch.setattr(c, "_stream_to", stream_to)
    dest = tmp_path / "dest"
    served["archive"] = _archive(tmp_path / "links.tar.gz", {"x/b": "beside"}, {"a": "x/b", "top/l": "../x/b"})
    with pytest.raises(PrivatizeError, match=r"holds a link \((a|top/l)\); refused"):
        c._unpack_to("/v1/t/1/top", dest)
    assert list(dest.iterdir()) == []  # nothing moved, the temporary folder gone
    served["archive"] = _archive(tmp_path / "ok.tar.gz", {"model/config.json": "{}", "model/w.bin": "w",
                                                          "notes.txt": "n"})
    assert c._unpack_to("/v1/t/1/model", dest) == [dest / "model", dest / "notes.txt"]
    assert (dest / "model" / "config.json").read_text() == "{}" and (dest / "notes.txt").read_text() == "n"
    (dest / "model" / "config.json").write_text("mine")
    with pytest.raises(PrivatizeError, match=r"dest/model exists; choose another folder"):
        c._unpack_to("/v1/t/1/model", dest)
    assert (dest / "model" / "config.json").read_text() == "mine"  # untouched
    assert sorted(p.name for p in dest.iterdir()) == ["model", "notes.txt"]
    # a dangling link is an entry too (exists() would say no): the only clash, still refused
    (dest / "notes.txt").unlink()
    (dest / "notes.txt").symlink_to(tmp_path / "nowhere")
    served["archive"] = _archive(tmp_path / "notes.tar.gz", {"notes.txt": "n"})
    with pytest.raises(PrivatizeError, match=r"dest/notes.txt exists; choose another folder"):
        c._unpack_to("/v1/t/1/notes", dest)
    assert (dest / "notes.txt").is_symlink() and sorted(p.name for p in dest.iterdir()) == ["model", "notes.txt"]
