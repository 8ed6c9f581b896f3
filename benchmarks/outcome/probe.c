/* LS latency probe: a request arrives every PERIOD_US; each request is a fixed piece of work
 * (WORK iterations: random reads over a BUF_MB buffer, or arithmetic when BUF_MB is 0).
 * Latency = completion - scheduled arrival (queueing and wake-up included).
 * Runs SECONDS (or until SIGTERM), then prints one line per request: "<arrival s since start> <latency us>".
 * usage: probe PERIOD_US WORK BUF_MB SECONDS */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;

static void on_term(int sig) {
    (void)sig;
    stop = 1;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: probe PERIOD_US WORK BUF_MB SECONDS\n");
        return 2;
    }
    double period = atof(argv[1]);
    long work = atol(argv[2]);
    long size = atol(argv[3]) << 20;
    double seconds = atof(argv[4]);
    long n = (long)(seconds * 1e6 / period);
    unsigned char *buf = size > 0 ? malloc(size) : NULL;
    float *lat = malloc(n * sizeof(float));
    if ((size > 0 && buf == NULL) || lat == NULL) return 1;
    if (buf) memset(buf, 1, size);
    signal(SIGTERM, on_term);
    unsigned long long idx = 12345, acc = 0;
    double start = now_us(), t = start;
    long done = 0;
    for (long i = 0; i < n && !stop; i++) {
        t += period;
        double d;
        while ((d = t - now_us()) > 0 && !stop) {
            struct timespec s = {0, (long)(d * 1000)};
            nanosleep(&s, NULL);
        }
        for (long k = 0; k < work; k++) {
            idx = idx * 6364136223846793005ULL + 1442695040888963407ULL;
            acc += buf ? buf[(idx >> 16) % size] : (idx >> 33);
        }
        lat[i] = (float)(now_us() - t);
        done = i + 1;
    }
    for (long i = 0; i < done; i++) printf("%.6f %.1f\n", (period * (i + 1)) / 1e6, lat[i]);
    fprintf(stderr, "acc %llu\n", acc & 1);
    return 0;
}
