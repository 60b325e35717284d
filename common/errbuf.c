/* errbuf: printf into a caller-owned error buffer. */
#include "common/errbuf.h"

#include <stdarg.h>
#include <stdio.h>

void errbuf_vprintf(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (buf == NULL || len == 0)
        return;
    vsnprintf(buf, len, fmt, ap);
}

void errbuf_printf(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vprintf(buf, len, fmt, ap);
    va_end(ap);
}
