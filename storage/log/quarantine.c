/* quarantine: a bounded second log of what was refused, appended by its own writer thread. */
#include "storage/log/quarantine.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "storage/log/log.h"
#include "storage/log/qshare.h"

/*
 * DESIGN. Request threads format a record (a few microseconds, only for refused input) into one
 * node and append it to a list under a mutex, or count it dropped when the queued bytes would
 * pass queue_bytes: memory stays bounded however fast a client sends garbage, and nobody waits
 * for a disk. The writer thread takes the whole list at once, appends it in chunks that keep a
 * segment near segment_bytes, fsyncs each chunk (one fsync per batch, as the group commit does),
 * then applies the size bound. The bytes of a batch stay counted as queued until it is written,
 * so the bound also covers what the writer holds.
 *
 * SHARES. The bound is shared by source, so one source (one public browser key) flooding the
 * quarantine cannot push out another's records. The writer counts the bytes each source holds
 * (storage/log/qshare.h; read from the whole log when the writer starts). While the log is over
 * max_bytes, the oldest segment goes, and first its records of sources within their share
 * (max_bytes / sources with records) are appended again at the end, with their bytes and
 * receivedAt unchanged (new offsets); the records of sources over their share go with the
 * segment. The largest source is always over its share when the log is over the bound, so its
 * oldest records go first. Each closed segment is swept at most once per batch (bounded work),
 * and the carried copies are fsynced before the segment is deleted: a crash in between leaves
 * a record twice, never none. Should a sweep fail (a read or write error), the oldest segments
 * are deleted as they are and the counts are read again: the bound holds whatever happens.
 *
 * Functions: JSON output (out_s, utf8_seq, utf8_prefix, put_str, put_base64, raw_plan, put_opt,
 * put_time), format, shares (rescan, carry, sweep_oldest, enforce), the writer (write_chunk,
 * write_batch, writer), and the public functions.
 */

#define MIN_SEGMENT (16u * 1024)
#define MAX_SEGMENT (64u * 1024 * 1024)
#define MIN_QUEUE   (256u * 1024)
#define MAX_QUEUE   (8u * 1024 * 1024)

struct node {
    struct node *next;
    int64_t received_ms;
    uint32_t len;
    char data[];
};

struct quarantine {
    char *dir;
    log_t *log;
    quarantine_options_t o;
    qshare_t *share; /* the writer thread's: bytes per source; NULL: out of memory, plain FIFO */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t work, idle;
    struct node *head, *tail;
    uint64_t queued_bytes; /* queued plus the batch being written */
    uint64_t enqueued;     /* records queued so far (quarantine_flush waits for done >= it) */
    uint64_t done;         /* records the writer finished (written or lost) */
    bool stop;
    quarantine_stats_t s;
};

/* ---- JSON output into a buffer sized up front (format() computes the bound) ---- */

typedef struct out {
    char *p;
} out_t;

static void out_s(out_t *o, const char *s)
{
    size_t n = strlen(s);
    memcpy(o->p, s, n);
    o->p += n;
}

/* Length of the UTF-8 sequence at s (1..4), 0 when it is not a valid one (overlong forms,
 * surrogates, above U+10FFFF, cut short); *cp gets the code point. */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;

    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

/* Bytes of s[0..n) that form whole valid UTF-8 characters from the start. */
static size_t utf8_prefix(const char *s, size_t n)
{
    size_t i = 0;
    uint32_t cp;

    while (i < n) {
        size_t l = utf8_seq((const unsigned char *)s + i, n - i, &cp);
        if (l == 0)
            break;
        i += l;
    }
    return i;
}

/*
 * A JSON string of s[0..n), escaped as the event log's payloads are (docs/log-format.md,
 * "Strings"): quotes, backslashes and controls, and also C1 controls and U+2028/U+2029, so `log
 * cat` output stays NDJSON for every line splitter. A byte that is not UTF-8 becomes U+FFFD.
 * Writes at most 2 + 6 * n bytes.
 */
static void put_str(out_t *o, const char *s, size_t n)
{
    static const char HEX[] = "0123456789ABCDEF";
    const unsigned char *u = (const unsigned char *)s;
    uint32_t cp;

    *o->p++ = '"';
    for (size_t i = 0; i < n;) {
        size_t l = utf8_seq(u + i, n - i, &cp);
        if (l == 0) {
            out_s(o, "\\uFFFD");
            i++;
            continue;
        }
        if (cp == '"' || cp == '\\') {
            *o->p++ = '\\';
            *o->p++ = (char)cp;
        } else if (cp < 0x20 || (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029) {
            o->p += sprintf(o->p, "\\u%c%c%c%c", HEX[(cp >> 12) & 15], HEX[(cp >> 8) & 15],
                            HEX[(cp >> 4) & 15], HEX[cp & 15]);
        } else {
            memcpy(o->p, s + i, l);
            o->p += l;
        }
        i += l;
    }
    *o->p++ = '"';
}

/* Standard base64 with padding of s[0..n): at most 2 + 4 * (n / 3 + 1) bytes with quotes. */
static void put_base64(out_t *o, const unsigned char *s, size_t n)
{
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    *o->p++ = '"';
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)s[i + 1] << 8;
        if (i + 2 < n)
            v |= s[i + 2];
        *o->p++ = B64[(v >> 18) & 63];
        *o->p++ = B64[(v >> 12) & 63];
        *o->p++ = i + 1 < n ? B64[(v >> 6) & 63] : '=';
        *o->p++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o->p++ = '"';
}

/*
 * What of e->raw a record keeps: *n bytes, as text when *text (the first *n are UTF-8), else in
 * base64 (e.g. a gzip body). A cut may split the last character: the cut then moves back to the
 * character's start (up to 3 bytes), so that text stays text. *truncated: not all was kept.
 */
static void raw_plan(const quarantine_entry_t *e, size_t *n, bool *text, bool *truncated)
{
    size_t keep = e->raw_len < e->raw_cap ? e->raw_len : e->raw_cap;
    size_t valid = e->raw ? utf8_prefix(e->raw, keep) : 0;

    *text = valid == keep || (keep < e->raw_len && keep - valid < 4);
    *n = *text ? valid : keep;
    *truncated = *n < e->raw_len || e->size > *n;
}

static void put_opt(out_t *o, const char *name, const char *v)
{
    out_s(o, name);
    if (v)
        put_str(o, v, strlen(v));
    else
        out_s(o, "null");
}

/* ISO-8601 UTC with milliseconds, as the event log's receivedAt. */
static void put_time(out_t *o, int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    int frac = (int)(ms % 1000);

    if (ms < 0 || gmtime_r(&t, &tm) == NULL || tm.tm_year + 1900 > 9999) {
        out_s(o, "null");
        return;
    }
    o->p += sprintf(o->p, "\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"", tm.tm_year + 1900,
                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

static size_t opt_len(const char *s)
{
    return s ? strlen(s) : 0;
}

/* The record of e as one node (malloc'ed), or NULL when out of memory. */
static struct node *format(const quarantine_entry_t *e)
{
    size_t raw = e->raw_len < e->raw_cap ? e->raw_len : e->raw_cap;
    size_t meta =
        opt_len(e->reason) + opt_len(e->error) + opt_len(e->request_id) + opt_len(e->source);
    /* Field names, numbers and the time take under 256 bytes; a string at most 6 per byte. */
    size_t cap = 256 + 6 * meta + 6 * raw + 8;
    struct node *n = malloc(sizeof(*n) + cap);
    bool truncated = false;

    if (!n)
        return NULL;
    out_t o = {n->data};
    put_opt(&o, "{\"reason\":", e->reason);
    put_opt(&o, ",\"error\":", e->error);
    put_opt(&o, ",\"requestId\":", e->request_id);
    put_opt(&o, ",\"source\":", e->source);
    out_s(&o, ",\"receivedAt\":");
    put_time(&o, e->received_ms);
    if (e->index >= 0)
        o.p += sprintf(o.p, ",\"scope\":\"event\",\"index\":%lld", (long long)e->index);
    else
        out_s(&o, ",\"scope\":\"request\"");
    o.p += sprintf(o.p, ",\"size\":%llu",
                   (unsigned long long)(e->size > e->raw_len ? e->size : e->raw_len));
    size_t keep;
    bool text;
    raw_plan(e, &keep, &text, &truncated);
    out_s(&o, truncated ? ",\"truncated\":true" : ",\"truncated\":false");
    if (text) {
        out_s(&o, ",\"raw\":");
        put_str(&o, e->raw ? e->raw : "", keep);
    } else {
        out_s(&o, ",\"rawBase64\":");
        put_base64(&o, (const unsigned char *)e->raw, keep);
    }
    *o.p++ = '}';
    n->next = NULL;
    n->received_ms = e->received_ms;
    n->len = (uint32_t)(o.p - n->data);
    return n;
}

/* ---- shares ---- */

#define CARRY_CHUNK (1024u * 1024) /* carried bytes appended at a time (one fsync at the end) */

static uint64_t rec_bytes(uint32_t len)
{
    return LOG_RECORD_HEADER + (uint64_t)len;
}

/* Counts every retained record's bytes by source anew (at start, and after a failed sweep).
 * Without memory for the table the bound falls back to deleting the oldest segments. */
static void rescan(quarantine_t *q)
{
    log_info_t li;
    log_reader_t *r = NULL;
    log_record_t rec;
    qshare_t *t = qshare_new();

    qshare_free(q->share);
    q->share = NULL;
    log_get_info(q->log, &li);
    if (!t || log_reader_open(q->dir, li.first_offset, &r) != LOG_OK)
        goto fail;
    while (log_reader_next(r, li.synced_offset, &rec) == LOG_OK)
        if (qshare_add(t, rec.data, rec.len, rec_bytes(rec.len)) != 0)
            goto fail;
    log_reader_close(r);
    q->share = t;
    return;
fail:
    log_reader_close(r);
    qshare_free(t);
}

/* Appends the pending carried records recs[0..*n) and empties the list. 0 or -1. */
static int carry(quarantine_t *q, log_record_t *recs, size_t *n, size_t *used)
{
    int rc = *n > 0 ? log_append(q->log, recs, *n) : LOG_OK;
    *n = 0;
    *used = 0;
    return rc == LOG_OK ? 0 : -1;
}

/*
 * Sweeps the oldest segment (the log has two or more): records of sources over their share are
 * dropped from the table, the others appended again and fsynced, then the segment is deleted.
 * Returns 0 with *dropped and *carried added to, or -1 (nothing deleted; the table may be off).
 */
static int sweep_oldest(quarantine_t *q, uint64_t *dropped, uint64_t *carried)
{
    uint64_t *bases = NULL;
    log_info_t di;
    log_reader_t *r = NULL;
    log_record_t rec, *recs = NULL;
    char *arena = malloc(CARRY_CHUNK);
    size_t n = 0, used = 0, cap = 0;
    uint64_t gone = 0, kept = 0;
    int rc = -1, lrc;

    if (!arena || log_describe(q->dir, &di, &bases) != LOG_OK || di.segments < 2 ||
        log_reader_open(q->dir, bases[0], &r) != LOG_OK)
        goto out;
    while ((lrc = log_reader_next(r, bases[1], &rec)) == LOG_OK) {
        if (qshare_over(q->share, rec.data, rec.len, q->o.max_bytes)) {
            qshare_sub(q->share, rec.data, rec.len, rec_bytes(rec.len));
            gone++;
            continue;
        }
        if (used + rec.len > CARRY_CHUNK && carry(q, recs, &n, &used) != 0)
            goto out;
        if (n == cap) {
            size_t c = cap ? 2 * cap : 64;
            log_record_t *grown = realloc(recs, c * sizeof(*grown));
            if (!grown)
                goto out;
            recs = grown;
            cap = c;
        }
        /* A record longer than the arena (never: quarantine_add's caps keep them far smaller)
         * would need its own buffer; dropping it keeps the sweep simple. */
        if (rec.len > CARRY_CHUNK) {
            qshare_sub(q->share, rec.data, rec.len, rec_bytes(rec.len));
            gone++;
            continue;
        }
        memcpy(arena + used, rec.data, rec.len);
        recs[n] =
            (log_record_t){.received_ms = rec.received_ms, .data = arena + used, .len = rec.len};
        used += rec.len;
        n++;
        kept++;
    }
    if (lrc != LOG_END || carry(q, recs, &n, &used) != 0)
        goto out;
    if (kept > 0 && log_sync(q->log) != LOG_OK)
        goto out;
    /* Only the swept segment may go: every record of the next one is at or past bases[1]. */
    log_retain_result_t rr;
    if (log_retain(q->log, 0, 0, 1, bases[1], &rr) != LOG_OK || rr.segments != 1)
        goto out;
    *dropped += gone;
    *carried += kept;
    rc = 0;
out:
    if (rc != 0 && kept > 0)
        log_rollback(q->log); /* carried copies not yet synced: the originals stay */
    log_reader_close(r);
    free(bases);
    free(recs);
    free(arena);
    return rc;
}

/* Applies the size bound (see SHARES above); *deleted and *carried get what it did. */
static void enforce(quarantine_t *q, uint64_t *deleted, uint64_t *carried)
{
    log_info_t li;

    *deleted = *carried = 0;
    log_get_info(q->log, &li);
    if (li.bytes <= q->o.max_bytes)
        return;
    uint64_t steps = li.segments > 0 ? li.segments - 1 : 0;
    while (q->share && li.bytes > q->o.max_bytes && steps-- > 0) {
        if (sweep_oldest(q, deleted, carried) != 0) {
            qshare_free(q->share); /* counted from the log again below */
            q->share = NULL;
            break;
        }
        log_get_info(q->log, &li);
    }
    if (!q->share) {
        log_retain_result_t rr = {0};
        log_retain(q->log, 0, 0, q->o.max_bytes, LOG_RETAIN_UNBOUNDED, &rr);
        *deleted += rr.records;
        rescan(q);
    }
}

/* ---- the writer ---- */

/* Appends and fsyncs n records. Returns how many are durable (n, or 0 on failure). */
static size_t write_chunk(quarantine_t *q, log_record_t *recs, size_t n)
{
    if (log_append(q->log, recs, n) != LOG_OK)
        return 0; /* log_append rolled back already */
    if (log_sync(q->log) != LOG_OK) {
        log_rollback(q->log);
        return 0;
    }
    return n;
}

/* Writes a batch (the list from `list`), chunked so a segment stays near segment_bytes. */
static void write_batch(quarantine_t *q, struct node *list, size_t count, uint64_t *written,
                        uint64_t *failed)
{
    log_record_t *recs = calloc(count, sizeof(*recs));
    size_t i = 0;

    *written = *failed = 0;
    if (!recs) {
        *failed = count;
        return;
    }
    for (struct node *n = list; n; n = n->next, i++) {
        recs[i].received_ms = n->received_ms;
        recs[i].data = n->data;
        recs[i].len = n->len;
    }
    for (size_t start = 0; start < count;) {
        log_info_t li;
        log_get_info(q->log, &li);
        /* log_append rotates first when the active segment is full (we sync every chunk). */
        uint64_t fill =
            li.active_bytes >= q->o.segment_bytes ? LOG_SEGMENT_HEADER : li.active_bytes;
        uint64_t room = q->o.segment_bytes > fill ? q->o.segment_bytes - fill : 0;
        size_t end = start + 1; /* at least one record, whatever its size */
        uint64_t used = LOG_RECORD_HEADER + recs[start].len;
        while (end < count && used + LOG_RECORD_HEADER + recs[end].len <= room)
            used += LOG_RECORD_HEADER + recs[end++].len;
        size_t ok = write_chunk(q, recs + start, end - start);
        for (size_t k = start; q->share && k < start + ok; k++) {
            if (qshare_add(q->share, recs[k].data, recs[k].len, rec_bytes(recs[k].len)) != 0) {
                qshare_free(q->share); /* enforce counts from the log again */
                q->share = NULL;
            }
        }
        *written += ok;
        *failed += (end - start) - ok;
        start = end;
    }
    free(recs);
}

/* The stats of the log after the writer changed it, and what enforce did. Under q->mu. */
static void update_stats(quarantine_t *q, uint64_t deleted, uint64_t carried)
{
    log_info_t li;

    log_get_info(q->log, &li);
    q->s.deleted += deleted;
    q->s.carried += carried;
    q->s.first_offset = li.first_offset;
    q->s.next_offset = li.synced_offset;
    q->s.bytes = li.bytes;
    q->s.segments = li.segments;
    q->s.sources = q->share ? qshare_sources(q->share) : 0;
}

static void *writer(void *arg)
{
    quarantine_t *q = arg;
    uint64_t deleted, carried;

    /* The shares from what the log holds, and a bound lowered since the last run, before any
     * new record: records added meanwhile wait in the queue. */
    rescan(q);
    enforce(q, &deleted, &carried);
    pthread_mutex_lock(&q->mu);
    update_stats(q, deleted, carried);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->work, &q->mu);
        if (!q->head)
            break;
        struct node *list = q->head;
        q->head = q->tail = NULL;
        pthread_mutex_unlock(&q->mu);

        size_t count = 0;
        uint64_t bytes = 0, written = 0, failed = 0;
        for (struct node *n = list; n; n = n->next) {
            count++;
            bytes += n->len;
        }
        write_batch(q, list, count, &written, &failed);
        enforce(q, &deleted, &carried);
        while (list) {
            struct node *next = list->next;
            free(list);
            list = next;
        }

        pthread_mutex_lock(&q->mu);
        q->queued_bytes -= bytes;
        q->done += count;
        q->s.written += written;
        q->s.failed += failed;
        update_stats(q, deleted, carried);
        pthread_cond_broadcast(&q->idle);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* ---- public ---- */

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static int from_log_status(int rc)
{
    switch (rc) {
    case LOG_NOMEM:
        return QUARANTINE_NOMEM;
    case LOG_CORRUPT:
        return QUARANTINE_CORRUPT;
    case LOG_INVALID:
        return QUARANTINE_INVALID;
    default:
        return QUARANTINE_EIO;
    }
}

int quarantine_open(const char *dir, const quarantine_options_t *opts, quarantine_t **out,
                    int *log_status)
{
    quarantine_t *q = NULL;
    log_info_t li;
    int rc;

    *out = NULL;
    if (log_status)
        *log_status = LOG_OK;
    if (!dir || !opts || opts->max_bytes == 0)
        return QUARANTINE_INVALID;
    q = calloc(1, sizeof(*q));
    if (!q || !(q->dir = strdup(dir))) {
        free(q);
        return QUARANTINE_NOMEM;
    }
    q->o = *opts;
    if (q->o.segment_bytes == 0)
        q->o.segment_bytes = clamp(q->o.max_bytes / 8, MIN_SEGMENT, MAX_SEGMENT);
    if (q->o.queue_bytes == 0)
        q->o.queue_bytes = clamp(q->o.max_bytes / 4, MIN_QUEUE, MAX_QUEUE);
    log_options_t lo = {.segment_bytes = q->o.segment_bytes};
    rc = log_open(dir, &lo, &q->log);
    if (rc != LOG_OK) {
        if (log_status)
            *log_status = rc;
        free(q->dir);
        free(q);
        return from_log_status(rc);
    }
    /* A bound lowered since the last run applies when the writer starts (enforce). */
    log_get_info(q->log, &li);
    q->s.first_offset = li.first_offset;
    q->s.next_offset = li.synced_offset;
    q->s.bytes = li.bytes;
    q->s.segments = li.segments;
    q->s.max_bytes = q->o.max_bytes;
    q->s.segment_bytes = q->o.segment_bytes;
    q->s.queue_bytes = q->o.queue_bytes;
    if (pthread_mutex_init(&q->mu, NULL) != 0)
        goto nomem_log;
    if (pthread_cond_init(&q->work, NULL) != 0) {
        pthread_mutex_destroy(&q->mu);
        goto nomem_log;
    }
    pthread_condattr_t ca; /* quarantine_flush's deadline must not move with the wall clock */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int crc = pthread_cond_init(&q->idle, &ca);
    pthread_condattr_destroy(&ca);
    if (crc != 0) {
        pthread_cond_destroy(&q->work);
        pthread_mutex_destroy(&q->mu);
        goto nomem_log;
    }
    q->started = true; /* from here quarantine_close tears down the sync objects */
    if (pthread_create(&q->thread, NULL, writer, q) != 0) {
        q->started = false;
        pthread_cond_destroy(&q->idle);
        pthread_cond_destroy(&q->work);
        pthread_mutex_destroy(&q->mu);
        goto nomem_log;
    }
    *out = q;
    return QUARANTINE_OK;
nomem_log:
    log_close(q->log);
    free(q->dir);
    free(q);
    return QUARANTINE_NOMEM;
}

void quarantine_close(quarantine_t *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL); /* the writer drains the queue before it exits */
    pthread_cond_destroy(&q->idle);
    pthread_cond_destroy(&q->work);
    pthread_mutex_destroy(&q->mu);
    log_close(q->log); /* every chunk was synced (or rolled back) by the writer */
    qshare_free(q->share);
    free(q->dir);
    free(q);
}

int quarantine_add(quarantine_t *q, const quarantine_entry_t *e)
{
    if (!q || !e || !e->reason || (e->raw_len > 0 && !e->raw))
        return QUARANTINE_INVALID;
    struct node *n = format(e);
    pthread_mutex_lock(&q->mu);
    if (!n || q->stop || q->queued_bytes + (n ? n->len : 0) > q->o.queue_bytes) {
        q->s.dropped++;
        pthread_mutex_unlock(&q->mu);
        free(n);
        return QUARANTINE_DROPPED;
    }
    q->queued_bytes += n->len;
    q->enqueued++;
    if (q->tail)
        q->tail->next = n;
    else
        q->head = n;
    q->tail = n;
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
    return QUARANTINE_OK;
}

int quarantine_flush(quarantine_t *q, int timeout_ms)
{
    struct timespec until = clk_mono_after(timeout_ms);
    int rc = QUARANTINE_OK;

    pthread_mutex_lock(&q->mu);
    uint64_t target = q->enqueued;
    while (q->done < target) {
        if (pthread_cond_timedwait(&q->idle, &q->mu, &until) == ETIMEDOUT) {
            rc = q->done < target ? QUARANTINE_TIMEOUT : QUARANTINE_OK;
            break;
        }
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

const char *quarantine_dir(const quarantine_t *q)
{
    return q->dir;
}

void quarantine_get_stats(quarantine_t *q, quarantine_stats_t *out)
{
    pthread_mutex_lock(&q->mu);
    *out = q->s;
    out->records = q->s.next_offset - q->s.first_offset;
    out->queued_bytes = q->queued_bytes;
    pthread_mutex_unlock(&q->mu);
}

const char *quarantine_strerror(int status)
{
    switch (status) {
    case QUARANTINE_OK:
        return "ok";
    case QUARANTINE_DROPPED:
        return "quarantine queue full: record dropped";
    case QUARANTINE_EIO:
        return "I/O error";
    case QUARANTINE_NOMEM:
        return "out of memory";
    case QUARANTINE_INVALID:
        return "invalid argument";
    case QUARANTINE_CORRUPT:
        return "the quarantine log is corrupt";
    case QUARANTINE_TIMEOUT:
        return "timed out";
    default:
        return "unknown quarantine status";
    }
}
