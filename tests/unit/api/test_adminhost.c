/*
 * Unit tests for api/adminhost: which Host may read the operator routes without an admin token
 * (DNS rebinding): localhost, IP addresses, the --listen host and --admin-hosts names, ports and
 * one trailing dot ignored, everything else refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "api/adminhost.h"

static adminhost_t *make(const char *listen, const char *names)
{
    adminhost_t *a = NULL;
    assert_int_equal(adminhost_new(listen, names, &a), 0);
    assert_non_null(a);
    return a;
}

static void loopback_and_addresses_always(void **state)
{
    (void)state;
    adminhost_t *a = make(NULL, NULL);
    const char *ok[] = {"localhost",  "LocalHost:8080", "localhost.",   "a.b.localhost:1",
                        "127.0.0.1",  "127.0.0.1:8080", "10.0.0.5:443", "[::1]",
                        "[::1]:8080", "[2001:db8::7]",  "192.168.1.1."};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        assert_true(adminhost_allowed(a, ok[i]));
    assert_true(adminhost_allowed(a, NULL)); /* no Host: HTTP/1.0, not a browser */
    adminhost_free(a);
}

static void names_refused_unless_listed(void **state)
{
    (void)state;
    adminhost_t *a = make("ingest.lan", "Stats.Example.com, other.test");
    const char *bad[] = {"evil.example",
                         "evil.example:80",
                         "",
                         ":8080",
                         "localhost.evil",
                         "xlocalhost",
                         "[::1",
                         "[nothing]",
                         "127.0.0.1:80x",
                         "stats.example.co",
                         "ingest.lan.evil",
                         "127.0.0.1.nip.io"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(adminhost_allowed(a, bad[i]));
    assert_true(adminhost_allowed(a, "ingest.lan:8080"));
    assert_true(adminhost_allowed(a, "INGEST.LAN"));
    assert_true(adminhost_allowed(a, "stats.example.com"));
    assert_true(adminhost_allowed(a, "other.test.:9"));
    adminhost_free(a);
}

static void star_allows_any(void **state)
{
    (void)state;
    adminhost_t *a = make("127.0.0.1", "a.test,*");
    assert_true(adminhost_allowed(a, "evil.example"));
    adminhost_free(a);
    a = make(NULL, "*.example.com"); /* no wildcards: only "*" alone means any */
    assert_false(adminhost_allowed(a, "x.example.com"));
    adminhost_free(a);
    adminhost_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loopback_and_addresses_always),
        cmocka_unit_test(names_refused_unless_listed),
        cmocka_unit_test(star_allows_any),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
