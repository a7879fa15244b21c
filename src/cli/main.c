/* utrain command line. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "version") == 0) {
        printf("utrain 0.1.0\n");
        return 0;
    }
    fprintf(stderr, "usage: utrain version\n");
    return 2;
}
