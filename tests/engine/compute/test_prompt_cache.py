"""river_cpp.engine.compute.prompt_cache on a stand-in backbone whose state is its ids: the longest
cached prefix is restored, RAM stays within its budget (least recently used evicted),
the disk tier outlives the object, and damaged or foreign files are skipped with a
warning."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from river_cpp.engine.compute.prompt_cache import PromptCache, cache_scope, from_llama_cpp_cache, make_prompt_cache


class StateBackbone:
    """Holds a sequence; its state is the ids' bytes times `scale` (so sizes are known)."""

    def __init__(self, key: str = "model-a", scale: int = 1, *, rewinds_anywhere: bool = True) -> None:
        self.key, self.scale, self.ids = key, scale, []
        self.restored = 0
        self.rewinds_anywhere = rewinds_anywhere

    def state_key(self) -> str:
        return self.key

    def prefix_state(self) -> tuple[list[int], bytes]:
        return list(self.ids), np.asarray(self.ids, dtype=np.int32).tobytes() * self.scale

    def restore_prefix(self, ids, state) -> None:
        n = len(ids)
        assert state == np.asarray(ids, dtype=np.int32).tobytes() * self.scale
        self.ids = list(ids[:n])
        self.restored += 1

    def rewind(self, n_past: int) -> None:
        del self.ids[n_past:]


DOC_A = list(range(100, 140))
DOC_B = list(range(500, 540))


def test_the_longest_prefix_is_restored():
    cache = PromptCache(min_tokens=4)
    model = StateBackbone()
    for doc in (DOC_A, DOC_B):
        model.ids = doc + [1, 2, 3]
        cache.save(model)
    assert len(cache) == 2
    model.ids = []
    # the same document, another question: the document's 40 positions
    assert cache.restore(model, DOC_A + [9, 9], cached=0) == 40
    assert model.ids == DOC_A
    # a prompt that is a whole entry and more: at most len(ids) - 1 positions
    assert cache.restore(model, DOC_B + [1, 2, 3], cached=0) == 42
    # what the backbone holds already is not replaced by a shorter prefix
    model.ids = DOC_B + [1, 2, 3]
    assert cache.restore(model, DOC_B + [1, 2, 3, 4], cached=43) == 43 and model.restored == 2
    # another model's entries are never used
    assert cache.restore(StateBackbone("model-b"), DOC_A + [9], cached=0) == 0
    assert cache.hits == 2 and cache.reused_tokens == 82


def test_an_extension_replaces_its_prefix_and_short_sequences_are_skipped():
    cache = PromptCache(min_tokens=8)
    model = StateBackbone()
    model.ids = DOC_A[:5]
    cache.save(model)
    assert len(cache) == 0
    model.ids = DOC_A[:20]
    cache.save(model)
    model.ids = DOC_A  # the chat went on
    cache.save(model)
    assert len(cache) == 1
    model.ids = DOC_A[:30]  # held whole already
    cache.save(model)
    assert len(cache) == 1


def test_ram_stays_within_its_budget_least_recently_used_first():
    entry = 40 * 4 * 10 + 40 * 4  # state plus ids
    cache = PromptCache(ram_bytes=2 * entry, min_tokens=4)
    model = StateBackbone(scale=10)
    docs = [list(range(k * 1000, k * 1000 + 40)) for k in range(3)]
    for doc in docs[:2]:
        model.ids = doc
        cache.save(model)
    assert cache.restore(model, docs[0] + [1], cached=0) == 40  # docs[0] used: docs[1] is the oldest
    model.ids = docs[2]
    cache.save(model)
    assert len(cache) == 2 and cache.ram_used <= 2 * entry
    assert cache.restore(model, docs[1] + [1], cached=0) == 0
    assert cache.restore(model, docs[0] + [1], cached=0) == 40


def test_the_disk_tier_outlives_the_process(tmp_path):
    model = StateBackbone(scale=3)
    model.ids = DOC_A
    PromptCache(disk=tmp_path, min_tokens=4).save(model)
    assert len(list(tmp_path.glob("*.rvpc"))) == 1
    fresh = PromptCache(disk=tmp_path, min_tokens=4)  # a new process: RAM is empty
    restarted = StateBackbone(scale=3)
    assert fresh.restore(restarted, DOC_A + [7], cached=0) == 40
    assert restarted.ids == DOC_A
    assert not list(tmp_path.glob(".tmp-*"))  # written through a temporary file, then renamed


def test_disk_budget_evicts_the_oldest_files(tmp_path):
    model = StateBackbone(scale=50)
    cache = PromptCache(disk=tmp_path, disk_bytes=20_000, min_tokens=4)
    for k in range(4):
        model.ids = list(range(k * 1000, k * 1000 + 40))  # about 8 kB a file
        cache.save(model)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.rvpc")) <= 20_000
    assert len(list(tmp_path.glob("*.rvpc"))) == 2


@pytest.mark.parametrize("damage", ["truncated", "foreign", "flipped", "empty"])
def test_damaged_files_are_skipped_with_a_warning(tmp_path, caplog, damage):
    model = StateBackbone(scale=3)
    model.ids = DOC_A
    PromptCache(disk=tmp_path, min_tokens=4).save(model)
    (path,) = tmp_path.glob("*.rvpc")
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "foreign":
        path.write_bytes(b"GGUF" + bytes(200))
    elif damage == "flipped":  # same size, one byte of the state changed
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:])
    else:
        path.write_bytes(b"")
    fresh = PromptCache(disk=tmp_path, min_tokens=4)
    restarted = StateBackbone(scale=3)
    with caplog.at_level(logging.WARNING, logger="river_cpp.engine.compute.prompt_cache"):
        assert fresh.restore(restarted, DOC_A + [7], cached=0) == 0
    assert restarted.ids == [] and restarted.restored == 0
    assert "prompt cache: ignoring" in caplog.text


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="ram_bytes"):
        PromptCache(-1)
    with pytest.raises(ValueError, match="disk_bytes"):
        PromptCache(disk_bytes=1.5)


def test_a_scope_sees_only_its_own_entries(tmp_path):
    cache = PromptCache(disk=tmp_path, min_tokens=4)
    model = StateBackbone()
    model.ids = list(DOC_A)
    with cache_scope("client-1"):
        cache.save(model)
    with cache_scope("client-2"):
        assert cache.restore(model, DOC_A + [1], cached=0) == 0
    assert cache.restore(model, DOC_A + [1], cached=0) == 0  # nor outside any scope
    with cache_scope("client-1"):
        assert cache.restore(model, DOC_A + [1], cached=0) == 40
    with cache_scope("client-1"):  # on disk too, after a restart
        assert PromptCache(disk=tmp_path, min_tokens=4).restore(StateBackbone(), DOC_A + [1], cached=0) == 40


def test_make_prompt_cache(tmp_path):
    assert make_prompt_cache(None) is None and make_prompt_cache(False) is None
    assert make_prompt_cache(True).ram_bytes == PromptCache().ram_bytes
    assert make_prompt_cache(1 << 20).ram_bytes == 1 << 20
    assert make_prompt_cache(str(tmp_path)).disk == tmp_path
    cache = PromptCache()
    assert make_prompt_cache(cache) is cache
    with pytest.raises(TypeError, match="prompt_cache must be"):
        make_prompt_cache(1.5)


def test_llama_cpp_caches_become_prompt_caches(tmp_path):
    import llama_cpp

    ram = from_llama_cpp_cache(llama_cpp.LlamaRAMCache(capacity_bytes=1 << 20))
    assert ram.ram_bytes == 1 << 20 and ram.disk is None
    disk = from_llama_cpp_cache(llama_cpp.LlamaDiskCache(cache_dir=str(tmp_path), capacity_bytes=1 << 24))
    assert disk.disk == tmp_path and disk.disk_bytes == 1 << 24
    ours = PromptCache()
    assert from_llama_cpp_cache(ours) is ours and from_llama_cpp_cache(None) is None
    with pytest.raises(TypeError, match="set_cache takes"):
        from_llama_cpp_cache({})


def test_a_state_that_cannot_be_cut_is_restored_only_whole():
    """A recurrent state holds only its end: an entry that a prompt parts from inside
    would be restored and then run again from the start, so it is no hit; one that the
    prompt continues whole is."""
    for rewinds_anywhere, expected in ((True, len(DOC_A) + 1), (False, 0)):
        cache = PromptCache(min_tokens=4)
        model = StateBackbone(rewinds_anywhere=rewinds_anywhere)
        model.ids = DOC_A + [1, 2, 3]
        cache.save(model)
        model.ids = []
        parting = DOC_A + [1, 9, 9]
        assert cache.longest(model, parting, cached=0) == expected
        assert cache.restore(model, parting, cached=0) == expected
    continuing = DOC_A + [1, 2, 3, 4, 5]
    assert cache.restore(model, continuing, cached=0) == len(DOC_A) + 3 and model.restored == 1
