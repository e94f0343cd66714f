/* fp8run command-line interface (commands are being written). */
#include <stdio.h>

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "fp8run: no command yet\n");
    return 2;
}
