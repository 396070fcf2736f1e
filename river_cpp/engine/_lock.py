"""The lock a RiverModel's calls serialize on.

Owns one rule: one thread at a time runs the model, and the thread holding the lock
may take it again (a generation calls forward). It does not decide what to lock:
RiverModel and its streams do.
"""

from __future__ import annotations

import threading


class ModelLock:
    """A reentrant lock that any thread may release.

    A stream takes the lock when it starts and keeps it across its yields; when an
    abandoned stream is garbage-collected, its finalizer may run on another thread,
    which threading.RLock would refuse (and the model would stay locked forever).
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock (waiting for it, unless not `blocking`); whether it was taken."""
        me = threading.get_ident()
        with self._condition:
            while self._owner is not None and self._owner != me:
                if not blocking:
                    return False
                self._condition.wait()
            self._owner = me
            self._depth += 1
            return True

    def release(self) -> None:
        with self._condition:
            if self._depth == 0:
                raise RuntimeError("release of an unlocked ModelLock")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._condition.notify()

    def locked(self) -> bool:
        with self._condition:
            return self._depth > 0

    def __enter__(self) -> ModelLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
