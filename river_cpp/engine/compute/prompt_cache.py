"""A prompt cache across requests: the KV states of earlier sequences, kept by their token
ids, so that a request that begins as an earlier one did (the same document, the same
chat so far) loads the longest such prefix instead of computing it again.

RAM first, within a byte budget, least recently used evicted; optionally a disk tier
in a folder (by default the cache folder's prompt-cache/), each entry one file written
atomically (a temporary file, then a rename) and checked when read: a truncated,
damaged or foreign file is skipped with a warning, never trusted. Owns the entries and
their files; what a state holds is the backbone's (state_key, prefix_state,
restore_prefix): river-cpp's graph saves every layer's K and V (the river's rows
share the cache, so they travel with it), llama.cpp's context its sequence state.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
from collections import OrderedDict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Protocol, Sequence, Union

import numpy as np

from river_cpp.engine.compute.backbone import common_prefix

log = logging.getLogger(__name__)

DEFAULT_RAM_BYTES = 2 << 30  # llama-cpp-python's LlamaRAMCache default
DEFAULT_DISK_BYTES = 8 << 30
MIN_TOKENS = 16  # shorter sequences are not worth an entry
_MAGIC = b"RVPC"
_VERSION = 1
# magic, version, key length, number of ids, state bytes, sha256 of (key, ids, state)
_HEADER = struct.Struct("<4sIIQQ32s")


# Entries serve only requests of the scope they were saved in (the server's: a hash of the
# client's API key, unless it shares the cache); "" outside any.
_scope: ContextVar[str] = ContextVar("river_cpp_prompt_cache_scope", default="")


@contextmanager
def cache_scope(scope: str) -> Iterator[None]:
    """Within this block, prompt caches save and restore only entries of `scope` (never
    the secret itself: it is written to disk with the entries; pass a hash)."""
    token = _scope.set(str(scope))
    try:
        yield
    finally:
        _scope.reset(token)


def current_scope() -> str:
    """The scope cache_scope set for this thread's (or task's) calls; "" outside one."""
    return _scope.get()


def _key(backbone: StatefulBackbone) -> str:
    scope = _scope.get()
    return backbone.state_key() + (f"\0scope={scope}" if scope else "")


class StatefulBackbone(Protocol):
    """What a backbone offers the prompt cache."""

    def state_key(self) -> str:
        """What a saved state is valid for: the weights, and how the cache is laid out."""
        ...

    def prefix_state(self) -> tuple[list[int], bytes]:
        """The longest leading part of the cached sequence that a cold prefill of its ids
        would compute the same way, and its state."""
        ...

    def restore_prefix(self, ids: Sequence[int], state: bytes) -> None:
        """Make the cache hold `ids`, from what prefix_state returned for them."""
        ...

    def rewind(self, n_past: int) -> None:
        """Keep the first n_past positions."""
        ...

    @property
    def rewinds_anywhere(self) -> bool:
        """Whether a restored state can be cut at any position without running it again
        (a KV cache); a recurrent state holds only its end, so only an entry that the
        prompt continues whole saves it any work."""
        ...


@dataclass
class _Entry:
    key: str
    ids: np.ndarray  # int32
    state: Optional[bytes]  # None: on disk only, not loaded
    path: Optional[Path] = None

    @property
    def nbytes(self) -> int:
        return (len(self.state) if self.state is not None else 0) + self.ids.nbytes


class PromptCache:
    """KV states of earlier sequences by token prefix: RAM within `ram_bytes` (least
    recently used evicted), and with `disk` (a folder, or True: the cache folder's
    prompt-cache/) a disk tier within `disk_bytes` that outlives the process.

    One cache may serve several models: an entry is used only by a backbone with the
    same state_key. Thread-safe. RiverModel(prompt_cache=...) and Llama.set_cache use it.
    """

    def __init__(
        self,
        ram_bytes: int = DEFAULT_RAM_BYTES,
        *,
        disk: Union[None, bool, str, os.PathLike] = None,
        disk_bytes: int = DEFAULT_DISK_BYTES,
        min_tokens: int = MIN_TOKENS,
    ) -> None:
        for name, value in (("ram_bytes", ram_bytes), ("disk_bytes", disk_bytes), ("min_tokens", min_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        self.ram_bytes, self.disk_bytes, self.min_tokens = ram_bytes, disk_bytes, min_tokens
        if disk is True:
            from river_cpp.engine.files.cache import cache_dir

            disk = cache_dir() / "prompt-cache"
        self.disk: Optional[Path] = Path(disk) if disk not in (None, False) else None
        self._ram: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._disk: Optional[dict[Path, _Entry]] = None  # read on first use
        self._next = 0
        self._lock = threading.RLock()
        self.hits = 0  # lookups that restored a prefix
        self.reused_tokens = 0  # positions those restored

    # ---------------------------------------------------------------- sizes

    @property
    def ram_used(self) -> int:
        """Bytes of the states held in RAM."""
        return sum(e.nbytes for e in self._ram.values())

    def __len__(self) -> int:
        return len(self._ram)

    def clear(self) -> None:
        """Forget every entry in RAM (files on disk stay)."""
        with self._lock:
            self._ram.clear()

    # ---------------------------------------------------------------- use

    def longest(self, backbone: StatefulBackbone, ids: Sequence[int], *, cached: int) -> int:
        """The positions of `ids` that restore() would leave `backbone` holding; a query
        that loads nothing."""
        with self._lock:
            return self._best(backbone, ids, cached)[1]

    def restore(self, backbone: StatefulBackbone, ids: Sequence[int], *, cached: int) -> int:
        """Load into `backbone` the longest cached prefix of `ids` (at most len(ids) - 1
        positions) when it is longer than the `cached` positions the backbone already
        holds of them; the positions of `ids` the backbone then holds."""
        with self._lock:
            best, best_n = self._best(backbone, ids, cached)
            if best is None:
                return cached
            state = self._state_of(best)
            if state is None:  # a damaged file: skipped
                return cached
            backbone.restore_prefix(best.ids.tolist(), state)
            backbone.rewind(best_n)
            self.hits += 1
            self.reused_tokens += best_n
        return best_n

    def _best(self, backbone: StatefulBackbone, ids: Sequence[int], cached: int) -> tuple[Optional[_Entry], int]:
        """The entry sharing the longest prefix with `ids` (at most len(ids) - 1) when it
        beats the `cached` positions, and that length; (None, cached) otherwise. A
        backbone that cannot cut a restored state takes only entries `ids` holds whole."""
        limit = len(ids) - 1
        best, best_n = None, cached
        if limit <= max(cached, 0):
            return best, best_n
        query = np.asarray(ids, dtype=np.int32)
        whole_only = not backbone.rewinds_anywhere
        for entry in self._candidates(_key(backbone)):
            n = min(common_prefix(entry.ids, query), limit)
            if n > best_n and not (whole_only and n < len(entry.ids)):
                best, best_n = entry, n
        return best, best_n

    def save(self, backbone: StatefulBackbone) -> None:
        """Keep what `backbone` holds now (its prefix_state), unless an entry already
        holds it whole; an entry it extends is replaced."""
        ids, state = backbone.prefix_state()
        if len(ids) < self.min_tokens or not state:
            return
        key = _key(backbone)
        query = np.asarray(ids, dtype=np.int32)
        with self._lock:
            for handle, entry in list(self._ram.items()):
                if entry.key != key:
                    continue
                common = common_prefix(entry.ids, query)
                if common == len(query):  # already held (perhaps longer)
                    self._ram.move_to_end(handle)
                    return
                if common == len(entry.ids):  # the new sequence extends it
                    del self._ram[handle]
            entry = _Entry(key, query, state)
            if entry.nbytes <= self.ram_bytes:
                self._ram[self._next] = entry
                self._next += 1
                while self.ram_used > self.ram_bytes:
                    self._ram.popitem(last=False)
            if self.disk is not None and entry.nbytes <= self.disk_bytes:
                self._write(entry)

    # ---------------------------------------------------------------- RAM and disk

    def _candidates(self, key: str) -> list[_Entry]:
        ram = [e for e in self._ram.values() if e.key == key]
        if self.disk is None:
            return ram
        return ram + [e for e in self._disk_index().values() if e.key == key]

    def _state_of(self, entry: _Entry) -> Optional[bytes]:
        """The entry's state: from RAM (marked used), or read from its file and checked."""
        for handle, held in self._ram.items():
            if held is entry:
                self._ram.move_to_end(handle)
                return entry.state
        assert entry.path is not None
        loaded = _read_entry(entry.path, header_only=False)
        if loaded is None or loaded.key != entry.key or not np.array_equal(loaded.ids, entry.ids):
            self._disk_index().pop(entry.path, None)
            return None
        try:
            os.utime(entry.path)  # recently used: evicted last
        except OSError:
            pass
        if loaded.nbytes <= self.ram_bytes:
            self._ram[self._next] = _Entry(loaded.key, loaded.ids, loaded.state)
            self._next += 1
            while self.ram_used > self.ram_bytes:
                self._ram.popitem(last=False)
        return loaded.state

    def _disk_index(self) -> dict[Path, _Entry]:
        """The disk tier's entries (ids and key; states are read when used)."""
        if self._disk is None:
            self._disk = {}
            assert self.disk is not None
            if self.disk.is_dir():
                for path in sorted(self.disk.glob("*.rvpc")):
                    entry = _read_entry(path, header_only=True)
                    if entry is not None:
                        self._disk[path] = entry
        return self._disk

    def _write(self, entry: _Entry) -> None:
        assert self.disk is not None and entry.state is not None
        try:
            self.disk.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha256(entry.key.encode() + entry.ids.tobytes()).hexdigest()[:32]
            path = self.disk / f"{digest}.rvpc"
            key = entry.key.encode()
            checksum = hashlib.sha256(key + entry.ids.tobytes() + entry.state).digest()
            header = _HEADER.pack(_MAGIC, _VERSION, len(key), len(entry.ids), len(entry.state), checksum)
            fd, tmp = tempfile.mkstemp(dir=self.disk, prefix=".tmp-", suffix=".rvpc")
            try:
                with os.fdopen(fd, "wb") as f:
                    for part in (header, key, entry.ids.tobytes(), entry.state):
                        f.write(part)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as error:
            log.warning("prompt cache: could not write %s: %s", self.disk, error)
            return
        index = self._disk_index()
        for other, held in list(index.items()):  # the new sequence extends these
            if other != path and held.key == entry.key and common_prefix(held.ids, entry.ids) == len(held.ids):
                index.pop(other)
                _unlink(other)
        index[path] = _Entry(entry.key, entry.ids, None, path)
        self._evict_disk()

    def _evict_disk(self) -> None:
        """Remove the least recently used files until the tier fits disk_bytes."""
        index = self._disk_index()
        sizes = {}
        for path in index:
            try:
                stat = path.stat()
                sizes[path] = (stat.st_mtime_ns, stat.st_size)
            except OSError:
                sizes[path] = (0, 0)
        total = sum(size for _, size in sizes.values())
        for path in sorted(sizes, key=lambda p: sizes[p][0]):
            if total <= self.disk_bytes:
                break
            total -= sizes[path][1]
            index.pop(path, None)
            _unlink(path)


def make_prompt_cache(option: object) -> Optional[PromptCache]:
    """RiverModel(prompt_cache=...)'s value as a cache: None or False: none; True: a
    PromptCache in RAM; an int: one of that many bytes; a folder (str or path): RAM and a
    disk tier there; a PromptCache: itself. TypeError for anything else."""
    if option is None or option is False:
        return None
    if option is True:
        return PromptCache()
    if isinstance(option, PromptCache):
        return option
    if isinstance(option, int):
        return PromptCache(option)
    if isinstance(option, (str, os.PathLike)):
        return PromptCache(disk=option)
    raise TypeError(
        f"prompt_cache must be None, a bool, a byte budget, a folder or a PromptCache, got {type(option).__name__}"
    )


def from_llama_cpp_cache(cache: object) -> Optional[PromptCache]:
    """The PromptCache that stands for a cache given to Llama.set_cache: a river-cpp
    PromptCache as it is; llama-cpp-python's LlamaRAMCache as RAM of its capacity;
    its LlamaDiskCache as a disk tier of its capacity in its folder (our own files,
    beside any of llama-cpp-python's there), with the default RAM; None: none."""
    if cache is None or isinstance(cache, PromptCache):
        return cache
    capacity = getattr(cache, "capacity_bytes", None)
    if not isinstance(capacity, int):
        raise TypeError(
            "set_cache takes a river_cpp PromptCache, a llama_cpp.LlamaRAMCache or LlamaDiskCache, or None; "
            f"got {type(cache).__name__}"
        )
    folder = getattr(getattr(cache, "cache", None), "directory", None)  # LlamaDiskCache's diskcache.Cache
    if folder is not None:
        return PromptCache(disk=folder, disk_bytes=capacity)
    return PromptCache(capacity)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _read_entry(path: Path, *, header_only: bool) -> Optional[_Entry]:
    """The entry in `path` (its state too unless header_only), or None with a warning when
    the file is not a whole, intact entry of this format."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
            if len(head) < _HEADER.size:
                raise ValueError("shorter than its header")
            magic, version, n_key, n_ids, n_state, checksum = _HEADER.unpack(head)
            if magic != _MAGIC:
                raise ValueError("not a river-cpp prompt cache file")
            if version != _VERSION:
                raise ValueError(f"format version {version}, this river-cpp reads {_VERSION}")
            size = os.fstat(f.fileno()).st_size
            if size != _HEADER.size + n_key + 4 * n_ids + n_state:
                raise ValueError(f"{size} bytes where its header promises {_HEADER.size + n_key + 4 * n_ids + n_state}")
            key = f.read(n_key)
            ids = np.frombuffer(f.read(4 * n_ids), dtype=np.int32)
            state = None
            if not header_only:
                state = f.read(n_state)
                if hashlib.sha256(key + ids.tobytes() + state).digest() != checksum:
                    raise ValueError("its contents do not match their checksum")
        return _Entry(key.decode(), ids, state, path)
    except (OSError, ValueError, UnicodeDecodeError, struct.error) as error:
        log.warning("prompt cache: ignoring %s: %s", path, error)
        return None
