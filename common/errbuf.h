/* errbuf: the one way to put a message into a caller's error buffer (`char *err, size_t errlen`).
 */
#ifndef INGESTD_COMMON_ERRBUF_H
#define INGESTD_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

/*
 * Formats into buf[0..len), always NUL-terminated, truncating what does not fit. A NULL buf or
 * a len of 0 is a no-op, so a caller that does not want the message passes NULL, 0.
 */
void errbuf_printf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* errbuf_printf with a va_list, for a helper that adds its own return code (filter_fail). */
void errbuf_vprintf(char *buf, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
