/* slwrite: create a Streamline stream and write COUNT records into it, each with another
 * of the write calls, then close it (its readers see the end).
 *
 *   slwrite NAME COUNT [MODE]      MODE in octal, default 0600
 *
 * Record i is 16 + (i * 7919) % 2000 bytes, byte j of it (i * 31 + j) & 0xff, written by
 * call i % 4: slfile_write; slfile_poke (filled in place, published at the next call);
 * slfile_poke_acquire of 100 bytes more than needed, filled, slfile_poke_complete of what
 * was used; two slfile_append of 8 bytes and slfile_write of the rest. After each record
 * slfile_check on the write side verifies that nothing written since the last check was
 * overwritten.
 *
 * The open returns once a registered reader is there (like a FIFO's); then it prints
 * "created NAME", and at the end "records R bytes B fnv1a H" with slcat's checksum.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streamline.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t record(uint64_t h, const void *p, size_t n) {
    unsigned char len[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, (n >> 24) & 0xff};
    return fnv(fnv(h, len, 4), p, n);
}

static void die(const char *call, const char *name) {
    int e = errno;
    fprintf(stderr, "slwrite: %s %s: errno=%s (%s): %s\n", call, name, strerrorname_np(e), strerror(e), slfile_error());
    exit(1);
}

static void fill(unsigned char *p, unsigned long i, size_t len) {
    for (size_t j = 0; j < len; j++)
        p[j] = (unsigned char)((i * 31 + j) & 0xff);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: slwrite NAME COUNT [MODE]\n");
        return 2;
    }
    const char *name = argv[1];
    unsigned long count = strtoul(argv[2], NULL, 10);
    unsigned int mode = argc == 4 ? (unsigned int)strtoul(argv[3], NULL, 8) : 0600;
    int fd = slfile_open(name, O_WRONLY | O_CREAT | O_EXCL, mode);
    if (fd < 0)
        die("slfile_open", name);
    printf("created %s\n", name);
    fflush(stdout);

    static unsigned char rec[4096];
    uint64_t bytes = 0, h = 14695981039346656037ULL;
    int64_t t = slfile_check(fd, -1, O_WRONLY);
    if (t < 0)
        die("slfile_check", name);
    for (unsigned long i = 0; i < count; i++) {
        size_t len = 16 + (i * 7919) % 2000;
        void *w = NULL;
        fill(rec, i, len);
        switch (i % 4) {
        case 0:
            if (slfile_write(fd, rec, len) != (ssize_t)len)
                die("slfile_write", name);
            break;
        case 1:
            if (slfile_poke(fd, &w, len) != (ssize_t)len)
                die("slfile_poke", name);
            fill(w, i, len);
            break;
        case 2:
            if (slfile_poke_acquire(fd, &w, len + 100) != (ssize_t)(len + 100))
                die("slfile_poke_acquire", name);
            fill(w, i, len);
            if (slfile_poke_complete(fd, len) != (ssize_t)len)
                die("slfile_poke_complete", name);
            break;
        case 3:
            if (slfile_append(fd, rec, 8) != 8 || slfile_append(fd, rec + 8, 8) != 8)
                die("slfile_append", name);
            if (slfile_write(fd, rec + 16, len - 16) != (ssize_t)(len - 16))
                die("slfile_write", name);
            break;
        }
        h = record(h, rec, len);
        bytes += len;
        if ((t = slfile_check(fd, t, O_WRONLY)) < 0)
            die("slfile_check", name);
    }
    if (slfile_close(fd) < 0)
        die("slfile_close", name);
    printf("records %lu bytes %llu fnv1a %016llx\n", count, (unsigned long long)bytes, (unsigned long long)h);
    return 0;
}
