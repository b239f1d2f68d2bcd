/* udp_send PORT COUNT SIZE: send COUNT datagrams of SIZE bytes (a 4-byte sequence number,
 * then the pattern) to 127.0.0.1:PORT, cycling sendto, sendmsg and sendmmsg; then wait
 * for one reply and print "reply <text> from <port>" (recvfrom), and a second one with
 * recvmsg ("reply2 <text> from <port>"). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int port = atoi(argv[1]), count = atoi(argv[2]), size = atoi(argv[3]);
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    static unsigned char buf[65536];
    for (int i = 0; i < count; i++) {
        memcpy(buf, &i, 4);
        for (int j = 4; j < size; j++) buf[j] = (unsigned char)(i + j);
        struct iovec v = {buf, size};
        struct mmsghdr mm = {.msg_hdr = {.msg_name = &a, .msg_namelen = sizeof a, .msg_iov = &v, .msg_iovlen = 1}};
        ssize_t r;
        switch (i % 3) {
        case 0: r = sendto(s, buf, size, 0, (struct sockaddr *)&a, sizeof a); break;
        case 1: r = sendmsg(s, &mm.msg_hdr, 0); break;
        default: r = sendmmsg(s, &mm, 1, 0) == 1 ? (ssize_t)mm.msg_len : -1; break;
        }
        if (r != size) { perror("send"); return 1; }
    }
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t r = recvfrom(s, buf, sizeof buf - 1, 0, (struct sockaddr *)&from, &fl);
    if (r < 0) { perror("recvfrom"); return 1; }
    buf[r] = 0;
    printf("reply %s from %d len %d\n", buf, ntohs(from.sin_port), (int)fl);
    struct iovec v = {buf, sizeof buf - 1};
    struct msghdr m = {.msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &v, .msg_iovlen = 1};
    r = recvmsg(s, &m, 0);
    if (r < 0) { perror("recvmsg"); return 1; }
    buf[r] = 0;
    printf("reply2 %s from %d len %d\n", buf, ntohs(from.sin_port), (int)m.msg_namelen);
    return 0;
}
