#!/bin/sh
# The table of environment variables (graph/env_knobs.def) against the sources, both ways:
#  1. every FP8RUN_ variable read anywhere is in the table: the library's reads
#     (fr_env_get(FR_ENV_<NAME>)), the CLI's (fp8run_env_get("FP8RUN_<NAME>")), any getenv of
#     an FP8RUN_ name, Python's (os.environ / env.get / getenv) and the scripts' ($FP8RUN_<NAME>);
#  2. every line of the table is read somewhere, and docs/environment.md lists it;
#  3. no C source of graph/ ops/ passes/ runtime/ tools/ calls getenv but graph/env.c (the
#     table's reader), except for a standard variable named literally (CUDA's, a launcher's
#     WORLD_SIZE) and the two launcher parsers that take the name as an argument.
#   check_env.sh [SOURCE_DIR]       (ctest check_env; exit 1 with what is wrong)
set -eu
cd "${1:-.}"
C="--include=*.c --include=*.h --include=*.cu --include=*.cuh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fp8run-env-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
sed -n 's/^FR_ENV(\([A-Z0-9_]*\),.*/FP8RUN_\1/p' graph/env_knobs.def | sort -u > "$tmp/table"
{
    # shellcheck disable=SC2086
    grep -rhoE 'FR_ENV_[A-Z0-9_]+' $C graph ops passes runtime tools tests | grep -vxE 'FR_ENV_(COUNT|H)' |
        sed 's/^FR_ENV_/FP8RUN_/'
    # shellcheck disable=SC2086
    grep -rhoE '(getenv|fp8run_env_get)\("FP8RUN_[A-Z0-9_]+"' $C graph ops passes runtime tools tests include
    grep -rhoE '(environ\.get\(|environ\[|env\.get\(|getenv\()"FP8RUN_[A-Z0-9_]+"' --include=*.py python tools tests
    grep -rhoE '\$\{?FP8RUN_[A-Z0-9_]+' --include=*.sh tools tests
    grep -hoE '\$\{?FP8RUN_[A-Z0-9_]+' .ci/run 2> /dev/null || true
} | grep -oE 'FP8RUN_[A-Z0-9_]+' | sort -u > "$tmp/read"
bad=0
for v in $(comm -23 "$tmp/read" "$tmp/table"); do
    echo "check_env: $v is read but not in graph/env_knobs.def"
    bad=1
done
for v in $(comm -13 "$tmp/read" "$tmp/table"); do
    echo "check_env: $v is in graph/env_knobs.def but nothing reads it"
    bad=1
done
for v in $(cat "$tmp/table"); do
    grep -q "\`$v\`" docs/environment.md || { echo "check_env: $v is not in docs/environment.md" && bad=1; }
done
# shellcheck disable=SC2086
grep -rnE '\bgetenv\(' $C graph ops passes runtime tools | grep -v '^graph/env\.c:' |
    grep -vE 'getenv\("[A-Z][A-Z0-9_]*"\)' | grep -vE '^[^:]*/(dist_train|cli_dist|api_dist)\.c:' > "$tmp/getenv" || true
# shellcheck disable=SC2086
grep -rnE '\bgetenv\("FP8RUN_' $C graph ops passes runtime tools | grep -v '^graph/env\.c:' >> "$tmp/getenv" || true
if [ -s "$tmp/getenv" ]; then
    echo "check_env: getenv outside graph/env.c (read an FP8RUN_ variable with fr_env_get, or fp8run_env_get in tools/):"
    sort -u "$tmp/getenv"
    bad=1
fi
[ $bad = 0 ] && echo "check_env: $(wc -l < "$tmp/table") variables, each read and documented; no other getenv"
exit $bad
