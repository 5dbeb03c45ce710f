"""A scripted OpenAI-compatible chat-completions server on loopback: a labelled **test
double** at the paid-LLM-API boundary (the project does not own the LLM). It answers
``POST /v1/chat/completions`` from a script, so tests know every expected output:

* the association prompt (it contains ``E1: <a>`` / ``E2: <b>``) gets ``Score: <x>`` with
  ``x = scores[(a, b)]`` (default 0.9), or, for a pair in ``broken``, an answer without
  a score;
* the entity-list prompt gets ``- <e>`` lines for each entity token in the article;
* a description, QA or relation prompt gets an answer naming its entities (QA in the
  ``Q:``/``A:`` format).

It records every request (body and headers) and can fail on purpose: ``faults`` maps a
request number (1-based, counted over all requests) to an HTTP status (429, 500, 503...) or ``"timeout"``
(it then answers only after ``hang_s``); ``delay_s`` delays every answer (a slow model)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PAIR = re.compile(r"^E1: (.+)\nE2: (.+)$", re.MULTILINE)
_TOKEN = re.compile(r"[A-Z][A-Za-z0-9]*_\[[A-Za-z0-9+/_-]+={0,2}\]")
_LIST = re.compile(r"(?:relate to each other|relate): (.+?)\. ")
_ENTITY = re.compile(r'describe the entity "(.+?)"')


class ScriptedLLM:
    def __init__(self, scores: dict | None = None, broken: set | None = None, faults: dict | None = None,
                 hang_s: float = 2.0, delay_s: float = 0.0):
        self.scores = scores or {}
        self.broken = broken or set()
        self.faults = faults or {}
        self.hang_s = hang_s
        self.delay_s = delay_s
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with double.lock:
                    double.requests.append({"body": body, "auth": self.headers.get("Authorization")})
                    n = len(double.requests)
                fault = double.faults.get(n)
                time.sleep(double.delay_s)
                if fault == "timeout":
                    time.sleep(double.hang_s)
                elif isinstance(fault, int):
                    self.send_response(fault)
                    self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(b'{"error": "scripted"}')
                    return
                text = double.answer(body["messages"][-1]["content"])
                out = json.dumps({"id": f"c{n}", "object": "chat.completion", "model": body["model"],
                                  "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                               "finish_reason": "stop"}],
                                  "usage": {"prompt_tokens": len(body["messages"][-1]["content"].split()),
                                            "completion_tokens": len(text.split())}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def answer(self, prompt: str) -> str:
        pair = _PAIR.search(prompt)
        if pair:
            a, b = pair.group(1), pair.group(2)
            if (a, b) in self.broken:
                return "Causal Relationship: unclear. I cannot give a number."
            return f"Causal Relationship between {a} and {b}: related.\n\nScore: {self.scores.get((a, b), 0.9)}"
        if prompt.startswith("List the salient entities"):
            article = prompt.split("Article:\n", 1)[1]
            return "\n".join(f"- {t}" for t in dict.fromkeys(_TOKEN.findall(article)))
        m = _ENTITY.search(prompt)
        if m:
            return f"{m.group(1)} appears in the article and matters to it."
        m = _LIST.search(prompt)
        if m:
            ents = m.group(1).split(", ")
            if prompt.startswith("Using only the article below, write question-answer pairs"):
                return f"Q: How are {ents[0]} and {ents[1]} connected?\nA: {' and '.join(ents)} work together."
            return f"{' and '.join(ents)} depend on each other in the article."
        return "I do not know."

    def prompts(self) -> list[str]:
        return [m["content"] for r in self.requests for m in r["body"]["messages"]]

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
