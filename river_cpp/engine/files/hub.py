"""GGUF files from the Hugging Face Hub, through its local cache: what
`RiverModel.from_pretrained` and `river-cpp ... -hf REPO[:QUANT]` load.

In llama-cpp-python's shape (`Llama.from_pretrained(repo_id, filename)`, where the
file name may be a glob) and llama.cpp's (`-hf REPO:QUANT`, where QUANT picks the file
whose name contains it). Files land in, and are read from, huggingface_hub's cache
(HF_HUB_CACHE, default ~/.cache/huggingface/hub), so a model downloaded by any
Hugging Face tool is not downloaded again. With HF_HUB_OFFLINE=1, or when the Hub
cannot be reached, the choice of a file is made among those already in the cache.
Needs the `[hf]` extra (huggingface_hub).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Optional, Sequence, Union

# Characters that make a file name a glob pattern (fnmatch's).
GLOB_CHARACTERS = "*?["
# What -hf REPO and from_pretrained load when no file is named: the repository's one GGUF.
ANY_GGUF = "*.gguf"


def _hub():
    try:
        import huggingface_hub
        import huggingface_hub.constants
        import huggingface_hub.utils
    except ImportError as error:
        raise ImportError(
            f"models from the Hugging Face Hub need the hf extra: pip install 'river-cpp[hf]' ({error})"
        ) from None
    return huggingface_hub


def parse_repo_spec(spec: str) -> tuple[str, Optional[str]]:
    """`REPO[:QUANT]` (llama.cpp's -hf) as (repo_id, quant or None)."""
    repo_id, _, quant = spec.partition(":")
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"-hf takes OWNER/NAME[:QUANT], e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q8_0; got {spec!r}")
    if ":" in spec and not quant:
        raise ValueError(f"-hf {spec!r}: nothing after ':' (give a quantization such as Q8_0, or drop the ':')")
    return repo_id, quant or None


def quant_pattern(quant: Optional[str]) -> str:
    """The file-name pattern of llama.cpp's QUANT: a GGUF whose name contains it."""
    if quant is None:
        return ANY_GGUF
    if any(c in quant for c in GLOB_CHARACTERS + "/"):
        raise ValueError(f"a quantization is a name such as Q8_0 or F16, got {quant!r}")
    return f"*{quant}*.gguf"


def choose_file(names: Sequence[str], pattern: str, repo_id: str) -> str:
    """The one name of `names` that `pattern` (a glob, case-insensitive) matches.

    Multimodal projector files (mmproj) are passed over unless the pattern names
    them: they sit beside the language model in many GGUF repositories, and a
    projector is not a model river-cpp runs. ValueError lists the candidates when
    none or several match.
    """
    wanted = pattern.lower()
    matches = [
        name
        for name in names
        if fnmatch.fnmatchcase(name.lower(), wanted) and ("mmproj" in wanted or "mmproj" not in name.lower())
    ]
    if len(matches) == 1:
        return matches[0]
    ggufs = sorted(n for n in names if n.lower().endswith(".gguf")) or sorted(names)
    listing = ", ".join(ggufs) if ggufs else "no files"
    if not matches:
        raise ValueError(f"no file in {repo_id} matches {pattern!r}; it has: {listing}")
    raise ValueError(
        f"{len(matches)} files in {repo_id} match {pattern!r}: {', '.join(sorted(matches))};"
        " name one (a longer QUANT such as Q4_K_M, or the file name)"
    )


def _cached_files(repo_id: str, revision: Optional[str], cache_dir: Optional[Union[str, os.PathLike]]) -> list[str]:
    """The files of `repo_id` at `revision` in the local cache (LocalEntryNotFoundError if none)."""
    folder = Path(_hub().snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True))
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def repo_files(
    repo_id: str, *, revision: Optional[str] = None, cache_dir: Optional[Union[str, os.PathLike]] = None
) -> list[str]:
    """The files of a repository: the Hub's list, or the cache's when offline.

    HF_HUB_OFFLINE=1 reads only the cache. Online, a failure to reach the Hub falls
    back on the cache too (as huggingface_hub's own downloads do), and is raised when
    the cache has nothing of the repository.
    """
    hub = _hub()
    if hub.constants.HF_HUB_OFFLINE:
        return _cached_files(repo_id, revision, cache_dir)
    try:
        return sorted(hub.HfApi().list_repo_files(repo_id, revision=revision))
    except Exception as online_error:  # noqa: BLE001 - any failure to reach the Hub: try the cache
        try:
            return _cached_files(repo_id, revision, cache_dir)
        except hub.utils.LocalEntryNotFoundError:
            if isinstance(online_error, hub.utils.HfHubHTTPError):  # the Hub answered: no such repository...
                raise online_error from None
            raise ConnectionError(
                f"cannot reach the Hugging Face Hub to list {repo_id}, and the cache has none of it: {online_error}"
            ) from None


def download(
    repo_id: str,
    filename: Optional[str] = None,
    *,
    revision: Optional[str] = None,
    cache_dir: Optional[Union[str, os.PathLike]] = None,
) -> Path:
    """The local path of `filename` in `repo_id`, downloaded into the cache unless it is there.

    `filename` is a path in the repository or a glob (case-insensitive) that must
    match exactly one file, e.g. "*Q8_0.gguf" (None: the one GGUF). FileNotFoundError when the repository
    or the file does not exist (or, offline, is not in the cache), ConnectionError
    when the Hub cannot be reached and the cache cannot answer instead.
    """
    hub = _hub()
    errors = hub.utils
    filename = filename or ANY_GGUF
    try:
        if any(c in filename for c in GLOB_CHARACTERS):
            filename = choose_file(repo_files(repo_id, revision=revision, cache_dir=cache_dir), filename, repo_id)
        return Path(hub.hf_hub_download(repo_id, filename, revision=revision, cache_dir=cache_dir))
    except errors.LocalEntryNotFoundError as error:
        offline = " (HF_HUB_OFFLINE is set)" if hub.constants.HF_HUB_OFFLINE else ""
        raise FileNotFoundError(
            f"{repo_id} ({filename}) is not in the Hugging Face cache and cannot be downloaded{offline}: {error}"
        ) from None
    except errors.RepositoryNotFoundError:
        raise FileNotFoundError(
            f"no repository {repo_id} on the Hugging Face Hub (a private or gated one needs `hf auth login`)"
        ) from None
    except errors.RevisionNotFoundError:
        raise FileNotFoundError(f"{repo_id} has no revision {revision!r}") from None
    except errors.EntryNotFoundError:
        raise FileNotFoundError(f"{repo_id} has no file {filename!r}") from None
    except errors.HfHubHTTPError as error:
        raise ConnectionError(f"the Hugging Face Hub answered an error for {repo_id}: {error}") from None


def download_spec(spec: str, *, cache_dir: Optional[Union[str, os.PathLike]] = None) -> Path:
    """The local path of llama.cpp's `-hf REPO[:QUANT]`."""
    repo_id, quant = parse_repo_spec(spec)
    return download(repo_id, quant_pattern(quant), cache_dir=cache_dir)
