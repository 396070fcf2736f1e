# Finds the ggml that llama-cpp-python installed into site-packages (headers,
# shared libraries and its CMake package) and makes our extension load the very
# same libraries llama-cpp-python loads, so the process holds a single ggml.
# No ggml source lives in this repository.

file(READ "${CMAKE_CURRENT_LIST_DIR}/LLAMA_CPP_PYTHON_VERSION" RIVER_LLAMA_CPP_PYTHON_VERSION)
string(STRIP "${RIVER_LLAMA_CPP_PYTHON_VERSION}" RIVER_LLAMA_CPP_PYTHON_VERSION)

execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
        "import importlib.metadata as m, importlib.util as u, os; s = u.find_spec('llama_cpp'); print(m.version('llama-cpp-python')); print(os.path.dirname(os.path.dirname(s.origin)))"
    OUTPUT_VARIABLE _river_llama_info
    RESULT_VARIABLE _river_llama_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
if (NOT _river_llama_rc EQUAL 0)
    message(FATAL_ERROR "river-cpp builds against the ggml of llama-cpp-python==${RIVER_LLAMA_CPP_PYTHON_VERSION}, "
                        "which is not importable by ${Python_EXECUTABLE}. Install it first.")
endif()
string(REPLACE "\n" ";" _river_llama_info "${_river_llama_info}")
list(GET _river_llama_info 0 _river_llama_version)
list(GET _river_llama_info 1 RIVER_SITE_PACKAGES)
if (NOT _river_llama_version STREQUAL RIVER_LLAMA_CPP_PYTHON_VERSION)
    message(FATAL_ERROR "found llama-cpp-python ${_river_llama_version}, river-cpp needs ${RIVER_LLAMA_CPP_PYTHON_VERSION}")
endif()

find_package(ggml CONFIG REQUIRED PATHS "${RIVER_SITE_PACKAGES}" NO_DEFAULT_PATH)
message(STATUS "river-cpp: ggml from llama-cpp-python ${_river_llama_version} in ${RIVER_SITE_PACKAGES}")

# At run time, resolve libggml*.so from llama_cpp/lib next to our package in the
# installed site-packages (the module lives in river_cpp/engine/, two folders below):
# the copies llama-cpp-python itself loads.
function(river_link_ggml_at_runtime target)
    if (APPLE)
        set(_origin "@loader_path")
    else()
        set(_origin "$ORIGIN")
    endif()
    set_target_properties(${target} PROPERTIES
        INSTALL_RPATH "${_origin}/../../llama_cpp/lib"
        BUILD_WITH_INSTALL_RPATH TRUE)
endfunction()
