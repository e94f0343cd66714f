/* The training options on the command line, built from the library's table of
 * fp8run_train_config (fp8run_train_config_option): each command takes the entries marked
 * with its bit, parses them with fp8run_train_config_set (range and choices checked there, the
 * error naming the flag) and prints their help from the same entries. */
#include <string.h>

#include "cli.h"

/* Is argv[*i] entry e's flag ("--flag", "--flag=V"; a BOOL's flag alone)? */
static int is_flag(const fp8run_option_info *e, const char *arg)
{
    size_t n = strlen(e->flag);
    if (strncmp(arg, e->flag, n) != 0) return 0;
    return arg[n] == '\0' || (arg[n] == '=' && e->type != FP8RUN_OPTION_BOOL);
}

int cli_config_option(const char *cmd, unsigned command, int argc, char **argv, int *i, fp8run_train_config *c,
                      cli_given *given, int *rc)
{
    fp8run_option_info e = {.struct_size = sizeof e};
    for (int k = 0; k < fp8run_train_config_option_count(); k++) {
        if (fp8run_train_config_option(k, &e) != FP8RUN_OK || !e.flag || !(e.commands & command) ||
            !is_flag(&e, argv[*i]))
            continue;
        const char *v = NULL;
        if (e.type != FP8RUN_OPTION_BOOL && cli_option(argc, argv, i, cmd, e.flag, &v) < 0) {
            *rc = CLI_EXIT_USAGE;
            return 1;
        }
        if (fp8run_train_config_set(c, e.flag, v) != FP8RUN_OK) {
            *rc = cli_usage(cmd, "%s", cli_last_error());
            return 1;
        }
        if (given && k < (int)sizeof given->set) given->set[k] = 1;
        *rc = 0;
        return 1;
    }
    return 0;
}

int cli_config_given(const cli_given *given, const char *name)
{
    int k = fp8run_train_config_find(name);
    return k >= 0 && k < (int)sizeof given->set && given->set[k];
}

int cli_config_fixed_flag(const char *arg)
{
    fp8run_option_info e = {.struct_size = sizeof e};
    for (int k = 0; k < fp8run_train_config_option_count(); k++)
        if (fp8run_train_config_option(k, &e) == FP8RUN_OK && e.flag && (e.commands & FP8RUN_OPTION_COMPILED) &&
            strncmp(arg, e.flag, strlen(e.flag)) == 0 && (arg[strlen(e.flag)] == '\0' || arg[strlen(e.flag)] == '='))
            return 1;
    return 0;
}

void cli_config_help(FILE *f, unsigned command, const fp8run_train_config *c, const char *const *no_default)
{
    fp8run_option_info e = {.struct_size = sizeof e};
    for (int k = 0; k < fp8run_train_config_option_count(); k++) {
        if (fp8run_train_config_option(k, &e) != FP8RUN_OK || !e.flag || !(e.commands & command)) continue;
        char left[160], def[64];
        int n = snprintf(left, sizeof left, "  %s", e.flag);
        if (e.metavar)
            n += snprintf(left + n, sizeof left - (size_t)n, " %s", e.metavar);
        for (int j = 0; e.choices && e.choices[j] && n < (int)sizeof left; j++)
            n += snprintf(left + n, sizeof left - (size_t)n, "%c%s", j ? '|' : ' ', e.choices[j]);
        fprintf(f, n < 26 ? "%-26s" : "%s\n                          ", left);
        if (fp8run_train_config_get(c, k, def, sizeof def) != FP8RUN_OK) def[0] = '\0'; /* shown without one */
        int show = e.type != FP8RUN_OPTION_BOOL && def[0] && strcmp(def, "nan") != 0;
        for (int j = 0; no_default && no_default[j]; j++) show = show && strcmp(no_default[j], e.name) != 0;
        if (show)
            fprintf(f, "%s%s(default %s)\n", e.help, e.help[0] ? " " : "", def);
        else
            fprintf(f, "%s\n", e.help);
    }
}

int cli_choice(const char *cmd, const char *opt, const char *text, const char *const *choices, int *out)
{
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, choices[i], sizeof list - strlen(list) - 1);
    }
    return cli_usage(cmd, "%s: '%s' is not one of %s", opt, text, list);
}
