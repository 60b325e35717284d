/* common/test_clock.c: the clocks of common/clock.c agree with the system and with each other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "common/clock.h"

static void test_wall_is_the_epoch_in_ms(void **state)
{
    (void)state;
    time_t before = time(NULL);
    int64_t ms = clk_wall_ms();
    time_t after = time(NULL);
    assert_true(ms / 1000 >= (int64_t)before);
    assert_true(ms / 1000 <= (int64_t)after);
}

static void test_monotonic_units_agree(void **state)
{
    (void)state;
    int64_t ms0 = clk_mono_ms();
    double f = clk_mono_msf();
    int64_t ns = clk_mono_ns();
    int64_t ms1 = clk_mono_ms();
    /* Read in this order, each is between its neighbours (in one unit or another). */
    assert_true(f >= (double)ms0);
    assert_true((double)ns / 1e6 >= f);
    assert_true(ms1 >= ns / 1000000);
    assert_true(ms1 >= ms0);
}

static void test_monotonic_advances(void **state)
{
    (void)state;
    double a = clk_mono_msf();
    struct timespec two_ms = {0, 2000000};
    nanosleep(&two_ms, NULL);
    double b = clk_mono_msf();
    assert_true(b - a >= 2.0);
}

static void test_mono_after(void **state)
{
    (void)state;
    int64_t before = clk_mono_ns();
    struct timespec t = clk_mono_after(1999);
    int64_t after = clk_mono_ns();
    int64_t at = (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
    assert_true(t.tv_nsec >= 0 && t.tv_nsec < 1000000000L);
    assert_true(at >= before + 1999000000LL);
    assert_true(at <= after + 1999000000LL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wall_is_the_epoch_in_ms),
        cmocka_unit_test(test_monotonic_units_agree),
        cmocka_unit_test(test_monotonic_advances),
        cmocka_unit_test(test_mono_after),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
