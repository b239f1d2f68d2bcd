/* Interleaves write(2) with dprintf and vdprintf on stdout: the reader must see them in
 * the order they were made. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
static void say(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdprintf(fd, fmt, ap);
    va_end(ap);
}
int main(void) {
    for (int i = 0; i < 200; i++) {
        char b[32];
        int n = snprintf(b, sizeof b, "write %d\n", i);
        if (write(1, b, n) != n) return 1;
        dprintf(1, "dprintf %d %.2f %s %d %d %d %d %ld\n", i, i * 0.25, "s", 1, 2, 3, 4, 5L + i);
        say(1, "vdprintf %d %g\n", i, i * 1.5);
    }
    return 0;
}
