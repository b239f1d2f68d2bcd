/* A blocking call on a pipe interrupted by SIGALRM 100 ms in (its handler installed with
 * or without SA_RESTART); the pipe's other end acts 400 ms in. Prints what the call
 * returned. Usage: sigwait read|write|poll|select|epoll restart|intr */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t handled;
static void on_alarm(int s) { (void)s; handled++; }

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *mode = argv[1];
    int writing = strcmp(mode, "write") == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = strcmp(argv[2], "restart") == 0 ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    int p[2];
    if (pipe(p)) return 3;
    if (writing) {
        /* Fill it, so the next write blocks. */
        char b[4096] = {0};
        fcntl(p[1], F_SETFL, O_NONBLOCK);
        while (write(p[1], b, sizeof b) > 0) {}
        fcntl(p[1], F_SETFL, 0);
    }
    pid_t kid = fork();
    if (kid == 0) {
        usleep(400000);
        if (writing) {
            close(p[1]);
            char b[65536];
            while (read(p[0], b, sizeof b) > 0) {}
        } else {
            close(p[0]);
            if (write(p[1], "hello", 5) != 5) _exit(1);
        }
        _exit(0);
    }
    if (writing) close(p[0]); else close(p[1]);
    ualarm(100000, 0);
    long r;
    char buf[100];
    if (writing) {
        r = write(p[1], "x", 1);
    } else if (!strcmp(mode, "read")) {
        r = read(p[0], buf, sizeof buf);
    } else if (!strcmp(mode, "poll")) {
        struct pollfd f = {p[0], POLLIN, 0};
        r = poll(&f, 1, -1);
    } else if (!strcmp(mode, "select")) {
        fd_set s;
        FD_ZERO(&s);
        FD_SET(p[0], &s);
        r = select(p[0] + 1, &s, NULL, NULL, NULL);
    } else {
        int ep = epoll_create1(0);
        struct epoll_event e = {.events = EPOLLIN}, out;
        epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &e);
        r = epoll_wait(ep, &out, 1, -1);
    }
    int err = errno;
    printf("%s %s: %ld %s, handled %d\n", mode, argv[2], r, r < 0 ? strerrorname_np(err) : "-",
           (int)handled);
    fflush(stdout);
    if (writing) close(p[1]);
    waitpid(kid, NULL, 0);
    return 0;
}
