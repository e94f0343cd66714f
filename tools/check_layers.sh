#!/bin/sh
# The layering check (registered with ctest as check_layers, label cpu): a reader finds each thing
# below what uses it, and a change cannot ripple upward through a circle. The library's
# folders form one order with no circle:  graph < ops < passes < runtime  (ops/cuda and
# runtime/cuda belong to their parent). A folder may include its own headers and those of the
# folders below it, never above. graph/ is the base: status, dtypes, tensors, FP8 formats.
# Every quoted include is written from the repository root ("graph/ir.h"): no "../", no bare
# same-folder names; the generated "schema/*.pb-c.h" and the public "fp8run.h" are the two
# names outside the folders. tools/ is built on the public API only: <fp8run.h> plus its own
# headers, named bare (the example host is compiled with include/ as its only path).
#   check_layers.sh [SOURCE_DIR]      exit 0 when clean; else one line per bad include
set -eu
src=${1:-$(dirname "$0")/..}
cd "$src"

# the folders each folder may include (tests/: anything in the tree)
allowed() {
    case $1 in
    graph) echo "graph schema" ;;
    ops) echo "graph ops schema" ;;
    passes) echo "graph ops passes schema" ;;
    runtime) echo "graph ops passes runtime schema fp8run.h" ;;
    tests) echo "graph ops passes runtime schema tests fp8run.h" ;;
    esac
}

bad=0
for top in graph ops passes runtime tests; do
    ok=$(allowed $top)
    files=$(find "$top" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
        -o -name '*.def' \) ! -path 'tests/fixtures/*' | sort)
    for f in $files; do
        awk -v f="$f" -v ok=" $ok " '
            /^[ \t]*#[ \t]*include[ \t]*"/ {
                name = $0; sub(/^[^"]*"/, "", name); sub(/".*$/, "", name)
                first = name; sub(/\/.*$/, "", first)
                if (name ~ /(^|\/)\.\.?\//) {
                    printf "%s:%d: \"%s\": write includes from the repository root, without ./ or ../\n", f, NR, name; bad = 1
                } else if (name !~ /\// && name != "fp8run.h") {
                    printf "%s:%d: \"%s\": write includes from the repository root (\"folder/%s\")\n", f, NR, name, name; bad = 1
                } else if (index(ok, " " first " ") == 0) {
                    printf "%s:%d: \"%s\": %s/ may include only from:%s\n", f, NR, name, substr(f, 1, index(f, "/") - 1), substr(ok, 1, length(ok) - 1); bad = 1
                }
            }
            END { exit bad }' "$f" || bad=1
    done
done

# tools/ (the CLI in tools/cli/, the example host): the public header and headers of the
# program's own folder only
for f in $(find tools -type f \( -name '*.c' -o -name '*.h' \) | sort); do
    awk -v f="$f" -v dir="${f%/*}" '
        /^[ \t]*#[ \t]*include[ \t]*"/ {
            name = $0; sub(/^[^"]*"/, "", name); sub(/".*$/, "", name)
            if (name ~ /\// || name == "fp8run.h") {
                printf "%s:%d: \"%s\": tools/ include <fp8run.h> and their own headers only\n", f, NR, name; bad = 1
            } else if ((getline line < (dir "/" name)) < 0) {
                printf "%s:%d: \"%s\": not a header in %s/\n", f, NR, name, dir; bad = 1
            }
        }
        /^[ \t]*#[ \t]*include[ \t]*</ {
            name = $0; sub(/^[^<]*</, "", name); sub(/>.*$/, "", name)
            if (name ~ /^(graph|ops|passes|runtime|schema|tests)\//) {
                printf "%s:%d: <%s>: tools/ include <fp8run.h> and their own headers only\n", f, NR, name; bad = 1
            }
        }
        END { exit bad }' "$f" || bad=1
done

# the public header includes nothing of the library
if grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' include/fp8run.h; then
    echo "include/fp8run.h: the public header includes only system headers" >&2
    bad=1
fi

[ $bad -eq 0 ] && echo "check_layers: graph < ops < passes < runtime, tools on <fp8run.h>: clean"
exit $bad
