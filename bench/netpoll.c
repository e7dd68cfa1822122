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
 * seconds of being due is unanswered. Closed loop: CONNECTIONS callers, each sending its next
 * request as soon as its previous one is answered, for SECONDS. WARM connections are opened (TLS
 * included) before the clock starts; the rest when a request finds no free connection.
 * A request that finds no idle connection waits and starts a dial (at most CONNECTIONS open or
 * opening), and goes out on whichever connection is free first, its dial's or one another
 * request's answer freed, as in Go's http.Transport; a failed dial fails a request still
 * waiting. Dials (connect and TLS handshake) run on threads of their own at the lowest CPU
 * priority, as Go runs each dial in a goroutine of its own (net/http's transport.go,
 * queueForDial: "go t.dialConnFor(w)") on the API server's other cores: a client that did
 * its handshakes in the loop that sends and reads stalled for tens of milliseconds under
 * churn on this benchmark's one client core, then sent its requests in bursts and dialled
 * again for them, an effect the API server does not have.
 * MAX_IDLE (default 0, no limit): like Go's MaxIdleConnsPerHost, at most this many answered
 * connections are kept idle and the others are closed; kube-apiserver's webhook client keeps
 * 25 (client-go's transport: idleConnsPerHost).
 *
 * Prints "dials N" (connections opened after the start), "scheduled N answered N unanswered N",
 * "status CODE N" lines and "latency p50 p99 max" in seconds.
 */
#include "loadclient.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

enum { IDLE, WRITING, READING, CLOSED, DIALLING };

typedef struct conn {
    int fd, state, dial_ok;
    SSL *ssl;
    double due;  /* when the request on this connection was due */
    char buf[16384];
    size_t have;
    struct conn *next_free;
} conn_t;

static load_args_t args;
static int epfd, timer_fd;
static double start, closed_end;
static long total, next_ticket, answered, unanswered, in_flight, statuses[600], latencies_cap;
static double *latencies;
static conn_t *free_list;   /* connected and idle, most recently used first */
static conn_t *spare_list;  /* closed slots, connected again when no idle connection is left */
static long idle_count, dials, dialing;
/* Requests due and not yet sent, oldest first (their due times): each waits for the first
 * connection that becomes free, its own dial or another request's answered connection, as a
 * request waits in Go's http.Transport (idleConnWait). */
static double *waiting;
static long waiting_head, waiting_len, waiting_cap;

/* Dials run on DIAL_THREADS threads at the lowest CPU priority (see the top of this file): the
 * TLS handshakes of new connections never hold up the loop that sends requests and reads
 * answers. A dial is handed over in a queue and comes back, finished, through a pipe. */
#define DIAL_THREADS 16
static pthread_mutex_t dial_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dial_wanted = PTHREAD_COND_INITIALIZER;
static conn_t **dial_queue;
static long dial_head, dial_len, dial_cap;
static int dialled_pipe[2];
static char dialled_marker;  /* the epoll tag of dialled_pipe[0] */

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

/* A blocking connect and handshake (before the clock starts, or on a dial thread), then
 * non-blocking; the caller watches the connection. */
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
    return 0;
fail:
    disconnect(c);
    return -1;
}

static void *dial_thread(void *unused) {
    (void)unused;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
    for (;;) {
        pthread_mutex_lock(&dial_lock);
        while (dial_len == 0) pthread_cond_wait(&dial_wanted, &dial_lock);
        conn_t *c = dial_queue[dial_head];
        dial_head = (dial_head + 1) % dial_cap;
        dial_len--;
        pthread_mutex_unlock(&dial_lock);
        c->dial_ok = connect_tls(c) == 0;
        if (write(dialled_pipe[1], &c, sizeof c) != sizeof c) abort();
    }
    return NULL;
}

static void push_waiting(double due) {
    if (waiting_head + waiting_len == waiting_cap) {
        if (waiting_head > 0) {  /* slide the queue to the front, then grow it if still full */
            memmove(waiting, waiting + waiting_head, (size_t)waiting_len * sizeof(double));
            waiting_head = 0;
        }
        if (waiting_len == waiting_cap) {
            waiting_cap = waiting_cap ? waiting_cap * 2 : 4096;
            waiting = realloc(waiting, (size_t)waiting_cap * sizeof(double));
        }
    }
    waiting[waiting_head + waiting_len++] = due;
}

static double pop_waiting(void) {
    waiting_len--;
    return waiting[waiting_head++];
}

/* Waiting requests past the timeout are unanswered. */
static void expire_waiting(double t) {
    while (waiting_len > 0 && t - waiting[waiting_head] >= args.timeout_s) {
        pop_waiting();
        unanswered++;
    }
}

/* An answered connection with no request waiting: kept idle, or closed past MAX_IDLE. */
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

/* The most recently used idle connection (what Go hands out first), or NULL. */
static conn_t *take_idle(void) {
    while (free_list != NULL) {
        conn_t *c = free_list;
        free_list = c->next_free;
        idle_count--;
        if (c->fd >= 0) return c;
        c->next_free = spare_list;  /* the server closed it while idle */
        spare_list = c;
    }
    return NULL;
}

static int busy(const conn_t *c) {
    return c->state == WRITING || c->state == READING;
}

static int dialling(const conn_t *c) {
    return c->state == DIALLING;
}

static void failed(conn_t *c) {
    if (busy(c)) {
        unanswered++;
        in_flight--;
    } else if (dialling(c)) {
        dialing--;
        /* In Go the request that started this dial fails with it, unless a connection another
         * request freed reached it first: a waiting request beyond the dials still under way
         * is that request. */
        if (waiting_len > dialing) {
            pop_waiting();
            unanswered++;
        }
    }
    disconnect(c);
    release(c);
}

/* After an SSL call that returned ``ret`` without finishing: wait in ``state`` for what OpenSSL
 * wants (readable or writable), or fail the connection. */
static void wait_for_tls(conn_t *c, int ret, int state) {
    int err = SSL_get_error(c->ssl, ret);
    if (err == SSL_ERROR_WANT_WRITE || err == SSL_ERROR_WANT_READ) {
        c->state = state;
        watch(c, err == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN, EPOLL_CTL_MOD);
        return;
    }
    failed(c);
}

static void try_write(conn_t *c) {
    int n = SSL_write(c->ssl, args.request, (int)args.request_len);
    if (n == (int)args.request_len) {
        c->state = READING;
        c->have = 0;
        watch(c, EPOLLIN, EPOLL_CTL_MOD);
        return;
    }
    wait_for_tls(c, n, WRITING);
}

static void send_on(conn_t *c, double due) {
    c->due = due;
    in_flight++;
    try_write(c);
}

/* A connection is free (answered, or just dialled): the oldest waiting request goes out on it,
 * else it is released. */
static void conn_ready(conn_t *c) {
    expire_waiting(now());
    if (waiting_len > 0) {
        send_on(c, pop_waiting());
        return;
    }
    release(c);
}

/* A dial thread finished: the new connection takes the oldest waiting request, or fails. */
static void dialled(conn_t *c) {
    if (!c->dial_ok) {
        c->state = DIALLING;  /* the thread's disconnect marked it closed */
        failed(c);
        return;
    }
    dialing--;
    c->state = IDLE;
    watch(c, EPOLLIN, EPOLL_CTL_ADD);
    conn_ready(c);
}

/* A request found no idle connection: dial one for it without holding up the others, as Go's
 * http.Transport does (the request takes whichever connection is free first). */
static void start_dial(void) {
    conn_t *c = spare_list;
    if (c == NULL) return;  /* CONNECTIONS are open or opening: the request waits for one */
    spare_list = c->next_free;
    dials++;
    dialing++;
    c->state = DIALLING;
    pthread_mutex_lock(&dial_lock);
    dial_queue[(dial_head + dial_len++) % dial_cap] = c;
    pthread_cond_signal(&dial_wanted);
    pthread_mutex_unlock(&dial_lock);
}

/* A request is due: the oldest waiting one goes out on an idle connection, else it waits and a
 * dial starts for it. */
static void request_due(double due) {
    conn_t *c = take_idle();
    push_waiting(due);
    if (c != NULL)
        send_on(c, pop_waiting());
    else
        start_dial();
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
            double t = now();
            record(t - c->due, status);
            in_flight--;
            c->state = IDLE;
            if (!args.open_loop && t < closed_end) push_waiting(t);  /* this caller's next request */
            if (close_after) {
                disconnect(c);
                release(c);
                if (waiting_len > 0) start_dial();
                return;
            }
            conn_ready(c);
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
    dial_cap = connections;
    dial_queue = calloc((size_t)connections, sizeof(conn_t *));
    if (pipe2(dialled_pipe, O_NONBLOCK) != 0) return 1;
    fcntl(dialled_pipe[1], F_SETFL, 0);  /* the dial threads' writes block, the loop's reads do not */
    struct epoll_event dev = {.events = EPOLLIN, .data.ptr = &dialled_marker};
    epoll_ctl(epfd, EPOLL_CTL_ADD, dialled_pipe[0], &dev);
    for (int i = 0; i < DIAL_THREADS; i++) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, dial_thread, NULL) != 0) return 1;
        pthread_detach(thread);
    }
    for (int i = connections - 1; i >= 0; i--) {  /* the free list hands out conns[0] first */
        conns[i].fd = -1;
        conns[i].state = CLOSED;
        if (i < warm) {
            if (connect_tls(&conns[i]) != 0) {
                fprintf(stderr, "could not open connection %d\n", i);
                return 1;
            }
            conns[i].state = IDLE;
            watch(&conns[i], EPOLLIN, EPOLL_CTL_ADD);  /* an idle connection that becomes readable was closed */
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
    int closed_started = 0;
    closed_end = end;
    struct epoll_event events[1024];
    for (;;) {
        double t = now();
        if (args.open_loop) {
            /* Every request that is due goes out on an idle connection, or waits for the first
             * connection free (its dial's, or one another request freed); one that waited
             * longer than the timeout is unanswered. */
            expire_waiting(t);
            while (next_ticket < total) {
                double due = start + (double)next_ticket / args.rate;
                if (due > t) break;
                next_ticket++;
                if (t - due >= args.timeout_s) {
                    unanswered++;
                    continue;
                }
                request_due(due);
            }
            if (next_ticket >= total && in_flight == 0 && waiting_len == 0) break;
            if (next_ticket < total) arm(start + (double)next_ticket / args.rate);
        } else {
            /* CONNECTIONS callers, each sending its next request when the last is answered. */
            if (t >= start && !closed_started) {
                closed_started = 1;
                for (int i = 0; i < connections; i++) request_due(t);
            }
            expire_waiting(t);
            if (closed_started && in_flight == 0 && waiting_len == 0) break;
            if (t < start) arm(start);
        }
        if (t > give_up) {
            unanswered += in_flight + waiting_len;
            break;
        }
        int n = epoll_wait(epfd, events, 1024, 100);
        for (int i = 0; i < n; i++) {
            conn_t *c = events[i].data.ptr;
            if ((void *)c == (void *)&dialled_marker) {
                conn_t *done[256];
                ssize_t got;
                while ((got = read(dialled_pipe[0], done, sizeof done)) > 0)
                    for (ssize_t k = 0; k < got / (ssize_t)sizeof(conn_t *); k++) dialled(done[k]);
                continue;
            }
            if (c == NULL) {
                uint64_t expirations;
                if (read(timer_fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) return 1;
                continue;
            }
            if (c->fd >= 0) on_ready(c);
        }
        /* A request in flight past its timeout is unanswered; its connection is closed (a dial
         * gives up on its own, at the same timeout). */
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
