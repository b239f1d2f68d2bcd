/* A SIGALRM handler writes a byte to a pipe every 200 us while the program makes and
 * closes pipes as fast as it can (the library's fd table changes under the handler). A
 * child counts what it reads. Prints "sent N" and the child prints "read N". */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int out;
static volatile sig_atomic_t sent;
static void on_alarm(int s) {
    (void)s;
    int e = errno;
    char c = 'x';
    if (write(out, &c, 1) == 1) sent++;
    errno = e;
}

int main(void) {
    int p[2];
    if (pipe(p)) return 3;
    out = p[1];
    pid_t kid = fork();
    if (kid == 0) {
        close(p[1]);
        long n = 0;
        char b[4096];
        for (;;) {
            ssize_t r = read(p[0], b, sizeof b);
            if (r > 0) n += r;
            else if (r == 0 || errno != EINTR) break;
        }
        printf("read %ld\n", n);
        fflush(stdout);
        _exit(0);
    }
    close(p[0]);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long loops = 0;
    do {
        int q[2];
        if (pipe(q) == 0) {
            close(q[0]);
            close(q[1]);
        }
        loops++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1500000000L);
    struct itimerval off;
    memset(&off, 0, sizeof off);
    setitimer(ITIMER_REAL, &off, NULL);
    close(p[1]);
    waitpid(kid, NULL, 0);
    printf("sent %d (%ld pipes made)\n", (int)sent, loops);
    return 0;
}
