/* The launch environment of dist.h: where this rank sits in the job (rank, node, local rank)
 * and where the job meets (MASTER_ADDR:MASTER_PORT). A pure function over a getenv-like
 * callback, so every combination is testable without touching the process environment.
 *
 * The checks are the mistakes a multi-node launch makes: a node rank past the node count, a
 * node count that does not divide the ranks, a global rank that does not follow from the node
 * and local rank (two launch scripts numbering differently), and several nodes with no
 * MASTER_ADDR/MASTER_PORT, where every node would wait on its own loopback until the timeout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/dist.h"

/* an integer variable: *out = def when absent; *given = 1 when present */
static fr_status env_int(fr_getenv_fn get, const char *name, int def, int lo, int *out, int *given)
{
    const char *v = get(name);
    if (given) *given = v && *v;
    if (!v || !*v) {
        *out = def;
        return FR_OK;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > 1 << 20)
        return fr_error(FR_ERR_INVALID_ARG, "environment variable %s='%s': expected an integer >= %d", name, v, lo);
    *out = (int)x;
    return FR_OK;
}

/* NNODES or torchrun's GROUP_WORLD_SIZE (likewise NODE_RANK / GROUP_RANK): both may be set, and
 * must then agree */
static fr_status env_pair(fr_getenv_fn get, const char *a, const char *b, int lo, int *out, int *given)
{
    int va, vb, ga, gb;
    FR_TRY(env_int(get, a, 0, lo, &va, &ga));
    FR_TRY(env_int(get, b, 0, lo, &vb, &gb));
    if (ga && gb && va != vb)
        return fr_error(FR_ERR_INVALID_ARG, "environment: %s=%d and %s=%d disagree (both name the same thing)", a, va, b,
                        vb);
    *given = ga || gb;
    *out = ga ? va : vb;
    return FR_OK;
}

fr_status fr_dist_env_parse(fr_getenv_fn get, fr_dist_env *out)
{
    memset(out, 0, sizeof *out);
    out->node_rank = -1;
    const char *ws = get("WORLD_SIZE");
    out->present = ws && *ws;
    int g_local, g_lws, g_nodes, g_node, g_addr, g_port;
    FR_TRY(env_int(get, "WORLD_SIZE", 1, 1, &out->world, NULL));
    FR_TRY(env_int(get, "RANK", 0, 0, &out->rank, NULL));
    FR_TRY(env_int(get, "LOCAL_RANK", out->rank, 0, &out->local_rank, &g_local));
    FR_TRY(env_int(get, "LOCAL_WORLD_SIZE", 0, 1, &out->local_world, &g_lws));
    FR_TRY(env_pair(get, "NNODES", "GROUP_WORLD_SIZE", 1, &out->nnodes, &g_nodes));
    FR_TRY(env_pair(get, "NODE_RANK", "GROUP_RANK", 0, &out->node_rank, &g_node));
    if (!g_node) out->node_rank = -1;
    FR_TRY(env_int(get, "MASTER_PORT", 29500, 1, &out->port, &g_port));
    if (out->port > 65535) return fr_error(FR_ERR_INVALID_ARG, "environment variable MASTER_PORT=%d is not a TCP port", out->port);
    const int W = out->world;
    if (out->rank >= W)
        return fr_error(FR_ERR_INVALID_ARG, "environment: RANK=%d is not below WORLD_SIZE=%d", out->rank, W);

    /* ranks per node and nodes, each from the other where only one is given */
    if (g_nodes && W % out->nnodes != 0)
        return fr_error(FR_ERR_INVALID_ARG, "environment: WORLD_SIZE=%d ranks do not split evenly over NNODES=%d nodes "
                        "(every node runs the same number of ranks)", W, out->nnodes);
    if (g_lws && W % out->local_world != 0)
        return fr_error(FR_ERR_INVALID_ARG, "environment: WORLD_SIZE=%d is not a multiple of LOCAL_WORLD_SIZE=%d "
                        "(every node runs the same number of ranks)", W, out->local_world);
    if (g_lws && g_nodes && out->local_world * out->nnodes != W)
        return fr_error(FR_ERR_INVALID_ARG, "environment: NNODES=%d x LOCAL_WORLD_SIZE=%d is not WORLD_SIZE=%d",
                        out->nnodes, out->local_world, W);
    if (!g_lws) out->local_world = g_nodes ? W / out->nnodes : (!g_local || out->local_rank == out->rank) && !g_node ? W : 0;
    if (!g_nodes && out->local_world > 0) out->nnodes = W / out->local_world;
    if (!g_local && out->local_world > 0) out->local_rank = out->rank % out->local_world; /* node by node */
    if (out->local_world > 0 && out->local_rank >= out->local_world)
        return fr_error(FR_ERR_INVALID_ARG, "environment: LOCAL_RANK=%d is not below the %d ranks of a node%s",
                        out->local_rank, out->local_world, g_lws ? " (LOCAL_WORLD_SIZE)" : " (WORLD_SIZE / NNODES)");
    if (g_node && out->nnodes > 0 && out->node_rank >= out->nnodes)
        return fr_error(FR_ERR_INVALID_ARG, "environment: NODE_RANK=%d is not below NNODES=%d", out->node_rank, out->nnodes);
    if (out->local_world > 0) {
        const int want = out->rank / out->local_world;
        if (g_node && out->node_rank * out->local_world + out->local_rank != out->rank)
            return fr_error(FR_ERR_INVALID_ARG, "environment: RANK=%d is not NODE_RANK=%d x %d ranks per node + "
                            "LOCAL_RANK=%d (= %d): ranks are numbered node by node", out->rank, out->node_rank,
                            out->local_world, out->local_rank, out->node_rank * out->local_world + out->local_rank);
        if (!g_node && g_local && out->rank % out->local_world != out->local_rank)
            return fr_error(FR_ERR_INVALID_ARG, "environment: RANK=%d with %d ranks per node is local rank %d of node "
                            "%d, not LOCAL_RANK=%d", out->rank, out->local_world, out->rank % out->local_world, want,
                            out->local_rank);
        if (!g_node) out->node_rank = want;
    }

    const char *a = get("MASTER_ADDR");
    g_addr = a && *a;
    if (!g_addr) a = "127.0.0.1";
    if (out->nnodes > 1 && (!g_addr || !g_port)) {
        const char *miss = !g_addr && !g_port ? "MASTER_ADDR and MASTER_PORT are" : !g_addr ? "MASTER_ADDR is" : "MASTER_PORT is";
        return fr_error(FR_ERR_INVALID_ARG, "environment: %d nodes, but %s not set: set both on every node (node 0's "
                        "address and a free port there)", out->nnodes, miss);
    }
    if (strlen(a) >= sizeof out->addr) return fr_error(FR_ERR_INVALID_ARG, "environment variable MASTER_ADDR is too long");
    strcpy(out->addr, a);
    return FR_OK;
}

const char *fr_dist_rank_text(const fr_dist_env *e, int rank, char *buf, size_t n)
{
    if (e && e->local_world > 0 && e->nnodes > 1)
        snprintf(buf, n, "rank %d (node %d, local rank %d)", rank, rank / e->local_world, rank % e->local_world);
    else
        snprintf(buf, n, "rank %d", rank);
    return buf;
}
