/* pcap_reader: a libpcap program that reads live packets three ways, printed so that the
 * same binary on the system's libpcap and on Streamline's can be compared line for line
 * (crates/tools/cli/tests/legacy.rs). Usage: pcap_reader DEVICE FILTER N1 N2 N3
 *
 *   loop:     pcap_loop for N1 packets
 *   next_ex:  pcap_next_ex for N2 packets
 *   poll:     pcap_setnonblock, then poll() on pcap_get_selectable_fd and pcap_dispatch
 *             until N3 more packets
 * For each: the count and a checksum of the packets (bytes, caplen and wire length);
 * then pcap_stats' drops. "listening" on stderr once activated, then the library's
 * version (pcap_lib_version, pcap_version). Gives up after 60 s (exit 1).
 */
#include <pcap/pcap.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern char pcap_version[];

struct sum { unsigned long n; uint64_t h; };

static void add(struct sum *s, const struct pcap_pkthdr *h, const u_char *b) {
    uint64_t x = s->h ^ ((uint64_t)h->caplen << 32 | h->len);
    for (bpf_u_int32 i = 0; i < h->caplen; i++) x = (x ^ b[i]) * 1099511628211ULL;
    s->h = x;
    s->n++;
}

static void cb(u_char *user, const struct pcap_pkthdr *h, const u_char *b) {
    add((struct sum *)user, h, b);
}

int main(int argc, char **argv) {
    char err[PCAP_ERRBUF_SIZE];
    if (argc < 6) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    alarm(60);
    unsigned long want[3] = { strtoul(argv[3], 0, 10), strtoul(argv[4], 0, 10), strtoul(argv[5], 0, 10) };
    pcap_t *p = pcap_create(argv[1], err);
    if (!p) { printf("create failed: %s\n", err); return 1; }
    pcap_set_snaplen(p, 262144);
    pcap_set_timeout(p, 1000);
    pcap_set_immediate_mode(p, 1);
    pcap_set_buffer_size(p, 16 << 20);
    if (pcap_activate(p) < 0) { printf("activate failed: %s\n", pcap_geterr(p)); return 1; }
    struct bpf_program prog;
    if (pcap_compile(p, &prog, argv[2], 1, PCAP_NETMASK_UNKNOWN) != 0 || pcap_setfilter(p, &prog) != 0) {
        printf("filter failed: %s\n", pcap_geterr(p));
        return 1;
    }
    pcap_freecode(&prog);
    fprintf(stderr, "listening\n%s\npcap_version %s\n", pcap_lib_version(), pcap_version);

    struct sum s[3] = { { 0, 0 }, { 0, 0 }, { 0, 0 } };
    int r = pcap_loop(p, (int)want[0], cb, (u_char *)&s[0]);
    printf("loop: %d, %lu packets, sum %016llx\n", r, s[0].n, (unsigned long long)s[0].h);

    while (s[1].n < want[1]) {
        struct pcap_pkthdr *h;
        const u_char *b;
        r = pcap_next_ex(p, &h, &b);
        if (r == 1) add(&s[1], h, b);
        else if (r < 0) { printf("next_ex: %d %s\n", r, pcap_geterr(p)); return 1; }
    }
    printf("next_ex: %lu packets, sum %016llx\n", s[1].n, (unsigned long long)s[1].h);

    if (pcap_setnonblock(p, 1, err) != 0) { printf("setnonblock: %s\n", err); return 1; }
    int fd = pcap_get_selectable_fd(p);
    if (fd < 0) { printf("no selectable fd\n"); return 1; }
    unsigned long empty = 0;
    while (s[2].n < want[2]) {
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (poll(&pf, 1, 5000) <= 0) { printf("poll: nothing for 5 s at %lu\n", s[2].n); return 1; }
        r = pcap_dispatch(p, (int)(want[2] - s[2].n), cb, (u_char *)&s[2]);
        if (r < 0) { printf("dispatch: %d %s\n", r, pcap_geterr(p)); return 1; }
        if (r == 0) empty++;
    }
    printf("poll: %lu packets, sum %016llx\n", s[2].n, (unsigned long long)s[2].h);
    /* Readable after everything was read: a spurious wake-up at most, never a packet. */
    fprintf(stderr, "empty dispatches after poll: %lu\n", empty);

    struct pcap_stat ps;
    if (pcap_stats(p, &ps) != 0) { printf("stats: %s\n", pcap_geterr(p)); return 1; }
    printf("stats: drop %u ifdrop %u\n", ps.ps_drop, ps.ps_ifdrop);
    pcap_close(p);
    return 0;
}
