/* `fp8run rendezvous`: a launch checked before a run spends GPU time on it. The same launcher
 * as `fp8run train` (--gpus, --nnodes, --node-rank, or torchrun's environment) starts the
 * ranks; each meets rank 0 at MASTER_ADDR:MASTER_PORT exactly as a training run's communicator
 * does (fp8run_dist_rendezvous), prints where it sits and the job's id, and stops. A rank that
 * never comes or dies is named, by every rank, within the rendezvous timeout. Needs no GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

void cli_rendezvous_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run rendezvous [--gpus G] [--nnodes N --node-rank R] [--timeout S]\n"
            "\n"
            "Start (or, under a launcher such as torchrun, join) the ranks of a job and meet at\n"
            "MASTER_ADDR:MASTER_PORT as `fp8run train` with the same options does, then stop: each rank\n"
            "prints its place and the job's id (one line on stdout). Checks node ranks, addresses, ports\n"
            "and firewalls without a GPU. A rank that does not come, dies, or was launched differently\n"
            "makes every rank fail, naming it.\n"
            "\n"
            "options:\n"
            "  --gpus G                ranks of this node (one per GPU)\n"
            "  --nnodes N              nodes of the job (each runs this command with its --node-rank;\n"
            "                          MASTER_ADDR = node 0's address, MASTER_PORT a free port there)\n"
            "  --node-rank R           this node, 0 to N-1\n"
            "  --timeout S             seconds to wait for every rank (default: $FP8RUN_RENDEZVOUS_TIMEOUT,\n"
            "                          else $FP8RUN_NCCL_TIMEOUT, else 600)\n"
            "  -h, --help              show this help\n");
}

/* rank 0's id for the job: random bytes, so two jobs on one port cannot be mistaken */
static void job_id(unsigned char *id, size_t n)
{
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id, 1, n, f) : 0;
    if (f) fclose(f);
    for (size_t i = got; i < n; i++) id[i] = (unsigned char)((unsigned)time(NULL) * 2654435761u >> (i % 24));
}

int cli_rendezvous(int argc, char **argv)
{
    int gpus = 0, nnodes = 0, node_rank = -1, rc = 0;
    double timeout = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v = NULL;
        int m;
        int64_t n;
        if (cli_is_help(argv[i])) {
            cli_rendezvous_help(stdout);
            return 0;
        }
        if (cli_dist_option("rendezvous", argc, argv, &i, &nnodes, &node_rank, &rc)) continue;
        if ((m = cli_option(argc, argv, &i, "rendezvous", "--gpus", &v)) != 0) {
            if (m > 0 && (rc = cli_int64("rendezvous", "--gpus", v, 1, &n)) == 0 && n > 1 << 20)
                rc = cli_usage("rendezvous", "--gpus: %s is too large", v);
            if (m > 0 && rc == 0) gpus = (int)n;
            if (m < 0) rc = CLI_EXIT_USAGE;
        } else if ((m = cli_option(argc, argv, &i, "rendezvous", "--timeout", &v)) != 0) {
            char *end = NULL;
            timeout = m > 0 ? strtod(v, &end) : 0;
            if (m < 0 || !end || *end || !(timeout > 0))
                rc = cli_usage("rendezvous", "--timeout needs a number of seconds > 0");
        } else
            rc = cli_usage("rendezvous", "unknown argument '%s'", argv[i]);
    }
    if (rc != 0) return rc;
    fp8run_train_config o;
    cli_must(fp8run_train_config_init(&o, sizeof o));
    int launcher = 0;
    rc = cli_dist_env(gpus, nnodes, node_rank, &o, &launcher);
    if (rc != 0) return rc;
    if (launcher) return cli_dist_launch(gpus, nnodes, node_rank);
    fp8run_dist_env e = {.struct_size = sizeof e};
    if (fp8run_dist_env_read(&e) != FP8RUN_OK) return cli_fail_status();
    if (!e.present)
        return cli_usage("rendezvous", "nothing to meet: give --gpus G (and --nnodes N --node-rank R), or run under a "
                                       "launcher that sets WORLD_SIZE and RANK");
    unsigned char id[16] = {0};
    if (e.rank == 0) job_id(id, sizeof id);
    if (fp8run_dist_rendezvous(&e, id, sizeof id, timeout) != FP8RUN_OK) return cli_fail_status();
    char hex[2 * sizeof id + 1];
    for (size_t i = 0; i < sizeof id; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    char node[96] = "";
    if (e.nnodes > 0 && e.node_rank >= 0)
        snprintf(node, sizeof node, " (node %d of %d, local rank %d of %d)", e.node_rank, e.nnodes, e.local_rank,
                 e.local_world_size);
    printf("rank %d of %d%s: met at %s:%d, job %s\n", e.rank, e.world_size, node, e.master_addr, e.master_port, hex);
    fflush(stdout);
    return 0;
}
