/* two_conns PORT NBYTES: one thread blocks in a read on a connection that never gets
 * data while the main thread sends NBYTES on a second connection; then exit (which ends
 * the blocked thread). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int conn(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); exit(1); }
    return s;
}

static void *idle_reader(void *p) {
    char b[100];
    read(*(int *)p, b, sizeof b);
    return NULL;
}

int main(int argc, char **argv) {
    int port = atoi(argv[1]);
    long n = atol(argv[2]);
    static int idle;
    idle = conn(port);
    pthread_t t;
    pthread_create(&t, NULL, idle_reader, &idle);
    usleep(100000);
    int s = conn(port);
    static char buf[65536];
    for (long off = 0; off < n;) {
        ssize_t r = write(s, buf, n - off < (long)sizeof buf ? n - off : (long)sizeof buf);
        if (r < 0) { perror("write"); return 1; }
        off += r;
    }
    close(s);
    return 0;
}
