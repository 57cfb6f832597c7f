#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp source that the llama-cpp-python sdist
# vendors -- the SAME version as the installed llama-cpp-python, so the served and the
# embedded engine run one llama.cpp. Cached: a second call returns at once.
#
#   tests/tools/build_llama_server.sh            # prints the binary's path
#   ABGATE_LLAMA_SERVER_JOBS=2 (default) ABGATE_CACHE (default ~/.cache/abgate)
#
# CPU only, static (no shared libs), no -march=native (generic x86-64 CI machines: GGML_NATIVE=OFF),
# no HTTPS, no web UI (nothing is downloaded at build time).
set -euo pipefail

PY="${PYTHON:-python}"
VERSION="$("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)')"
CACHE="${ABGATE_CACHE:-$HOME/.cache/abgate}/llama-server/$VERSION"
BIN="$CACHE/bin/llama-server"
JOBS="${ABGATE_LLAMA_SERVER_JOBS:-2}"

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE"
WORK="$(mktemp -d "$CACHE/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

SDIST="${ABGATE_LLAMA_CPP_SDIST:-}"
if [ -z "$SDIST" ]; then
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK" >&2
  SDIST="$(ls "$WORK"/llama_cpp_python-*.tar.gz)"
fi
tar -xzf "$SDIST" -C "$WORK" --wildcards '*/vendor/llama.cpp/*'
SRC="$(ls -d "$WORK"/llama_cpp_python-*/vendor/llama.cpp)"

start=$(date +%s)
cmake -S "$SRC" -B "$WORK/build" -G "${CMAKE_GENERATOR:-Unix Makefiles}" \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >&2
cmake --build "$WORK/build" --target llama-server -j "$JOBS" >&2
mkdir -p "$CACHE/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
"$BIN.tmp" --version >&2  # it runs on this machine
mv "$BIN.tmp" "$BIN"
echo "built llama-server $VERSION in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
