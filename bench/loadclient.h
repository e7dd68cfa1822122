/* What the two load clients share (bench/openloop.c, a thread per connection; bench/netpoll.c,
 * one epoll thread): their arguments, the request they send, the TLS context, the clock, the
 * connection's socket options and the report they print.
 *
 *   CLIENT open|closed HOST PORT CAFILE REQUESTFILE RATE SECONDS CONNECTIONS TIMEOUT WARM
 *
 * The report: "scheduled N answered N unanswered N", "status CODE N" lines and
 * "latency p50 p99 max" in seconds.
 */
#ifndef GPUSHARE_LOADCLIENT_H
#define GPUSHARE_LOADCLIENT_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct {
    int open_loop, port, connections, warm;
    long max_idle;  /* idle connections kept (netpoll); 0: all of them */
    const char *host;
    double rate, seconds, timeout_s;
    char *request;
    size_t request_len;
    SSL_CTX *ctx;
} load_args_t;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The arguments, the request file and a TLS context that verifies the server against CAFILE;
 * 0, or the exit status after saying what is wrong. */
static int load_args(int argc, char **argv, load_args_t *a) {
    if (argc != 11 && argc != 12) {
        fprintf(stderr, "usage: %s open|closed HOST PORT CAFILE REQUESTFILE RATE SECONDS CONNECTIONS "
                        "TIMEOUT WARM [MAX_IDLE]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    a->open_loop = strcmp(argv[1], "open") == 0;
    a->host = argv[2];
    a->port = atoi(argv[3]);
    a->rate = atof(argv[6]);
    a->seconds = atof(argv[7]);
    a->connections = atoi(argv[8]);
    a->timeout_s = atof(argv[9]);
    a->warm = atoi(argv[10]);
    a->max_idle = argc == 12 ? atol(argv[11]) : 0;
    FILE *f = fopen(argv[5], "rb");
    if (!f) { perror(argv[5]); return 2; }
    fseek(f, 0, SEEK_END);
    a->request_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    a->request = malloc(a->request_len);
    if (fread(a->request, 1, a->request_len, f) != a->request_len) { perror("read"); return 2; }
    fclose(f);
    a->ctx = SSL_CTX_new(TLS_client_method());
    if (SSL_CTX_load_verify_locations(a->ctx, argv[4], NULL) != 1) { ERR_print_errors_fp(stderr); return 2; }
    SSL_CTX_set_verify(a->ctx, SSL_VERIFY_PEER, NULL);
    return 0;
}

/* A TCP socket with Nagle off (a request goes out in one piece, at once). */
static int tcp_socket(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* connect(2) to HOST:PORT. */
static int connect_server(const load_args_t *a, int fd) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->port)};
    inet_pton(AF_INET, a->host, &addr.sin_addr);
    return connect(fd, (struct sockaddr *)&addr, sizeof addr);
}

/* A TLS session over ``fd`` that checks the server's certificate names localhost. */
static SSL *tls_session(const load_args_t *a, int fd) {
    SSL *ssl = SSL_new(a->ctx);
    SSL_set_fd(ssl, fd);
    SSL_set_tlsext_host_name(ssl, "localhost");
    SSL_set1_host(ssl, "localhost");
    return ssl;
}

static int by_value(const void *x, const void *y) {
    double p = *(const double *)x, q = *(const double *)y;
    return (p > q) - (p < q);
}

/* Prints the report; sorts ``latencies`` (``answered`` of them, in seconds). */
static void report(long scheduled, long answered, long unanswered, const long statuses[600], double *latencies) {
    if (answered) qsort(latencies, (size_t)answered, sizeof(double), by_value);
    printf("scheduled %ld answered %ld unanswered %ld\n", scheduled, answered, unanswered);
    for (int s = 0; s < 600; s++)
        if (statuses[s]) printf("status %d %ld\n", s, statuses[s]);
    if (answered)
        printf("latency %.6f %.6f %.6f\n", latencies[answered / 2], latencies[(long)((double)answered * 0.99)],
               latencies[answered - 1]);
}

#endif
