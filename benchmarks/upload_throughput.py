"""Corpus upload throughput through the service, and the service's memory while it runs.

A 1 GiB JSONL corpus (``privatize make-corpus`` output repeated) is uploaded over
loopback to a real service process (uvicorn, SQLite, local storage) with the streaming
client of ``privatize submit``; the time runs until the service has answered 201, so it
covers receiving, hashing, writing, validating and renaming the file. The service's
resident memory is read from ``/proc`` before, during (peak) and after.

Baselines in the same run, on the same bytes: a bare TCP transfer over loopback into a
file on the same disk (what the service does, minus HTTP, hashing and validation), and
a plain file copy. Median of ``--repeats`` runs each.

    python benchmarks/upload_throughput.py [--gib 1] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, machine, save_result  # noqa: E402  (puts the project on sys.path)

GiB = 1 << 30


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, KiB."""
    vals = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            vals[k] = int(v.split()[0])
    return vals["VmRSS"], vals["VmHWM"]


def upload_measured(client, pid: int, path: Path, name: str):
    """Upload, sampling the service's RSS every 20 ms: (corpus, seconds, peak KiB, after KiB)."""
    peak = [rss_kib(pid)[0]]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_kib(pid)[0])
            time.sleep(0.02)

    th = threading.Thread(target=sample)
    th.start()
    t0 = time.perf_counter()
    corpus = client.upload_corpus(path, name=name)
    dt = time.perf_counter() - t0
    stop.set()
    th.join()
    time.sleep(0.5)
    after = rss_kib(pid)[0]
    client.delete_corpus(corpus["id"])
    return corpus, dt, peak[0], after


def make_file(path: Path, size: int) -> int:
    from privatize.corpus import make_corpus

    seed = path.with_suffix(".seed.jsonl")
    make_corpus(seed, n_docs=20000, seed=11)
    block = seed.read_bytes()
    seed.unlink()
    written = 0
    with open(path, "wb") as fh:
        while written < size:
            fh.write(block)
            written += len(block)
    return written


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def socket_baseline(src: Path, dest: Path) -> float:
    """Seconds to send ``src`` over loopback TCP into ``dest`` (1 MiB reads and writes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def receive():
        conn, _ = srv.accept()
        with conn, open(dest, "wb") as out:
            while True:
                b = conn.recv(1 << 20)
                if not b:
                    break
                out.write(b)
            out.flush()
            os.fsync(out.fileno())

    t = threading.Thread(target=receive)
    t.start()
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as c, open(src, "rb") as fh:
        c.sendfile(fh)
    t.join()
    dt = time.perf_counter() - t0
    srv.close()
    dest.unlink()
    return dt


def copy_baseline(src: Path, dest: Path) -> float:
    t0 = time.perf_counter()
    shutil.copyfile(src, dest)
    with open(dest, "rb") as fh:
        os.fsync(fh.fileno())
    dt = time.perf_counter() - t0
    dest.unlink()
    return dt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    base = Path(tempfile.mkdtemp(prefix="upload-bench-", dir=os.environ.get("BENCH_TMP", "/tmp")))
    data = base / "data"
    src = base / "corpus.jsonl"
    size = make_file(src, int(args.gib * GiB))
    print(f"corpus: {size / 1e6:.0f} MB JSONL at {src}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PRIVATIZE_DATA_DIR": str(data),
           "PRIVATIZE_MASTER_KEY_FILE": str(base / "master.key"),
           # no Ray needed to upload: point at nothing and poll rarely
           "PRIVATIZE_RAY_ADDRESS": "http://127.0.0.1:9", "PRIVATIZE_POLL_INTERVAL_S": "3600",
           "PRIVATIZE_DEFAULT_STORAGE_LIMIT_BYTES": str(64 * GiB), "PRIVATIZE_LOG_LEVEL": "WARNING"}
    py = sys.executable
    subprocess.run([py, "-m", "services.cli", "admin", "master-key", "new", "--out", str(base / "master.key")],
                   env=env, check=True, capture_output=True, cwd=ROOT)
    tok = json.loads(subprocess.run([py, "-m", "services.cli", "admin", "tenant", "create", "bench"], env=env,
                                    check=True, capture_output=True, text=True, cwd=ROOT).stdout)["token"]
    port = free_port()
    log = open(base / "service.log", "wb")
    proc = subprocess.Popen([py, "-m", "services.cli", "serve", "--port", str(port)], env=env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    from services.client import ServiceClient

    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(200):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        time.sleep(1.0)
        rss_before, _ = rss_kib(proc.pid)
        with ServiceClient(url, tok, timeout=3600) as client:
            # first a quarter of the bytes: a flat service peaks at the same RSS for both
            small = base / "quarter.jsonl"
            with open(src, "rb") as fh:
                head = fh.read(size // 4)
            small.write_bytes(head[:head.rfind(b"\n") + 1])
            _, _, peak_small, _ = upload_measured(client, proc.pid, small, "quarter")
            small.unlink()
            times, peaks, afters = [], [], []
            for i in range(args.repeats):
                corpus, dt, peak, after = upload_measured(client, proc.pid, src, f"run{i}")
                assert corpus["bytes"] == size
                times.append(dt)
                peaks.append(peak)
                afters.append(after)
                print(f"  run {i}: {size / dt / 1e6:.0f} MB/s, {corpus['records']} records, "
                      f"RSS peak {peak / 1024:.0f} MiB")
        sock = [socket_baseline(src, base / "sock.out") for _ in range(args.repeats)]
        copy = [copy_baseline(src, base / "copy.out") for _ in range(args.repeats)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()

    t_svc, t_sock, t_copy = statistics.median(times), statistics.median(sock), statistics.median(copy)
    mbps = size / t_svc / 1e6
    res = {
        "bytes": size, "service_mb_s": round(mbps, 1), "socket_baseline_mb_s": round(size / t_sock / 1e6, 1),
        "copy_baseline_mb_s": round(size / t_copy / 1e6, 1),
        "ratio_to_socket": round(t_sock / t_svc, 3), "ratio_to_copy": round(t_copy / t_svc, 3),
        "rss_mib_before": round(rss_before / 1024), "rss_mib_peak": round(max(peaks) / 1024),
        "rss_mib_after": round(max(afters) / 1024), "rss_mib_peak_quarter_size": round(peak_small / 1024),
        "repeats": args.repeats, "machine": machine(),
    }
    print(json.dumps(res))
    save_result("upload_throughput", res)
    print(f"service upload: {mbps:.0f} MB/s (target >= 100), {res['ratio_to_socket']:.2f}x a bare loopback "
          f"socket into a file ({res['socket_baseline_mb_s']:.0f} MB/s), {res['ratio_to_copy']:.2f}x a file copy "
          f"({res['copy_baseline_mb_s']:.0f} MB/s); service RSS {res['rss_mib_before']} MiB before, "
          f"{res['rss_mib_peak']} MiB peak ({res['rss_mib_peak_quarter_size']} MiB peak for a quarter of the bytes), "
          f"{res['rss_mib_after']} MiB after")
    shutil.rmtree(base, ignore_errors=True)
    return 0 if mbps >= 100 else 1


if __name__ == "__main__":
    sys.exit(main())
