"""A request body read and parsed as untrusted input: bounded in size and nesting, strict JSON, text that
encodes, then validated into its protocol model. Every way a body can be bad is an APIError (400, or 413 for
size), never an exception that reaches the server's catch-all.

Python's json module alone lets through what fails later, far from the request: integers of thousands of
digits (int() refuses them past sys.get_int_max_str_digits), nesting deep enough for a RecursionError,
NaN/Infinity (not JSON), numbers that overflow to inf, and lone surrogates from \\ud800 escapes (they cannot
be encoded as UTF-8 when the text reaches the tokenizer).
"""
from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ..errors import APIError
from ..executors import Pool
from .base import Limits, ProtocolModel, parse

MAX_DEPTH = 32         # an OpenAI request nests 4-5 levels (messages, content parts); tools schemas a few more
MAX_INT_DIGITS = 40    # more than a uint64 seed needs; past this an integer is an error, not a slow int()


class _Refused(ValueError):
    """A JSON value the parser's hooks refuse; json.loads passes it through as itself."""


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"a number out of the range of a double ({text[:20]}...)" if len(text) > 20
                       else f"a number out of the range of a double ({text})")
    return value


def _constant(name: str) -> float:
    raise _Refused(f"{name} (not a JSON value)")


def parse_json(raw: bytes) -> Any:
    """The JSON value in `raw`, or APIError(400) saying what is wrong and, for bad text, where."""
    try:
        value = json.loads(raw, parse_int=_integer, parse_float=_float, parse_constant=_constant)
    except _Refused as e:
        raise APIError(400, f"the request body is not acceptable JSON: {e}") from None
    except RecursionError:
        raise APIError(400, f"the request body nests deeper than {MAX_DEPTH} levels") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(400, f"the request body is not valid JSON: {e}") from None
    _check_tree(value)
    return value


def _check_tree(value: Any) -> None:
    """Depth and text of every node, iteratively (a recursive walk is what deep nesting would break)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise APIError(400, f"the request body nests deeper than {MAX_DEPTH} levels", param=path or None)
        if isinstance(node, str):
            _check_text(node, path)
        elif isinstance(node, dict):
            for key, item in node.items():
                _check_text(key, path)
                stack.append((item, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(node))


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise APIError(400, f"a string holds a lone surrogate ({text[e.start:e.end]!r} at index {e.start}): "
                            "not valid Unicode text", param=path[:200] or None) from None


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request's body, read at most `max_bytes` far (413 past that)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and (len(declared) > 18 or int(declared) > max_bytes):  # (no int() of 5,000 digits)
        raise _too_large(max_bytes)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(max_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        raise APIError(400, "the client disconnected before the whole body arrived") from None
    return b"".join(chunks)


async def read_json(request: Request, max_bytes: int, pool: Pool) -> Any:
    """The request's JSON body (read_body), parsed by parse_json (a large one in `pool`, the route's kind of
    work: server/executors.py)."""
    data = await read_body(request, max_bytes)
    if len(data) > _PARSE_ON_LOOP_BYTES:  # a large body's parse and checks take long: not on the event loop
        return await pool.run(parse_json, data)
    return parse_json(data)


_PARSE_ON_LOOP_BYTES = 64 * 1024


async def read_request(request: Request, limits: Limits, model: type[ProtocolModel], *args: Any,
                       pool: Pool) -> tuple[Any, list[str]]:
    """The body read as read_json does, then validated as `model` and converted (protocol_base.parse) in `pool`'s
    threads (the route's kind of work): a grammar compiles, an infill prompt is tokenized there. Returns it and
    its unknown fields."""
    data = await read_body(request, limits.max_request_bytes)
    if len(data) > _PARSE_ON_LOOP_BYTES:  # (its JSON parse in the same job as its checks: one admission, one hop)
        return await pool.run(_parse_request, data, model, limits, *args)
    return await pool.run(parse, model, parse_json(data), limits, *args)


def _parse_request(data: bytes, model: type[ProtocolModel], limits: Limits, *args: Any) -> tuple[Any, list[str]]:
    return parse(model, parse_json(data), limits, *args)


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"the request body is larger than {max_bytes} bytes (--max-request-bytes)",
                    code="request_too_large")
