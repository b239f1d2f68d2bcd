/* tcp_recv PORT: connect to 127.0.0.1:PORT, receive until EOF cycling read, recv,
 * recvfrom, readv and recvmsg, and write everything to stdout. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    static char buf[65536];
    for (int k = 0;; k++) {
        ssize_t r;
        struct sockaddr_in from;
        socklen_t fl = sizeof from;
        struct iovec v[2] = {{buf, 1000}, {buf + 1000, sizeof buf - 1000}};
        char ctl[64];
        struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = v, .msg_iovlen = 2, .msg_control = ctl, .msg_controllen = sizeof ctl};
        switch (k % 5) {
        case 0: r = read(s, buf, sizeof buf); break;
        case 1: r = recv(s, buf, sizeof buf, 0); break;
        case 2: r = recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl); break;
        case 3: r = readv(s, v, 2); break;
        default: r = recvmsg(s, &m, 0); break;
        }
        if (r < 0) { perror("recv"); return 1; }
        if (r == 0) return 0;
        for (ssize_t o = 0; o < r;) {
            ssize_t w = write(1, buf + o, r - o);
            if (w < 0) { perror("write"); return 1; }
            o += w;
        }
    }
}
