/* sig_recv PORT restart|norestart: a SIGALRM handler (with or without SA_RESTART) fires
 * 200 ms into a blocking recv on a connection whose server answers later; print what the
 * recv returned and how many times the handler ran. The handler says "fired" on stderr. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t fired;
/* Says so on stderr (write is async-signal-safe): the test's server answers only then. */
static void on_alarm(int s) { (void)s; fired++; (void)!write(2, "fired\n", 6); }

int main(int argc, char **argv) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = strcmp(argv[2], "restart") == 0 ? SA_RESTART : 0;
    sigaction(SIGALRM, &sa, NULL);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    struct itimerval it = {.it_value = {.tv_usec = 200000}};
    setitimer(ITIMER_REAL, &it, NULL);
    char buf[16];
    ssize_t r = recv(s, buf, sizeof buf, 0);
    if (r < 0) printf("recv %s handler %d\n", errno == EINTR ? "EINTR" : strerror(errno), (int)fired);
    else printf("recv %d handler %d\n", (int)r, (int)fired);
    return 0;
}
