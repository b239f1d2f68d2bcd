/* sendfile_send PORT PATH: send a file to 127.0.0.1:PORT with sendfile, the first half
 * through the file's own offset, the rest with an explicit offset. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    int fd = open(argv[2], O_RDONLY);
    struct stat st;
    fstat(fd, &st);
    off_t half = st.st_size / 2;
    while (lseek(fd, 0, SEEK_CUR) < half) {
        ssize_t r = sendfile(s, fd, NULL, half - lseek(fd, 0, SEEK_CUR));
        if (r <= 0) { perror("sendfile"); return 1; }
    }
    off_t off = half;
    while (off < st.st_size) {
        ssize_t r = sendfile(s, fd, &off, st.st_size - off);
        if (r <= 0) { perror("sendfile offset"); return 1; }
    }
    if (lseek(fd, 0, SEEK_CUR) != half) { fprintf(stderr, "file offset moved\n"); return 1; }
    close(s);
    return 0;
}
