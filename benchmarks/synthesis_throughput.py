"""The synthesize stage's LLM client against a local OpenAI-compatible server that answers
after a fixed delay (issue 20): does it keep ``max_in_flight`` requests busy?

The server runs in a child process (a threading HTTP server: every request waits
``--delay`` seconds, then answers a fixed chat completion). The client
(:class:`privatize.synthesis.client.ChatClient`, what the stage calls) sends ``--requests``
distinct prompts with ``max_in_flight`` 1, 16 and 64, nothing cached; the ideal rate is
``in_flight / delay``. Goal: >= 90% of it at 64 in flight. With ``--delay 0`` the figure is
the client's own cost per request (the server's included). The client process is pinned
to one core (``--cores 2``: not pinned).

``--budget``: the cost of a run's spending ledger at 64 in flight, the same requests sent
with no budget, with ``max_requests`` kept in memory (the in-process runner) and kept by
the Ray actor a Ray run's driver starts (every request awaits two calls to it); the
ratio to the unbudgeted rate is the figure.

``--ray-data-llm``: the same requests through Ray Data's LLM support instead
(``ray.data.llm.HttpRequestProcessorConfig`` and ``build_processor``: a Dataset of
prompts, an HTTP request stage of ``--concurrency`` actors sending ``batch_size`` requests
each), against the stage's client at 64 in flight, both on an embedded Ray of ``--cores``
CPUs: the measurement behind the stage not using it (its docstring).

    python benchmarks/synthesis_throughput.py [--delay 0.2] [--requests 1280] [--cores 1] [--budget]
        [--ray-data-llm]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import machine, save_result

SERVER = r"""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
delay = float(sys.argv[1])
BODY = json.dumps({"id": "x", "object": "chat.completion", "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "Score: 0.7"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 3}}).encode()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        if delay: time.sleep(delay)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
class S(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
s = S(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--requests", type=int, default=1280)
    ap.add_argument("--cores", type=int, default=1, choices=[1, 2])
    ap.add_argument("--budget", action="store_true", help="measure the spending ledger's cost instead")
    ap.add_argument("--ray-data-llm", action="store_true", help="compare with ray.data.llm's HTTP processor")
    args = ap.parse_args()
    if args.budget:
        return budget(args)
    if args.ray_data_llm:
        return ray_data_llm(args)

    from privatize.synthesis.client import ChatClient

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.delay)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    if args.cores == 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    results = {}
    try:
        print(f"# {machine()}; server delay {args.delay * 1000:.0f} ms, {args.requests} requests, client on "
              f"{args.cores} core(s)")
        print(f"{'in flight':>9} {'requests/s':>11} {'ideal':>9} {'share':>7} {'client CPU s/request':>21}")
        for flight in (1, 16, 64):
            n = args.requests if flight > 1 else min(args.requests, 50 if args.delay else args.requests)
            with tempfile.TemporaryDirectory() as tmp:
                client = ChatClient(f"http://127.0.0.1:{port}/v1", "m", api_key=None, cache_dir=Path(tmp),
                                    max_in_flight=flight, max_tokens=16)
                convs = [[{"role": "user", "content": f"prompt {flight}-{i}"}] for i in range(n)]
                c0, t0 = time.process_time(), time.perf_counter()
                client.complete(convs)
                secs, cpu = time.perf_counter() - t0, time.process_time() - c0
            rate = n / secs
            ideal = flight / args.delay if args.delay else float("inf")
            share = rate / ideal if args.delay else float("nan")
            results[flight] = {"rate": rate, "ideal": ideal, "share": share, "cpu_per_request": cpu / n}
            print(f"{flight:>9} {rate:11.1f} {ideal:9.1f} {share:7.1%} {1000 * cpu / n:18.2f} ms")
        if args.delay:
            ok = results[64]["share"] >= 0.9
            print(f"goal >= 90% of the ideal rate at 64 in flight: {'met' if ok else 'NOT met'}")
        print(json.dumps({"delay": args.delay, "cores": args.cores, "results": results}))
        save_result("synthesis_throughput", {"machine": machine(), "delay": args.delay, "cores": args.cores,
                                             "results": results})
    finally:
        server.terminate()
        server.wait()


def ray_data_llm(args) -> None:
    import ray
    import ray.data
    from ray.data.llm import HttpRequestProcessorConfig, build_processor

    from privatize.synthesis.client import ChatClient

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.delay)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    url = f"http://127.0.0.1:{port}/v1"
    ray.init(num_cpus=args.cores, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    rates = {}
    try:
        print(f"# {machine()}; server delay {args.delay * 1000:.0f} ms, {args.requests} requests, Ray of "
              f"{args.cores} CPU(s)")
        client = ChatClient(url, "m", api_key=None, cache_dir=None, max_in_flight=64, max_tokens=16)
        convs = [[{"role": "user", "content": f"prompt client {i}"}] for i in range(args.requests)]
        t0 = time.perf_counter()
        client.complete(convs)
        rates["stage client, 64 in flight"] = args.requests / (time.perf_counter() - t0)
        for conc, batch in ((1, 64), (args.cores, 64)):
            cfg = HttpRequestProcessorConfig(url=f"{url}/chat/completions", concurrency=conc, batch_size=batch)
            proc = build_processor(cfg, preprocess=lambda row: {"payload": {
                "model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": row["prompt"]}]}},
                postprocess=lambda row: {"answer": row["http_response"]["choices"][0]["message"]["content"]})
            ds = ray.data.from_items([{"prompt": f"prompt rdl {conc} {i}"} for i in range(args.requests)])
            t0 = time.perf_counter()
            out = proc(ds).take_all()
            secs = time.perf_counter() - t0
            assert len(out) == args.requests and all(r["answer"] == "Score: 0.7" for r in out)
            rates[f"ray.data.llm, {conc} actor(s) x batch {batch}"] = args.requests / secs
        base = rates["stage client, 64 in flight"]
        for name, rate in rates.items():
            print(f"{name:>38}: {rate:8.1f} requests/s ({rate / base:.2f}x the stage's client)")
        print(json.dumps({"delay": args.delay, "cores": args.cores, "rates": rates}))
        save_result("synthesis_throughput-ray_data_llm", {"machine": machine(), "delay": args.delay,
                                                          "cores": args.cores, "rates": rates})
    finally:
        server.terminate()
        server.wait()
        ray.shutdown()


def budget(args) -> None:
    import ray

    from privatize.synthesis.client import ChatClient, start_run_ledger

    server = subprocess.Popen([sys.executable, "-c", SERVER, str(args.delay)], stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    if args.cores == 1:  # (after Ray's own processes started, on every core)
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    cap = 10 * args.requests
    handle = start_run_ledger("bench-ledger", cap, None)
    ray.get(handle.spent.remote())
    rates = {}
    try:
        print(f"# {machine()}; server delay {args.delay * 1000:.0f} ms, {args.requests} requests at 64 in flight, "
              f"client on {args.cores} core(s)")
        for name, extra in (("no budget", {}), ("ledger in memory", {"max_requests": cap}),
                            ("ledger actor (Ray)", {"max_requests": cap, "ledger": "bench-ledger"})):
            client = ChatClient(f"http://127.0.0.1:{port}/v1", "m", api_key=None, cache_dir=None, max_in_flight=64,
                                max_tokens=16, **extra)
            convs = [[{"role": "user", "content": f"prompt {name} {i}"}] for i in range(args.requests)]
            t0 = time.perf_counter()
            client.complete(convs)
            rates[name] = args.requests / (time.perf_counter() - t0)
            print(f"{name:>20}: {rates[name]:8.1f} requests/s, {rates[name] / rates['no budget']:.3f}x unbudgeted")
        spent = ray.get(handle.spent.remote())
        assert spent["requests"] == args.requests, spent  # the actor counted every request it let through
        print(json.dumps({"delay": args.delay, "cores": args.cores, "rates": rates}))
        save_result("synthesis_throughput-budget", {"machine": machine(), "delay": args.delay,
                                                          "cores": args.cores, "rates": rates})
    finally:
        server.terminate()
        server.wait()
        ray.shutdown()


if __name__ == "__main__":
    main()
