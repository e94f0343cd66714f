#!/bin/sh
# The layering check (registered with ctest as check_layers, label cpu).
#
# The library's folders form one order, each including only its own headers and those of the
# folders below it:
#
#   graph < ops < passes < runtime/io < runtime/exec < runtime/dist < runtime/train < runtime/api
#           (ops/cuda with ops)                        (runtime/cuda with runtime/train)
#
# and tools/ sits on top, built on the public API only. graph/ is the base: status, dtypes,
# tensors, FP8 formats, the IR and its ONNX import/export. ops/cuda/ holds the CUDA kernels and
# their contract (the device context, the kernel tables), so it ranks with ops/. io/ reads and
# writes files (checkpoints, safetensors, npy, token data, .fbs); exec/ runs a prepared graph;
# dist/ plans data-parallel runs (no GPU); train/ builds and steps the trainer; api/ is the C
# API over all of them. runtime/cuda/ ranks with train/: it is the GPU half of the executor
# (cuda_exec, cuda_graph) and of the trainer (cuda_train, dist_train), the trainer chooses it
# (cuda_probe.h, cuda_exec.h) and it implements the trainer's backend (train_backend.h); the
# circle check below keeps the files of the two folders themselves in one order.
#
# What is checked:
#   1. every quoted include is written from the repository root ("graph/ir.h"): no "../", no
#      bare same-folder names; the generated "schema/*.pb-c.h" and the public "fp8run.h" (api/
#      only) are the two names outside the folders. tools/ programs (tools/cli/ the CLI,
#      tools/example_host.c) include <fp8run.h> and headers of their own folder, named bare (the
#      example host is compiled with include/ as its only path); tests/ include anything but
#      tools/;
#   2. no include runs back up the order, and no library file sits outside its folders;
#   3. no circle of files: a module is a file without its extension (a.c, a.h and a.cuh are one
#      module "a"); a module depends on another when one of its files includes the other's
#      header or, given the build folder, when its object calls a function the other's object
#      defines (nm; functions only: the registries list every family's table of ops or kernels,
#      and a table is registered, not called). A circle through either kind of arrow, within or
#      across folders and of any length, is an error, and so is a call that runs back up the
#      order.
#
#   check_layers.sh [SOURCE_DIR [BUILD_DIR]]   exit 0 when clean; else one line per problem
#   (BUILD_DIR: the CMake build folder; its library and CLI objects give the symbol arrows)
set -eu
src=${1:-$(dirname "$0")/..}
bld=${2:-}
[ -z "$bld" ] || bld=$(cd "$bld" && pwd)
cd "$src"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/syms"
if [ -n "$bld" ]; then
    # objects of the library and the CLI whose source still exists (a build folder keeps the
    # objects of moved or deleted files), one "object: symbol type ..." line per symbol
    n=0
    for dir in "$bld/CMakeFiles/fp8run_obj.dir" "$bld/CMakeFiles/fp8run.dir"; do
        [ -d "$dir" ] || continue
        for o in $(cd "$dir" && find graph ops passes runtime tools -name '*.o' 2>/dev/null | sort); do
            s=${o%.o}
            [ -f "$s" ] || continue
            nm -P -A "$dir/$o" | sed "s|^$dir/||" >>"$tmp/syms"
            n=$((n + 1))
        done
    done
    if [ $n -eq 0 ]; then
        echo "check_layers: no library objects under $bld/CMakeFiles (build the library first)"
        exit 1
    fi
fi

find graph ops passes runtime tools tests -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.cuh' -o -name '*.def' \) ! -path 'tests/fixtures/*' | sort >"$tmp/files"

# shellcheck disable=SC2046
awk -v symfile="$tmp/syms" '
function rank(p) {
    if (p ~ /^graph\//) return 0
    if (p ~ /^schema\//) return 0
    if (p ~ /^ops\//) return 1
    if (p ~ /^passes\//) return 2
    if (p ~ /^runtime\/io\//) return 3
    if (p ~ /^runtime\/exec\//) return 4
    if (p ~ /^runtime\/dist\//) return 5
    if (p ~ /^runtime\/(train|cuda)\//) return 6
    if (p ~ /^runtime\/api\//) return 7
    if (p == "fp8run.h") return 7
    return -1
}
function folder(p) {
    if (p ~ /^(ops\/cuda|runtime\/[a-z]+|tools\/cli)\//) { sub(/\/[^\/]*$/, "", p); return p }
    sub(/\/.*$/, "", p)
    return p
}
function module(p) {
    sub(/\.(c|h|cu|cuh|def)$/, "", p)
    return p
}
function bad(msg) { print msg; failed = 1 }
function arrow(a, b, why) {
    if (a == b) return
    if (!((a, b) in edge)) edge[a, b] = why
}
BEGIN {
    order = "graph < ops < passes < runtime/io < runtime/exec < runtime/dist < runtime/train = runtime/cuda < runtime/api"
    # symbols: "object.o: name type [value size]"
    while ((getline line < symfile) > 0) {
        n = split(line, fld, " ")
        if (n < 3) continue
        obj = fld[1]; sub(/:$/, "", obj); sub(/\.o$/, "", obj)
        m = module(obj); sym = fld[2]; t = fld[3]
        if (t == "U") { nuse++; use_mod[nuse] = m; use_sym[nuse] = sym }
        else if (t == "T" && !(sym in def)) def[sym] = m
    }
}
{
    if (FNR == 1) {
        f = FILENAME
        top = f; sub(/\/.*$/, "", top)
        fr = rank(f)
        if (top != "tools" && top != "tests" && fr < 0) bad(f ": a library file outside the folders of the order (" order ")")
        if (top != "tests") seen[module(f)] = 1
    }
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
    name = $0; sub(/^[^"]*"/, "", name); sub(/".*$/, "", name)
    where = f ":" FNR ": \"" name "\": "
    if (top == "tools") {
        if (name ~ /\// || name == "fp8run.h") bad(where "tools/ include <fp8run.h> and their own headers only")
        else if ((getline line < (folder(f) "/" name)) < 0) bad(where "not a header in " folder(f) "/")
        else if (close(folder(f) "/" name) || 1) arrow(module(f), module(folder(f) "/" name), f ":" FNR " includes " name)
        next
    }
    if (name ~ /(^|\/)\.\.?\//) { bad(where "write includes from the repository root, without ./ or ../"); next }
    if (name !~ /\// && name != "fp8run.h") { bad(where "write includes from the repository root (\"folder/" name "\")"); next }
    if (top == "tests") {
        if (name ~ /^tools\//) bad(where "tests/ include the library, the public header and tests/, not tools/")
        next
    }
    tr = rank(name)
    if (tr < 0) bad(where folder(f) "/ may include only the library folders (" order ") and fp8run.h")
    else if (fr >= 0 && tr > fr) bad(where "runs back up the order: " folder(f) "/ may not include " folder(name) "/ (" order ")")
    if (name != "fp8run.h" && name !~ /^schema\//) arrow(module(f), module(name), f ":" FNR " includes " name)
    next
}
/^[ \t]*#[ \t]*include[ \t]*</ {
    if (top != "tools") next
    name = $0; sub(/^[^<]*</, "", name); sub(/>.*$/, "", name)
    if (name ~ /^(graph|ops|passes|runtime|schema|tests)\//)
        bad(f ":" FNR ": <" name ">: tools/ include <fp8run.h> and their own headers only")
}
# Tarjan: the strongly connected components of the module graph
function strong(v,    i, n, w, a, members, k) {
    idx[v] = cnt; low[v] = cnt; cnt++
    stack[++sp] = v; on[v] = 1
    n = split(adj[v], a, " ")
    for (i = 1; i <= n; i++) {
        w = a[i]
        if (!(w in idx)) {
            strong(w)
            if (low[w] < low[v]) low[v] = low[w]
        } else if (on[w] && idx[w] < low[v]) low[v] = idx[w]
    }
    if (low[v] == idx[v]) {
        members = ""; k = 0
        do { w = stack[sp--]; on[w] = 0; comp[w] = ncomp; members = members " " w; k++ } while (w != v)
        csize[ncomp] = k; cmembers[ncomp] = members; ncomp++
    }
}
# The circles that stay for now, each with the reason (remove a line when its circle goes; a
# circle not listed here, or one that grows, fails):
#   ops/cuda/attention_cudnn ops/cuda/attention_cudnn_graph: the cuDNN SDPA problem
#     (fr_cudnn_sdpa, attention_cudnn.h) is described where the plan cache is, and the header of
#     the graph builder includes it; the next step moves the problem type into a header below
#     both.
#   ops/cuda/cuda_gemm ops/cuda/gemm_tune: the timing of cuBLASLt candidates is the GEMM
#     wrapper split in two files; they share the algorithm cache through gemm_tune.h (private
#     to them, over cuda_gemm.h) and gemm_tune.c writes the wrapper report cuda_gemm.h declares.
#   ops/cuda/elementwise and elementwise_binary, _grad, _unary (CUDA builds): the family table
#     in elementwise.cu names the launchers of the three others, which call the geometry and
#     flag helpers defined next to the table; the next step moves those helpers into a file of
#     their own below the launchers.
#   runtime/train trainer, train_build, train_lora, train_memory and runtime/cuda cuda_train,
#     cuda_train_backend (CUDA builds): the trainer picks its backend (tr_backend_cuda), and the
#     CUDA backend calls the build helpers of the trainer (inputs, LoRA codes, memory checks),
#     one of which (LoRA) syncs through the trainer; the next step moves the helpers the
#     backends call below the trainer.
#   passes/attention_fuse passes/attention_mask: the symbolic mask reader classifies constant
#     masks with the classifier of the fusion pass, which calls the reader; the next step moves
#     fr_attn_classify_mask into attention_mask.c.
#   ops/cuda/cuda_ctx ops/cuda/quantize (CUDA builds): the context sets the block count of the
#     amax kernels (FP8RUN_QUANT_BLOCKS) through quantize.cu, whose launches report through the
#     context; the next step keeps the count in the context and lets quantize.cu read it there.
#   ops/cuda/attention_cudnn_graph ops/cuda/attention_cudnn_load (CUDA builds): the loader
#     describes what the loaded cuDNN supports with the support check of the graph builder,
#     which words its errors with the status text of the loader; the next step moves the
#     status text below both.
function known_circle(members,    n, m, i, j, key) {
    n = split(members, m, " ")
    # insertion sort: the members in one order
    for (i = 2; i <= n; i++) { key = m[i]; for (j = i - 1; j >= 1 && m[j] > key; j--) m[j + 1] = m[j]; m[j + 1] = key }
    key = ""
    for (i = 1; i <= n; i++) key = key (i > 1 ? " " : "") m[i]
    return key == "ops/cuda/attention_cudnn ops/cuda/attention_cudnn_graph" ||
        key == "ops/cuda/cuda_gemm ops/cuda/gemm_tune" ||
        key == "ops/cuda/elementwise ops/cuda/elementwise_binary ops/cuda/elementwise_grad ops/cuda/elementwise_unary" ||
        key == "runtime/cuda/cuda_train runtime/cuda/cuda_train_backend runtime/train/train_build runtime/train/train_lora runtime/train/train_memory runtime/train/trainer" ||
        key == "passes/attention_fuse passes/attention_mask" ||
        key == "ops/cuda/cuda_ctx ops/cuda/quantize" ||
        key == "ops/cuda/attention_cudnn_graph ops/cuda/attention_cudnn_load"
}
# the circles of one kind of arrow (strongly connected components)
function circles(kind, inc,    k, ab, v, c) {
    split("", adj); split("", node); split("", idx); split("", low); split("", on); split("", comp)
    cnt = 0; sp = 0; ncomp = 0
    split("", arrows)
    if (inc) { for (k in edge) arrows[k] = edge[k] } else { for (k in sedge) arrows[k] = sedge[k] }
    for (k in arrows) {
        split(k, ab, SUBSEP)
        if (!(ab[1] in seen) || !(ab[2] in seen)) continue
        adj[ab[1]] = adj[ab[1]] " " ab[2]
        node[ab[1]] = 1; node[ab[2]] = 1
    }
    for (v in node) if (!(v in idx)) strong(v)
    for (c = 0; c < ncomp; c++) {
        if (csize[c] < 2) continue
        if (known_circle(cmembers[c])) continue
        bad("circle of " kind " among " csize[c] " files:" cmembers[c])
        for (k in arrows) {
            split(k, ab, SUBSEP)
            if ((ab[1] in comp) && (ab[2] in comp) && comp[ab[1]] == c && comp[ab[2]] == c)
                print "    " arrows[k]
        }
    }
}
END {
    for (i = 1; i <= nuse; i++) {
        s = use_sym[i]
        if (!(s in def) || def[s] == use_mod[i]) continue
        a = use_mod[i]; b = def[s]
        if (rank(a) >= 0 && rank(b) > rank(a))
            bad(a ": calls " s " of " b ", which runs back up the order (" order ")")
        if (!((a, b) in sedge)) sedge[a, b] = a " calls " s " of " b
    }
    # the private header of a folder (*_internal.h: those of the trainer, the API and the FP8
    # compile pass) is a shared list of includes and declarations of the files that include it, not
    # a module: a file that includes it depends on what it includes
    for (round = 0; round < 4; round++) {
        split("", add)
        for (k in edge) {
            split(k, ab, SUBSEP)
            if (ab[2] !~ /_internal$/) continue
            for (k2 in edge) {
                split(k2, bc, SUBSEP)
                if (bc[1] == ab[2] && ab[1] != bc[2]) add[ab[1], bc[2]] = edge[k] ", which includes " bc[2]
            }
        }
        for (k in add) if (!(k in edge)) edge[k] = add[k]
    }
    for (v in seen) if (v ~ /_internal$/) delete seen[v]
    circles("includes", 1)
    circles("calls", 0)
    if (!failed) {
        nmod = 0
        for (v in seen) nmod++
        print "check_layers: " order ", tools on <fp8run.h>; no circle of includes" \
            (nuse ? " or calls" : " (give the build folder to check calls)") " among " nmod " modules"
    }
    exit failed
}' $(cat "$tmp/files") || status=$?
status=${status:-0}

# the public header includes nothing of the library
if grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' include/fp8run.h; then
    echo "include/fp8run.h: the public header includes only system headers"
    status=1
fi
exit $status
