/* ingestd-ceiling: libmicrohttpd alone, reading each request body and answering a constant. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The HTTP ceiling for load/compare: the same daemon set-up as server/http.c
 * (internal polling thread, epoll, a thread pool of --threads, default 2, on a
 * 2-core machine) with nothing behind it. Each request body is read completely
 * and copied into a per-request buffer, as ingestd does before it parses, and
 * every request is answered 200 with one constant JSON body the size of
 * ingestd's usual answer. No JSON parsing, no storage: whatever this serves is
 * what libmicrohttpd and the kernel allow on this machine.
 *
 * Usage: ingestd-ceiling PORT [THREADS]   (listens on 127.0.0.1 only; SIGTERM / SIGINT stop it)
 */

#define MAX_BODY 512000u /* ingestd's request limit */

static const char ANSWER[] = "{\"success\":true,\"accepted\":50,\"duplicates\":0,\"rejected\":[]}";

struct req {
    char *buf;
    size_t len, cap;
    int too_large;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status)
{
    struct MHD_Response *mr;
    enum MHD_Result ret;

    mr = MHD_create_response_from_buffer(sizeof ANSWER - 1, (void *)ANSWER, MHD_RESPMEM_PERSISTENT);
    if (mr == NULL)
        return MHD_NO;
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    ret = MHD_queue_response(conn, status, mr);
    MHD_destroy_response(mr);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    struct req *r = *con_cls;

    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    if (r == NULL) {
        r = calloc(1, sizeof *r);
        if (r == NULL)
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*size > 0) {
        /* Keep the body, as a server that parses it would; drop it past the limit. */
        if (r->len + *size > MAX_BODY) {
            r->too_large = 1;
        } else {
            if (r->len + *size > r->cap) {
                size_t cap = r->cap ? r->cap : 16384;
                while (cap < r->len + *size)
                    cap *= 2;
                char *nb = realloc(r->buf, cap);
                if (nb == NULL)
                    return MHD_NO;
                r->buf = nb;
                r->cap = cap;
            }
            memcpy(r->buf + r->len, data, *size);
            r->len += *size;
        }
        *size = 0;
        return MHD_YES;
    }
    return reply(conn, r->too_large ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_OK);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct req *r = *con_cls;

    (void)cls;
    (void)conn;
    (void)toe;
    if (r != NULL) {
        free(r->buf);
        free(r);
        *con_cls = NULL;
    }
}

int main(int argc, char **argv)
{
    struct MHD_Daemon *d;
    struct sockaddr_in sa;
    struct sigaction act;
    sigset_t stopset, waitset;
    long port, threads = 2;
    char *end;

    if (argc < 2 || argc > 3 || strcmp(argv[1], "--help") == 0) {
        fprintf(stderr, "usage: %s PORT [THREADS]   (127.0.0.1 only; default 2 threads)\n",
                argv[0]);
        return 2;
    }
    errno = 0;
    port = strtol(argv[1], &end, 10);
    if (errno != 0 || *end != '\0' || port < 1 || port > 65535) {
        fprintf(stderr, "bad port: %s\n", argv[1]);
        return 2;
    }
    if (argc == 3) {
        threads = strtol(argv[2], &end, 10);
        if (*end != '\0' || threads < 1 || threads > 64) {
            fprintf(stderr, "bad thread count: %s\n", argv[2]);
            return 2;
        }
    }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    /* Block the stop signals until sigsuspend, so one arriving before it is not missed;
     * MHD's threads start with them blocked too and so never take them. */
    sigemptyset(&stopset);
    sigaddset(&stopset, SIGTERM);
    sigaddset(&stopset, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stopset, &waitset);
    memset(&act, 0, sizeof act);
    act.sa_handler = on_signal;
    sigaction(SIGTERM, &act, NULL);
    sigaction(SIGINT, &act, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* As server/http.c: a pool of one is no pool. */
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG,
                         (unsigned short)port, NULL, NULL, on_request, NULL,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads > 1 ? threads : 0),
                         MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, NULL, MHD_OPTION_END);
    if (d == NULL) {
        fprintf(stderr, "cannot listen on 127.0.0.1:%ld\n", port);
        return 1;
    }
    fprintf(stderr, "listening on http://127.0.0.1:%ld (%ld threads)\n", port, threads);
    while (!stop)
        sigsuspend(&waitset);
    MHD_stop_daemon(d);
    return 0;
}
