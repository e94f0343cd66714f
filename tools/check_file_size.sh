#!/bin/sh
# Library files stay at most 800 lines, so each holds one concept a reader can take in
# (include/fp8run.h, the one public header, is exempt). Registered with ctest as check_file_size, label cpu.
#   check_file_size.sh [SOURCE_DIR]    exit 0 when every file fits; else one line per file
set -eu
cd "${1:-$(dirname "$0")/..}"
find graph ops passes runtime -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
    -o -name '*.def' \) | sort | while read -r f; do
    n=$(wc -l <"$f")
    [ "$n" -le 800 ] || echo "check_file_size: $f has $n lines (at most 800: split it by concern)"
done | { if read -r line; then echo "$line"; cat; exit 1; fi; echo "check_file_size: every library file is at most 800 lines"; }
