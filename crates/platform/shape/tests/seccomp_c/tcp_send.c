/* tcp_send PORT NBYTES [fork]: connect to 127.0.0.1:PORT and send NBYTES of the test
 * pattern, cycling write, writev, send, sendto and sendmsg; with "fork", fork first and
 * let parent and child each send NBYTES/2 on a connection of their own. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned char pat(long i) { return (unsigned char)(i * 7 + 13); }

static int send_all(int port, long n) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    static unsigned char buf[100000];
    long off = 0;
    int k = 0;
    while (off < n) {
        long want = n - off < (long)sizeof buf ? n - off : (long)sizeof buf;
        for (long i = 0; i < want; i++) buf[i] = pat(off + i);
        ssize_t r;
        struct iovec v[2] = {{buf, want / 3}, {buf + want / 3, want - want / 3}};
        struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
        switch (k++ % 5) {
        case 0: r = write(s, buf, want); break;
        case 1: r = writev(s, v, 2); break;
        case 2: r = send(s, buf, want, 0); break;
        case 3: r = sendto(s, buf, want, 0, NULL, 0); break;
        default: r = sendmsg(s, &m, 0); break;
        }
        if (r < 0) { perror("send"); return 1; }
        off += r;
    }
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    int port = atoi(argv[1]);
    long n = atol(argv[2]);
    if (argc > 3 && !strcmp(argv[3], "fork")) {
        pid_t p = fork();
        if (p == 0) _exit(send_all(port, n / 2));
        int rc = send_all(port, n - n / 2), st;
        waitpid(p, &st, 0);
        return rc || !WIFEXITED(st) || WEXITSTATUS(st);
    }
    return send_all(port, n);
}
