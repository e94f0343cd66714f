#!/bin/sh
# The ABI test (registered with ctest as abi_check): install the build into a temporary
# prefix, then compile tests/abi/abi_check.c against what was installed only, through
# pkg-config, once against the shared library and once statically, and run both. Also checks
# that the shared library exports nothing but fp8run_* and that the header compiles as C++.
#   run_abi_check.sh BUILD_DIR SOURCE_DIR [CC]   (env ABI_CFLAGS: extra flags, e.g. sanitizers;
#                                                CMAKE: the cmake to install with)
set -eu
build=$1
src=$2
cc=${3:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fp8run-abi-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

"${CMAKE:-cmake}" --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name fp8run.pc)
[ -n "$pc" ] || { echo "abi_check: no fp8run.pc installed under $prefix" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
libdir=$(pkg-config --variable=libdir fp8run)
for f in "$prefix/include/fp8run.h" "$libdir/libfp8run.so" "$libdir/libfp8run.a"; do
    [ -e "$f" ] || { echo "abi_check: $f was not installed" >&2; exit 1; }
done

# only the public API is exported
extra=$(nm -D --defined-only "$libdir/libfp8run.so" | awk '{print $3}' | grep -v '^fp8run_' || true)
if [ -n "$extra" ]; then
    echo "abi_check: libfp8run.so exports symbols outside the API:" >&2
    echo "$extra" | head -20 >&2
    exit 1
fi
echo "abi_check: libfp8run.so exports $(nm -D --defined-only "$libdir/libfp8run.so" | wc -l) symbols, all fp8run_*"

flags="-std=c11 -Wall -Wextra -Werror -pedantic ${ABI_CFLAGS:-}"
model=$src/tests/fixtures/llama_tiny/model.onnx
tokens=$src/tests/fixtures/train/tokens.bin

# shared: exactly what a user types
# shellcheck disable=SC2046,SC2086
$cc $flags "$src/tests/abi/abi_check.c" -o "$tmp/abi_shared" $(pkg-config --cflags --libs fp8run) -lm
mkdir -p "$tmp/out_shared" "$tmp/out_static"
LD_LIBRARY_PATH="$libdir" "$tmp/abi_shared" "$model" "$tokens" "$tmp/out_shared"

# static: the archive plus Libs.private
libs=$(pkg-config --static --libs fp8run | sed "s#-lfp8run#$libdir/libfp8run.a#")
# shellcheck disable=SC2046,SC2086
$cc $flags "$src/tests/abi/abi_check.c" -o "$tmp/abi_static" $(pkg-config --cflags fp8run) $libs
if ldd "$tmp/abi_static" | grep -q libfp8run; then
    echo "abi_check: the static build still needs libfp8run.so" >&2
    exit 1
fi
"$tmp/abi_static" "$model" "$tokens" "$tmp/out_static"

# the header is valid C++ too (extern "C")
if command -v c++ >/dev/null 2>&1; then
    printf '#include <fp8run.h>\nint main() { return fp8run_abi_version() == FP8RUN_ABI_VERSION ? 0 : 1; }\n' \
        > "$tmp/cxx.cc"
    # shellcheck disable=SC2046
    c++ -Wall -Wextra -Werror ${ABI_CFLAGS:-} "$tmp/cxx.cc" -o "$tmp/abi_cxx" $(pkg-config --cflags --libs fp8run)
    LD_LIBRARY_PATH="$libdir" "$tmp/abi_cxx"
    echo "abi_check: the header compiles and links as C++"
fi
echo "abi_check: passed"
