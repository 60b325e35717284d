/* test_config: the `serve` settings table, flags, environment, bounds, --help, masking. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/config.h"
#include "storage/window/store.h"
#include "server/logging.h"

#define MAXARGS 64

static config_t cfg; /* ~130 KB: kept off the stack */
static char err[512];

/* Parses "serve" + a NULL-terminated list of args, over `env` (NULL-terminated, may be NULL). */
static int parse_env(char **env, ...)
{
    char *argv[MAXARGS];
    int argc = 0;
    va_list ap;
    char *empty_env[] = {NULL};

    argv[argc++] = (char *)"serve";
    va_start(ap, env);
    for (char *a = va_arg(ap, char *); a != NULL; a = va_arg(ap, char *))
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = '\0';

    FILE *out = fopen("/dev/null", "w");
    assert_non_null(out);
    int rc = config_parse(&cfg, argc, argv, env != NULL ? env : empty_env, out, err, sizeof err);
    fclose(out);
    if (rc == 2) {
        /* One line, something to say. */
        assert_true(strlen(err) > 10);
        assert_null(strchr(err, '\n'));
    }
    return rc;
}

#define PARSE(...)          parse_env(NULL, __VA_ARGS__, (char *)NULL)
#define PARSE_ENV(env, ...) parse_env(env, __VA_ARGS__, (char *)NULL)

static void test_defaults(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k1"), 0);
    assert_string_equal(cfg.listen_host, "127.0.0.1");
    assert_int_equal(cfg.listen_port, 8080);
    assert_string_equal(cfg.data_dir, "./data");
    assert_int_equal(cfg.nwrite_keys, 1);
    assert_string_equal(cfg.write_keys[0].key, "k1");
    assert_string_equal(cfg.write_keys[0].source, "default");
    assert_int_equal(cfg.window_ms, 24LL * 3600 * 1000);
    assert_int_equal(cfg.max_keys, 100000000);
    assert_int_equal(cfg.segment_bytes, 64ULL << 20);
    assert_int_equal(cfg.map_size, 1ULL << 30);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(cfg.threads, cpus < 1 ? 1 : cpus > 64 ? 64 : cpus);
    assert_int_equal(cfg.max_connections, 1024);
    assert_int_equal(cfg.timeout_s, 30);
    assert_int_equal(cfg.max_batch_events, 50000);
    assert_int_equal(cfg.log_level, LOGGING_LEVEL_INFO);
    assert_string_equal(cfg.admin_token, ""); /* none: GET /v1/log is off */
    assert_int_equal(cfg.log_retention_ms, 0);
    assert_int_equal(cfg.log_max_bytes, 0);
    assert_int_equal(cfg.window_floor_ms, 0); /* off */
}

/* --window-floor: a duration, from the flag or INGESTD_WINDOW_FLOOR, never above --window. */
static void test_window_floor(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k", "--window-floor", "15m"), 0);
    assert_int_equal(cfg.window_floor_ms, 15LL * 60 * 1000);
    char *env[] = {"INGESTD_WINDOW_FLOOR=2h", NULL};
    assert_int_equal(PARSE_ENV(env, "--write-key", "k"), 0);
    assert_int_equal(cfg.window_floor_ms, 2LL * 3600 * 1000);
    assert_int_equal(PARSE("--write-key", "k", "--window", "1h", "--window-floor", "1h"), 0);
    assert_int_equal(PARSE("--write-key", "k", "--window", "1h", "--window-floor", "61m"), 2);
    assert_non_null(strstr(err, "--window-floor"));
    assert_int_equal(PARSE("--write-key", "k", "--window-floor", "soon"), 2);
}

static void check_all_flags(void)
{
    assert_string_equal(cfg.listen_host, "0.0.0.0");
    assert_int_equal(cfg.listen_port, 9090);
    assert_string_equal(cfg.data_dir, "/tmp/ingestd-data");
    assert_int_equal(cfg.nwrite_keys, 2);
    assert_string_equal(cfg.write_keys[0].key, "wk1");
    assert_string_equal(cfg.write_keys[0].source, "web");
    assert_string_equal(cfg.write_keys[1].key, "wk2");
    assert_string_equal(cfg.write_keys[1].source, "default");
    assert_int_equal(cfg.window_ms, 15LL * 60 * 1000);
    assert_int_equal(cfg.max_keys, 5000);
    assert_int_equal(cfg.segment_bytes, 1ULL << 20);
    assert_int_equal(cfg.map_size, 256ULL << 20);
    assert_int_equal(cfg.threads, 3);
    assert_int_equal(cfg.max_connections, 77);
    assert_int_equal(cfg.timeout_s, 120);
    assert_int_equal(cfg.max_batch_events, 1234);
    assert_int_equal(cfg.log_level, LOGGING_LEVEL_DEBUG);
}

static void test_every_flag_separate_value(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--listen", "0.0.0.0:9090", "--data", "/tmp/ingestd-data", "--write-key",
                           "wk1:web", "--write-key", "wk2", "--window", "15m", "--max-keys", "5000",
                           "--segment-bytes", "1MiB", "--map-size", "256m", "--threads", "3",
                           "--max-connections", "77", "--timeout", "2m", "--commit-max-events",
                           "1234", "--log-level", "debug"),
                     0);
    check_all_flags();
}

static void test_every_flag_equals_form(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--listen=0.0.0.0:9090", "--data=/tmp/ingestd-data",
                           "--write-key=wk1:web", "--write-key=wk2", "--window=15m",
                           "--max-keys=5000", "--segment-bytes=1048576", "--map-size=256MiB",
                           "--threads=3", "--max-connections=77", "--timeout=120",
                           "--commit-max-events=1234", "--log-level=DEBUG"),
                     0);
    check_all_flags();
}

static void test_every_env(void **state)
{
    (void)state;
    char *env[] = {"PATH=/usr/bin",
                   "INGESTD_LISTEN=0.0.0.0:9090",
                   "INGESTD_DATA=/tmp/ingestd-data",
                   "INGESTD_WRITE_KEY=wk1:web,wk2",
                   "INGESTD_WINDOW=900s",
                   "INGESTD_MAX_KEYS=5000",
                   "INGESTD_SEGMENT_BYTES=1M",
                   "INGESTD_MAP_SIZE=262144k",
                   "INGESTD_THREADS=3",
                   "INGESTD_MAX_CONNECTIONS=77",
                   "INGESTD_TIMEOUT=2m",
                   "INGESTD_COMMIT_MAX_EVENTS=1234",
                   "INGESTD_LOG_LEVEL=debug",
                   NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    check_all_flags();
}

static void test_flag_wins_over_env(void **state)
{
    (void)state;
    char *env[] = {"INGESTD_WINDOW=15m", "INGESTD_WRITE_KEY=envkey:envsrc", "INGESTD_THREADS=2",
                   "INGESTD_LISTEN=127.0.0.1:1", NULL};

    assert_int_equal(PARSE_ENV(env, "--window", "90s", "--write-key", "flagkey"), 0);
    assert_int_equal(cfg.window_ms, 90000);
    /* --write-key replaces the variable's list rather than adding to it. */
    assert_int_equal(cfg.nwrite_keys, 1);
    assert_string_equal(cfg.write_keys[0].key, "flagkey");
    /* What no flag sets still comes from the environment. */
    assert_int_equal(cfg.threads, 2);
    assert_int_equal(cfg.listen_port, 1);

    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.window_ms, 15 * 60 * 1000);
    assert_string_equal(cfg.write_keys[0].key, "envkey");
    assert_string_equal(cfg.write_keys[0].source, "envsrc");

    /* A bad variable is an error even though a flag would have been fine elsewhere. */
    char *bad[] = {"INGESTD_WINDOW=forever", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(bad, (char *)NULL), 2);
    assert_non_null(strstr(err, "INGESTD_WINDOW"));
    /* ...unless the flag overrides it: the variable is then not looked at. */
    assert_int_equal(PARSE_ENV(bad, "--window", "1h"), 0);
    assert_int_equal(cfg.window_ms, 3600 * 1000);
    /* Last flag wins. */
    assert_int_equal(PARSE("--write-key", "k", "--window", "1h", "--window", "2h"), 0);
    assert_int_equal(cfg.window_ms, 2 * 3600 * 1000);
}

static void test_write_keys(void **state)
{
    (void)state;
    char *env[] = {"INGESTD_WRITE_KEY= a:web , b ,c:ios", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.nwrite_keys, 3);
    assert_string_equal(cfg.write_keys[0].key, "a");
    assert_string_equal(cfg.write_keys[0].source, "web");
    assert_string_equal(cfg.write_keys[1].key, "b");
    assert_string_equal(cfg.write_keys[1].source, "default");
    assert_string_equal(cfg.write_keys[2].key, "c");
    assert_string_equal(cfg.write_keys[2].source, "ios");

    /* A flag may carry a list too; the source is everything after the first ':'. */
    assert_int_equal(PARSE("--write-key", "x:s1,y", "--write-key", "z:a:b"), 0);
    assert_int_equal(cfg.nwrite_keys, 3);
    assert_string_equal(cfg.write_keys[2].key, "z");
    assert_string_equal(cfg.write_keys[2].source, "a:b");

    assert_int_equal(PARSE("--write-key", "k:"), 2);
    assert_non_null(strstr(err, "source"));
    assert_int_equal(PARSE("--write-key", ":web"), 2);
    assert_int_equal(PARSE("--write-key", ""), 2);
    assert_int_equal(PARSE("--write-key", "a,,b"), 2);
    assert_int_equal(PARSE("--write-key", "a,"), 2);
    assert_int_equal(PARSE("--write-key", "a b"), 2);
    assert_int_equal(PARSE("--write-key", "dup:x", "--write-key", "dup:y"), 2);
    assert_non_null(strstr(err, "twice"));

    /* The table's limit on keys. */
    char many[CONFIG_MAX_WRITE_KEYS * 8 + 16];
    size_t used = 0;
    for (int i = 0; i <= CONFIG_MAX_WRITE_KEYS; i++)
        used += (size_t)snprintf(many + used, sizeof many - used, "%sk%d", i ? "," : "", i);
    assert_int_equal(PARSE("--write-key", many), 2);
    char *last = strrchr(many, ',');
    *last = '\0';
    assert_int_equal(PARSE("--write-key", many), 0);
    assert_int_equal(cfg.nwrite_keys, CONFIG_MAX_WRITE_KEYS);
    assert_string_equal(cfg.write_keys[CONFIG_MAX_WRITE_KEYS - 1].key, "k255");

    /* Each key must fit its storage slot. */
    char longkey[600];
    memset(longkey, 'q', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_int_equal(PARSE("--write-key", longkey), 2);
}

static void test_missing_write_key(void **state)
{
    (void)state;
    assert_int_equal(parse_env(NULL, (char *)NULL), 2);
    assert_non_null(strstr(err, "write key"));
    char *env[] = {"INGESTD_WRITE_KEY=", NULL};
    assert_int_equal(parse_env(env, "--window", "1h", (char *)NULL), 2);
    assert_non_null(strstr(err, "write key"));
}

static void test_durations(void **state)
{
    (void)state;
    int64_t ms = -1;
    assert_int_equal(config_parse_duration("90s", &ms), 0);
    assert_int_equal(ms, 90000);
    assert_int_equal(config_parse_duration("15m", &ms), 0);
    assert_int_equal(ms, 900000);
    assert_int_equal(config_parse_duration("24h", &ms), 0);
    assert_int_equal(ms, 86400000);
    assert_int_equal(config_parse_duration("28d", &ms), 0);
    assert_int_equal(ms, 28LL * 86400000);
    assert_int_equal(config_parse_duration("3600", &ms), 0);
    assert_int_equal(ms, 3600000);
    assert_int_equal(config_parse_duration("0s", &ms), 0);
    assert_int_equal(ms, 0);

    const char *bad[] = {"",
                         "s",
                         "h1",
                         "-1s",
                         "+1s",
                         "1.5h",
                         "1 h",
                         " 1h",
                         "1h ",
                         "10x",
                         "1hh",
                         "1H",
                         "1d2h",
                         "0x10",
                         "9223372036854776s",
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ms = 42;
        if (config_parse_duration(bad[i], &ms) != -1)
            fail_msg("duration \"%s\" should be rejected", bad[i]);
    }
    assert_int_equal(config_parse_duration(NULL, &ms), -1);
}

static void test_sizes(void **state)
{
    (void)state;
    uint64_t b = 0;
    const struct {
        const char *s;
        uint64_t v;
    } good[] = {{"1048576", 1048576}, {"64k", 64 << 10},  {"64KiB", 64 << 10},
                {"64MiB", 64 << 20},  {"64mb", 64 << 20}, {"1G", 1ULL << 30},
                {"2t", 2ULL << 40},   {"512b", 512},      {"0", 0}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(config_parse_size(good[i].s, &b), 0);
        assert_int_equal(b, good[i].v);
    }
    const char *bad[] = {
        "", "k", "1.5G", "-1", "12q", "1 M", "1MiBs", "20000000000000000000", "17179869184T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (config_parse_size(bad[i], &b) != -1)
            fail_msg("size \"%s\" should be rejected", bad[i]);
    }
}

static void test_bounds(void **state)
{
    (void)state;
#define OK(...)  assert_int_equal(PARSE("--write-key", "k", __VA_ARGS__), 0)
#define BAD(...) assert_int_equal(PARSE("--write-key", "k", __VA_ARGS__), 2)
    OK("--window", "1s");
    OK("--window", "365d");
    BAD("--window", "0s");
    BAD("--window", "366d");
    BAD("--window", "forever");
    assert_non_null(strstr(err, "--window"));
    OK("--threads", "1");
    OK("--threads", "64");
    BAD("--threads", "0");
    BAD("--threads", "65");
    BAD("--threads", "-1");
    BAD("--threads", "4k");
    OK("--listen", "127.0.0.1:0");
    assert_int_equal(cfg.listen_port, 0);
    OK("--listen", "127.0.0.1:65535");
    BAD("--listen", "127.0.0.1:65536");
    BAD("--listen", "127.0.0.1:");
    BAD("--listen", "127.0.0.1:http");
    BAD("--listen", "127.0.0.1");
    BAD("--listen", ":8080");
    BAD("--listen", "::1:8080");
    BAD("--listen", "[::1]");
    BAD("--listen", "[zz::1]:80");
    OK("--listen", "[::1]:8081");
    assert_string_equal(cfg.listen_host, "::1");
    assert_int_equal(cfg.listen_port, 8081);
    OK("--listen", "localhost:9");
    assert_string_equal(cfg.listen_host, "localhost");
    OK("--max-keys", "0"); /* no size bound */
    assert_int_equal(cfg.max_keys, 0);
    BAD("--max-keys", "1000000000001");
    BAD("--max-connections", "0");
    OK("--timeout", "1");
    BAD("--timeout", "0");
    BAD("--timeout", "2h");
    BAD("--segment-bytes", "1k");
    OK("--segment-bytes", "4k");
    BAD("--map-size", "1k");
    BAD("--commit-max-events", "0");
    BAD("--log-level", "loud");
    OK("--log-level", "warn");
    assert_int_equal(cfg.log_level, LOGGING_LEVEL_WARN);
    OK("--log-level", "error");
    assert_int_equal(cfg.log_level, LOGGING_LEVEL_ERROR);
    BAD("--data", "");
#undef OK
#undef BAD
}

static void test_unknown_and_malformed_args(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k", "--bogus", "1"), 2);
    assert_non_null(strstr(err, "--bogus"));
    assert_int_equal(PARSE("--write-key", "k", "--bogus=1"), 2);
    assert_non_null(strstr(err, "--bogus"));
    assert_null(strstr(err, "=1"));
    assert_int_equal(PARSE("--write-key", "k", "stray"), 2);
    assert_int_equal(PARSE("--write-key", "k", "-w", "x"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--window"), 2); /* value missing */
    assert_non_null(strstr(err, "--window"));
    assert_int_equal(PARSE("--write-key"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--windows", "1h"), 2); /* no prefix matching */
}

static void test_help(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    char *argv[] = {"serve", "--window", "nonsense", "--help", NULL};
    char *env[] = {NULL};

    assert_non_null(out);
    /* --help wins over everything else, including a missing write key and bad values. */
    assert_int_equal(config_parse(&cfg, 4, argv, env, out, err, sizeof err), 1);
    fclose(out);
    const char *flags[] = {
        "--listen",          "--data",          "--write-key",         "--window",
        "--max-keys",        "--segment-bytes", "--map-size",          "--threads",
        "--max-connections", "--timeout",       "--commit-max-events", "--log-level",
        "--admin-token",     "--log-retention", "--log-max-bytes"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strstr(buf, flags[i]) == NULL)
            fail_msg("--help lacks %s", flags[i]);
    }
    const char *envs[] = {"INGESTD_LISTEN",
                          "INGESTD_DATA",
                          "INGESTD_WRITE_KEY",
                          "INGESTD_WINDOW",
                          "INGESTD_MAX_KEYS",
                          "INGESTD_SEGMENT_BYTES",
                          "INGESTD_MAP_SIZE",
                          "INGESTD_THREADS",
                          "INGESTD_MAX_CONNECTIONS",
                          "INGESTD_TIMEOUT",
                          "INGESTD_COMMIT_MAX_EVENTS",
                          "INGESTD_LOG_LEVEL",
                          "INGESTD_ADMIN_TOKEN",
                          "INGESTD_LOG_RETENTION",
                          "INGESTD_LOG_MAX_BYTES"};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        if (strstr(buf, envs[i]) == NULL)
            fail_msg("--help lacks %s", envs[i]);
    }
    assert_non_null(strstr(buf, "127.0.0.1:8080")); /* defaults are shown */
    assert_non_null(strstr(buf, "24h"));
    free(buf);

    char *argv2[] = {"serve", "-h", NULL};
    out = fopen("/dev/null", "w");
    assert_int_equal(config_parse(&cfg, 2, argv2, env, out, err, sizeof err), 1);
    fclose(out);
}

/* Runs config_log with stderr captured; returns the text (caller frees). */
static char *capture_config_log(void)
{
    char path[] = "/tmp/test_config_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    config_log(&cfg);
    dup2(saved, 2);
    close(saved);

    off_t n = lseek(fd, 0, SEEK_END);
    char *buf = calloc(1, (size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(pread(fd, buf, (size_t)n, 0), n);
    close(fd);
    return buf;
}

static void test_config_log_masks_keys(void **state)
{
    (void)state;
    int saved_level = logging_level;
    logging_level = LOGGING_LEVEL_INFO;
    assert_int_equal(PARSE("--write-key", "supersecretkey:web", "--write-key", "ab", "--window",
                           "28d", "--listen", "[::1]:0"),
                     0);
    char *log = capture_config_log();
    logging_level = saved_level;

    assert_null(strstr(log, "supersecretkey"));
    assert_null(strstr(log, "supe"));
    assert_non_null(strstr(log, "sup\xe2\x80\xa6:web"));
    /* A short key shows at most half of itself. */
    assert_non_null(strstr(log, "a\xe2\x80\xa6:default"));
    assert_null(strstr(log, "ab\xe2\x80\xa6"));
    assert_non_null(strstr(log, "window = 28d"));
    assert_non_null(strstr(log, "listen = [::1]:0"));
    /* One line per setting, each with a timestamp and level. */
    size_t lines = 0;
    for (const char *p = log; (p = strchr(p, '\n')) != NULL; p++)
        lines++;
    assert_int_equal(lines, 44);
    assert_non_null(strstr(log, "admin-token = none"));
    assert_non_null(strstr(log, "data-mode = private\n"));
    assert_non_null(strstr(log, "store-sync = meta\n"));
    assert_non_null(strstr(log, "store = lmdb\n"));
    assert_non_null(strstr(log, "log-retention = 0\n"));
    assert_non_null(strstr(log, "rejected-max-bytes = 256MiB\n"));
    assert_non_null(strstr(log, "log-max-bytes = 0\n"));
    assert_non_null(strstr(log, "Z INFO config "));
    free(log);
}

/* Issue 27: --tls-min-version by meaning (1.2|1.3), --admin-hosts. */
static void test_tls_and_admin_hosts(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_int_equal(cfg.tls_min, CONFIG_TLS_1_2);
    assert_string_equal(cfg.admin_hosts, "");
    assert_int_equal(PARSE("--write-key", "k", "--tls-min-version", "1.3", "--admin-hosts",
                           "a.example,b.example"),
                     0);
    assert_int_equal(cfg.tls_min, CONFIG_TLS_1_3);
    assert_string_equal(cfg.admin_hosts, "a.example,b.example");
    assert_int_equal(PARSE("--write-key", "k", "--tls-min-version", "1.1"), 2);
    assert_non_null(strstr(err, "invalid --tls-min-version \"1.1\": expected 1.2|1.3"));
    assert_int_equal(PARSE("--write-key", "k", "--tls-min-version", "TLSv1.2"), 2);
}

/* Issue 16: slow clients, proxies and context.ip. */
static void test_transport_hardening(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_int_equal(cfg.header_timeout_s, 10);
    assert_int_equal(cfg.min_body_rate, 1024);
    assert_int_equal(cfg.max_body_memory, 128ULL << 20);
    /* A quarter of --max-connections per address unless given (README "Limits"). */
    assert_int_equal(cfg.max_connections_per_ip, 1024 / 4);
    assert_int_equal(cfg.proxies.n, 0);
    assert_false(cfg.no_context_ip);
    assert_int_equal(PARSE("--write-key", "k", "--max-connections", "100"), 0);
    assert_int_equal(cfg.max_connections_per_ip, 25);
    assert_int_equal(PARSE("--write-key", "k", "--max-connections", "3"), 0);
    assert_int_equal(cfg.max_connections_per_ip, 1);
    assert_int_equal(PARSE("--write-key", "k", "--max-connections-per-ip", "0"), 0);
    assert_int_equal(cfg.max_connections_per_ip, 0);
    assert_int_equal(PARSE("--write-key", "k", "--max-connections-per-ip", "5000"), 0);
    assert_int_equal(cfg.max_connections_per_ip, 5000);

    /* A switch takes no value, so the next argument is a flag again. */
    assert_int_equal(PARSE("--no-context-ip", "--write-key", "k", "--header-timeout", "3s",
                           "--min-body-rate", "0", "--max-body-memory", "16MiB",
                           "--trusted-proxies", "10.0.0.0/8, fd00::/8"),
                     0);
    assert_true(cfg.no_context_ip);
    assert_int_equal(cfg.header_timeout_s, 3);
    assert_int_equal(cfg.min_body_rate, 0);
    assert_int_equal(cfg.max_body_memory, 16ULL << 20);
    assert_int_equal(cfg.proxies.n, 2);
    assert_int_equal(PARSE("--no-context-ip=false", "--write-key", "k"), 0);
    assert_false(cfg.no_context_ip);

    char *env[] = {"INGESTD_NO_CONTEXT_IP=1", "INGESTD_TRUSTED_PROXIES=127.0.0.1",
                   "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_true(cfg.no_context_ip);
    assert_int_equal(cfg.proxies.n, 1);

    char *bad_env[] = {"INGESTD_NO_CONTEXT_IP=maybe", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(bad_env, (char *)NULL), 2);
    assert_non_null(strstr(err, "INGESTD_NO_CONTEXT_IP"));
    assert_int_equal(PARSE("--write-key", "k", "--trusted-proxies", "10.0.0.0/40"), 2);
    assert_non_null(strstr(err, "--trusted-proxies"));
    assert_int_equal(PARSE("--write-key", "k", "--header-timeout", "0s"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--max-body-memory", "1k"), 2);
}

static void test_admin_token(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", "s3cr3t-T0ken_~+/="), 0);
    assert_string_equal(cfg.admin_token, "s3cr3t-T0ken_~+/=");
    assert_int_equal(PARSE("--write-key", "k", "--admin-token=abc"), 0);
    assert_string_equal(cfg.admin_token, "abc");

    char *env[] = {"INGESTD_ADMIN_TOKEN=from-env", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_string_equal(cfg.admin_token, "from-env");
    assert_int_equal(PARSE_ENV(env, "--admin-token", "from-flag"), 0);
    assert_string_equal(cfg.admin_token, "from-flag");
    /* An empty variable counts as unset, as for every setting. */
    char *empty[] = {"INGESTD_ADMIN_TOKEN=", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(empty, (char *)NULL), 0);
    assert_string_equal(cfg.admin_token, "");

    /* An empty flag, blanks, control and non-ASCII bytes cannot travel in a Bearer header. */
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", ""), 2);
    assert_non_null(strstr(err, "--admin-token"));
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", "two words"), 2);
    assert_null(strstr(err, "two words")); /* the error never echoes the secret */
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", "tab\there"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", "caf\xc3\xa9"), 2);
    char bad_env[] = "INGESTD_ADMIN_TOKEN=a b";
    char *env2[] = {bad_env, "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env2, (char *)NULL), 2);
    assert_non_null(strstr(err, "INGESTD_ADMIN_TOKEN"));

    char long_tok[300];
    memset(long_tok, 'a', sizeof long_tok);
    long_tok[255] = '\0';
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", long_tok), 0);
    assert_int_equal(strlen(cfg.admin_token), 255);
    long_tok[255] = 'a';
    long_tok[256] = '\0';
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", long_tok), 2);
}

static void test_log_retention(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "7d"), 0);
    assert_int_equal(cfg.log_retention_ms, 7LL * 86400 * 1000);
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "0"), 0);
    assert_int_equal(cfg.log_retention_ms, 0);
    assert_int_equal(PARSE("--write-key", "k", "--log-retention=90s"), 0);
    assert_int_equal(cfg.log_retention_ms, 90000);
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "3650d"), 0);
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "3651d"), 2);
    assert_non_null(strstr(err, "--log-retention"));
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "forever"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--log-retention", "-1d"), 2);

    assert_int_equal(PARSE("--write-key", "k", "--log-max-bytes", "10GiB"), 0);
    assert_int_equal(cfg.log_max_bytes, 10ULL << 30);
    assert_int_equal(PARSE("--write-key", "k", "--log-max-bytes", "0"), 0);
    assert_int_equal(cfg.log_max_bytes, 0);
    assert_int_equal(PARSE("--write-key", "k", "--log-max-bytes", "1024TiB"), 0);
    assert_int_equal(PARSE("--write-key", "k", "--log-max-bytes", "1025TiB"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--log-max-bytes", "lots"), 2);
    assert_non_null(strstr(err, "--log-max-bytes"));

    char *env[] = {"INGESTD_LOG_RETENTION=48h", "INGESTD_LOG_MAX_BYTES=1G", "INGESTD_WRITE_KEY=k",
                   NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.log_retention_ms, 48LL * 3600 * 1000);
    assert_int_equal(cfg.log_max_bytes, 1ULL << 30);
    assert_int_equal(PARSE_ENV(env, "--log-retention", "0", "--log-max-bytes", "0"), 0);
    assert_int_equal(cfg.log_retention_ms, 0);
    assert_int_equal(cfg.log_max_bytes, 0);
}

static void test_store_sync(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_META);
    assert_int_equal(PARSE("--write-key", "k", "--store-sync", "full"), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_FULL);
    assert_int_equal(PARSE("--write-key", "k", "--store-sync=lazy"), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_NONE);
    assert_int_equal(PARSE("--write-key", "k", "--store-sync", "meta"), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_META);
    assert_int_equal(PARSE("--write-key", "k", "--store-sync", "none"), 2);
    assert_non_null(strstr(err, "meta|full|lazy"));
    assert_int_equal(PARSE("--write-key", "k", "--store-sync", "lazyx"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--store-sync", "laz"), 2);
    char *env[] = {"INGESTD_STORE_SYNC=lazy", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_NONE);
    assert_int_equal(PARSE_ENV(env, "--store-sync", "full"), 0);
    assert_int_equal(cfg.store_sync, STORE_SYNC_FULL);
}

static void test_data_mode(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_int_equal(cfg.data_mode, CONFIG_DATA_PRIVATE);
    assert_int_equal(config_data_umask(cfg.data_mode), 077);
    assert_int_equal(PARSE("--write-key", "k", "--data-mode", "group"), 0);
    assert_int_equal(cfg.data_mode, CONFIG_DATA_GROUP);
    assert_int_equal(config_data_umask(cfg.data_mode), 027);
    assert_int_equal(PARSE("--write-key", "k", "--data-mode", "world"), 2);
    assert_non_null(strstr(err, "private|group"));
    char *env[] = {"INGESTD_DATA_MODE=group", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.data_mode, CONFIG_DATA_GROUP);
    assert_int_equal(PARSE_ENV(env, "--data-mode", "private"), 0);
    assert_int_equal(cfg.data_mode, CONFIG_DATA_PRIVATE);
    /* The other commands read only the variable; anything else is private. */
    assert_int_equal(config_data_mode_env("group"), CONFIG_DATA_GROUP);
    assert_int_equal(config_data_mode_env("private"), CONFIG_DATA_PRIVATE);
    assert_int_equal(config_data_mode_env(NULL), CONFIG_DATA_PRIVATE);
    assert_int_equal(config_data_mode_env("0644"), CONFIG_DATA_PRIVATE);
}

static void test_store(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_string_equal(cfg.store, "lmdb");
    assert_int_equal(PARSE("--write-key", "k", "--store", "memory:qqhtd:8Mbit"), 0);
    assert_string_equal(cfg.store, "memory:qqhtd:8Mbit");
    assert_int_equal(PARSE("--write-key", "k", "--store=memory:nsq:1Mbit"), 0);
    assert_int_equal(PARSE("--write-key", "k", "--store", "memory:nsq"), 2); /* no size */
    assert_int_equal(PARSE("--write-key", "k", "--store", "memory:"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--store", "memory:cuckoo"), 2);
    assert_non_null(strstr(err, "cuckoo"));
    assert_int_equal(PARSE("--write-key", "k", "--store", "redis"), 2);
    assert_non_null(strstr(err, "lmdb or memory:SPEC"));
    char *env[] = {"INGESTD_STORE=memory:bloom:1Mbit", "INGESTD_WRITE_KEY=k", NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_string_equal(cfg.store, "memory:bloom:1Mbit");
}

static void test_config_log_hides_admin_token(void **state)
{
    (void)state;
    int saved_level = logging_level;
    logging_level = LOGGING_LEVEL_INFO;
    assert_int_equal(PARSE("--write-key", "k", "--admin-token", "tok-ABCDEFGHIJ", "--log-retention",
                           "7d", "--log-max-bytes", "512MiB"),
                     0);
    char *log = capture_config_log();
    logging_level = saved_level;

    /* Not even a prefix: the token alone grants access to every event. */
    assert_null(strstr(log, "tok-"));
    assert_null(strstr(log, "ABC"));
    assert_non_null(strstr(log, "admin-token = (set, hidden)"));
    assert_non_null(strstr(log, "log-retention = 7d"));
    assert_non_null(strstr(log, "log-max-bytes = 512MiB"));
    free(log);
}

/* --role edge and its Kafka settings (docs/scale-out.md, "Edge role"). */
static void test_role_edge(void **state)
{
    (void)state;
    assert_int_equal(PARSE("--write-key", "k"), 0);
    assert_int_equal(cfg.role, CONFIG_ROLE_SINGLE);
    assert_int_equal(cfg.delivery_timeout_s, 10);
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers",
                           "k1:9092,k2:9092", "--raw-topic", "raw", "--kafka-opt",
                           "security.protocol=SASL_SSL", "--kafka-opt", "producer.linger.ms=5",
                           "--delivery-timeout", "3s"),
                     0);
    assert_int_equal(cfg.role, CONFIG_ROLE_EDGE);
    assert_string_equal(cfg.kafka_brokers, "k1:9092,k2:9092");
    assert_string_equal(cfg.raw_topic, "raw");
    assert_int_equal(cfg.nkafka_opts, 2);
    assert_string_equal(cfg.kafka_opts[0], "security.protocol=SASL_SSL");
    assert_string_equal(cfg.kafka_opts[1], "producer.linger.ms=5");
    assert_int_equal(cfg.delivery_timeout_s, 3);
    assert_int_equal(cfg.partitions_before, 0);
    assert_int_equal(cfg.repartition_at_ms, 0);
    /* The cut-over as ISO-8601 or ms since the epoch. */
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--partitions-before", "4", "--repartition-at",
                           "2026-01-31T00:00:00Z"),
                     0);
    assert_int_equal(cfg.partitions_before, 4);
    assert_int_equal(cfg.repartition_at_ms, INT64_C(1769817600000));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--partitions-before", "4", "--repartition-at",
                           "1769817600123"),
                     0);
    assert_int_equal(cfg.repartition_at_ms, INT64_C(1769817600123));
    /* Environment: one setting a line. */
    char *env[] = {
        "INGESTD_ROLE=edge",     "INGESTD_KAFKA_BROKERS=b:1",
        "INGESTD_RAW_TOPIC=raw", "INGESTD_KAFKA_OPTS=sasl.username=u\nsasl.password=a,b=c\n",
        "INGESTD_WRITE_KEY=k",   NULL};
    assert_int_equal(parse_env(env, (char *)NULL), 0);
    assert_int_equal(cfg.nkafka_opts, 2);
    assert_string_equal(cfg.kafka_opts[1], "sasl.password=a,b=c");
    /* Flags replace the variable's list. */
    assert_int_equal(PARSE_ENV(env, "--kafka-opt", "acks=all"), 0);
    assert_int_equal(cfg.nkafka_opts, 1);

    /* What does not go together. */
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--raw-topic", "raw"), 2);
    assert_non_null(strstr(err, "--kafka-brokers"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1"), 2);
    assert_int_equal(PARSE("--write-key", "k", "--kafka-brokers", "b:1"), 2);
    assert_non_null(strstr(err, "--role edge"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--partitions-before", "4"),
                     2);
    assert_non_null(strstr(err, "--repartition-at"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--repartition-at", "1769817600000"),
                     2);
    assert_non_null(strstr(err, "--partitions-before"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--partitions-before", "4", "--repartition-at",
                           "yesterday"),
                     2);
    assert_non_null(strstr(err, "ISO-8601"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--kafka-opt", "noequals"),
                     2);
    assert_non_null(strstr(err, "NAME=VALUE"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "cluster"), 2);
    assert_non_null(strstr(err, "single|edge"));
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--delivery-timeout", "10m"),
                     2);
}

/* The values of --kafka-opt may be passwords: the start-up log shows names only. */
/* The one HOST:PORT parser, which serve's --listen and the worker's both go through. */
static void test_hostport(void **state)
{
    (void)state;
    char host[16], e[128];
    uint16_t port = 1;
    assert_int_equal(
        config_parse_hostport("127.0.0.1:0", "--listen", host, sizeof host, &port, e, sizeof e), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 0);
    assert_int_equal(
        config_parse_hostport("[::1]:8081", "--listen", host, sizeof host, &port, e, sizeof e), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 8081);
    static const char *const bad[] = {
        "nohostport", "127.0.0.1:99999", "127.0.0.1:port", ":80",
        "::1:80",     "[::1]80",         "[1:2:3]:80",     "a-host-name-that-is-too-long:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(
            config_parse_hostport(bad[i], "--listen", host, sizeof host, &port, e, sizeof e), -1);
        assert_non_null(strstr(e, "--listen"));
    }
}

static void test_config_log_hides_kafka_opts(void **state)
{
    (void)state;
    int saved_level = logging_level;
    logging_level = LOGGING_LEVEL_INFO;
    assert_int_equal(PARSE("--write-key", "k", "--role", "edge", "--kafka-brokers", "b:1",
                           "--raw-topic", "raw", "--kafka-opt", "sasl.password=hunter2",
                           "--partitions-before", "2", "--repartition-at", "1769817600000"),
                     0);
    char *log = capture_config_log();
    logging_level = saved_level;
    assert_null(strstr(log, "hunter2"));
    assert_non_null(strstr(log, "kafka-opt = sasl.password=(hidden)"));
    assert_non_null(strstr(log, "role = edge\n"));
    assert_non_null(strstr(log, "repartition-at = 2026-01-31T00:00:00.000Z\n"));
    free(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_role_edge),
        cmocka_unit_test(test_config_log_hides_kafka_opts),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_window_floor),
        cmocka_unit_test(test_every_flag_separate_value),
        cmocka_unit_test(test_every_flag_equals_form),
        cmocka_unit_test(test_every_env),
        cmocka_unit_test(test_flag_wins_over_env),
        cmocka_unit_test(test_write_keys),
        cmocka_unit_test(test_missing_write_key),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_unknown_and_malformed_args),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_config_log_masks_keys),
        cmocka_unit_test(test_admin_token),
        cmocka_unit_test(test_log_retention),
        cmocka_unit_test(test_store_sync),
        cmocka_unit_test(test_data_mode),
        cmocka_unit_test(test_store),
        cmocka_unit_test(test_config_log_hides_admin_token),
        cmocka_unit_test(test_transport_hardening),
        cmocka_unit_test(test_tls_and_admin_hosts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
