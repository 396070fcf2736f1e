#!/usr/bin/env bash
# pip install "$@" (e.g. -e ".[test]") on top of the pinned llama-cpp-python built with
# ggml's RPC and Vulkan backends, which the multi-device tests use as second devices: an
# RPC server (another CPU behind a socket) and Mesa's lavapipe, a conformant Vulkan
# driver that runs on the CPU, so that CI executes a GPU backend's kernels for real.
# Users who need neither install with plain pip and keep working.
#
# RIVER_DEVICES=rpc builds without Vulkan (no Debian packages needed).
#
# pip caches the wheels it builds by version, not by CMAKE_ARGS: a plain `pip install`
# would reuse a cached CPU-only wheel without a word. So this wheel is built once with
# --no-cache-dir into its own folder (RIVER_WHEEL_DIR, default
# ~/.cache/river-cpp/wheels/llama-cpp-python-<version>-<devices>), installed from there,
# and offered to pip's isolated build of river-cpp through --find-links, so that the
# build compiles against the same wheel instead of building another.
set -euo pipefail
cd "$(dirname "$0")/.."
version="$(tr -d '[:space:]' < third_party/LLAMA_CPP_PYTHON_VERSION)"
devices="${RIVER_DEVICES:-rpc-vulkan}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/river-cpp"
wheel_dir="${RIVER_WHEEL_DIR:-$cache/wheels/llama-cpp-python-$version-$devices}"
cmake_args="-DGGML_RPC=on"

apt_install() {  # Debian packages, only those missing
    local missing=()
    for package in "$@"; do
        dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if ! command -v apt-get >/dev/null || [ "$(id -u)" -ne 0 ]; then
        echo "error: the Vulkan build needs the Debian packages ${missing[*]}; install them" \
            "(apt-get install ${missing[*]}) or build without Vulkan: RIVER_DEVICES=rpc $0 $*" >&2
        exit 1
    fi
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
}

vulkan_headers() {  # prints an include folder new enough for the pinned ggml-vulkan
    # Debian 12's libvulkan-dev (1.3.239) lacks VK_EXT_layer_settings, which the pinned
    # ggml-vulkan uses; Debian 13's headers (1.4.x) build against Debian 12's loader. The
    # .deb is unpacked into the cache folder, never installed. Its mirror is the one the
    # system already uses.
    local headers="$cache/vulkan-headers"
    if [ ! -f "$headers/usr/include/vulkan/vulkan.hpp" ] || ! grep -q LayerSettingEXT "$headers/usr/include/vulkan/vulkan_structs.hpp"; then
        local mirror tmp
        # the configured mirror of the release's main suite (not -security or -updates)
        mirror="$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
            awk '$3 == "main" && $2 !~ /-/ { print $1; exit }')"
        tmp="$(mktemp -d)"
        mkdir -p "$tmp/lists/partial"
        echo "deb $mirror trixie main" > "$tmp/sources.list"
        local opts=(-q -o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$tmp/lists")
        apt-get "${opts[@]}" update >/dev/null
        (cd "$tmp" && apt-get "${opts[@]}" download libvulkan-dev >/dev/null 2>&1) || true
        if ! ls "$tmp"/libvulkan-dev_*.deb >/dev/null 2>&1; then
            echo "error: could not download Debian 13's libvulkan-dev from $mirror (its Vulkan headers)" \
                "; build without Vulkan: RIVER_DEVICES=rpc $0" >&2
            exit 1
        fi
        rm -rf "$headers" && mkdir -p "$headers"
        dpkg -x "$tmp"/libvulkan-dev_*.deb "$headers"
        rm -rf "$tmp"
    fi
    echo "$headers/usr/include"
}

case "$devices" in
    rpc) ;;
    rpc-vulkan)
        # loader, lavapipe (runtime), the shader compiler and SPIR-V headers (build)
        apt_install libvulkan1 mesa-vulkan-drivers glslc spirv-headers
        include="$(vulkan_headers)"
        # the loader itself: libvulkan1 ships no unversioned libvulkan.so to link with
        library="$(dpkg -L libvulkan1 | grep -m1 '/libvulkan\.so\.1$')"
        cmake_args="$cmake_args -DGGML_VULKAN=on -DVulkan_INCLUDE_DIR=$include -DVulkan_LIBRARY=$library"
        ;;
    *) echo "error: RIVER_DEVICES must be rpc or rpc-vulkan, not '$devices'" >&2; exit 1 ;;
esac

if ! ls "$wheel_dir"/llama_cpp_python-"$version"-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $version with $cmake_args into $wheel_dir (about 10 minutes on 2 cores)"
    mkdir -p "$wheel_dir"
    start=$SECONDS
    CMAKE_ARGS="${CMAKE_ARGS:-} $cmake_args" python -m pip wheel --no-cache-dir --no-deps \
        "llama-cpp-python==$version" -w "$wheel_dir"
    echo "built in $((SECONDS - start)) s"
fi
python -m pip install --force-reinstall --no-deps "$wheel_dir"/llama_cpp_python-"$version"-*.whl
python -m pip install --find-links "$wheel_dir" "$@"
python -c "from river_cpp.engine import _core; assert _core.has_rpc(), 'llama-cpp-python was installed without RPC'"
if [ "$devices" = rpc-vulkan ]; then  # lavapipe, seen the way the tests select it
    GGML_VK_VISIBLE_DEVICES=0 python -c "from river_cpp.engine import _core; \
assert any(d['name'] == 'Vulkan0' for d in _core.devices()), 'no Vulkan device: is mesa-vulkan-drivers installed?'"
fi
