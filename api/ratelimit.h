/* ratelimit: a token bucket (events per second, one second of burst) for one write key. */
#ifndef INGESTD_API_RATELIMIT_H
#define INGESTD_API_RATELIMIT_H

#include <pthread.h>
#include <stdint.h>

/*
 * The bucket holds at most `rate` tokens (one second's worth) and refills at
 * `rate` tokens a second. A request of n events takes n tokens, all or none:
 * - it fits when the bucket holds n tokens, or when the bucket is full: a batch
 *   larger than one second's worth (rate below 2,500 events/s) would otherwise
 *   never pass, so it is let through and leaves the bucket in debt (negative),
 *   which the refill pays back before anything else fits. Over any stretch of
 *   time a key gets no more than rate * seconds + one request's events.
 * - otherwise nothing is taken and the caller learns how many whole seconds
 *   (at least 1) until it would fit, for Retry-After.
 *
 * The struct is embedded by its owner (one per write key); its fields are
 * private to ratelimit.c. Every function but init/destroy is thread-safe (one
 * small mutex per bucket: a take is a few arithmetic operations under it).
 * Times are CLOCK_MONOTONIC milliseconds supplied by the caller, so tests need
 * no clock.
 */
typedef struct ratelimit {
    pthread_mutex_t mu;
    double rate;     /* tokens per second, also the capacity */
    double tokens;   /* may be negative: a debt left by a request larger than the capacity */
    int64_t last_ms; /* when tokens was last brought up to date */
} ratelimit_t;

enum ratelimit_status {
    RATELIMIT_OK = 0,      /* taken */
    RATELIMIT_LIMITED = 1, /* nothing taken; *retry_after_s says when it would fit */
    RATELIMIT_ERROR = -1,  /* init: bad rate or the mutex could not be created */
};

/* A full bucket of `rate` (> 0) events a second. Returns RATELIMIT_OK or RATELIMIT_ERROR. */
int ratelimit_init(ratelimit_t *rl, uint64_t rate, int64_t now_ms);

/* Releases the mutex. The bucket must not be in use. */
void ratelimit_destroy(ratelimit_t *rl);

/*
 * Takes n tokens if the request fits (see above): RATELIMIT_OK. Otherwise
 * RATELIMIT_LIMITED with *retry_after_s (>= 1, rounded up) and nothing taken.
 * n == 0 always fits.
 */
int ratelimit_take(ratelimit_t *rl, uint64_t n, int64_t now_ms, uint32_t *retry_after_s);

/*
 * Whether a request of one event would fit now, without taking anything: a
 * cheap refusal before a body is read or parsed. Same returns as ratelimit_take.
 */
int ratelimit_check(ratelimit_t *rl, int64_t now_ms, uint32_t *retry_after_s);

/* Gives back n tokens taken by a request that was then refused elsewhere (e.g. 503). */
void ratelimit_give_back(ratelimit_t *rl, uint64_t n, int64_t now_ms);

/* Copies src's level (tokens, last refill) into dst, e.g. across a reload of the write keys. */
void ratelimit_copy_state(ratelimit_t *dst, ratelimit_t *src);

#endif
