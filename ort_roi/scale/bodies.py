"""Reading a request body that may be hostile: the body read with its size and time capped
([`read_body`][ort_roi.scale.read_body]), then its JSON refused on the bytes, before any parsing,
where it holds too many or too long strings, nests too deeply, holds more than the model's inputs
can or holds literals that are not numbers, and parsed strictly (``loads``)."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import numpy as np

from .limits import MAX_STRINGS, HttpError, Limits, bad_request

_CHUNK = 1 << 20
_NEST = np.zeros(256, np.int8)
_NEST[[ord("["), ord("{")]] = 1
_NEST[[ord("]"), ord("}")]] = -1
_LETTER = np.zeros(256, bool)  # letters outside strings: only a number's exponent is one
_LETTER[[c for c in range(128) if chr(c).isalpha() and chr(c) not in "eE"]] = True


_NUMBERS = b"0123456789.,:-+eE \t\n\r"  # what a body of numbers is mostly made of


def _scan_json(body: bytes, max_depth: int,
               most: tuple[int, int] | None = None) -> None:
    """Refuse, on the bytes and before any parsing, JSON nested deeper than ``max_depth``,
    holding more arrays or values than ``most`` = (arrays, values) the model's inputs can
    hold (a body of a million empty lists costs 25 times its size and seconds to parse, one
    of short numbers 11 times its size) and literals that are not numbers (``true``,
    ``false``, ``null``, ``NaN``, ``Infinity``), outside strings.
    Numbers, commas, colons and blanks are dropped first (``bytes.translate``: in valid JSON
    none follows an escaping backslash, so strings keep their bounds), which leaves a body of
    numbers a few hundred bytes of brackets and keys; the rest is scanned with NumPy in
    chunks of 1 MiB (bounded memory). Where it finds something the body itself is scanned
    again, to name the byte."""
    rest = body.translate(None, _NUMBERS)
    if _scan(rest, max_depth) is None:
        if most is not None:
            for what, n, cap in (("arrays", rest.count(b"["), most[0]),
                                 ("values", body.count(b",") + 1, most[1])):
                if n > cap:
                    raise bad_request(f"the JSON holds {n} {what}; the model's inputs hold "
                                      f"at most {cap} (their declared shapes, max_boxes "
                                      "boxes)")
        return
    kind, at = _scan(body, max_depth) or ("?", 0)
    if kind == "depth":
        raise bad_request(f"the JSON nests deeper than the cap max_depth={max_depth} (at "
                          f"byte {at}); graph inputs are nested lists of their rank")
    left = at
    while left > 0 and body[left - 1:left].isalpha():
        left -= 1
    word = re.match(rb"[A-Za-z]*", body[left:left + 32]).group().decode() or "?"
    raise bad_request(f"{word!r} at byte {left} is not a number: graph inputs hold numbers "
                      "(JSON's true, false and null, NaN and Infinity are refused)")


def _check_strings(body: bytes, max_bytes: int) -> None:
    """Refuse, on the bytes and before any parsing, a body holding more than ``MAX_STRINGS``
    JSON strings or a string longer than ``max_bytes`` (what is inside its quotes). The
    quotes are counted in C (``bytes.count``); at most ``2 * MAX_STRINGS`` of them are then
    walked, each one's preceding backslashes counted on the stretch since the last quote
    (``rstrip``, in C): a quote after an odd run of them is escaped."""
    quotes = body.count(b'"')
    if quotes > 2 * MAX_STRINGS:
        raise bad_request(f"the JSON holds {quotes} quote characters, over the {MAX_STRINGS} "
                          "strings a body may hold (its keys: graph input names, shape, data)")
    start, last, at = -1, 0, body.find(b'"')
    while at >= 0:
        if start < 0:
            start = at + 1
        else:
            if at - start > max_bytes:
                raise bad_request(f"the JSON string at byte {start - 1} holds at least "
                                  f"{at - start} bytes, over the cap max_string_bytes="
                                  f"{max_bytes}")
            seg = body[last:at]  # the stretch since the last quote: under max_bytes
            if (len(seg) - len(seg.rstrip(b"\\"))) % 2 == 0:  # not escaped: it closes
                start = -1
        last, at = at + 1, body.find(b'"', at + 1)
    if start >= 0 and len(body) - start > max_bytes:
        raise bad_request(f"the JSON string at byte {start - 1} holds {len(body) - start} "
                          f"bytes (unterminated), over the cap max_string_bytes={max_bytes}")


def _scan(body: bytes, max_depth: int) -> tuple[str, int] | None:
    """("depth" or "literal", byte) of the first nesting over ``max_depth`` or letter (other
    than an exponent's) outside strings; None when there is none."""
    depth, inside, run = 0, 0, 0  # carried between chunks: nesting, in a string, backslashes
    for start in range(0, len(body), _CHUNK):
        b = np.frombuffer(body, np.uint8, count=min(_CHUNK, len(body) - start), offset=start)
        quote = b == 34
        backslash = b == 92
        if run or backslash.any():  # a quote after an odd run of backslashes is escaped
            idx = np.arange(len(b))
            last = np.maximum.accumulate(np.where(backslash, -1, idx))
            before = np.empty(len(b), np.int64)
            before[0] = run
            before[1:] = idx[:-1] - last[:-1] + np.where(last[:-1] < 0, run, 0)
            quote &= before % 2 == 0
            run = len(b) - 1 - last[-1] + (run if last[-1] < 0 else 0)
        toggles = np.cumsum(quote, dtype=np.int32) + inside
        outside = (toggles & 1 == 0) & ~quote
        inside = int(toggles[-1] & 1)
        level = depth + np.cumsum(_NEST[b] * outside, dtype=np.int32)
        letters = _LETTER[b] & outside
        deep = int(np.argmax(level > max_depth)) if level.max() > max_depth else len(b)
        word = int(np.argmax(letters)) if letters.any() else len(b)
        if min(deep, word) < len(b):
            return ("depth", start + deep) if deep < word else ("literal", start + word)
        depth = int(level[-1])
    return None


def _object(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(ValueError):
    pass


def _constant(word: str) -> None:
    raise ValueError(f"the literal {word} is not a number")


def loads(body: bytes, limits: Limits, most: tuple[int, int] | None = None) -> Any:
    """The JSON of ``body``, refused over the caps or when it is not strict JSON: UTF-8, no
    duplicate keys, numbers only where numbers go.

    Args:
        body: the request's body.
        limits: the caps (``max_body_bytes``, ``max_string_bytes``, ``max_depth``).
        most: (arrays, values) the model's inputs can hold at most, refused on the bytes
            beyond; None where a declared dimension is open.

    Returns:
        The parsed JSON.

    Raises:
        HttpError: 400, naming the cap or what is not strict JSON.
    """
    if len(body) > limits.max_body_bytes:
        raise bad_request(f"the body is {len(body)} bytes, over the cap max_body_bytes="
                          f"{limits.max_body_bytes}")
    if not body.strip():
        raise bad_request("the body is empty; send a JSON object (graph input name -> nested "
                          "lists)")
    _check_strings(body, limits.max_string_bytes)
    _scan_json(body, limits.max_depth, most)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_request(f"the body is not UTF-8 text: {e}") from e
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except _Duplicate as e:
        raise bad_request(f"the key {e.args[0]!r} appears twice in one JSON object") from e
    except ValueError as e:
        raise bad_request(f"the request body is not JSON: {e}") from e
    except RecursionError as e:  # _scan_json refuses this first; kept as the backstop
        raise bad_request(f"the JSON nests too deeply (cap max_depth={limits.max_depth})") from e


async def read_body(request: Any, limits: Limits | None = None) -> bytes:
    """The body of a Starlette request to an ort_roi endpoint, checked on the way in.

    Args:
        request: the ``starlette.requests.Request`` (what Ray Serve hands a deployment).
        limits: the caps (``max_body_bytes``, ``read_timeout_s``); defaults if None.

    Returns:
        The body's bytes.

    Raises:
        HttpError: 405 for a method other than POST, 415 for a content type other than
            ``application/json``, 400 for a ``Content-Length`` over ``max_body_bytes`` (the
            body unread) or a body that grows over it while it streams in (reading stops),
            408 for a body that has not arrived within ``read_timeout_s``.
    """
    limits = limits or Limits()
    if request.method != "POST":
        raise HttpError(405, f"ort_roi: request: method {request.method} is not allowed; "
                        "POST a JSON object", {"Allow": "POST"})
    kind = request.headers.get("content-type", "")
    if kind.split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, "ort_roi: request: the content type must be application/json, "
                        f"got {kind or 'none'!r}")
    length = request.headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise bad_request(f"Content-Length {length!r} is not a number")
        if int(length) > limits.max_body_bytes:
            raise bad_request(f"the body is {int(length)} bytes (Content-Length), over the cap "
                              f"max_body_bytes={limits.max_body_bytes}")

    chunks, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise bad_request(f"the body grew over the cap max_body_bytes="
                                  f"{limits.max_body_bytes} while it was read ({size} bytes "
                                  "so far)")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise HttpError(408, f"ort_roi: request: the body did not arrive within "
                        f"read_timeout_s={limits.read_timeout_s} ({size} bytes came)",
                        {"Connection": "close"}) from None
    return b"".join(chunks)
