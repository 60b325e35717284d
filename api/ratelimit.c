/* ratelimit: token bucket per write key; all-or-nothing takes with a Retry-After estimate. */
#include "api/ratelimit.h"

/* Longest Retry-After we announce: past an hour a client had better just retry later anyway. */
#define MAX_RETRY_S 3600.0

int ratelimit_init(ratelimit_t *rl, uint64_t rate, int64_t now_ms)
{
    if (rate == 0)
        return RATELIMIT_ERROR;
    if (pthread_mutex_init(&rl->mu, NULL) != 0)
        return RATELIMIT_ERROR;
    rl->rate = (double)rate;
    rl->tokens = rl->rate;
    rl->last_ms = now_ms;
    return RATELIMIT_OK;
}

void ratelimit_destroy(ratelimit_t *rl)
{
    pthread_mutex_destroy(&rl->mu);
}

/* Brings tokens up to now_ms; under rl->mu. A clock that goes back adds nothing. */
static void refill(ratelimit_t *rl, int64_t now_ms)
{
    if (now_ms <= rl->last_ms)
        return;
    rl->tokens += rl->rate * (double)(now_ms - rl->last_ms) / 1000.0;
    if (rl->tokens > rl->rate)
        rl->tokens = rl->rate;
    rl->last_ms = now_ms;
}

/* Whole seconds (>= 1) until `need` tokens are there; under rl->mu, after refill. */
static uint32_t wait_s(const ratelimit_t *rl, double need)
{
    double s = (need - rl->tokens) / rl->rate;
    if (!(s >= 1.0)) /* also catches NaN */
        return 1;
    if (s > MAX_RETRY_S)
        return (uint32_t)MAX_RETRY_S;
    uint32_t whole = (uint32_t)s;
    return (double)whole < s ? whole + 1 : whole; /* rounded up */
}

int ratelimit_take(ratelimit_t *rl, uint64_t n, int64_t now_ms, uint32_t *retry_after_s)
{
    int rc = RATELIMIT_OK;
    double want = (double)n;

    if (n == 0)
        return RATELIMIT_OK;
    pthread_mutex_lock(&rl->mu);
    refill(rl, now_ms);
    if (rl->tokens >= want || rl->tokens >= rl->rate) {
        rl->tokens -= want;
    } else {
        /* It fits once the bucket holds it, or (larger than the capacity) once the bucket is full.
         */
        *retry_after_s = wait_s(rl, want < rl->rate ? want : rl->rate);
        rc = RATELIMIT_LIMITED;
    }
    pthread_mutex_unlock(&rl->mu);
    return rc;
}

int ratelimit_check(ratelimit_t *rl, int64_t now_ms, uint32_t *retry_after_s)
{
    int rc = RATELIMIT_OK;

    pthread_mutex_lock(&rl->mu);
    refill(rl, now_ms);
    if (rl->tokens < 1.0) { /* rate >= 1, so a full bucket always has one */
        *retry_after_s = wait_s(rl, 1.0);
        rc = RATELIMIT_LIMITED;
    }
    pthread_mutex_unlock(&rl->mu);
    return rc;
}

void ratelimit_give_back(ratelimit_t *rl, uint64_t n, int64_t now_ms)
{
    pthread_mutex_lock(&rl->mu);
    refill(rl, now_ms);
    rl->tokens += (double)n;
    if (rl->tokens > rl->rate)
        rl->tokens = rl->rate;
    pthread_mutex_unlock(&rl->mu);
}

void ratelimit_copy_state(ratelimit_t *dst, ratelimit_t *src)
{
    pthread_mutex_lock(&src->mu);
    double tokens = src->tokens;
    int64_t last = src->last_ms;
    pthread_mutex_unlock(&src->mu);

    pthread_mutex_lock(&dst->mu);
    dst->tokens = tokens > dst->rate ? dst->rate : tokens;
    dst->last_ms = last;
    pthread_mutex_unlock(&dst->mu);
}
