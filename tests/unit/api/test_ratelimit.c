/* Unit tests for api/ratelimit: the per-write-key token bucket, driven by a fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>

#include "api/ratelimit.h"

#define T0 1000000 /* an arbitrary monotonic start (ms) */

static void test_init(void **state)
{
    ratelimit_t rl;
    (void)state;
    assert_int_equal(ratelimit_init(&rl, 0, T0), RATELIMIT_ERROR);
    assert_int_equal(ratelimit_init(&rl, 1, T0), RATELIMIT_OK);
    ratelimit_destroy(&rl);
}

/* A full bucket holds one second's worth; past it nothing is taken and Retry-After is right. */
static void test_burst_then_limited(void **state)
{
    ratelimit_t rl;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 100, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 60, T0, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 40, T0, &wait), RATELIMIT_OK);
    /* Empty: one event does not fit; it will in 10 ms, announced as the minimum of 1 s. */
    wait = 0;
    assert_int_equal(ratelimit_take(&rl, 1, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1);
    assert_int_equal(ratelimit_check(&rl, T0, &wait), RATELIMIT_LIMITED);
    /* 0 events always fit, even when empty. */
    assert_int_equal(ratelimit_take(&rl, 0, T0, &wait), RATELIMIT_OK);
    /* Half a second later, 50 are back: 50 fit, 51 do not (and nothing was taken by the try). */
    assert_int_equal(ratelimit_take(&rl, 51, T0 + 500, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1);
    assert_int_equal(ratelimit_check(&rl, T0 + 500, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 50, T0 + 500, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 1, T0 + 500, &wait), RATELIMIT_LIMITED);
    ratelimit_destroy(&rl);
}

/* The refill stops at the capacity: a long pause does not save up more than one second. */
static void test_refill_capped(void **state)
{
    ratelimit_t rl;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 10, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 10, T0, &wait), RATELIMIT_OK);
    int64_t later = T0 + 3600 * 1000;
    assert_int_equal(ratelimit_take(&rl, 10, later, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 1, later, &wait), RATELIMIT_LIMITED);
    /* A clock that goes back adds nothing and breaks nothing. */
    assert_int_equal(ratelimit_take(&rl, 1, later - 5000, &wait), RATELIMIT_LIMITED);
    ratelimit_destroy(&rl);
}

/* Retry-After is the whole seconds until the request fits, rounded up. */
static void test_retry_after(void **state)
{
    ratelimit_t rl;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 100, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 100, T0, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 100, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1); /* exactly one second */
    assert_int_equal(ratelimit_take(&rl, 100, T0 + 999, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1);
    assert_int_equal(ratelimit_take(&rl, 100, T0 + 1000, &wait), RATELIMIT_OK);
    ratelimit_destroy(&rl);

    /* 3 events/s, empty bucket, 3 wanted: 1 s; at 1 event/s, 1 wanted after 2 debts: 3 s. */
    assert_int_equal(ratelimit_init(&rl, 3, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 3, T0, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 3, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1);
    assert_int_equal(ratelimit_take(&rl, 2, T0 + 100, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1); /* 2 - 0.3 = 1.7 tokens at 3/s: 0.57 s -> 1 */
    ratelimit_destroy(&rl);
}

/*
 * A request larger than one second's worth passes when the bucket is full and leaves a debt:
 * otherwise a 2,500-event batch could never pass a rate below 2,500/s.
 */
static void test_large_request_debt(void **state)
{
    ratelimit_t rl;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 100, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 2500, T0, &wait), RATELIMIT_OK);
    /* 2,400 in debt: even one event waits until the debt is paid (24.01 s -> 25 s). */
    assert_int_equal(ratelimit_take(&rl, 1, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 25);
    /* A second large one waits for a full bucket: the debt (24 s) plus one second. */
    assert_int_equal(ratelimit_take(&rl, 2500, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 25);
    assert_int_equal(ratelimit_check(&rl, T0 + 24000, &wait), RATELIMIT_LIMITED); /* 0 tokens */
    assert_int_equal(ratelimit_take(&rl, 2500, T0 + 24000, &wait), RATELIMIT_LIMITED);
    assert_int_equal(wait, 1);
    assert_int_equal(ratelimit_take(&rl, 2500, T0 + 25000, &wait), RATELIMIT_OK);
    /* Over 25 s, 5,000 events passed: rate * time + one request, no more. */
    assert_int_equal(ratelimit_take(&rl, 1, T0 + 25000, &wait), RATELIMIT_LIMITED);
    ratelimit_destroy(&rl);
}

/* A request refused elsewhere after its take (503) gets its tokens back, never past full. */
static void test_give_back(void **state)
{
    ratelimit_t rl;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 10, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 8, T0, &wait), RATELIMIT_OK);
    ratelimit_give_back(&rl, 8, T0);
    assert_int_equal(ratelimit_take(&rl, 10, T0, &wait), RATELIMIT_OK);
    ratelimit_give_back(&rl, 1000, T0); /* capped at the capacity */
    assert_int_equal(ratelimit_take(&rl, 10, T0, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&rl, 1, T0, &wait), RATELIMIT_LIMITED);
    ratelimit_destroy(&rl);
}

/* A reload carries the level over; a lower new rate caps it. */
static void test_copy_state(void **state)
{
    ratelimit_t a, b, c;
    uint32_t wait = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&a, 100, T0), RATELIMIT_OK);
    assert_int_equal(ratelimit_init(&b, 100, T0 + 10), RATELIMIT_OK);
    assert_int_equal(ratelimit_init(&c, 5, T0 + 10), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&a, 90, T0, &wait), RATELIMIT_OK);
    ratelimit_copy_state(&b, &a);
    assert_int_equal(ratelimit_take(&b, 11, T0, &wait), RATELIMIT_LIMITED);
    assert_int_equal(ratelimit_take(&b, 10, T0, &wait), RATELIMIT_OK);
    ratelimit_copy_state(&c, &a); /* a holds 10, c's capacity is 5 */
    assert_int_equal(ratelimit_take(&c, 5, T0, &wait), RATELIMIT_OK);
    assert_int_equal(ratelimit_take(&c, 1, T0, &wait), RATELIMIT_LIMITED);
    ratelimit_destroy(&a);
    ratelimit_destroy(&b);
    ratelimit_destroy(&c);
}

/* Many threads taking at once: exactly the capacity is handed out, never more. */
struct racer {
    ratelimit_t *rl;
    int taken;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    uint32_t wait;
    for (int i = 0; i < 5000; i++)
        if (ratelimit_take(r->rl, 1, T0, &wait) == RATELIMIT_OK)
            r->taken++;
    return NULL;
}

static void test_threads(void **state)
{
    enum { NT = 8 };
    ratelimit_t rl;
    pthread_t th[NT];
    struct racer rs[NT];
    int total = 0;
    (void)state;

    assert_int_equal(ratelimit_init(&rl, 10000, T0), RATELIMIT_OK);
    for (int i = 0; i < NT; i++) {
        rs[i] = (struct racer){&rl, 0};
        assert_int_equal(pthread_create(&th[i], NULL, race, &rs[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        total += rs[i].taken;
    }
    assert_int_equal(total, 10000); /* the clock does not move: no refill */
    ratelimit_destroy(&rl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_burst_then_limited),
        cmocka_unit_test(test_refill_capped),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_large_request_debt),
        cmocka_unit_test(test_give_back),
        cmocka_unit_test(test_copy_state),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
