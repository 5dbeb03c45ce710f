"""The Ray Data runner against the in-process runner, on a real local Ray: the shards are
byte-identical (SHA-256 of every file), the manifest counts agree, the work ran in Ray
workers, and no key bytes travel with the work."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from privatize import run
from privatize.ray import cluster
from privatize.errors import InputError, OutputError, RecordError
from privatize.keys import load_key_file, new_key, write_key_file
from privatize.output import verify
from privatize.spec import parse_spec
from tests.conftest import ROOT
from tests.integration.conftest import probe_calls, ray_env

pytestmark = pytest.mark.ray

WORDS = ("river stone lamp garden window letter orange violin harbor candle meadow silver "
         "engine pocket ladder thunder marble pepper forest rocket").split()
SHARED = "This sentence appears in more than one document on purpose."


def sentence(i: int) -> str:
    w = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(4 + i % 5)]
    return f"{w[0].capitalize()} {' '.join(w[1:])} number {i}."


def doc_text(i: int) -> str:
    body = [sentence(i * 10 + k) for k in range(2 + i % 4)]
    if i % 3 == 0:
        body.insert(1, SHARED)  # the same sentence in every third document
    return " ".join(body)


def write_corpus(folder, n_files=3, per_file=6):
    """JSONL files with metadata, individuals, a duplicated id across files and one bad
    line per file."""
    folder.mkdir(parents=True, exist_ok=True)
    k = 0
    for f in range(n_files):
        with open(folder / f"part{f}.jsonl", "w", encoding="utf-8") as fh:
            for _ in range(per_file):
                fh.write(json.dumps({"id": f"doc{k}", "text": doc_text(k), "individual_id": f"person{k % 4}",
                                     "source": "crm", "ssn": "078-05-1120"}) + "\n")
                k += 1
            fh.write(json.dumps({"id": "doc0", "text": "A second record with the id doc0."}) + "\n")
            fh.write("{not json\n")
    return folder


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("parity")
    write_key_file(new_key("vigenere", length=40), d / "keys" / "text.key")
    write_key_file(new_key("hmac"), d / "keys" / "pseudo.key")
    write_corpus(d / "corpus")
    return d


CRT = {"stages": [{"kind": "split"},
                  {"kind": "dedup", "method": "sha1", "min_length": 20},
                  {"kind": "split_private"},
                  {"kind": "encrypt_text", "key": "file:keys/text.key"}],
       "output": {"num_shards": 4, "pseudonym_key": "file:keys/pseudo.key", "meta_keys": ["source"]}}
BLOOM_DOCS = {"stages": [{"kind": "dedup", "unit": "document", "method": "bloom", "action": "drop"},
                         {"kind": "split", "unit": "line"},
                         {"kind": "split_private"},
                         {"kind": "encrypt_text", "key": "file:keys/text.key"}],
              "output": {"num_shards": 3}}


def shard_hashes(out) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "shards").iterdir())}


def comparable(manifest: dict) -> dict:
    stages = [{k: v for k, v in s.items() if k != "seconds"} for s in manifest["stages"]]
    return {"counts": manifest["counts"], "stages": stages, "key_ids": manifest["key_ids"],
            "shards": manifest["shards"], "spec_sha256": manifest["spec_sha256"]}


_baselines: dict = {}


def in_process(workdir, spec_dict: dict, name: str):
    if name not in _baselines:
        out = workdir / f"inproc-{name}"
        m = run(parse_spec(spec_dict), workdir / "corpus", out, spec_dir=str(workdir))
        _baselines[name] = (out, m)
    return _baselines[name]


def run_ray(workdir, spec_dict, name, **kw):
    out = workdir / f"ray-{name}"
    m = run(parse_spec(spec_dict), workdir / "corpus", out, runner="ray", spec_dir=str(workdir),
                                    progress=False, **kw)
    return out, m


def assert_parity(base, got):
    (bout, bm), (rout, rm) = base, got
    assert rm["runner"] == "ray" and bm["runner"] == "in-process"
    assert shard_hashes(rout) == shard_hashes(bout)
    assert comparable(rm) == comparable(bm)
    assert verify(rout) == []
    bq, rq = (p.with_name(p.name + ".quarantine.jsonl") for p in (bout, rout))
    assert sorted(rq.read_text().splitlines()) == sorted(bq.read_text().splitlines())


def spy_pools(monkeypatch) -> list[tuple[str, bool]]:
    """(map name, whether in an actor pool) of every Ray Data map the run plans."""
    pools = []
    real = cluster.map_batches

    def spy(ds, fn, **kw):
        pools.append((getattr(fn, "__name__", type(fn).__name__), "compute" in kw))
        return real(ds, fn, **kw)

    monkeypatch.setattr(cluster, "map_batches", spy)
    return pools


def check_crt_run(m):
    # the run really did something: duplicates masked, records routed, text encrypted,
    # the duplicated id and the bad lines quarantined (3 files x 2)
    by_kind = {s["kind"]: s for s in m["stages"]}
    assert by_kind["dedup"]["stats"]["dedup_hits"] == 5  # SHARED in docs 0, 3, ..., 15: six, one first
    assert by_kind["split_private"]["stats"]["private"] >= 5
    assert by_kind["encrypt_text"]["stats"]["chars_encrypted"] > 1000
    assert m["counts"]["quarantined"] == 6 and m["counts"]["read_quarantined"] == 6
    assert all(s["reconciled"] for s in m["stages"])


def test_crt_recipe_in_byte_ranges_and_small_batches(ray_session, workdir):
    base = in_process(workdir, CRT, "crt")
    got = run_ray(workdir, CRT, "crt-7", batch_size=7, read_range_bytes=1500)
    assert_parity(base, got)
    check_crt_run(got[1])


def test_crt_recipe_runs_in_workers_and_ships_no_key_bytes(probe, workdir, monkeypatch):
    """Default batches. The stage probe shows every stage method ran in Ray workers, not
    in this process; every callable shipped to them pickles without key bytes."""
    import base64

    import ray.cloudpickle as cloudpickle

    base = in_process(workdir, CRT, "crt")
    for p in probe.iterdir():  # the in-process reference (computed here when this test runs alone)
        p.unlink()
    shipped = []
    import ray

    real_batches, real_task = cluster.map_batches, cluster.task

    def spy_batches(ds, fn, **kw):
        shipped.append((fn, kw))
        return real_batches(ds, fn, **kw)

    class SpyTask:
        def __init__(self, fn, **options):
            self.fn, self.real = fn, real_task(fn, **options)

        def remote(self, *args):  # the arguments shipped with the task, object refs aside
            shipped.append((self.fn, [a for a in args if not isinstance(a, ray.ObjectRef)]))
            return self.real.remote(*args)

    monkeypatch.setattr(cluster, "map_batches", spy_batches)
    monkeypatch.setattr(cluster, "task", SpyTask)
    got = run_ray(workdir, CRT, "crt-1000", batch_size=1000)
    assert_parity(base, got)
    check_crt_run(got[1])

    calls = probe_calls(probe)
    pids = {pid for pid, _, _ in calls}
    assert pids and os.getpid() not in pids
    assert {"split.process_batch", "encrypt_text.process_batch", "split_private.process_batch", "dedup.keys",
            "dedup.decide", "dedup.apply", "_unique_ids.keys", "_unique_ids.decide", "_unique_ids.apply"} <= {
        w for _, _, w in calls}
    # the same probe sees the in-process runner work in this process, and only here
    for p in probe.iterdir():
        p.unlink()
    run(parse_spec(CRT), workdir / "corpus", workdir / "inproc-probed", spec_dir=str(workdir))
    assert {pid for pid, _, _ in probe_calls(probe)} == {os.getpid()}

    text_key = load_key_file(workdir / "keys" / "text.key").secret
    pseudo_key = load_key_file(workdir / "keys" / "pseudo.key").secret
    assert len(shipped) >= 8
    for fn, kw in shipped:
        blob = cloudpickle.dumps((fn, kw))
        for secret in (text_key, pseudo_key, base64.b64encode(pseudo_key), pseudo_key.hex().encode()):
            assert secret not in blob, f"key material shipped with {fn!r}"
    # what is shipped names the keys by reference
    assert any(b"file:keys/text.key" in cloudpickle.dumps((fn, kw)) for fn, kw in shipped)
    # no stage of this recipe has a heavy setup: no actor pool, every map a plain task
    assert not any(isinstance(kw, dict) and "compute" in kw for _, kw in shipped)


def test_batch_size_one_and_tiny_blocks(ray_session, tmp_path, workdir):
    # one record per batch and per block, on a small corpus (one Ray call per row)
    small = tmp_path / "corpus"
    small.mkdir()
    lines = (workdir / "corpus" / "part0.jsonl").read_text().splitlines()[:4]
    (small / "a.jsonl").write_text("\n".join(lines) + "\n")
    spec = parse_spec(CRT)
    local_figures, ray_figures = [], []
    bm = run(spec, small, tmp_path / "inproc", spec_dir=str(workdir), batch_size=1, on_progress=local_figures.append)
    rm = run(spec, small, tmp_path / "ray", runner="ray", spec_dir=str(workdir), batch_size=1,
                                     read_range_bytes=200, progress=False, on_progress=ray_figures.append)
    assert shard_hashes(tmp_path / "ray") == shard_hashes(tmp_path / "inproc")
    assert comparable(rm) == comparable(bm)
    # progress (issue 54, item 4): both runners' last figures are the manifest's counts, per
    # stage; the Ray runner's grow block by block as the final pass counts them
    for figures, m in ((local_figures, bm), (ray_figures, rm)):
        last = figures[-1]
        assert last["records_read"] == m["counts"]["input_records"] > 0
        assert [(s["kind"], s["records_in"], s["records_out"]) for s in last["stages"]] == \
            [(s["kind"], s["records_in"], s["records_out"]) for s in m["stages"]]
    assert local_figures[-1]["percent"] == 100.0 and local_figures[-1]["records_total"] == bm["counts"]["input_records"]
    reads = [f["records_read"] for f in ray_figures]
    assert reads == sorted(reads) and ray_figures[-1]["records_total"] is None


def test_bloom_document_dedup_with_drop(ray_session, workdir):
    base = in_process(workdir, BLOOM_DOCS, "bloom")
    got = run_ray(workdir, BLOOM_DOCS, "bloom", batch_size=5, read_range_bytes=2000)
    assert_parity(base, got)


@pytest.mark.presidio
@pytest.mark.slow
def test_redact_recipe_in_an_actor_pool_beside_fused_tasks(ray_session, workdir, monkeypatch):
    # surrogates: seeded by the masked record, the same made-up values on either runner and at
    # any batch size (the corpus's "River" and "Stone" are found as places and companies);
    # the CRT recipe's two-node test covers mask
    spec = {"stages": [{"kind": "split"}, {"kind": "dedup", "min_length": 20},
                       {"kind": "redact", "operator": "surrogate"},
                       {"kind": "split_private"}, {"kind": "encrypt_text", "key": "file:keys/text.key"}],
            "output": {"num_shards": 2}}
    pools = spy_pools(monkeypatch)
    local = in_process(workdir, spec, "redact")
    assert local[1]["stages"][2]["stats"]["chars_redacted"] > 0  # surrogates were written
    assert_parity(local, run_ray(workdir, spec, "redact", batch_size=16))
    # the spaCy stage runs in an actor pool (set up once per actor); every other stage
    # runs as tasks, which Ray Data fuses with their neighbours
    assert {name for name, actor in pools if actor} == {"2_redact"}
    assert any(not actor for _, actor in pools)


def test_duplicates_across_files_blocks_and_formats(ray_session, tmp_path):
    """Hand-built corpus: the expected duplicates are known without running anything."""
    d = tmp_path / "in"
    d.mkdir()
    rep = "Repeated sentence shared by many files here."
    a = [{"id": "x", "text": f"First alpha sentence. {rep}"}, {"id": "y", "text": "Only in a. Nothing else."}]
    # b.jsonl is read in several byte ranges: the repeat sits in different ranges
    b = [{"id": f"b{i}", "text": f"Filler line {i} of b."} for i in range(30)]
    b[3]["text"] = rep
    b[25]["text"] = f"Last words. {rep}"
    b.append({"id": "x", "text": "Duplicate id across files."})
    (d / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in a))
    (d / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in b))
    (d / "c.txt").write_text(f"A plain text document. {rep}\n")
    pq.write_table(pa.table({"id": ["p1", "y"], "text": [rep, "Parquet duplicate of y's id."]}), d / "d.parquet")
    spec = parse_spec({"stages": [{"kind": "split"}, {"kind": "dedup"}, {"kind": "split_private"}],
                       "output": {"num_shards": 2}})
    m = run(spec, d, tmp_path / "ray", runner="ray", batch_size=4, read_range_bytes=300, progress=False)
    rows = {r["doc_id"]: r for p in sorted((tmp_path / "ray" / "shards").iterdir())
            for r in pq.read_table(p).to_pylist()}
    hits = sorted(k for k, r in rows.items() if r["dedup_hit"])
    # first occurrence in the global order: a.jsonl line 1, segment 1 ("x#1")
    assert hits == sorted(["b3#0", "b25#1", "c.txt#1", "p1#0"])
    assert all(rows[h]["text"] == "<MASK>" and rows[h]["private"] for h in hits)
    assert rows["x#1"]["text"] == rep and not rows["x#1"]["dedup_hit"]
    q = [json.loads(line) for line in (tmp_path / "ray.quarantine.jsonl").read_text().splitlines()]
    assert sorted((r["doc_id"], r["reason"]) for r in q) == [
        ("x", "duplicate doc_id (first seen in input 0 line 1)"),
        ("y", "duplicate doc_id (first seen in input 0 line 2)")]
    bm = run(spec, d, tmp_path / "inproc", batch_size=1000)
    assert shard_hashes(tmp_path / "ray") == shard_hashes(tmp_path / "inproc")
    assert comparable(m) == comparable(bm)


def test_errors_match_the_in_process_runner(ray_session, tmp_path, workdir):
    spec = parse_spec(CRT)
    # a file with no JSON object at all: one line naming the first bad line, whether
    # the file is read whole or in byte ranges
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.jsonl").write_text("\n".join(["[1, 2]"] * 3 + ["{broken"] * 60) + "\n")
    with pytest.raises(InputError) as expected:
        run(spec, bad, tmp_path / "o1", spec_dir=str(workdir))
    for range_bytes in (64 << 20, 100):
        with pytest.raises(InputError) as got:
            run(spec, bad, tmp_path / "o2", runner="ray", spec_dir=str(workdir),
                                        read_range_bytes=range_bytes, progress=False)
        assert str(got.value) == str(expected.value)
        assert not (tmp_path / "o2").exists()
    # --strict: record-level problems are errors; nothing is written
    with pytest.raises(RecordError, match="strict"):
        run(spec, workdir / "corpus", tmp_path / "o3", runner="ray", spec_dir=str(workdir), strict=True,
                                    progress=False)
    assert not (tmp_path / "o3").exists() and not (tmp_path / "o3.quarantine.jsonl").exists()
    assert not list(tmp_path.glob(".o3.tmp-*"))
    # an existing output directory is refused before any work
    (tmp_path / "o4").mkdir()
    with pytest.raises(OutputError):
        run(spec, workdir / "corpus", tmp_path / "o4", runner="ray", spec_dir=str(workdir), progress=False)


ONE_CPU = textwrap.dedent("""
    import json, sys
    from privatize import run
    from privatize.spec import parse_spec
    specs, corpus, out, spec_dir = sys.argv[1:]
    got = {}
    for name, spec in json.loads(specs).items():  # every spec on the one cluster the first run starts
        m = run(parse_spec(spec), corpus, f"{out}/{name}", runner="ray", spec_dir=spec_dir, num_cpus=1,
                batch_size=64, read_range_bytes=2000, progress=False)
        got[name] = {"shards": m["shards"], "counts": m["counts"]}
    print(json.dumps(got))
""")


def _identifiers_plain() -> dict:
    """The identifiers spec without the detector (its terms are the graph's; spaCy would
    only add time on one CPU)."""
    plain = json.loads(json.dumps(IDENTIFIERS))
    plain["stages"][1]["direct"] = "none"
    return plain


@pytest.fixture(scope="module")
def one_cpu(ray_session, workdir, tmp_path_factory):
    """The CRT recipe and the identifiers stage on an embedded cluster of one CPU (actor
    pools and reads must share it; the naive plan hangs), in one separate process so the
    suite's Ray stays up: the output folder of each and what the process printed."""
    out = tmp_path_factory.mktemp("one-cpu")
    specs = {"crt": CRT, "identifiers": _identifiers_plain()}
    proc = subprocess.run([sys.executable, "-c", ONE_CPU, json.dumps(specs), str(workdir / "corpus"), str(out),
                           str(workdir)], cwd=ROOT, env=ray_env(), capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def test_one_cpu_cluster_completes_with_identical_shards(workdir, one_cpu):
    """An embedded cluster of one CPU completes the CRT recipe with the in-process shards."""
    base_out, base_m = in_process(workdir, CRT, "crt")
    out, got = one_cpu
    assert got["crt"]["counts"] == base_m["counts"]
    assert shard_hashes(out / "crt") == shard_hashes(base_out)


def _job(args, env, timeout=240):
    return subprocess.run([sys.executable, "-m", "privatize.job", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_job_entrypoint_bad_input_exits_2_with_one_line(workdir, tmp_path):
    """Problems with the spec, the input or the output location stop the job before any
    cluster work: exit code 2 and one line on stderr."""
    (workdir / "crt.json").write_text(json.dumps(CRT))
    env = ray_env()
    cases = [([str(workdir / "crt.json"), str(tmp_path / "missing"), str(tmp_path / "o")],
              f"{tmp_path / 'missing'}: no such file or directory"),
             ([str(tmp_path / "nospec.yaml"), str(workdir / "corpus"), str(tmp_path / "o")], "cannot read spec"),
             ([str(workdir / "crt.json"), str(workdir / "corpus"), str(workdir / "corpus")], "output directory exists")]
    for args, expected in cases:
        proc = _job(args, env)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("privatize: error: ") and expected in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.server
def test_job_entrypoint_on_the_running_cluster_with_s3(ray_session, workdir, tmp_path):
    """``python -m privatize.job`` as a Ray job runs it (RAY_ADDRESS names the cluster),
    with spec, input and output on an S3-protocol server (moto, on loopback)."""
    import socket
    import time

    import pyarrow.fs as pafs

    # the moto of this environment (a moto_server elsewhere on PATH may be another version)
    server = str(Path(sys.executable).with_name("moto_server"))
    if not Path(server).exists():
        pytest.skip("moto_server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        env = ray_env()
        env.update({"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
        import ray

        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
        s3 = pafs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                               endpoint_override=f"127.0.0.1:{port}", allow_bucket_creation=True)
        for attempt in range(100):  # the server takes a moment to listen
            try:
                s3.create_dir("bucket")
                break
            except OSError:
                if attempt == 99:
                    raise
                time.sleep(0.1)
        base_out, base_m = in_process(workdir, CRT, "crt")
        # key references in a remote spec: absolute file: paths (the service uses keystore:)
        spec = json.loads(json.dumps(CRT).replace("file:keys/", f"file:{workdir}/keys/"))
        with s3.open_output_stream("bucket/jobs/spec.json") as fh:
            fh.write(json.dumps(spec).encode())
        pafs.copy_files(str(workdir / "corpus"), "bucket/corpus", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=s3)
        proc = _job(["s3://bucket/jobs/spec.json", "s3://bucket/corpus", "s3://bucket/jobs/out"], env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["output"] == "s3://bucket/jobs/out"
        assert summary["quarantine"] == "s3://bucket/jobs/out.quarantine.jsonl"
        got = {}
        for name in shard_hashes(base_out):
            with s3.open_input_stream(f"bucket/jobs/out/shards/{name}") as fh:
                got[name] = hashlib.sha256(fh.read()).hexdigest()
        assert got == shard_hashes(base_out)
        with s3.open_input_stream("bucket/jobs/out/manifest.json") as fh:
            assert json.loads(fh.read())["counts"] == base_m["counts"]
        assert s3.get_file_info("bucket/jobs/out.quarantine.jsonl").size > 0
    finally:
        moto.terminate()
        moto.wait(timeout=10)


def test_cli_run_with_ray_address_matches_in_process(ray_session, workdir, tmp_path):
    """``privatize run SPEC --ray ADDRESS`` joins the running cluster and writes the
    in-process runner's shards; its summary line says where they are."""
    import ray

    base_out, base_m = in_process(workdir, CRT, "crt")
    (workdir / "crt-cli.json").write_text(json.dumps(CRT))
    out = tmp_path / "cli-ray"
    proc = subprocess.run([sys.executable, "-m", "privatize.cli", "run", str(workdir / "crt-cli.json"),
                           "--input", str(workdir / "corpus"), "--output", str(out),
                           "--ray", ray.get_runtime_context().gcs_address],
                          cwd=ROOT, env=ray_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["output_records"] == base_m["counts"]["output_records"]
    assert json.loads((out / "manifest.json").read_text())["runner"] == "ray"
    assert shard_hashes(out) == shard_hashes(base_out)


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_plan_that_cannot_be_scheduled_fails_instead_of_waiting(ray_session, workdir, tmp_path, monkeypatch,
                                                                  request, sigint):
    """Tasks that ask for more CPU than any node has wait forever in Ray; the stall guard
    ends the run with one clear error, and no output is left behind; also where SIGINT is
    ignored (a host's choice), so the guard's simulated SIGINT is lost."""
    import signal
    import time

    from privatize.ray.cluster import Budget, RunStalled

    if sigint == "ignored":
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))

    # the stage maps ask for 64 CPUs: reads run, then nothing can
    monkeypatch.setattr(Budget, "map_args", lambda self, actor, blocks=None: {"num_cpus": 64.0})
    t0 = time.monotonic()
    with pytest.raises(RunStalled, match=r"no progress for \d+s .*pending demands"):
        run(parse_spec(CRT), workdir / "corpus", tmp_path / "stalled", runner="ray", spec_dir=str(workdir),
            progress=False, stall_timeout_s=4)
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "stalled").exists() and not list(tmp_path.glob(".stalled.tmp-*"))


MASKED = {"stages": [{"kind": "split"}, {"kind": "mask", "technique": "vocab_threshold", "vocab_size": 2000},
                     {"kind": "split_private"}]}


def test_mask_stage_same_shards_on_ray(ray_session, workdir):
    base = in_process(workdir, MASKED, "mask")
    got = run_ray(workdir, MASKED, "mask", batch_size=7, read_range_bytes=3000)
    assert_parity(base, got)
    stats = {s["kind"]: s["stats"] for s in got[1]["stages"]}
    assert 0 < stats["mask"]["words_masked"] < stats["mask"]["words"]  # it masked something, not everything
    assert stats["split_private"]["private"] > 0


def test_refill_stage_same_shards_on_ray(ray_session, workdir, tiny_filler, monkeypatch):
    """mask then refill (a tiny masked LM trained with ``privatize train`` kind mlm): the
    refill runs in an actor pool on Ray, in batches other than the in-process run's, and
    writes the same shards."""
    spec = {"stages": [{"kind": "split"}, {"kind": "mask", "technique": "vocab_threshold", "vocab_size": 2000},
                       {"kind": "refill", "checkpoint": str(tiny_filler), "strategy": "topk", "seed": 3},
                       {"kind": "split_private"}]}
    pools = spy_pools(monkeypatch)
    base = in_process(workdir, spec, "refill")
    got = run_ray(workdir, spec, "refill", batch_size=5, read_range_bytes=3000)
    assert_parity(base, got)
    stats = {s["kind"]: s["stats"] for s in got[1]["stages"]}
    assert stats["refill"]["masks_filled"] == stats["mask"]["masks"] > 0
    assert {name for name, actor in pools if actor} == {"2_refill"}  # the filler in an actor pool


IDENTIFIERS = {"stages": [{"kind": "split"}, {"kind": "identifiers", "max_n": 3, "digits": "zero"}],
               "output": {"num_shards": 3, "pseudonym_key": "file:keys/pseudo.key"}}


def test_identifiers_stage_same_shards_on_ray_at_one_and_two_cpus(ray_session, workdir, monkeypatch, one_cpu):
    """The multi-key GlobalStage: every term of every record hash-partitioned, decided per
    partition, a list of decisions per row. Ray (2 CPUs, small batches and byte ranges, the
    detector in an actor pool) and a one-CPU cluster write the in-process run's shards."""
    pools = spy_pools(monkeypatch)
    base = in_process(workdir, IDENTIFIERS, "identifiers")
    got = run_ray(workdir, IDENTIFIERS, "identifiers", batch_size=4, read_range_bytes=2500)
    assert_parity(base, got)
    stats = {s["kind"]: s["stats"] for s in got[1]["stages"]}["identifiers"]
    assert 0 < stats["identifiers_n1"] < stats["terms_n1"] and stats["identifiers_n3"] > 0
    assert ("1_identifiers", True) in [(n, a) for n, a in pools if "identifiers" in n]  # apply in an actor pool
    # one CPU (the module's one-CPU process), without the detector
    out, _ = one_cpu
    assert shard_hashes(out / "identifiers") == shard_hashes(in_process(workdir, _identifiers_plain(),
                                                                         "identifiers-plain")[0])


def test_synthesize_stage_same_shards_on_ray_from_the_cache(ray_session, tmp_path, monkeypatch):
    """The synthesize stage in an actor pool on Ray: with the in-process run's cached
    answers it sends no request and writes the same shards (a scripted OpenAI-compatible
    server on loopback stands in for the paid LLM API: tests/llm_double.py)."""
    from privatize.ray.cluster import Budget
    from tests.llm_double import ScriptedLLM
    from tests.privatize.test_synthesize_stage import ARTICLES

    (tmp_path / "in").mkdir()
    rows = [{**a, "id": f"art{i}"} for i, a in enumerate(ARTICLES * 3)]
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pools = spy_pools(monkeypatch)
    sized = []  # (blocks the plan knew, the pool's starting size) of every actor map
    real_args = Budget.map_args

    def map_args(self, actor, blocks=None):
        args = real_args(self, actor, blocks)
        if actor:
            sized.append((blocks, args["compute"].min_size, self.max_actors))
        return args

    monkeypatch.setattr(Budget, "map_args", map_args)
    with ScriptedLLM() as llm:
        spec = {"stages": [{"kind": "synthesize", "allow_plaintext": True, "cache": str(tmp_path / "cache"),
                            "llm": {"base_url": llm.url, "model": "scripted"}}], "output": {"num_shards": 2}}
        base = run(parse_spec(spec), tmp_path / "in", tmp_path / "local")
        sent = len(llm.requests)
        got = run(parse_spec(spec), tmp_path / "in", tmp_path / "ray", runner="ray", progress=False, batch_size=2)
        assert len(llm.requests) == sent > 0  # every answer came from the cache
    assert shard_hashes(tmp_path / "ray") == shard_hashes(tmp_path / "local")
    assert got["counts"] == base["counts"] and got["stages"][0]["stats"]["samples"] == base["stages"][0]["stats"][
        "samples"] > 0
    assert ("0_synthesize", True) in pools
    # the pool was sized from the blocks the plan had materialized: never more actors than blocks
    assert sized and all(b is not None and n == max(1, min(b, top)) for b, n, top in sized), sized


def test_synthesis_budget_holds_across_the_actor_pool_on_ray(ray_session, tmp_path):
    """``max_requests`` on Ray: every synthesize actor draws on one ledger, an actor that
    the run's driver owns. A run that needs N requests stops at N - 1 (none kept on disk:
    ``cache: null``), having sent at most N - 1 (a ledger per actor would have let each
    spend N - 1); with N it finishes."""
    from privatize.synthesis.client import BudgetExceeded
    from tests.llm_double import ScriptedLLM
    from tests.privatize.test_synthesize_stage import ARTICLES

    (tmp_path / "in").mkdir()
    rows = [{**a, "id": f"art{i}"} for i, a in enumerate(ARTICLES * 3)]
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def spec(url, **budget):
        return parse_spec({"stages": [{"kind": "synthesize", "allow_plaintext": True, "cache": None, **budget,
                                       "llm": {"base_url": url, "model": "scripted"}}], "output": {"num_shards": 2}})

    with ScriptedLLM() as llm:
        base = run(spec(llm.url), tmp_path / "in", tmp_path / "local")
        need = len(llm.requests)
    with ScriptedLLM() as llm:
        with pytest.raises(BudgetExceeded, match=f"^llm budget: max_requests {need - 1} reached"):
            run(spec(llm.url, max_requests=need - 1), tmp_path / "in", tmp_path / "cut", runner="ray",
                progress=False, batch_size=2)
        assert len(llm.requests) <= need - 1 and not (tmp_path / "cut").exists()
    with ScriptedLLM() as llm:
        got = run(spec(llm.url, max_requests=need), tmp_path / "in", tmp_path / "ray", runner="ray", progress=False,
                  batch_size=2)
        assert len(llm.requests) == need
    assert shard_hashes(tmp_path / "ray") == shard_hashes(tmp_path / "local") and got["counts"] == base["counts"]
