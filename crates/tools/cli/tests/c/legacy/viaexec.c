/* Starts its target through execl, execlp or execle (the C-variadic exec calls). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char *env[] = {"X=from-execle", NULL};
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "l"))
        execl("./args", "args", "1", "2", "3", "4", "5", "6", "7", (char *)0);
    else if (!strcmp(argv[1], "lp"))
        execlp("args", "args", "p", (char *)0);
    else if (!strcmp(argv[1], "le"))
        execle("./args", "args", "e", "2", "3", "4", "5", "6", "7", "8", (char *)0, env);
    else if (!strcmp(argv[1], "lecat"))
        execle("/bin/cat", "cat", (char *)0, env);
    perror("exec");
    return 127;
}
