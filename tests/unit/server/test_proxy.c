/* Unit tests for server/proxy: --trusted-proxies parsing and the client address behind them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>

#include "server/proxy.h"

static proxy_list_t parsed(const char *spec)
{
    proxy_list_t l;
    char err[160];

    assert_int_equal(proxy_parse(spec, &l, err, sizeof err), 0);
    return l;
}

static void assert_bad(const char *spec)
{
    proxy_list_t l;
    char err[160] = "";

    assert_int_equal(proxy_parse(spec, &l, err, sizeof err), -1);
    assert_non_null(strstr(err, "--trusted-proxies"));
}

static bool trusted4(const proxy_list_t *l, const char *a)
{
    struct sockaddr_in sa;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, a, &sa.sin_addr), 1);
    return proxy_trusted_sa(l, (struct sockaddr *)&sa);
}

static bool trusted6(const proxy_list_t *l, const char *a)
{
    struct sockaddr_in6 sa;

    memset(&sa, 0, sizeof sa);
    sa.sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, a, &sa.sin6_addr), 1);
    return proxy_trusted_sa(l, (struct sockaddr *)&sa);
}

static void test_parse(void **state)
{
    (void)state;
    proxy_list_t l = parsed("");
    assert_int_equal(l.n, 0);
    assert_false(trusted4(&l, "127.0.0.1"));

    l = parsed(" 10.0.0.0/8 , 192.168.1.7,fd00::/8,, 172.16.0.0/12");
    assert_int_equal(l.n, 4);
    assert_true(trusted4(&l, "10.200.3.4"));
    assert_false(trusted4(&l, "11.0.0.1"));
    assert_true(trusted4(&l, "192.168.1.7"));
    assert_false(trusted4(&l, "192.168.1.8"));
    assert_true(trusted4(&l, "172.31.255.255"));
    assert_false(trusted4(&l, "172.32.0.0"));
    assert_true(trusted6(&l, "fd12::1"));
    assert_false(trusted6(&l, "fe80::1"));
    /* An IPv4 client on a dual-stack socket arrives IPv4-mapped. */
    assert_true(trusted6(&l, "::ffff:10.1.2.3"));

    l = parsed("0.0.0.0/0");
    assert_true(trusted4(&l, "8.8.8.8"));
    assert_false(trusted6(&l, "2001:db8::1"));
    l = parsed("::/0");
    assert_true(trusted6(&l, "2001:db8::1"));

    assert_bad("10.0.0.0/33");
    assert_bad("fd00::/129");
    assert_bad("10.0.0/8");
    assert_bad("10.0.0.0/");
    assert_bad("10.0.0.0/-1");
    assert_bad("localhost");
    assert_bad("10.0.0.0/8x");
}

static void assert_client(const proxy_list_t *l, const char *fwd, const char *xff, const char *want)
{
    char out[PROXY_ADDR_LEN] = "";

    if (want == NULL) {
        assert_int_equal(proxy_client(l, fwd, xff, out), -1);
        return;
    }
    assert_int_equal(proxy_client(l, fwd, xff, out), 0);
    assert_string_equal(out, want);
}

static void test_client_xff(void **state)
{
    (void)state;
    proxy_list_t l = parsed("10.0.0.0/8");

    assert_client(&l, NULL, "203.0.113.9", "203.0.113.9");
    /* Read from the right: what the client wrote itself (left) is not believed. */
    assert_client(&l, NULL, "1.1.1.1, 203.0.113.9", "203.0.113.9");
    assert_client(&l, NULL, "1.1.1.1, 203.0.113.9, 10.0.0.2", "203.0.113.9");
    /* Every hop one of ours: the leftmost. */
    assert_client(&l, NULL, "10.1.1.1,10.0.0.2", "10.1.1.1");
    /* Ports, brackets, blanks. */
    assert_client(&l, NULL, " 203.0.113.9:5555 ", "203.0.113.9");
    assert_client(&l, NULL, "[2001:db8::1]:80", "2001:db8::1");
    assert_client(&l, NULL, "2001:DB8::1", "2001:db8::1");
    /* Junk left of the client does not matter; junk our proxy passed on ends the walk. */
    assert_client(&l, NULL, "junk, 203.0.113.9", "203.0.113.9");
    assert_client(&l, NULL, "203.0.113.9, junk", NULL);
    assert_client(&l, NULL, "", NULL);
    assert_client(&l, NULL, NULL, NULL);
}

static void test_client_forwarded(void **state)
{
    (void)state;
    proxy_list_t l = parsed("10.0.0.0/8");

    assert_client(&l, "for=192.0.2.60;proto=http;by=203.0.113.43", NULL, "192.0.2.60");
    assert_client(&l, "for=\"[2001:db8:cafe::17]:4711\"", NULL, "2001:db8:cafe::17");
    assert_client(&l, "For=192.0.2.43, for=198.51.100.17", NULL, "198.51.100.17");
    assert_client(&l, "proto=https;for=192.0.2.43, for=10.0.0.9", NULL, "192.0.2.43");
    /* Forwarded wins over X-Forwarded-For. */
    assert_client(&l, "for=192.0.2.60", "203.0.113.9", "192.0.2.60");
    /* Obfuscated or unknown: no address. */
    assert_client(&l, "for=_hidden", NULL, NULL);
    assert_client(&l, "for=unknown", "203.0.113.9", NULL);
}

/* A long chain keeps its right end, where the hops our proxies added are. */
static void test_client_long_chain(void **state)
{
    (void)state;
    proxy_list_t l = parsed("10.0.0.0/8");
    char xff[4096] = "";

    for (int i = 0; i < 200; i++)
        strcat(xff, "1.2.3.4, ");
    strcat(xff, "203.0.113.9, 10.0.0.1");
    assert_client(&l, NULL, xff, "203.0.113.9");
}

static void test_keys(void **state)
{
    (void)state;
    uint8_t a[16], b[16];
    struct sockaddr_in sa;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, "192.0.2.7", &sa.sin_addr), 1);
    assert_int_equal(proxy_key_sa((struct sockaddr *)&sa, a), 0);
    assert_int_equal(proxy_key_text("192.0.2.7", b), 0);
    assert_memory_equal(a, b, 16);
    /* The same client on a dual-stack socket is the same key. */
    assert_int_equal(proxy_key_text("::ffff:192.0.2.7", b), 0);
    assert_memory_equal(a, b, 16);
    assert_int_equal(proxy_key_text("2001:db8::1", b), 0);
    assert_int_equal(proxy_key_text("not an address", b), -1);
    assert_int_equal(proxy_key_text(NULL, b), -1);
    assert_int_equal(proxy_key_sa(NULL, b), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_client_xff),
        cmocka_unit_test(test_client_forwarded),
        cmocka_unit_test(test_client_long_chain),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
