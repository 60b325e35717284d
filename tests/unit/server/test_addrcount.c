/* Unit tests for server/addrcount: per-address counts in an open-addressing table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/addrcount.h"

static void addr(uint8_t out[16], uint32_t v)
{
    memset(out, 0, 16);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &v, 4);
}

static void test_cap(void **state)
{
    addrcount_t *t;
    uint8_t a[16], b[16];
    (void)state;

    assert_int_equal(addrcount_new(8, &t), 0);
    addr(a, 1);
    addr(b, 2);
    assert_true(addrcount_take(t, a, 2));
    assert_true(addrcount_take(t, a, 2));
    assert_false(addrcount_take(t, a, 2));
    assert_true(addrcount_take(t, b, 2));
    assert_int_equal(addrcount_get(t, a), 2);
    addrcount_give(t, a);
    assert_true(addrcount_take(t, a, 2));
    addrcount_give(t, a);
    addrcount_give(t, a);
    assert_int_equal(addrcount_get(t, a), 0);
    assert_int_equal(addrcount_get(t, b), 1);
    addrcount_give(t, a); /* not counted: no-op */
    assert_int_equal(addrcount_get(t, b), 1);
    addrcount_free(t);
    addrcount_free(NULL);
}

/* Full churn against a plain array: every count right after takes and gives in any order,
 * which exercises the removal's pulling back of probe runs. */
static void test_churn(void **state)
{
    enum { N = 500, ADDRS = 300 };
    addrcount_t *t;
    unsigned want[ADDRS] = {0};
    uint8_t a[16];
    unsigned held = 0;
    (void)state;

    assert_int_equal(addrcount_new(N, &t), 0);
    srand(16);
    for (int step = 0; step < 200000; step++) {
        unsigned k = (unsigned)rand() % ADDRS;
        addr(a, k * 2654435761u);
        if ((rand() & 1) && held < N) {
            bool ok = addrcount_take(t, a, 4);
            assert_int_equal(ok, want[k] < 4);
            if (ok) {
                want[k]++;
                held++;
            }
        } else if (want[k] > 0) {
            addrcount_give(t, a);
            want[k]--;
            held--;
        }
        if (step % 997 == 0)
            for (unsigned j = 0; j < ADDRS; j++) {
                addr(a, j * 2654435761u);
                assert_int_equal(addrcount_get(t, a), want[j]);
            }
    }
    addrcount_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_churn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
