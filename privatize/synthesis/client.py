"""An OpenAI-compatible chat-completions client for synthesis: hosted APIs, vLLM, SGLang,
Ollama and ``transformers serve`` all speak ``POST {base_url}/chat/completions``.

* **Concurrent**: at most ``max_in_flight`` requests at once, started at most
  ``requests_per_second`` apart (asyncio and aiohttp, one event loop per call of
  :meth:`ChatClient.complete`; httpx's connection pool cost 20 ms of CPU per request at
  64 in flight, quadratic in the connections).
* **Retried**: 429, 5xx, timeouts and dropped connections are retried with exponential
  backoff (``Retry-After`` honoured), ``max_retries`` times; then the run stops with a
  clear error (what was answered is cached, so a re-run resumes).
* **Cached**: every answer is stored under the SHA-256 of (model, messages, parameters)
  in ``cache_dir`` (written to a temporary name, then renamed), so a re-run or a resumed
  job sends no request twice and, at temperature 0, writes byte-identical output. No
  ``cache_dir``: nothing is kept on disk (the service's jobs).
* **Budgeted**: ``max_requests`` and ``max_tokens`` (prompt plus completion, with each
  request's ``max_tokens`` reserved before it is sent) are kept in the run's ledger: in
  memory in the in-process runner, a Ray actor of the run's driver on Ray, so every
  worker of a run, on any node, draws on one budget; a request that would overspend is
  never sent and the run stops with :class:`BudgetExceeded`.

The API key is a reference (``env:NAME``, ``file:PATH`` or ``keystore:ID``) resolved where
the requests are sent; it is never logged, cached, or part of an error message.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
import threading
from dataclasses import dataclass
from pathlib import Path

from privatize.errors import KeyMaterialError, PrivatizeError

log = logging.getLogger(__name__)

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class LLMError(PrivatizeError, RuntimeError):
    """The LLM server failed a request for good (after the retries, or a 4xx)."""


class BudgetExceeded(PrivatizeError, RuntimeError):
    """A request would go over the run's ``max_requests`` or ``max_tokens``."""


@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int
    tokens_out: int
    cached: bool


def resolve_api_key(ref: str | None, base_dir: str | None = None, resolver=None) -> str | None:
    """``env:NAME`` -> that environment variable; ``file:PATH`` -> the file's first line
    (relative to ``base_dir``); ``keystore:ID`` -> the ``api-key`` key of the process's key
    store (through ``resolver``, a :class:`~privatize.keys.KeyResolver`); None -> no key
    (a local server)."""
    if not ref:
        return None
    scheme, _, rest = ref.partition(":")
    if scheme == "keystore" and rest:
        from privatize.keys import KeyResolver

        try:
            km = (resolver or KeyResolver(base_dir)).resolve(ref, expect=("api-key",))
        except KeyMaterialError as exc:
            raise KeyMaterialError(f"llm.api_key: {exc}") from None
        return km.secret.decode("ascii")
    if scheme == "env" and rest:
        value = os.environ.get(rest)
        if not value:
            raise KeyMaterialError(f"llm.api_key: the environment variable {rest} is not set")
        return value
    if scheme == "file" and rest:
        path = Path(rest) if os.path.isabs(rest) or not base_dir else Path(base_dir) / rest
        try:
            value = path.read_text(encoding="utf-8").strip().splitlines()[0].strip()
        except (OSError, IndexError):
            raise KeyMaterialError(f"llm.api_key: cannot read a key from {rest}") from None
        return value
    raise KeyMaterialError("llm.api_key: a reference is env:NAME, file:PATH or keystore:ID")


def request_key(model: str, messages: list[dict], params: dict) -> str:
    """The cache key of one request: SHA-256 of its canonical JSON."""
    body = json.dumps({"model": model, "messages": messages, "params": params}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class Ledger:
    """A run's spending so far (requests sent, tokens reserved or used), in memory: the
    in-process runner's ledger, and, as a Ray actor (:func:`start_run_ledger`), the one
    every worker of a Ray run draws on, on any node."""

    def __init__(self, max_requests: int | None, max_tokens: int | None):
        self.max_requests, self.max_tokens = max_requests, max_tokens
        self.state = {"requests": 0, "tokens": 0}
        self._lock = threading.Lock()

    def try_reserve(self, tokens: int) -> str | None:
        """Count one request and reserve ``tokens``; or, when that would overspend, leave
        the ledger as it is and return why."""
        with self._lock:
            st = self.state
            if self.max_requests is not None and st["requests"] + 1 > self.max_requests:
                return f"llm budget: max_requests {self.max_requests} reached ({st['requests']} sent); raise it to go on"
            if self.max_tokens is not None and st["tokens"] + tokens > self.max_tokens:
                return (f"llm budget: max_tokens {self.max_tokens} would be exceeded ({st['tokens']} used, the next "
                        f"request may take {tokens}); raise it to go on")
            st["requests"] += 1
            st["tokens"] += tokens
            return None

    def settle(self, reserved: int, used: int) -> None:
        """Replace a request's reservation by the tokens it used."""
        with self._lock:
            self.state["tokens"] += used - reserved

    def spent(self) -> dict:
        with self._lock:
            return dict(self.state)


class _Spending:
    """A ledger as the client's requests use it: in this process, or a Ray run's ledger
    actor (its answers awaited, so the requests in flight are not held up)."""

    def __init__(self, ledger: Ledger | None = None, actor=None):
        self.ledger, self.actor = ledger, actor

    async def reserve(self, tokens: int) -> None:
        why = self.ledger.try_reserve(tokens) if self.actor is None else await self.actor.try_reserve.remote(tokens)
        if why:
            raise BudgetExceeded(why)

    async def settle(self, reserved: int, used: int) -> None:
        if self.actor is None:
            self.ledger.settle(reserved, used)
        else:
            await self.actor.settle.remote(reserved, used)


def ledger_name(run: str, settings_json: str) -> str:
    """The Ray actor name of one stage's ledger in one run."""
    return f"privatize-llm-budget-{run}-{hashlib.sha256(settings_json.encode()).hexdigest()[:12]}"


def start_run_ledger(name: str, max_requests: int | None, max_tokens: int | None):
    """The Ray runner's driver starts each budgeted stage's ledger (an actor it owns, so
    it lives as long as the run) before any stage is set up; it kills it at the end."""
    import ray

    return ray.remote(Ledger).options(name=name, num_cpus=0, max_restarts=0).remote(max_requests, max_tokens)


def run_ledger(name: str | None, max_requests: int | None, max_tokens: int | None):
    """The ledger a client of this process draws on: the run's ledger actor when the
    Ray runner started one (every worker of the run shares it), else one in memory."""
    if max_requests is None and max_tokens is None:
        return None  # nothing to keep
    if name:
        import ray

        if ray.is_initialized():
            try:
                return _Spending(actor=ray.get_actor(name))
            except ValueError:  # not started: the in-process runner (beside some Ray session)
                pass
    return _Spending(Ledger(max_requests, max_tokens))


class ChatClient:
    """Chat completions against ``base_url`` for one run; see the module docstring."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None, cache_dir: Path | None,
                 temperature: float = 0.0,
                 max_tokens: int = 512, timeout_s: float = 60.0, max_in_flight: int = 16,
                 requests_per_second: float | None = None, max_retries: int = 5, backoff_s: float = 0.5,
                 max_requests: int | None = None, max_total_tokens: int | None = None, ledger: str | None = None):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self._key = api_key
        self.params = {"temperature": temperature, "max_tokens": max_tokens}
        self.timeout_s, self.max_in_flight = timeout_s, max_in_flight
        self.interval = 1.0 / requests_per_second if requests_per_second else 0.0
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        # one ledger per run: every process of the run draws on it; a later run starts afresh
        self.ledger = run_ledger(ledger, max_requests, max_total_tokens)
        self.stats = {"requests": 0, "cached": 0, "retries": 0, "tokens_in": 0, "tokens_out": 0}

    def __getstate__(self) -> dict:  # never pickled with its key
        state = dict(self.__dict__)
        state["_key"] = None
        return state

    def __repr__(self) -> str:
        return f"ChatClient({self.url!r}, model={self.model!r})"

    # -- cache ------------------------------------------------------------------------

    def _cache_path(self, key: str) -> Path:
        return self.cache_dir / "responses" / key[:2] / f"{key}.json"

    def _cached(self, key: str) -> Completion | None:
        if self.cache_dir is None:
            return None
        p = self._cache_path(key)
        if not p.is_file():
            return None
        r = json.loads(p.read_text(encoding="utf-8"))
        return Completion(r["text"], r["tokens_in"], r["tokens_out"], cached=True)

    def _store(self, key: str, c: Completion) -> None:
        if self.cache_dir is None:
            return
        p = self._cache_path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"text": c.text, "tokens_in": c.tokens_in, "tokens_out": c.tokens_out},
                                  ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, p)

    # -- requests ---------------------------------------------------------------------

    def complete(self, conversations: list[list[dict]]) -> list[Completion]:
        """One answer per conversation (a list of ``{"role", "content"}``), in order."""
        keys = [request_key(self.model, m, self.params) for m in conversations]
        out: list[Completion | None] = [self._cached(k) for k in keys]
        todo = [i for i, c in enumerate(out) if c is None]
        self.stats["cached"] += len(conversations) - len(todo)
        if todo:
            for i, c in zip(todo, asyncio.run(self._send_all([conversations[i] for i in todo],
                                                             [keys[i] for i in todo]))):
                out[i] = c
        return out  # type: ignore[return-value]

    async def _send_all(self, conversations: list[list[dict]], keys: list[str]) -> list[Completion]:
        import aiohttp

        limit = asyncio.Semaphore(self.max_in_flight)
        pace = asyncio.Lock()
        last = [0.0]
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}

        async def one(session, messages, key) -> Completion:
            async with limit:
                if self.interval:
                    async with pace:
                        wait = last[0] + self.interval - time.monotonic()
                        if wait > 0:
                            await asyncio.sleep(wait)
                        last[0] = time.monotonic()
                c = await self._send(session, messages, headers)
                self._store(key, c)
                return c

        connector = aiohttp.TCPConnector(limit=self.max_in_flight)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            tasks = [asyncio.create_task(one(session, m, k)) for m, k in zip(conversations, keys)]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise

    async def _send(self, session, messages: list[dict], headers: dict) -> Completion:
        import aiohttp

        reserve = self.params["max_tokens"] + _estimate_tokens(messages)
        if self.ledger is not None:
            try:
                await self.ledger.reserve(reserve)
            except BudgetExceeded as e:
                if self.cache_dir is None:
                    raise
                raise BudgetExceeded(f"{e} (answers so far are cached)") from None
        body = {"model": self.model, "messages": messages, **self.params}
        for attempt in range(self.max_retries + 1):
            delay = self.backoff_s * (2 ** attempt)
            try:
                async with session.post(self.url, json=body, headers=headers) as r:
                    status, text, after = r.status, await r.text(), r.headers.get("Retry-After")
            except (asyncio.TimeoutError, aiohttp.ClientError) as e:
                problem = type(e).__name__
            else:
                if status == 200:
                    c = _completion(text)
                    if self.ledger is not None:
                        await self.ledger.settle(reserve, c.tokens_in + c.tokens_out)
                    self.stats["requests"] += 1
                    self.stats["tokens_in"] += c.tokens_in
                    self.stats["tokens_out"] += c.tokens_out
                    return c
                if status not in RETRY_STATUS:
                    raise LLMError(f"llm: {self.url} answered HTTP {status}: {_short(text)}")
                problem = f"HTTP {status}"
                if after and after.replace(".", "", 1).isdigit():
                    delay = max(delay, float(after))
            if attempt == self.max_retries:
                raise LLMError(f"llm: {self.url} failed {self.max_retries + 1} times ({problem})"
                               + ("; answers so far are cached, a re-run resumes" if self.cache_dir else ""))
            self.stats["retries"] += 1
            log.info("llm: %s, retry %d in %.2fs", problem, attempt + 1, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


def _estimate_tokens(messages: list[dict]) -> int:
    """A prompt's tokens, over-estimated (a token is rarely under 3 bytes) for the budget."""
    return sum(len(m.get("content", "").encode("utf-8")) for m in messages) // 3 + 8 * len(messages)


def _completion(body: str) -> Completion:
    try:
        data = json.loads(body)
        text = data["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError):
        raise LLMError(f"llm: the answer is not a chat completion: {_short(body)}") from None
    usage = data.get("usage") or {}
    return Completion(text, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0), False)


def _short(text: str, n: int = 200) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[:n] + "..."
