/* pcap_probe: libpcap behaviour a capture program relies on, printed one fact per line,
 * so the same binary can run on the system's libpcap and on Streamline's and the outputs
 * be compared (crates/tools/cli/tests/legacy.rs). Usage: pcap_probe DEVICE
 *
 *   nonblock: pcap_setnonblock, then pcap_dispatch on a quiet device returns 0 at once
 *   selectable: pcap_get_selectable_fd is a descriptor poll() says is not readable while
 *               nothing arrives
 *   breakloop: pcap_breakloop from a SIGALRM handler ends a blocked pcap_loop with -2
 *   activated: options after pcap_activate give PCAP_ERROR_ACTIVATED
 *   datalink, snapshot, precision: as set
 *   stats: pcap_stats works on a live handle
 */
#include <pcap/pcap.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static pcap_t *p;

static void on_alarm(int sig) { (void)sig; pcap_breakloop(p); }

static void count(u_char *user, const struct pcap_pkthdr *h, const u_char *b) {
    (void)h; (void)b;
    (*(int *)user)++;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    char err[PCAP_ERRBUF_SIZE];
    if (argc < 2) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Which libpcap answers (stderr: not part of the comparison). */
    fprintf(stderr, "%s\n", pcap_lib_version());
    p = pcap_create(argv[1], err);
    if (!p) { printf("create failed: %s\n", err); return 1; }
    pcap_set_snaplen(p, 96);
    pcap_set_timeout(p, 100);
    pcap_set_tstamp_precision(p, PCAP_TSTAMP_PRECISION_NANO);
    int st = pcap_activate(p);
    if (st < 0) { printf("activate failed: %s\n", pcap_geterr(p)); return 1; }
    printf("activated: %d\n", st);
    printf("set after activate: %d\n", pcap_set_snaplen(p, 64));
    printf("datalink: %d\n", pcap_datalink(p));
    printf("snapshot: %d\n", pcap_snapshot(p));
    printf("precision: %d\n", pcap_get_tstamp_precision(p));
    struct bpf_program prog;
    if (pcap_compile(p, &prog, "udp port 65000", 1, PCAP_NETMASK_UNKNOWN) != 0) { printf("compile failed: %s\n", pcap_geterr(p)); return 1; }
    printf("setfilter: %d\n", pcap_setfilter(p, &prog));
    pcap_freecode(&prog);
    printf("bad filter: %d\n", pcap_compile(p, &prog, "udp port", 1, PCAP_NETMASK_UNKNOWN));

    /* Non-blocking: nothing matches, so dispatch returns 0 at once. */
    printf("setnonblock: %d\n", pcap_setnonblock(p, 1, err));
    printf("getnonblock: %d\n", pcap_getnonblock(p, err));
    int n = 0;
    double t0 = now();
    int r = pcap_dispatch(p, -1, count, (u_char *)&n);
    printf("nonblocking dispatch: %d packets %d, at once %s\n", r, n, now() - t0 < 0.05 ? "yes" : "no");
    pcap_setnonblock(p, 0, err);

    /* Selectable descriptor: not readable while nothing arrives. */
    int fd = pcap_get_selectable_fd(p);
    struct pollfd pf = { .fd = fd, .events = POLLIN };
    printf("selectable fd: %s, readable: %d\n", fd >= 0 ? "yes" : "no", fd >= 0 ? poll(&pf, 1, 200) : -1);

    /* Breakloop from a signal handler ends pcap_loop with PCAP_ERROR_BREAK. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = 300000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    r = pcap_loop(p, -1, count, (u_char *)&n);
    printf("loop after breakloop: %d\n", r);

    struct pcap_stat ps;
    printf("stats: %d\n", pcap_stats(p, &ps));
    printf("setdirection in/out: %d\n", pcap_setdirection(p, PCAP_D_INOUT));
    pcap_close(p);

    /* An unknown device fails at activation, not at creation. */
    pcap_t *q = pcap_create("nosuchdev0", err);
    printf("unknown device: create %s, activate %d\n", q ? "ok" : "failed", q ? pcap_activate(q) : 0);
    if (q) pcap_close(q);
    return 0;
}
