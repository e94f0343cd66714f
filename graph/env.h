/* The environment variables fp8run reads: one table (graph/env_knobs.def) and its reader, the
 * library's only getenv. It sits in graph/, the lowest layer, because the budgets of
 * graph/limits.h read it; every layer above reads its variables here. Values are read at each
 * call, not cached: a test or host program may set a variable between calls (not while
 * another thread reads it). */
#ifndef FR_ENV_H
#define FR_ENV_H

typedef enum fr_env {
#define FR_ENV(name, type, dflt, reader, help) FR_ENV_##name,
#include "graph/env_knobs.def"
#undef FR_ENV
    FR_ENV_COUNT
} fr_env;

typedef struct fr_env_knob {
    const char *name;    /* "FP8RUN_PROFILE" */
    const char *type;    /* "BOOL", "INT", "NUMBER", "SIZE", "PATH" or "TEXT" */
    const char *dflt;    /* what unset means, as text */
    const char *reader;  /* "LIBRARY", "CLI", "PYTHON", "SCRIPTS", "TESTS" or "CI" */
    const char *help;    /* one line */
} fr_env_knob;

/* The variable's value; NULL when it is unset (an empty value is returned as it is). */
const char *fr_env_get(fr_env id);
/* Whether the variable is set to exactly `text` ("0" for the switches that are on by default,
 * "1" for those off by default). */
int fr_env_is(fr_env id, const char *text);
/* The variable's name ("FP8RUN_PROFILE"). */
const char *fr_env_name(fr_env id);
/* Entry i of the table, 0 <= i < FR_ENV_COUNT; NULL otherwise. */
const fr_env_knob *fr_env_knob_at(int i);
/* The id of the variable named `name`, or -1 when the table has none. */
int fr_env_find(const char *name);

#endif
