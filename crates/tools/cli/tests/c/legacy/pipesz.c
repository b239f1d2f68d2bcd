/* Sizes its pipe with F_SETPIPE_SZ and checks what it got: F_GETPIPE_SZ, and how many
 * bytes the pipe takes before a non-blocking write says EAGAIN. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int p[2];

static long fill(void) {
    char b[4096] = {0};
    long n = 0;
    ssize_t r;
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    while ((r = write(p[1], b, sizeof b)) > 0) n += r;
    fcntl(p[1], F_SETFL, 0);
    return n;
}

static void drain(long n) {
    char b[65536];
    while (n > 0) {
        ssize_t r = read(p[0], b, n < (long)sizeof b ? n : (long)sizeof b);
        if (r <= 0) break;
        n -= r;
    }
}

static void set(unsigned long size) {
    long r = fcntl(p[1], F_SETPIPE_SZ, size);
    int e = errno;
    printf("set %lu: %ld %s; get %d\n", size, r, r < 0 ? strerrorname_np(e) : "-",
           fcntl(p[0], F_GETPIPE_SZ));
}

int main(void) {
    char b[8];
    long n;
    if (pipe(p)) return 3;
    printf("initial %d\n", fcntl(p[0], F_GETPIPE_SZ));
    set(100000);
    printf("holds %ld\n", n = fill());
    set(4096); /* below what is buffered */
    drain(n);
    set(0);
    printf("holds %ld\n", n = fill());
    drain(n);
    set(1 << 20);
    printf("holds %ld\n", n = fill());
    drain(n);
    if (write(p[1], "abc", 3) != 3) return 4;
    set(65536);
    printf("read %zd\n", read(p[0], b, sizeof b));
    set(3000000000UL);
    set((1 << 20) + 1); /* above pipe-max-size: root gets 2 MiB, others EPERM */
    printf("holds %ld\n", n = fill());
    drain(n);
    if (write(p[1], "end", 3) != 3) return 5;
    printf("read %zd\n", read(p[0], b, sizeof b));
    return 0;
}
