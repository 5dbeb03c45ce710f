"""JSON request bodies, bounded and checked before a route reads them.

* **Size.** A JSON body over its limit is refused with 413 as soon as its
  ``Content-Length``, or the bytes that have arrived, say so: it is never read whole.
  The limit is ``max_json_body_bytes`` (1 MiB), and ``max_decrypt_bytes`` for
  ``/v1/decrypt``, whose texts are data, not configuration. The corpus upload streams its
  body to storage under its own limits and is not a JSON body.
* **Content.** Python's JSON parser accepts what no other part of the service can hold: a
  lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8, so a row holding one made
  every later list answer 500; ``Infinity``, ``NaN`` and numbers past a double (``1e999``)
  are not JSON, and were stored as such. Both are refused with a 422 naming the field,
  before anything is stored, as is a configuration string longer than
  ``max_json_string_chars``, and a NUL character (``"a\\u0000b"``) in any string:
  PostgreSQL refuses NUL in a text column, so a stored one was a 500.
* **Depth.** Arrays and objects nested deeper than ``max_json_depth`` (64) are refused
  with a 422 before any parser runs: Python's parser recurses, and 5,000 nested arrays
  sent to a route that takes no body were a 500 (``RecursionError``); to one that takes a
  body, FastAPI's "There was an error parsing the body". The depth is counted on the raw
  bytes (brackets outside strings) by :class:`BodyLimitMiddleware`, so no route's parser
  ever sees such a body, with or without a body of its own.
"""

from __future__ import annotations

import json
import math
import re

from services.errors import InvalidRequest, ServiceError

#: routes whose JSON body carries data rather than configuration: (path, method) to the
#: top-level fields exempt from the string bound (the body limit still holds)
LONG_TEXT_FIELDS: dict[tuple[str, str], frozenset[str]] = {("/v1/decrypt", "POST"): frozenset({"text", "texts"})}

#: routes whose body is not JSON (streamed elsewhere, with their own limits)
RAW_BODIES = frozenset({("/v1/corpora", "POST"), ("/v1/models", "POST")})


class BodyTooLarge(ServiceError):
    code = "body_too_large"


class _NotFinite(ValueError):
    pass


def _constant(name: str):
    raise _NotFinite(name)


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _NotFinite(text)
    return v


def _where(loc: list) -> str:
    return ".".join(str(x) for x in loc) or "body"


def _refuse(loc: list, message: str) -> InvalidRequest:
    where = _where(loc)
    return InvalidRequest(f"{where}: {message}", errors=[{"loc": ["body", *loc], "path": where, "message": message}])


def _check_string(s: str, loc: list, max_chars: int | None) -> None:
    if "\x00" in s:
        raise _refuse(loc, f"a NUL character (\\u0000) at character {s.index(chr(0))} is not allowed in text")
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError as e:
            raise _refuse(loc, f"a lone surrogate (\\u{ord(s[e.start]):04x}) at character {e.start} is not "
                               "text") from None
    if max_chars is not None and len(s) > max_chars:
        raise _refuse(loc, f"{len(s):,} characters; at most {max_chars:,} on this service")


#: a JSON string (escapes included), or a bracket outside one
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")

#: the depth a body may have when no settings say otherwise (``max_json_depth``)
MAX_JSON_DEPTH = 64


def check_json_depth(raw: bytes, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`InvalidRequest` if ``raw`` nests arrays and objects deeper than
    ``max_depth``, counted on the bytes (brackets outside strings) without parsing: linear
    in the body, no recursion. Bytes that are not JSON are counted the same way; the
    route's parser says what else is wrong with them."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # cannot be deeper: most bodies stop here
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = 0
    for b in brackets:
        if b == 0x5B or b == 0x7B:  # [ {
            depth += 1
            if depth > max_depth:
                raise _refuse([], f"arrays and objects nested deeper than {max_depth} levels; at most "
                                  f"{max_depth} on this service")
        else:
            depth -= 1


def check_json_body(raw: bytes, *, max_chars: int, long_fields: frozenset[str] = frozenset(),
                    max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`InvalidRequest` naming the first field that holds a lone surrogate, a
    NUL character, a non-finite number or an over-long string (keys count as strings of
    their object), or ``body`` when it nests deeper than ``max_depth``.
    A body that is not JSON at all is left to the route's own parser, which says so."""
    if not raw:
        return
    check_json_depth(raw, max_depth)
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_float)
    except _NotFinite as e:
        # the parser does not say where: find the field by parsing again with a marker
        raise _refuse(_locate_constant(raw), f"{e.args[0]} is not a JSON number (finite numbers only)") from None
    except RecursionError:  # not reached within max_depth; never a 500 if it were
        raise _refuse([], "arrays and objects nested too deep") from None
    except ValueError:
        return
    stack: list[tuple[object, list, int | None]] = [(value, [], max_chars)]
    while stack:
        v, loc, bound = stack.pop()
        if isinstance(v, str):
            _check_string(v, loc, bound)
        elif isinstance(v, dict):
            for k, item in v.items():
                _check_string(k, [*loc, k] if _utf8(k) and "\x00" not in k else loc, max_chars)
                exempt = not loc and k in long_fields
                stack.append((item, [*loc, k], None if exempt else bound))
        elif isinstance(v, list):
            stack.extend((item, [*loc, i], bound) for i, item in enumerate(v))


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


_MARK = "\x00privatize-not-finite\x00"


def _locate_constant(raw: bytes) -> list:
    value = json.loads(raw, parse_constant=lambda _: _MARK,
                       parse_float=lambda t: _MARK if not math.isfinite(float(t)) else float(t))
    stack: list[tuple[object, list]] = [(value, [])]
    while stack:
        v, loc = stack.pop()
        if v is _MARK or v == _MARK:
            return loc
        if isinstance(v, dict):
            stack.extend((item, [*loc, k]) for k, item in v.items())
        elif isinstance(v, list):
            stack.extend((item, [*loc, i]) for i, item in enumerate(v))
    return []


def body_limit(settings, path: str, method: str) -> int | None:
    """The byte limit of a request's body, or None where the route streams it itself."""
    if (path, method) in RAW_BODIES or method not in ("POST", "PUT", "PATCH"):
        return None
    if (path, method) in LONG_TEXT_FIELDS:
        return settings.max_decrypt_bytes + settings.max_json_body_bytes
    return settings.max_json_body_bytes


class BodyLimitMiddleware:
    """Pure ASGI: a body over :func:`body_limit` answers 413 before it is read whole, by its
    ``Content-Length`` or once the bytes received pass the limit. A body within it is read
    here (the route would read it whole anyway); one nested deeper than ``max_json_depth``
    answers 422 (:func:`check_json_depth`) before any route or parser sees it, and any
    other is handed on as it came."""

    def __init__(self, app, settings):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = body_limit(self.settings, scope["path"], scope["method"])
        if limit is None:
            return await self.app(scope, receive, send)
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                return await _too_large(send, limit)
        messages, seen = [], 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break
            seen += len(message.get("body", b""))
            if seen > limit:
                return await _too_large(send, limit)
            if not message.get("more_body", False):
                break
        try:
            check_json_depth(b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request"),
                             self.settings.max_json_depth)
        except InvalidRequest as exc:
            return await _refused(send, exc)

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)


async def _refused(send, exc: InvalidRequest) -> None:
    """422 as ``services.app`` answers an :class:`InvalidRequest` (the middleware runs
    outside the app's exception handlers)."""
    body = json.dumps({"detail": exc.message, "code": exc.code, **exc.extra}).encode()
    await send({"type": "http.response.start", "status": 422,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _too_large(send, limit: int) -> None:
    body = json.dumps({"detail": f"request body over {limit:,} bytes; send less, or raise "
                                 "PRIVATIZE_MAX_JSON_BODY_BYTES", "code": BodyTooLarge.code}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
