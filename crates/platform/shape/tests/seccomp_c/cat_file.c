/* cat_file PATH [direct]: copy a file to stdout in 64 KiB pieces, cycling read, pread
 * (with its own offset) and readv; with "direct", open it O_DIRECT and use read only
 * (exit 3 when the file system refuses O_DIRECT). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int direct = argc > 2 && !strcmp(argv[2], "direct");
    int fd = open(argv[1], O_RDONLY | (direct ? O_DIRECT : 0));
    if (fd < 0) { perror("open"); return direct ? 3 : 1; }
    static char buf[65536] __attribute__((aligned(4096)));
    off_t off = 0;
    for (int k = 0;; k++) {
        ssize_t r;
        struct iovec v[2] = {{buf, 5000}, {buf + 5000, sizeof buf - 5000}};
        switch (direct ? 0 : k % 3) {
        case 0: r = read(fd, buf, sizeof buf); break;
        case 1: r = pread(fd, buf, sizeof buf, off); if (r > 0) lseek(fd, r, SEEK_CUR); break;
        default: r = readv(fd, v, 2); break;
        }
        if (r < 0) { perror("read"); return 1; }
        if (r == 0) return 0;
        off += r;
        for (ssize_t o = 0; o < r;) {
            ssize_t w = write(1, buf + o, r - o);
            if (w < 0) { perror("write"); return 1; }
            o += w;
        }
    }
}
