"""Fork safety in one place: a process forked while another thread held one of ort_roi's locks
(or had work under way) continues with only the forking thread, so every lock must start free
in the child and per-thread state must start empty. ``Lock`` / ``RLock`` are such locks;
``in_child`` registers what else a module resets there."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Callable

_locks: "weakref.WeakSet[_ForkSafe]" = weakref.WeakSet()
_resets: list[Callable[[], None]] = []


class _ForkSafe:
    """A lock (``with``, acquire, release) that a forked child gets fresh."""

    def __init__(self, factory: Callable[[], object]):
        self._factory = factory
        self._lock = factory()
        _locks.add(self)

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)

    def acquire(self, *args, **kwargs) -> bool:
        return self._lock.acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock.release()


def Lock() -> _ForkSafe:  # noqa: N802 - reads like threading.Lock
    """A threading.Lock, free again in a forked child."""
    return _ForkSafe(threading.Lock)


def RLock() -> _ForkSafe:  # noqa: N802 - reads like threading.RLock
    """A threading.RLock, free again in a forked child."""
    return _ForkSafe(threading.RLock)


def in_child(reset: Callable[[], None]) -> Callable[[], None]:
    """Run ``reset`` in a forked child (after the locks are fresh); returns it (a decorator)."""
    _resets.append(reset)
    return reset


def _after_fork_in_child() -> None:
    for lock in list(_locks):
        lock._lock = lock._factory()
    for reset in _resets:
        reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
