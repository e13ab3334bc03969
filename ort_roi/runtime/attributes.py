"""The attribute text onnxruntime-extensions hands a Python op, read back as typed values.

Float attributes arrive as text with 6 significant digits; ``parse_float`` recovers the
model's float32 value: exactly through the front door's tokens (``FloatTokens``: stand-ins
written into its copy of the graph, one per attribute of each node, held while the session
lives), else the likeliest float32 (1/k, or the nearest to the decimal). ``parse_attrs``
reads a node's attribute text by its op's spec (what the bridge calls on every run).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .. import forksafe
from ..errors import RoiOpError
from ..spec import OpSpec


def _g6(x: float) -> str:
    return "%g" % x  # what onnxruntime prints for a float attribute


#: The most tokens live at once: their 6-digit text is -1nnnnne+30, n in 1..TOKEN_SLOTS.
TOKEN_SLOTS = 99999
_tokens: dict[np.float32, np.float32] = {}  # token value -> exact float32 value
_free: list[int] = []  # released token numbers, reused first
_issued = 0  # token numbers 1.._issued have been handed out
_token_lock = forksafe.RLock()  # reentrant: a release may run from gc while it is held


def _token(n: int) -> np.float32:
    return np.float32(-float(f"1{n:05d}e25"))


class FloatTokens:
    """The float tokens of one front-door session: stand-ins for float attribute values that
    survive the bridge's 6-digit text exactly.

    Called with a value, it hands out a token of its own (negative, about -1e30, never a
    valid scale), one per attribute of each node, so the attribute text also names the node.
    The front door writes them into its in-memory copy of the model; ``parse_float`` maps
    them back to the exact float32. ``release`` (the front door calls it when its onnxruntime
    session is gone) frees them for reuse; a live session's tokens are never handed out again.
    """

    def __init__(self) -> None:
        self.held: list[int] = []

    def __call__(self, value: float) -> float:
        """A new token for ``value``.

        Args:
            value: a float attribute's value.
        Returns:
            The token, as the float to write into the attribute.
        """
        global _issued
        with _token_lock:
            if _free:
                n = _free.pop()
            elif _issued < TOKEN_SLOTS:
                _issued += 1
                n = _issued
            else:
                raise RoiOpError("ort_roi", "float attributes",
                                 f"the live front-door sessions hold {TOKEN_SLOTS} float "
                                 f"attributes, the most they can; close some sessions")
            _tokens[_token(n)] = np.float32(value)
            self.held.append(n)
        return float(_token(n))

    def release(self) -> None:
        """Free this session's tokens (call once its onnxruntime session is gone)."""
        with _token_lock:
            for n in self.held:
                _tokens.pop(_token(n), None)
            _free.extend(self.held)
            self.held = []
            _parsed.clear()  # cached attribute text may hold the tokens just freed
            _resolved.clear()


def tokens_held() -> int:
    """How many float tokens live front-door sessions hold.

    Returns:
        The number of tokens handed out and not yet released.
    """
    with _token_lock:
        return len(_tokens)


def parse_float(text: str) -> np.float32:
    """The float32 a model most likely holds, given onnxruntime's 6-significant-digit text.

    Front-door tokens map back exactly. Otherwise 1/k (k an integer) wins when it prints as
    ``text`` (scales like 1/7 and 1/16), else the float32 nearest the decimal (0.7).
    """
    v = float(text)
    f = np.float32(v)
    exact = _tokens.get(f)
    if exact is not None:
        return exact
    if v > 0 and np.isfinite(v):
        k = round(1.0 / v)
        if k >= 1:
            cand = np.float32(1.0 / k)
            if _g6(float(cand)) == _g6(float(f)) == _g6(v):
                return cand
    return f


_parsed: dict = {}  # (spec name, domain, attribute text) -> typed values


def parse_attrs(spec: OpSpec, text: Mapping[str, str]) -> dict[str, Any]:
    """Attribute text from onnxruntime -> typed values (validated later by the kernel)."""
    key = (spec.name, spec.domain, tuple(text.items()))
    out = _parsed.get(key)
    if out is None:
        out = _parse_attrs(spec, text)
        if len(_parsed) < 1024:
            _parsed[key] = out
    return dict(out)


_resolved: dict = {}  # the same key -> the attributes resolved, or None (refused)


def resolved_attrs(spec: OpSpec, text: Mapping[str, str]) -> dict[str, Any] | None:
    """A node's attributes as its kernel resolves them (``parse_attrs``, then
    ``spec.resolve``: defaults filled, values checked), once per node text; None where they
    are refused (the kernel, called with ``parse_attrs``, then says why). The small path's
    attributes (``Op.small``); the dict is shared: do not change it."""
    key = (spec.name, spec.domain, tuple(text.items()))
    try:
        return _resolved[key]
    except KeyError:
        pass
    try:
        out = spec.resolve(parse_attrs(spec, text))
    except RoiOpError:
        out = None
    if len(_resolved) < 1024:
        _resolved[key] = out
    return out


def _parse_attrs(spec: OpSpec, text: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in spec.attrs:
        if a.name not in text:
            continue
        s = text[a.name]
        try:
            if a.type is int:
                out[a.name] = int(s)
            elif a.type is float:
                out[a.name] = float(parse_float(s))
            else:
                out[a.name] = s
        except ValueError:
            raise RoiOpError(spec.name, f"attribute '{a.name}'",
                             f"cannot be read as {a.type.__name__}: {s!r}") from None
    return out
