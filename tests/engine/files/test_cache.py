"""The cache folder and file identities."""

from __future__ import annotations

from river_cpp.engine.files import cache as cache_module


def test_cache_dir_from_environment(river_cache):
    assert cache_module.cache_dir() == river_cache
    assert river_cache.is_dir()


def test_cache_dir_defaults_to_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("RIVER_CPP_CACHE_DIR", raising=False)
    monkeypatch.setattr(cache_module.platformdirs, "user_cache_dir", lambda app: str(tmp_path / app))
    assert cache_module.cache_dir() == tmp_path / "river-cpp"
    assert (tmp_path / "river-cpp").is_dir()


def test_file_identity_changes_with_contents(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 10)
    first = cache_module.file_identity(path)
    assert cache_module.file_identity(path) == first
    path.write_bytes(b"b" * 10)
    assert cache_module.file_identity(path)["head_sha256"] != first["head_sha256"]
