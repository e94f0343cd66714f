/* The commit the CLI was built from (tools/commit_stamp.cmake writes the header at every build). */
#include "tools/cli/cli.h"

#include "fp8run_commit.h"

const char *cli_commit(void) { return FP8RUN_COMMIT_STR; }
