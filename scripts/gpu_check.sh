#!/usr/bin/env bash
# One prepared check of river-cpp on a GPU machine (CUDA; Metal on a Mac): builds the
# pinned llama-cpp-python with the GPU backend, installs river-cpp against it in its
# own virtual environment, proves the engine runs on the GPU and computes what
# llama.cpp computes there, and prints decode speeds. Never part of CI.
#
#     scripts/gpu_check.sh            # RIVER_GPU_VENV=.venv-gpu, -t THREADS via RIVER_THREADS
#
# Needs the package index (or a pip cache holding the sources) and the CUDA toolkit
# (nvcc) or Xcode. The wheel is kept in ~/.cache/river-cpp/wheels/...-gpu, so a rerun
# skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(tr -d '[:space:]' < third_party/LLAMA_CPP_PYTHON_VERSION)"
if [[ "$(uname)" == Darwin ]]; then backend="-DGGML_METAL=on"; else backend="-DGGML_CUDA=on"; fi
venv="${RIVER_GPU_VENV:-.venv-gpu}"
threads="${RIVER_THREADS:-4}"
wheel_dir="${XDG_CACHE_HOME:-$HOME/.cache}/river-cpp/wheels/llama-cpp-python-$version-gpu"

python3 -m venv "$venv"
. "$venv/bin/activate"
python -m pip install -q --upgrade pip
if ! ls "$wheel_dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    echo "== building llama-cpp-python $version with $backend"
    mkdir -p "$wheel_dir"
    CMAKE_ARGS="$backend" python -m pip wheel --no-cache-dir --no-deps "llama-cpp-python==$version" -w "$wheel_dir"
fi
python -m pip install -q --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-"$version"-*.whl
python -m pip install -q --find-links "$wheel_dir" -e ".[test]"

echo "== devices"
python - <<'PY'
from river_cpp.engine import _core
devices = _core.devices()
for d in devices:
    print(f"  {d['name']:<10} {d['type']:<5} {d['memory_free'] >> 20:>7} MiB free  {d['description']}")
assert any(d["type"] in ("gpu", "igpu") for d in devices), "no GPU device: the build did not enable one"
PY

echo "== where the demo model's layers live"
river-cpp generate -v -t "$threads" -n 16 "The river" 2>&1 | grep -A5 "^river-cpp: placement"

echo "== parity with llama.cpp and the static split, on the GPU (n_gpu_layers=-1 is the default)"
python -m pytest -q -x tests/engine/test_engine.py -k "parity" tests/engine/files/test_river.py -k "static_split" tests/decoding/test_speculative.py

echo "== decode speed on the GPU: backbone, River tau 0.98, full river, llama.cpp F16/Q8_0/Q4_0"
river-cpp bench -t "$threads" --tau 0.98 --peers F16 Q8_0 Q4_0 -p 256 -n 128 -r 3 --no-memory
echo "== the default (Q8_0 river decode) and lossless River"
for preset in default lossless; do
    echo "-- --preset $preset"
    river-cpp generate -t "$threads" --preset "$preset" -n 128 --chat "Write a short story about a river." 2>&1 | tail -3
done
