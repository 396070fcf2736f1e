#!/usr/bin/env bash
# pip install "$@" (e.g. -e ".[test]") on top of the pinned llama-cpp-python built with
# ggml's RPC backend (-DGGML_RPC=on), which the multi-device tests use as a second
# device. Users who do not need RPC install with plain pip and keep working.
#
# pip caches the wheels it builds by version, not by CMAKE_ARGS: a plain `pip install`
# would reuse a cached CPU-only wheel without a word. So the RPC wheel is built once
# with --no-cache-dir into its own folder (RIVER_WHEEL_DIR, default
# ~/.cache/river-cpp/wheels/llama-cpp-python-<version>-rpc), installed from there, and
# offered to pip's isolated build of river-cpp through --find-links, so that the
# build compiles against the same wheel instead of building another.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(tr -d '[:space:]' < third_party/LLAMA_CPP_PYTHON_VERSION)"
wheel_dir="${RIVER_WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/river-cpp/wheels/llama-cpp-python-$version-rpc}"
if ! ls "$wheel_dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version with -DGGML_RPC=on into $wheel_dir (about 10 minutes on 2 cores)"
    mkdir -p "$wheel_dir"
    CMAKE_ARGS="${CMAKE_ARGS:-} -DGGML_RPC=on" python -m pip wheel --no-cache-dir --no-deps \
        "llama-cpp-python==$version" -w "$wheel_dir"
fi
python -m pip install --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-"$version"-*.whl
python -m pip install --find-links "$wheel_dir" "$@"
python -c "from river_cpp import _core; assert _core.has_rpc(), 'llama-cpp-python was installed without RPC'"
