/* fp8run command-line interface: a table of commands, each in its own file (cli_<name>.c).
 * Exit codes: 0 success, 1 the work failed (bad model, file, shape...), 2 the command line is
 * wrong. Errors go to stderr as "fp8run: error: <message>"; stdout carries only results. */
#include <string.h>

#include "cli.h"

#ifndef FP8RUN_VERSION
#define FP8RUN_VERSION "0.1.0"
#endif

static const cli_command commands[] = {
    {"info", "describe a model or .fbs: inputs/outputs, parameters, ops, FP8 Linear decisions", cli_info,
     cli_info_help},
    {"run", "run the forward pass on CPU and write every output as .npy", cli_run, cli_run_help},
    {"compile", "compile a model for FP8 training at one batch x seq into a .fbs file", cli_compile,
     cli_compile_help},
    {"train", "train a model on a token file (checkpoints, resume, export)", cli_train,
     cli_train_help},
    {"eval", "loss and perplexity of a model or checkpoint on a token file", cli_eval,
     cli_eval_help},
    {"export", "write a checkpoint's trained weights into its ONNX model", cli_export,
     cli_export_help},
    {"generate", "write a Llama-style model with random weights (tiny, 125m, 1b, 8b) as ONNX", cli_generate,
     cli_generate_help},
    {"bench", "time training steps: step time, tokens/s, MFU, memory (table and JSON)", cli_bench,
     cli_bench_help},
    {"prepare", "tokenize text files into token files (train/val split; fp8run, nanoGPT, llm.c)", cli_prepare,
     cli_prepare_help},
    {"sample", "generate text from a model or checkpoint (greedy, temperature, top-p)", cli_sample,
     cli_sample_help},
    {"plot", "draw training logs (--log, --log-fp8) as an SVG page of charts", cli_plot, cli_plot_help},
    {"rendezvous", "check a multi-GPU / multi-node launch: start or join the ranks, meet, stop", cli_rendezvous,
     cli_rendezvous_help},
};
#define N_COMMANDS (int)(sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fp8run <command> [options]\n"
            "       fp8run <command> --help\n"
            "       fp8run --help | --version\n"
            "\n"
            "fp8run runs ONNX models (and, as it grows, trains them in FP8 on Hopper GPUs).\n"
            "\n"
            "commands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nExit status: 0 on success, 1 when the work fails, 2 for a wrong command line.\n");
}

static const cli_command *find_command(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (cli_is_help(first)) {
        usage(stdout);
        return 0;
    }
    if (strcmp(first, "--version") == 0) {
        printf("fp8run %s (commit %s)\n", FP8RUN_VERSION, cli_commit());
        return 0;
    }
    if (strcmp(first, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        const cli_command *c = find_command(argv[2]);
        if (!c) return cli_usage(NULL, "unknown command '%s'", argv[2]);
        c->help(stdout);
        return 0;
    }
    const cli_command *c = find_command(first);
    if (!c) {
        if (first[0] == '-') return cli_usage(NULL, "unknown option '%s'", first);
        return cli_usage(NULL, "unknown command '%s'", first);
    }
    return c->run(argc - 1, argv + 1);
}
