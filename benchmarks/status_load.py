"""Job-status polling under load: 100 concurrent clients, 5 requests/s each, 30 s, over
loopback, against a real service (uvicorn, SQLite, local storage, its embedded Ray
head). Target: 0 errors, p99 <= 50 ms.

The load comes from a separate process (this script with ``--generate``): one
keep-alive connection per client, requests on a fixed schedule (wrk2's model), and the
latency counted from the *scheduled* send time, so a stalled server cannot hide its
queueing (no coordinated omission). What is polled: ``GET /v1/jobs/{id}`` with a
bearer token (token lookup, tenant check, the job and its corpus from the database) for
a job that has run. Baseline in the same run, same load: ``GET /healthz`` (no token, no
database): the ratio says what authentication and the database cost at this load.

With ``--training`` it also trains a tiny model on the job's output through the service
and polls ``GET /v1/trainings/{id}`` under the same load (issue 36: a training poll costs
at most 2x a job poll, with 50 clients).

    python benchmarks/status_load.py [--clients 100] [--rate 5] [--seconds 30]
    python benchmarks/status_load.py --clients 50 --training
    python benchmarks/status_load.py --in-process   # the two polls' cost, in this process

``--in-process`` times the training and job polls through FastAPI's TestClient (no
network, no load), alternating blocks: the ratio of the two without the load test's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def _client(host: str, port: int, request: bytes, start: float, period: float, offset: float, end: float,
                  out: list, errors: list) -> None:
    """One keep-alive HTTP/1.1 connection sending ``request`` on a fixed schedule. Plain
    asyncio streams, not an HTTP client library: the generator must cost far less CPU
    than the server it loads (both share this machine's cores)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        k = 0
        while True:
            due = start + offset + k * period
            if due >= end:
                return
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                writer.write(request)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                done = time.perf_counter()
                if status != 200:
                    errors.append(f"HTTP {status}")
                out.append(done - due)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
                errors.append(type(exc).__name__)
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
            k += 1
    finally:
        writer.close()


async def _generate(url: str, token: str | None, clients: int, rate: float, seconds: float) -> dict:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    request = f"GET {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n{auth}\r\n".encode()
    lat: list[float] = []
    errors: list[str] = []
    start = time.perf_counter() + 0.5
    end = start + seconds
    period = 1.0 / rate
    await asyncio.gather(*(_client(u.hostname, u.port, request, start, period, i * period / clients, end, lat, errors)
                           for i in range(clients)))
    elapsed = time.perf_counter() - start
    ms = [x * 1000 for x in lat]
    return {"requests": len(lat) + len(errors), "errors": len(errors), "error_kinds": sorted(set(errors))[:5],
            "rps": round(len(lat) / elapsed, 1), "p50_ms": round(pct(ms, 0.50), 2),
            "p95_ms": round(pct(ms, 0.95), 2), "p99_ms": round(pct(ms, 0.99), 2), "max_ms": round(max(ms), 2),
            "mean_ms": round(statistics.fmean(ms), 2)}


def generate(url: str, token: str | None, clients: int, rate: float, seconds: float) -> dict:
    """Run the load generator in its own process; its JSON summary."""
    env = {**os.environ, "BENCH_TOKEN": token or ""}  # not on the command line
    r = subprocess.run([sys.executable, __file__, "--generate", url, "--clients", str(clients), "--rate", str(rate),
                        "--seconds", str(seconds)], env=env, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of a process and its child processes (the uvicorn
    workers), from Linux /proc."""
    total = 0.0
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    for p in (pid, *kids):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measured(proc: subprocess.Popen, url: str, token: str | None, args) -> dict:
    """One load run, with the server process's CPU time per request."""
    before = cpu_seconds(proc.pid)
    res = generate(url, token, args.clients, args.rate, args.seconds)
    res["server_cpu_ms_per_request"] = round((cpu_seconds(proc.pid) - before) * 1000 / max(1, res["requests"]), 3)
    return res


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def in_process(blocks: int = 12, per_block: int = 200) -> dict:
    """The two polls timed in this process (FastAPI's TestClient, no network, no load): a
    succeeded training's row, alternating blocks of requests to ``GET /v1/trainings/{id}``
    and ``GET /v1/jobs/{id}``; the median block's mean latency of each (the first two blocks
    of each are warm-up), and their ratio: what the training route costs over the job
    route's, without the load test's noise."""
    from fastapi.testclient import TestClient

    from services.app import create_app
    from services.db import make_engine, session_factory, session_scope
    from services.models import Job
    from services.settings import Settings
    from services.tenants import create_tenant

    tmp = Path(tempfile.mkdtemp(prefix="status-inproc-"))
    settings = Settings(env="development", data_dir=tmp / "data", ray_address="http://127.0.0.1:9",
                        poll_interval_s=600)
    times: dict[str, list[float]] = {"trainings": [], "jobs": []}
    with TestClient(create_app(settings)) as client:
        engine = make_engine(settings.effective_database_url)
        with session_scope(session_factory(engine)) as s:
            tenant, _, token = create_tenant(s, "bench", storage_limit_bytes=1 << 30, max_concurrent_jobs=4)
            job = Job(tenant_id=tenant.id, kind="train", status="succeeded", spec={"kind": "pretrain"},
                      spec_sha256="0" * 64, key_ids=[], output_path="x",
                      counts={"steps": 10, "final_loss": 2.5, "tokens": 1000, "kind": "pretrain"})
            s.add(job)
            s.flush()
            jid = job.id
        client.headers["Authorization"] = f"Bearer {token}"
        for what in times:
            r = client.get(f"/v1/{what}/{jid}")
            assert r.status_code == 200, r.text
        for b in range(blocks):
            for what in ("trainings", "jobs") if b % 2 == 0 else ("jobs", "trainings"):
                t0 = time.perf_counter()
                for _ in range(per_block):
                    client.get(f"/v1/{what}/{jid}")
                times[what].append((time.perf_counter() - t0) / per_block * 1e3)
        engine.dispose()
    tr, jb = (statistics.median(times[w][2:]) for w in ("trainings", "jobs"))
    return {"mode": "in_process", "blocks": blocks, "per_block": per_block, "training_poll_ms": round(tr, 3),
            "job_poll_ms": round(jb, 3), "training_over_job": round(tr / jb, 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--rate", type=float, default=5.0, help="requests/s per client")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=2, help="API processes (privatize serve --workers)")
    ap.add_argument("--training", action="store_true", help="also poll a succeeded training")
    ap.add_argument("--in-process", action="store_true", help="time the training and job polls in this process "
                                                              "only (no server, no load)")
    ap.add_argument("--generate", metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_process:
        res = {"machine": machine(), **in_process()}
        print(json.dumps(res))
        save_result("status_load_in_process", res)
        return 0
    if args.generate:
        res = asyncio.run(_generate(args.generate, os.environ.get("BENCH_TOKEN") or None, args.clients, args.rate,
                                    args.seconds))
        print(json.dumps(res))
        return 0

    import httpx

    from privatize.corpus import make_corpus

    base = Path(tempfile.mkdtemp(prefix="status-bench-", dir=os.environ.get("BENCH_TMP", "/tmp")))
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PRIVATIZE_DATA_DIR": str(base / "data"),
           "PRIVATIZE_MASTER_KEY_FILE": str(base / "master.key"), "PRIVATIZE_RAY_NUM_CPUS": "1",
           "PRIVATIZE_RAY_TEMP_DIR": tempfile.mkdtemp(prefix="pvb-", dir="/tmp"),
           "PRIVATIZE_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "INFO"), "RAY_USAGE_STATS_ENABLED": "0"}
    for k in ("PRIVATIZE_RAY_ADDRESS", "PRIVATIZE_DATABASE_URL", "PRIVATIZE_STORAGE_URI"):
        env.pop(k, None)

    def cli(*a: str) -> str:
        return subprocess.run([py, "-m", "services.cli", *a], env=env, check=True, capture_output=True, text=True,
                              cwd=ROOT).stdout

    cli("admin", "master-key", "new", "--out", str(base / "master.key"))
    token = json.loads(cli("admin", "tenant", "create", "bench").strip().splitlines()[-1])["token"]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(base / "service.log", "wb")
    proc = subprocess.Popen([py, "-m", "services.cli", "serve", "--port", str(port), "--workers", str(args.workers)], env=env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise SystemExit(f"service not ready; see {base / 'service.log'}")
        h = {"Authorization": f"Bearer {token}"}
        make_corpus(base / "corpus.jsonl", n_docs=200, seed=1)
        corpus = httpx.post(f"{url}/v1/corpora", params={"filename": "corpus.jsonl"}, headers=h, timeout=60,
                            content=(base / "corpus.jsonl").read_bytes()).json()
        key = httpx.post(f"{url}/v1/keys", json={"kind": "vigenere"}, headers=h, timeout=60).json()
        job = httpx.post(f"{url}/v1/jobs", headers=h, timeout=60, json={
            "corpus_id": corpus["id"], "spec": {"version": 1, "stages": [{"kind": "encrypt_text",
                                                                         "key": key["ref"]}]}}).json()
        while (st := httpx.get(f"{url}/v1/jobs/{job['id']}", headers=h, timeout=60).json())["status"] not in \
                ("succeeded", "failed", "cancelled"):
            time.sleep(0.5)
        assert st["status"] == "succeeded", st
        training = None
        if args.training:
            training = httpx.post(f"{url}/v1/trainings", headers=h, timeout=60, json={
                "job_id": job["id"], "config": {"version": 1, "kind": "pretrain", "model": {"preset": "tiny"},
                                                "tokenizer": {"vocab_size": 512}, "data": {"seq_len": 32},
                                                "optim": {"max_steps": 4, "batch_size": 4}}}).json()
            while (st := httpx.get(f"{url}/v1/trainings/{training['id']}", headers=h, timeout=60).json())[
                    "status"] not in ("succeeded", "failed", "cancelled"):
                time.sleep(1)
            assert st["status"] == "succeeded", st
        time.sleep(2)
        idle0 = cpu_seconds(proc.pid)
        time.sleep(5)
        idle = (cpu_seconds(proc.pid) - idle0) / 5
        print(f"service idle CPU: {idle * 100:.1f}% of a core")
        print(f"service up (pid {proc.pid}); {args.clients} clients x {args.rate:g} req/s x {args.seconds:g} s")
        base_res = measured(proc, f"{url}/healthz", None, args)
        print(f"  baseline GET /healthz:       {json.dumps(base_res)}")
        res = measured(proc, f"{url}/v1/jobs/{job['id']}", token, args)
        print(f"  GET /v1/jobs/{{id}} (token):  {json.dumps(res)}")
        if training is not None:
            tres = measured(proc, f"{url}/v1/trainings/{training['id']}", token, args)
            print(f"  GET /v1/trainings/{{id}}:     {json.dumps(tres)}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        subprocess.run([py, "-m", "services.cli", "admin", "ray", "stop"], env=env, capture_output=True, cwd=ROOT)

    ok = res["errors"] == 0 and res["p99_ms"] <= 50
    summary = {"machine": machine(), "clients": args.clients, "rate_per_client": args.rate, "seconds": args.seconds,
               "status_p99_ms": res["p99_ms"], "status_p50_ms": res["p50_ms"], "errors": res["errors"],
               "achieved_rps": res["rps"], "baseline_healthz_p99_ms": base_res["p99_ms"],
               "p99_ratio_to_healthz": round(res["p99_ms"] / base_res["p99_ms"], 2) if base_res["p99_ms"] else None,
               "target": "0 errors, p99 <= 50 ms", "met": ok}
    if training is not None:
        ratio = {k: round(tres[k] / res[k], 2) if res[k] else None
                 for k in ("p50_ms", "p99_ms", "server_cpu_ms_per_request")}
        t_ok = tres["errors"] == 0 and ratio["p50_ms"] is not None and ratio["p50_ms"] <= 2 and \
            ratio["server_cpu_ms_per_request"] <= 2
        summary.update(training_p50_ms=tres["p50_ms"], training_p99_ms=tres["p99_ms"],
                       training_errors=tres["errors"],
                       training_server_cpu_ms_per_request=tres["server_cpu_ms_per_request"],
                       job_server_cpu_ms_per_request=res["server_cpu_ms_per_request"],
                       training_over_job=ratio, training_target="training poll <= 2x a job poll", training_met=t_ok)
        ok = ok and t_ok
    print(json.dumps(summary))
    save_result("status_load", summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
