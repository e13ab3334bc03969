"""The HTTP client of an ort_roi endpoint: [`Client`][ort_roi.scale.Client] retries what may be
retried (503, 408, 429, Serve's own 5xx, a failed connection), boundedly;
[`Reply`][ort_roi.scale.Reply] is what it got."""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import urllib.parse
from typing import Any, Mapping, NamedTuple

import numpy as np

from .limits import ERROR_HEADER


class Reply(NamedTuple):
    """What [`Client.post`][ort_roi.scale.Client.post] got: the last answer, and how it got there.

    Attributes:
        status: the HTTP status of the last answer (0: the connection failed each time).
        text: its body (the outputs' JSON on a 200, the message otherwise).
        attempts: tries made (1: answered at once).
        history: what each failed try got: a status, or the connection error's name.
    """

    status: int
    text: str
    attempts: int
    history: tuple


class Client:
    """A client of an ort_roi HTTP endpoint that retries what may be retried, boundedly.

    Inference is idempotent, so a request is sent again after: 503 (overloaded or a replica
    lost; after its ``Retry-After``), 408 (the request was not done within the service's
    timeout), 429, a 5xx that Serve itself answered (no ``X-Ort-Roi-Error`` header: the
    replica holding the request was lost) and a failed connection. A 400 (bad request,
    naming the input or cap), 405, 415 and a 500 from the model (``X-Ort-Roi-Error:
    model-error``) are answers, never retried. Waits grow from ``backoff_s``, doubling,
    jittered, at most ``max_wait_s``; no retry starts after ``deadline_s``. One keep-alive
    connection per thread.

    Args:
        url: the endpoint, ``http://127.0.0.1:8000/roi``.
        attempts: tries per request, the first included.
        backoff_s: the wait before the second try.
        max_wait_s: the longest wait between tries (a longer ``Retry-After`` is cut to it).
        timeout_s: the socket timeout of one try.
        deadline_s: no try starts this long after the first.
        retry_statuses: the statuses retried (besides Serve's own 5xx).
    """

    def __init__(self, url: str, *, attempts: int = 6, backoff_s: float = 0.1,
                 max_wait_s: float = 2.0, timeout_s: float = 60.0, deadline_s: float = 120.0,
                 retry_statuses: tuple = (408, 429, 503)):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"Client: an http:// URL, got {url!r}")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/"
        self.attempts, self.backoff_s, self.max_wait_s = attempts, backoff_s, max_wait_s
        self.timeout_s, self.deadline_s = timeout_s, deadline_s
        self.retry_statuses = tuple(retry_statuses)
        self._local = threading.local()

    def send(self, body: bytes) -> tuple[int, dict, bytes]:
        """One POST of ``body``, no retry.

        Args:
            body: the JSON body.

        Returns:
            (status, headers with lower-case names, body).

        Raises:
            OSError, http.client.HTTPException: the connection failed.
        """
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port,
                                                                 timeout=self.timeout_s)
        try:
            conn.request("POST", self.path, body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self._local.conn = None
            conn.close()
            raise
        headers = {k.lower(): v for k, v in r.getheaders()}
        if headers.get("connection", "").lower() == "close":
            self._local.conn = None
            conn.close()
        return r.status, headers, data

    def retryable(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether an answer may be retried.

        Args:
            status: its HTTP status.
            headers: its headers (lower-case names).

        Returns:
            True for the retried statuses and for Serve's own 5xx.
        """
        return status in self.retry_statuses or (
            status >= 500 and ERROR_HEADER.lower() not in headers)

    def post(self, feed: Mapping[str, Any] | bytes) -> Reply:
        """POST one request, retrying as the class says.

        Args:
            feed: graph input name -> array (or nested lists), or the JSON body's bytes.

        Returns:
            The last status and body, the tries and what failed before, as a
            [`Reply`][ort_roi.scale.Reply].
        """
        body = feed if isinstance(feed, (bytes, bytearray)) else json.dumps(
            {k: np.asarray(v).tolist() for k, v in feed.items()}).encode()
        start, history = time.monotonic(), []
        status, text = 0, ""
        for attempt in range(1, self.attempts + 1):
            wait = self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            try:
                status, headers, data = self.send(body)
            except (OSError, http.client.HTTPException) as e:
                status, text = 0, f"{type(e).__name__}: {e}"
                history.append(type(e).__name__)
            else:
                text = data.decode("utf-8", "replace")
                if not self.retryable(status, headers):
                    return Reply(status, text, attempt, tuple(history))
                history.append(status)
                after = headers.get("retry-after", "")
                if after.isdigit():
                    wait = max(wait, float(after))
            wait = min(wait, self.max_wait_s)
            if attempt == self.attempts or time.monotonic() + wait - start > self.deadline_s:
                break
            time.sleep(wait)
        return Reply(status, text, len(history), tuple(history))
