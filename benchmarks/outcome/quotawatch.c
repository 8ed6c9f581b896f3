/* A cgroup file as the kernel has it, timed: reads FILE every POLL_US and prints
 * "<CLOCK_MONOTONIC ns> <contents>" at the first read and whenever the contents change, for SECONDS
 * (or until SIGTERM).  The first line says whether it runs in SCHED_FIFO: "# fifo" or "# other <errno>".
 * The outcome benchmark times BE's quota with it: a watcher in the test's own Python thread waited for a
 * CPU (and the GIL) behind the very load it times, and saw quotas up to 200 ms after the kernel had them.
 * usage: quotawatch FILE POLL_US SECONDS */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static long long ns(const struct timespec *t) { return t->tv_sec * 1000000000LL + t->tv_nsec; }

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: quotawatch FILE POLL_US SECONDS\n");
        return 2;
    }
    long poll_ns = atol(argv[2]) * 1000L;
    long long end_ns;
    struct sched_param sp = {.sched_priority = 1};
    if (sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) == 0)
        printf("# fifo\n");
    else
        printf("# other %d\n", errno);
    signal(SIGTERM, on_term);
    int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    char last[256] = "", buf[256];
    int first = 1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    end_ns = ns(&t) + (long long)(atof(argv[3]) * 1e9);
    while (!stop) {
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (n < 0) {
            perror("pread");
            return 1;
        }
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' ')) n--;
        buf[n] = 0;
        if (first || strcmp(buf, last) != 0) {
            first = 0;
            printf("%lld %s\n", ns(&now), buf);
            fflush(stdout);
            memcpy(last, buf, (size_t)n + 1);
        }
        if (ns(&now) >= end_ns) break;
        t.tv_nsec += poll_ns;
        while (t.tv_nsec >= 1000000000L) {
            t.tv_nsec -= 1000000000L;
            t.tv_sec++;
        }
        if (ns(&t) < ns(&now)) t = now;  /* fell behind: no catch-up burst */
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
    }
    return 0;
}
