/* A program for the kernel shaping mechanism's tests, built with `cc -static` (so no
 * LD_PRELOAD library reaches it): plain read/write/sendto loops, a fork, and a read that a
 * signal interrupts.
 *
 *   shapeprog copy FILE CHUNK          FILE to stdout in CHUNK-byte reads and writes
 *   shapeprog send FILE CHUNK PORT     FILE to 127.0.0.1:PORT over TCP
 *   shapeprog udp FILE CHUNK PORT      FILE to 127.0.0.1:PORT as CHUNK-byte datagrams
 *   shapeprog fork FILE CHUNK PORT     two processes, each sending FILE over TCP
 *   shapeprog waitsig PORT             connect, block in read, print EINTR when SIGUSR1 comes
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int dial(int port, int type) {
    int s = socket(AF_INET, type, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(0x7f000001);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); exit(1); }
    return s;
}

static int pump(const char *file, size_t chunk, int out, int whole) {
    int in = open(file, O_RDONLY);
    if (in < 0) { perror("open"); return 1; }
    char *buf = malloc(chunk);
    for (;;) {
        ssize_t n = read(in, buf, chunk);
        if (n < 0) { if (errno == EINTR) continue; perror("read"); return 1; }
        if (n == 0) return 0;
        ssize_t off = 0;
        while (off < n) {
            ssize_t w = whole ? send(out, buf, n, 0) : write(out, buf + off, n - off);
            if (w < 0) { if (errno == EINTR) continue; perror("write"); return 1; }
            if (whole && w != n) { fprintf(stderr, "datagram cut: %zd of %zd\n", w, n); return 1; }
            off += w;
        }
    }
}

static void on_usr1(int sig) { (void)sig; }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "waitsig")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1; /* no SA_RESTART: the read must end with EINTR */
        sigaction(SIGUSR1, &sa, 0);
        int s = dial(atoi(argv[2]), SOCK_STREAM);
        printf("waiting\n");
        fflush(stdout);
        char b[64];
        ssize_t n = read(s, b, sizeof b);
        printf("%s\n", n < 0 && errno == EINTR ? "EINTR" : "other");
        return 0;
    }
    if (argc < 4) return 2;
    size_t chunk = strtoul(argv[3], 0, 0);
    if (!strcmp(mode, "copy")) return pump(argv[2], chunk, 1, 0);
    int port = argc > 4 ? atoi(argv[4]) : 0;
    if (!strcmp(mode, "send")) return pump(argv[2], chunk, dial(port, SOCK_STREAM), 0);
    if (!strcmp(mode, "udp")) return pump(argv[2], chunk, dial(port, SOCK_DGRAM), 1);
    if (!strcmp(mode, "fork")) {
        pid_t p = fork();
        int r = pump(argv[2], chunk, dial(port, SOCK_STREAM), 0);
        if (p > 0) { int st; waitpid(p, &st, 0); return r || !WIFEXITED(st) || WEXITSTATUS(st); }
        return r;
    }
    return 2;
}
