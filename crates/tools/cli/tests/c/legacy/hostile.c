/* A child writes 2 MB of 'a' into pipe A (for about a second) while another child (the hostile one) writes
 * garbage into the shared header of A's ring (if it has one); pipe B holds 'B's. The
 * parent reads A to the end and says how it ended and what it read.
 * Usage: hostile random|positions|capacity|locks|bell */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Map the ring beside pipe end fd (a memfd named slpipe:INODE), or NULL. */
static unsigned char *ring_of(int fd) {
    struct stat st;
    char want[64], path[64], link[256];
    if (fstat(fd, &st)) return NULL;
    snprintf(want, sizeof want, "/memfd:slpipe:%lu ", (unsigned long)st.st_ino);
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned char *m = NULL;
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0) continue;
        link[n] = 0;
        if (strncmp(link, want, strlen(want))) continue;
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, atoi(e->d_name), 0);
        if (p != MAP_FAILED) m = p;
        break;
    }
    if (d) closedir(d);
    return m;
}

static void put64(unsigned char *h, int at, uint64_t v) { memcpy(h + at, &v, 8); }
static void put32(unsigned char *h, int at, uint32_t v) { memcpy(h + at, &v, 4); }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *mode = argv[1];
    int a[2], b[2];
    if (pipe(a) || pipe(b)) return 3;
    char bs[1000];
    memset(bs, 'B', sizeof bs);
    if (write(b[1], bs, sizeof bs) != sizeof bs) return 4;
    pid_t w = fork();
    if (w == 0) {
        char buf[1000];
        memset(buf, 'a', sizeof buf);
        close(a[0]);
        for (int i = 0; i < 2000; i++) {
            if (write(a[1], buf, sizeof buf) < 0) _exit(1);
            if (i % 4 == 0) usleep(1000); /* about a second: the spoiling meets a live stream */
        }
        _exit(0);
    }
    pid_t h = fork();
    if (h == 0) {
        close(a[1]);
        unsigned char *r = ring_of(a[0]);
        if (!r) {
            printf("no ring to spoil\n");
            _exit(0);
        }
        srand(42);
        usleep(20000);
        /* Header offsets (beltway::stream::StreamHeader): capacity 8, mode 32, head 64,
         * pollers 72, bell 76, wlock 128, tail 192, space_wanted 212, rlock 256. */
        if (!strcmp(mode, "locks")) {
            put32(r, 128, 1);                   /* init holds the writers' lock */
            put32(r, 256, (uint32_t)getppid()); /* the reader holds the readers' lock */
        } else if (!strcmp(mode, "bell")) {
            for (int i = 0; i < 200; i++) {
                put32(r, 72, 0);
                put32(r, 76, 1); /* a doorbell "pending" that nobody rang */
                put32(r, 212, 0xffffffff);
                usleep(2000);
            }
        } else {
            for (int i = 0; i < 300; i++) {
                if (!strcmp(mode, "capacity")) {
                    put64(r, 8, i & 1 ? 3 : (uint64_t)1 << 40);
                } else if (!strcmp(mode, "positions")) {
                    put64(r, 64, ((uint64_t)rand() << 33) ^ (uint64_t)rand());
                    put64(r, 192, i & 1 ? UINT64_MAX - 5 : (uint64_t)rand());
                } else {
                    int at = rand() % 320;
                    for (int k = 0; k < 8 && at + k < 320; k++) r[at + k] = (unsigned char)rand();
                }
                usleep(1000);
            }
        }
        _exit(0);
    }
    close(a[1]);
    long as = 0, bs_seen = 0, other = 0;
    const char *how = "eof";
    int err = 0;
    char buf[65536];
    for (;;) {
        ssize_t n = read(a[0], buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            how = "error";
            err = errno;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == 'a') as++;
            else if (buf[i] == 'B') bs_seen++;
            else other++;
        }
    }
    int sw, sh;
    waitpid(w, &sw, 0);
    waitpid(h, &sh, 0);
    printf("end: %s %s; a=%ld B=%ld other=%ld; writer %s %d; hostile %s %d\n", how,
           err ? strerrorname_np(err) : "-", as, bs_seen, other,
           WIFSIGNALED(sw) ? "killed by" : "exited", WIFSIGNALED(sw) ? WTERMSIG(sw) : WEXITSTATUS(sw),
           WIFSIGNALED(sh) ? "killed by" : "exited", WIFSIGNALED(sh) ? WTERMSIG(sh) : WEXITSTATUS(sh));
    return 0;
}
