/* slcat: read a Streamline stream by name (or a PipesFS path) until its end, and say how
 * many records and bytes came, with a checksum over them.
 *
 *   slcat [-m read|peek|acquire] [-n] [-v] NAME
 *
 *   -m read     slfile_read into a private buffer (default)
 *   -m peek     slfile_peek in place, each record verified after use with slfile_check
 *               (the thesis' optimistic loop)
 *   -m acquire  slfile_peek_acquire, use, slfile_check, slfile_peek_complete
 *   -n          open with O_NONBLOCK and wait with slfile_block when a call says EAGAIN
 *   -v          print each record's length
 *
 * Once the stream is open it prints "opened NAME" (so a script can start the writer);
 * at the end "records R bytes B fnv1a H stale S lost L": H hashes each record's length (4
 * bytes, little-endian) and bytes in order, S counts records slfile_check found
 * overwritten after use, L the times records were overwritten before this reader got them
 * (EOVERFLOW: an observer that fell behind; a registered reader never loses any).
 * An error prints the call, errno's name and the library's reason, and exits 1.
 *
 *   cc -O2 -I crates/legacy/capi/include slcat.c -L target/release -lstreamline -Wl,-rpath,$PWD/target/release -o slcat
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    fprintf(stderr, "slcat: %s %s: errno=%s (%s): %s\n", call, name, strerrorname_np(e), strerror(e), slfile_error());
    exit(1);
}

int main(int argc, char **argv) {
    const char *mode = "read";
    int nonblock = 0, verbose = 0, c;
    while ((c = getopt(argc, argv, "m:nv")) != -1) {
        switch (c) {
        case 'm': mode = optarg; break;
        case 'n': nonblock = 1; break;
        case 'v': verbose = 1; break;
        default: fprintf(stderr, "usage: slcat [-m read|peek|acquire] [-n] [-v] NAME\n"); return 2;
        }
    }
    if (optind != argc - 1 || (strcmp(mode, "read") && strcmp(mode, "peek") && strcmp(mode, "acquire"))) {
        fprintf(stderr, "usage: slcat [-m read|peek|acquire] [-n] [-v] NAME\n");
        return 2;
    }
    const char *name = argv[optind];
    int fd = slfile_open(name, O_RDONLY | (nonblock ? O_NONBLOCK : 0));
    if (fd < 0)
        die("slfile_open", name);
    printf("opened %s\n", name);
    fflush(stdout);

    static char buf[1 << 16];
    uint64_t records = 0, bytes = 0, stale = 0, lost = 0, h = 14695981039346656037ULL;
    int64_t t = slfile_check(fd, -1, O_RDONLY);
    if (t < 0)
        die("slfile_check", name);
    for (;;) {
        const void *p = NULL;
        ssize_t n;
        if (!strcmp(mode, "read")) {
            n = slfile_read(fd, buf, sizeof buf);
            p = buf;
        } else if (!strcmp(mode, "peek")) {
            n = slfile_peek(fd, &p, SIZE_MAX);
        } else {
            n = slfile_peek_acquire(fd, &p, SIZE_MAX);
        }
        if (n < 0 && errno == EAGAIN && nonblock) {
            if (slfile_block(fd, -1) < 0)
                die("slfile_block", name);
            continue;
        }
        if (n < 0 && errno == EOVERFLOW) {
            lost++;
            continue;
        }
        if (n < 0)
            die(!strcmp(mode, "read") ? "slfile_read" : !strcmp(mode, "peek") ? "slfile_peek" : "slfile_peek_acquire", name);
        if (n == 0)
            break;
        h = record(h, p, (size_t)n);
        records++;
        bytes += (uint64_t)n;
        if (verbose)
            printf("record %llu %zd\n", (unsigned long long)records, n);
        if (strcmp(mode, "read")) {
            /* Used in place: was it overwritten meanwhile? */
            int64_t t2 = slfile_check(fd, t, O_RDONLY);
            if (t2 < 0) {
                if (errno != ESTALE)
                    die("slfile_check", name);
                stale++;
                t2 = slfile_check(fd, -1, O_RDONLY);
            }
            t = t2;
        }
        if (!strcmp(mode, "acquire") && slfile_peek_complete(fd, (size_t)n) != n)
            die("slfile_peek_complete", name);
    }
    printf("records %llu bytes %llu fnv1a %016llx stale %llu lost %llu\n", (unsigned long long)records, (unsigned long long)bytes, (unsigned long long)h, (unsigned long long)stale,
           (unsigned long long)lost);
    if (slfile_close(fd) < 0)
        die("slfile_close", name);
    return 0;
}
