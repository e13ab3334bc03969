"""What an HTTP request may hold, and how ort_roi answers one it refuses: the caps
([`Limits`][ort_roi.scale.Limits]), the error ([`HttpError`][ort_roi.scale.HttpError]), the header
naming its kind (``ERROR_HEADER``) and the Starlette response that carries an answer."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

#: the response header that says which kind of error an ort_roi answer is (absent on 200s
#: and on errors Serve itself answered, e.g. a 500 for a replica lost with the request)
ERROR_HEADER = "X-Ort-Roi-Error"
#: the most JSON strings a body may hold (keys: graph input names, ``shape``, ``data``)
MAX_STRINGS = 1024
_KINDS = {400: "bad-request", 405: "method", 408: "timeout", 415: "content-type",
          500: "model-error", 503: "unavailable"}


@dataclass(frozen=True)
class Limits:
    """What one HTTP request may hold, each checked before the work it would cost; a request
    over one is answered 400 (408 for time) with a message naming the cap.

    Args:
        max_body_bytes: the request body's size, checked on ``Content-Length`` before the
            body is read and again while it streams in (a chunked body). A JSON body of
            short numbers costs its replica up to 11 times its size while it is parsed;
            where the inputs' declared shapes bound the arrays and values a request can
            hold, a body holding more is refused on its bytes first.
        max_depth: how deeply JSON arrays and objects may nest, checked on the bytes before
            they are parsed (a [N, C, H, W] map as nested lists in the body's object: 5).
        max_string_bytes: the bytes of each JSON string (a key: an input's name, ``shape``,
            ``data``), checked on the bytes before they are parsed; a body holds at most
            ``MAX_STRINGS`` strings (a 15 MiB string cost its replica 19 times its size).
        max_boxes: the rows of each boxes input (the graph inputs of [R, 4..6] boxes), checked
            after parsing, before any array is built.
        max_output_bytes: the raw bytes of all outputs (their JSON is 3-5 times as many),
            checked before the model runs where the declared output shapes follow from the
            inputs' (``[R, 5]``), after the run and before encoding otherwise.
        read_timeout_s: how long the body may take to arrive once the request is in (a slow
            client); over it the answer is 408.
    """

    max_body_bytes: int = 16 << 20
    max_depth: int = 32
    max_string_bytes: int = 1024
    max_boxes: int = 10000
    max_output_bytes: int = 64 << 20
    read_timeout_s: float = 10.0


def as_limits(limits: Limits | Mapping[str, Any] | None) -> Limits:
    """The caps a deployment was given, as [`Limits`][ort_roi.scale.Limits].

    Args:
        limits: [`Limits`][ort_roi.scale.Limits], a dict of some of its fields, or None (the
            defaults).

    Returns:
        The [`Limits`][ort_roi.scale.Limits].

    Raises:
        TypeError: a dict naming a field [`Limits`][ort_roi.scale.Limits] does not have.
    """
    if limits is None:
        return Limits()
    if isinstance(limits, Limits):
        return limits
    unknown = set(limits) - {f.name for f in fields(Limits)}
    if unknown:
        raise TypeError(f"unknown limits {sorted(unknown)}: the caps are "
                        f"{[f.name for f in fields(Limits)]}")
    return replace(Limits(), **limits)


class HttpError(Exception):
    """An HTTP answer other than 200 that ort_roi gives: its status, its plain-text message
    and the headers that go with it (``Retry-After`` on a 503, ``Allow`` on a 405).

    Args:
        status: the HTTP status (400, 405, 408, 415, 500, 503).
        message: the body: what was wrong, naming the cap, input or value.
        headers: extra response headers.
    """

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {ERROR_HEADER: _KINDS.get(status, "error"), **(headers or {})}


def bad_request(message: str) -> HttpError:
    """A 400 refusing a request.

    Args:
        message: what is wrong with it (the input, value or cap).

    Returns:
        The [`HttpError`][ort_roi.scale.HttpError] to raise.
    """
    return HttpError(400, f"ort_roi: request: {message}")


def response(status: int, text: str, headers: Mapping[str, str] | None = None) -> Any:
    """The Starlette response carrying an answer: JSON on a 200, plain text otherwise with
    ``ERROR_HEADER`` saying which kind of error.

    Args:
        status: the HTTP status.
        text: the body (the outputs' JSON, or the message).
        headers: extra response headers (they may set ``ERROR_HEADER`` themselves).

    Returns:
        A ``starlette.responses.Response`` (Ray Serve installs Starlette).
    """
    from starlette.responses import Response  # Ray Serve installs it

    if status == 200:
        return Response(text, status_code=200, media_type="application/json")
    headers = {ERROR_HEADER: _KINDS.get(status, "error"), **(headers or {})}
    return Response(text, status_code=status, media_type="text/plain; charset=utf-8",
                    headers=headers)
