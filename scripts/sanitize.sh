#!/usr/bin/env bash
# Runs tests against an AddressSanitizer + UBSan build of _core, without touching the
# installed package: the instrumented module is built in build/asan, placed next to
# a copy of the Python sources in build/asan-pkg, and Python runs with -S (so the
# editable install's finder does not redirect river_cpp) and the ASan runtime
# preloaded (Python itself is not instrumented).
#   scripts/sanitize.sh tests/engine/test_gguf_validation.py tests/engine/test_engine.py -x
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
case "$PY" in /*) ;; *) PY="$PWD/$PY" ;; esac
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p build/asan
if [ ! -f build/asan/build.ninja ]; then
    cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRIVER_SANITIZE=address,undefined \
        -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$("$PY" -m pybind11 --cmakedir)"
fi
ninja -C build/asan
rm -rf build/asan-pkg && mkdir -p build/asan-pkg
cp -r river_cpp build/asan-pkg/river_cpp
cp build/asan/_core*.so build/asan-pkg/river_cpp/engine/
ln -s "$SITE/llama_cpp" build/asan-pkg/llama_cpp   # the module's rpath: ../../llama_cpp/lib
# ggml's CPU backend leaks a few thread-pool objects by design; report, do not fail on leaks
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ROOT=$PWD
ARGS=()
for a in "$@"; do
    case "$a" in tests/*) ARGS+=("$ROOT/$a") ;; *) ARGS+=("$a") ;; esac
done
# from build/asan-pkg, so that `python -m` puts the instrumented package first
cd build/asan-pkg
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
PYTHONPATH="$ROOT/build/asan-pkg:$ROOT/tests:$SITE" \
    "$PY" -S -m pytest -p no:cacheprovider --rootdir "$ROOT" "${ARGS[@]}"
