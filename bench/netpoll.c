/* The load of bench/openloop.c (same arguments, same output), from one thread that waits on
 * all its connections with epoll, as kube-apiserver's webhook calls do: the API server is a Go
 * program, and Go parks a goroutine that reads a connection on the runtime's network poller
 * (epoll on Linux), where one thread collects every connection that became readable at once.
 * openloop.c blocks one thread per connection instead, so every answer the server writes wakes
 * a separate sleeping thread, a cost the server pays in its write on a loopback connection and
 * that a netpoller-driven caller mostly does not cause.
 *
 *   netpoll open|closed HOST PORT CAFILE REQUESTFILE RATE SECONDS CONNECTIONS TIMEOUT WARM [MAX_IDLE]
 *
 * Open loop: request i is due at start + i/RATE whether or not earlier ones were answered; it
 * goes out on a free connection as soon as it is due (if none is free it waits for one, and
 * its latency still counts from when it was due); one not sent or not answered within TIMEOUT
 * seconds of being due is unanswered. Closed loop: every connection sends its next request as
 * soon as the previous one is answered, for SECONDS. WARM connections are opened (TLS
 * included) before the clock starts; the rest when a request finds no free connection.
 * MAX_IDLE (default 0, no limit): like Go's http.Transport with MaxIdleConnsPerHost, at most
 * this many answered connections are kept idle and the others are closed; a request that finds
 * no idle connection dials a new one (without blocking the others), up to CONNECTIONS at once.
 * kube-apiserver's webhook client keeps 25 (client-go's transport: idleConnsPerHost).
 *
 * Prints "scheduled N answered N unanswered N", "status CODE N" lines and
 * "latency p50 p99 max" in seconds.
 */
#include "loadclient.h"

#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

enum { IDLE, WRITING, READING, CLOSED, CONNECTING, HANDSHAKE };

typedef struct conn {
    int fd, state;
    SSL *ssl;
    double due;  /* when the request on this connection was due */
    char buf[16384];
    size_t have;
    struct conn *next_free;
} conn_t;

static load_args_t args;
static int epfd, timer_fd;
static double start;
static long total, next_ticket, answered, unanswered, in_flight, statuses[600], latencies_cap;
static double *latencies;
static conn_t *free_list;   /* connected and idle, most recently used first */
static conn_t *spare_list;  /* closed slots, connected again when no idle connection is left */
static long idle_count, dials;

static void record(double latency, int status) {
    if (answered == latencies_cap) {
        latencies_cap = latencies_cap ? latencies_cap * 2 : 65536;
        latencies = realloc(latencies, (size_t)latencies_cap * sizeof(double));
    }
    latencies[answered++] = latency;
    statuses[status > 0 && status < 600 ? status : 0]++;
}

static void watch(conn_t *c, uint32_t events, int op) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(epfd, op, c->fd, &ev);
}

static void disconnect(conn_t *c) {
    if (c->ssl) SSL_free(c->ssl);
    if (c->fd >= 0) close(c->fd);  /* also leaves the epoll set */
    c->ssl = NULL;
    c->fd = -1;
    c->state = CLOSED;
}

/* A blocking connect and handshake (before the clock starts, or on demand), then non-blocking. */
static int connect_tls(conn_t *c) {
    c->fd = tcp_socket();
    if (c->fd < 0) return -1;
    struct timeval tv = {(time_t)args.timeout_s, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect_server(&args, c->fd) != 0) goto fail;
    c->ssl = tls_session(&args, c->fd);
    if (SSL_connect(c->ssl) != 1) goto fail;
    struct timeval none = {0, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
    SSL_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) != 0) goto fail;
    c->state = IDLE;
    watch(c, EPOLLIN, EPOLL_CTL_ADD);  /* an idle connection that becomes readable was closed */
    return 0;
fail:
    disconnect(c);
    return -1;
}

static void release(conn_t *c) {
    if (c->fd >= 0 && args.max_idle > 0 && idle_count >= args.max_idle) disconnect(c);
    if (c->fd < 0) {
        c->next_free = spare_list;
        spare_list = c;
        return;
    }
    c->next_free = free_list;
    free_list = c;
    idle_count++;
}

static conn_t *take(void) {
    conn_t *c = free_list;
    if (c != NULL) {
        free_list = c->next_free;
        idle_count--;
        return c;
    }
    c = spare_list;
    if (c != NULL) spare_list = c->next_free;
    return c;
}

static int busy(const conn_t *c) {
    return c->state == WRITING || c->state == READING || c->state == CONNECTING || c->state == HANDSHAKE;
}

static void failed(conn_t *c) {
    if (busy(c)) {
        unanswered++;
        in_flight--;
    }
    disconnect(c);
    release(c);  /* reconnected when it is next needed */
}

static void try_write(conn_t *c) {
    int n = SSL_write(c->ssl, args.request, (int)args.request_len);
    if (n == (int)args.request_len) {
        c->state = READING;
        c->have = 0;
        watch(c, EPOLLIN, EPOLL_CTL_MOD);
        return;
    }
    int err = SSL_get_error(c->ssl, n);
    if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
        c->state = WRITING;
        watch(c, err == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
        return;
    }
    failed(c);
}

/* The TLS handshake of a connection dialled for a request, without blocking; then the request. */
static void handshake(conn_t *c) {
    int r = SSL_connect(c->ssl);
    if (r == 1) {
        SSL_set_mode(c->ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        try_write(c);
        return;
    }
    int err = SSL_get_error(c->ssl, r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        c->state = HANDSHAKE;
        watch(c, err == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
        return;
    }
    failed(c);
}

static void send_on(conn_t *c, double due) {
    c->due = due;
    in_flight++;
    if (c->state != CLOSED) {
        try_write(c);
        return;
    }
    /* No idle connection: dial one for this request, as Go's http.Transport does, without
     * holding up the other connections. */
    dials++;
    c->fd = tcp_socket();
    if (c->fd < 0 || fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK) != 0 ||
        (connect_server(&args, c->fd) != 0 && errno != EINPROGRESS)) {
        c->state = CONNECTING;  /* counted as unanswered by failed() */
        failed(c);
        return;
    }
    c->ssl = tls_session(&args, c->fd);
    c->state = CONNECTING;
    watch(c, EPOLLOUT, EPOLL_CTL_ADD);
}

/* The answer is all here: the status, or 0 while more is due; -1 if it is malformed. */
static int complete(conn_t *c, int *close_after) {
    c->buf[c->have] = 0;
    char *end = strstr(c->buf, "\r\n\r\n");
    if (end == NULL) return c->have >= sizeof c->buf - 1 ? -1 : 0;
    long length = 0;
    for (char *line = strstr(c->buf, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "content-length:", 15) == 0) length = atol(line + 17);
        if (strncasecmp(line + 2, "connection: close", 17) == 0) *close_after = 1;
    }
    if ((long)c->have < (end + 4 - c->buf) + length) return 0;
    return c->have >= 12 ? atoi(c->buf + 9) : -1;
}

static void on_ready(conn_t *c) {
    if (c->state == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
            failed(c);
            return;
        }
        c->state = HANDSHAKE;
    }
    if (c->state == HANDSHAKE) {
        handshake(c);
        return;
    }
    if (c->state == WRITING) {
        try_write(c);
        if (c->state != READING) return;
    }
    if (c->state != READING) {
        /* Idle and readable: TLS 1.3 session tickets sent after the handshake, or the server
         * closing the connection. */
        char scratch[4096];
        int n = SSL_read(c->ssl, scratch, sizeof scratch);
        int err = n > 0 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, n);
        if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE)
            disconnect(c);  /* it is on the free list already; reconnected when next needed */
        return;
    }
    for (;;) {
        int n = SSL_read(c->ssl, c->buf + c->have, (int)(sizeof c->buf - 1 - c->have));
        if (n <= 0) {
            int err = SSL_get_error(c->ssl, n);
            if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return;
            failed(c);
            return;
        }
        c->have += (size_t)n;
        int close_after = 0, status = complete(c, &close_after);
        if (status < 0) {
            failed(c);
            return;
        }
        if (status > 0) {
            record(now() - c->due, status);
            in_flight--;
            c->state = IDLE;
            if (close_after) disconnect(c);
            release(c);
            return;
        }
    }
}

static void arm(double when) {
    struct itimerspec at = {{0, 0}, {(time_t)when, (long)((when - (double)(time_t)when) * 1e9)}};
    if (at.it_value.tv_sec == 0 && at.it_value.tv_nsec == 0) at.it_value.tv_nsec = 1;
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &at, NULL);
}

int main(int argc, char **argv) {
    int bad = load_args(argc, argv, &args);
    if (bad) return bad;
    int connections = args.connections, warm = args.warm;
    epfd = epoll_create1(0);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, timer_fd, &tev);

    conn_t *conns = calloc((size_t)connections, sizeof(conn_t));
    for (int i = connections - 1; i >= 0; i--) {  /* the free list hands out conns[0] first */
        conns[i].fd = -1;
        conns[i].state = CLOSED;
        if (i < warm && connect_tls(&conns[i]) != 0) {
            fprintf(stderr, "could not open connection %d\n", i);
            return 1;
        }
        release(&conns[i]);
    }
    total = args.open_loop ? (long)(args.rate * args.seconds) : 0;
    /* The connections are open: a caller measuring the server from here on leaves out their
     * TLS handshakes. */
    printf("ready\n");
    fflush(stdout);
    start = now() + 0.1;
    double end = start + args.seconds, give_up = end + args.timeout_s + 1;
    struct epoll_event events[1024];
    for (;;) {
        double t = now();
        if (args.open_loop) {
            /* Every request that is due goes out on a free connection; one that waited longer
             * than the timeout for a connection is unanswered. */
            while (next_ticket < total) {
                double due = start + (double)next_ticket / args.rate;
                if (due > t) break;
                if (t - due >= args.timeout_s) {
                    unanswered++;
                    next_ticket++;
                    continue;
                }
                conn_t *c = take();
                if (c == NULL) break;
                next_ticket++;
                send_on(c, due);
            }
            if (next_ticket >= total && in_flight == 0) break;
            if (next_ticket < total && (free_list != NULL || spare_list != NULL)) arm(start + (double)next_ticket / args.rate);
        } else {
            conn_t *c;
            while (t >= start && t < end && (c = take()) != NULL) send_on(c, t);
            if (t >= end && in_flight == 0) break;
            if (t < start) arm(start);
        }
        if (t > give_up) {
            unanswered += in_flight;
            break;
        }
        int n = epoll_wait(epfd, events, 1024, 100);
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if (c == NULL) {
                uint64_t expirations;
                if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) return 1;
                continue;
            }
            if (c->fd >= 0) on_ready(c);
        }
        /* A request in flight past its timeout is unanswered; its connection is closed. */
        static double scanned;
        if (in_flight && now() - scanned > 0.05) {
            scanned = now();
            double late = scanned - args.timeout_s;
            for (int i = 0; i < connections; i++)
                if (busy(&conns[i]) && conns[i].due < late) failed(&conns[i]);
        }
    }
    printf("dials %ld\n", dials);
    report(args.open_loop ? total : answered + unanswered, answered, unanswered, statuses, latencies);
    return 0;
}
