/* Open-loop (and closed-loop) HTTPS load for bench/overload.py, in C so that the load
 * generator is not what saturates on a small machine (the Python client topped out near the
 * rates it had to produce).
 *
 *   openloop open|closed HOST PORT CAFILE REQUESTFILE RATE SECONDS CONNECTIONS TIMEOUT WARM
 *
 * REQUESTFILE holds one complete HTTP/1.1 request, sent as is. Open loop: request i is due
 * at start + i/RATE whether or not earlier ones were answered; one thread per connection
 * takes the next due request, so a request waits for a free connection if all are busy and
 * its latency is measured from when it was due (no coordinated omission). A request not
 * answered TIMEOUT seconds after it was due is unanswered. Closed loop: every connection
 * sends its next request as soon as the previous one is answered, for SECONDS.
 * WARM connections are opened (TLS included) before the clock starts; the rest on demand.
 *
 * Prints "scheduled N answered N unanswered N", "status CODE N" lines and
 * "latency p50 p99 max" in seconds.
 */
#include "loadclient.h"

#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>

static load_args_t args;
static double start;
static long total, next_ticket;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    int fd;
    SSL *ssl;
    double *latencies;
    long count, capacity, unanswered, statuses[600];
} worker_t;

static void sleep_until(double when) {
    double left = when - now();
    if (left <= 0) return;
    struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
    nanosleep(&ts, NULL);
}

static void disconnect(worker_t *w) {
    if (w->ssl) SSL_free(w->ssl);
    if (w->fd >= 0) close(w->fd);
    w->ssl = NULL;
    w->fd = -1;
}

static void set_deadline(worker_t *w, double deadline) {
    double left = deadline - now();
    if (left < 0.001) left = 0.001;
    struct timeval tv = {(time_t)left, (suseconds_t)((left - (double)(time_t)left) * 1e6)};
    setsockopt(w->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(w->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int connect_tls(worker_t *w, double deadline) {
    w->fd = tcp_socket();
    if (w->fd < 0) return -1;
    set_deadline(w, deadline);
    if (connect_server(&args, w->fd) != 0) goto fail;
    w->ssl = tls_session(&args, w->fd);
    if (SSL_connect(w->ssl) != 1) goto fail;
    return 0;
fail:
    disconnect(w);
    return -1;
}

/* One exchange on the worker's connection; the status code, or -1 (the connection is closed). */
static int exchange(worker_t *w, double deadline) {
    if (w->ssl == NULL && connect_tls(w, deadline) != 0) return -1;
    set_deadline(w, deadline);
    if (SSL_write(w->ssl, args.request, (int)args.request_len) != (int)args.request_len) goto fail;
    char buf[16384];
    size_t have = 0;
    char *end = NULL;
    while (end == NULL) {
        if (have == sizeof buf - 1) goto fail;
        int n = SSL_read(w->ssl, buf + have, (int)(sizeof buf - 1 - have));
        if (n <= 0) goto fail;
        have += (size_t)n;
        buf[have] = 0;
        end = strstr(buf, "\r\n\r\n");
    }
    int status = have >= 12 ? atoi(buf + 9) : 0;
    long length = 0;
    int close_after = 0;
    for (char *line = strstr(buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) length = atol(line + 17);
        if (strncasecmp(line + 2, "connection: close", 17) == 0) close_after = 1;
    }
    long body = (long)have - (long)(end + 4 - buf);
    while (body < length) {
        int n = SSL_read(w->ssl, buf, (int)(length - body < (long)sizeof buf ? length - body : (long)sizeof buf));
        if (n <= 0) goto fail;
        body += n;
    }
    if (close_after) disconnect(w);
    return status;
fail:
    disconnect(w);
    return -1;
}

static void record(worker_t *w, double latency, int status) {
    if (w->count == w->capacity) {
        w->capacity = w->capacity ? w->capacity * 2 : 4096;
        w->latencies = realloc(w->latencies, (size_t)w->capacity * sizeof(double));
    }
    w->latencies[w->count++] = latency;
    w->statuses[status > 0 && status < 600 ? status : 0]++;
}

static void *run(void *arg) {
    worker_t *w = arg;
    for (;;) {
        double due;
        if (args.open_loop) {
            pthread_mutex_lock(&lock);
            long ticket = next_ticket < total ? next_ticket++ : -1;
            pthread_mutex_unlock(&lock);
            if (ticket < 0) break;
            due = start + (double)ticket / args.rate;
            sleep_until(due);
            if (now() - due >= args.timeout_s) {  /* no connection was free in time */
                w->unanswered++;
                continue;
            }
        } else {
            due = now();
            if (due >= start + args.seconds) break;
        }
        int status = exchange(w, due + args.timeout_s);
        if (status > 0)
            record(w, now() - due, status);
        else
            w->unanswered++;
    }
    disconnect(w);
    return NULL;
}

int main(int argc, char **argv) {
    int bad = load_args(argc, argv, &args);
    if (bad) return bad;
    int connections = args.connections, warm = args.warm;
    worker_t *workers = calloc((size_t)connections, sizeof(worker_t));
    for (int i = 0; i < connections; i++) {
        workers[i].fd = -1;
        if (i < warm && connect_tls(&workers[i], now() + args.timeout_s) != 0) {
            fprintf(stderr, "could not open connection %d\n", i);
            return 1;
        }
    }
    total = args.open_loop ? (long)(args.rate * args.seconds) : 0;
    /* The connections are open: a caller measuring the server from here on leaves out their
     * TLS handshakes. */
    printf("ready\n");
    fflush(stdout);
    start = now() + 0.1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t *threads = calloc((size_t)connections, sizeof(pthread_t));
    for (int i = 0; i < connections; i++) pthread_create(&threads[i], &attr, run, &workers[i]);
    long answered = 0, unanswered = 0, statuses[600] = {0};
    for (int i = 0; i < connections; i++) {
        pthread_join(threads[i], NULL);
        answered += workers[i].count;
        unanswered += workers[i].unanswered;
        for (int s = 0; s < 600; s++) statuses[s] += workers[i].statuses[s];
    }
    double *all = malloc((size_t)(answered ? answered : 1) * sizeof(double));
    long k = 0;
    for (int i = 0; i < connections; i++) {
        memcpy(all + k, workers[i].latencies, (size_t)workers[i].count * sizeof(double));
        k += workers[i].count;
    }
    report(args.open_loop ? total : answered + unanswered, answered, unanswered, statuses, all);
    return 0;
}
