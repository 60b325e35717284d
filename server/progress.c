/* progress: one self-rewriting progress line (percent, rate, ETA) for long commands, on a terminal
 * only. */
#include "server/progress.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

#define REDRAW_NS 200000000 /* five redraws a second: live, without flooding a slow terminal */

struct progress {
    FILE *f;
    bool shown;       /* a line is on the terminal now */
    char phase[64];   /* the `what` of the phase under way */
    int64_t start_ns; /* its first update */
    uint64_t start;   /* `done` then */
    int64_t drawn_ns; /* last redraw */
};

progress_t *progress_new(FILE *f)
{
    if (!f || !isatty(fileno(f)))
        return NULL;
    progress_t *p = calloc(1, sizeof(*p));
    if (p)
        p->f = f;
    return p;
}

/* 950, 12.3k, 4.56M: a rate or count that fits the line however large it gets. */
static void human(char *buf, size_t len, double v)
{
    if (v >= 1e9)
        snprintf(buf, len, "%.2fG", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, len, "%.2fM", v / 1e6);
    else if (v >= 1e4)
        snprintf(buf, len, "%.1fk", v / 1e3);
    else
        snprintf(buf, len, "%.0f", v);
}

void progress_format(char *buf, size_t len, const char *what, uint64_t done, uint64_t total,
                     double rate, const char *unit, const char *extra)
{
    char d[16], t[16], r[48] = "", eta[32] = "";
    const char *u = unit ? unit : "";
    const char *sp = unit && *unit ? " " : "";
    const char *x = extra ? extra : "";

    human(d, sizeof(d), (double)done);
    if (rate > 0) {
        char h[16];
        human(h, sizeof(h), rate);
        snprintf(r, sizeof(r), ", %s%s%s/s", h, sp, u);
    }
    if (total == 0) {
        snprintf(buf, len, "%s: %s%s%s%s%s%s", what, d, sp, u, r, *x ? "  " : "", x);
        return;
    }
    human(t, sizeof(t), (double)total);
    if (done < total && rate > 0) {
        /* The average rate of the phase: steadier than the last interval's. */
        uint64_t left = (uint64_t)((double)(total - done) / rate + 0.5);
        if (left >= 3600)
            snprintf(eta, sizeof(eta), ", ETA %" PRIu64 ":%02u:%02u", left / 3600,
                     (unsigned)(left / 60 % 60), (unsigned)(left % 60));
        else
            snprintf(eta, sizeof(eta), ", ETA %u:%02u", (unsigned)(left / 60),
                     (unsigned)(left % 60));
    }
    double pct = done >= total ? 100.0 : 100.0 * (double)done / (double)total;
    snprintf(buf, len, "%s: %5.1f%% %s/%s%s%s%s%s%s%s", what, pct, d, t, sp, u, r, eta,
             *x ? "  " : "", x);
}

void progress_update(progress_t *p, const char *what, uint64_t done, uint64_t total,
                     const char *unit, const char *extra)
{
    char line[256];

    if (!p)
        return;
    int64_t now = clk_mono_ns();
    if (strncmp(p->phase, what, sizeof(p->phase) - 1) != 0) {
        snprintf(p->phase, sizeof(p->phase), "%s", what);
        p->start_ns = now;
        p->start = done;
        p->drawn_ns = 0;
    }
    if (now - p->drawn_ns < REDRAW_NS && !(total > 0 && done >= total))
        return;
    p->drawn_ns = now;
    double secs = (double)(now - p->start_ns) / 1e9;
    double rate = secs > 0 && done > p->start ? (double)(done - p->start) / secs : 0;
    progress_format(line, sizeof(line), what, done, total, rate, unit, extra);
    /* \r back to the start, then erase what a longer previous line left (ANSI EL). */
    fprintf(p->f, "\r%s\033[K", line);
    fflush(p->f);
    p->shown = true;
}

void progress_clear(progress_t *p)
{
    if (!p || !p->shown)
        return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
    p->shown = false;
}

void progress_free(progress_t *p)
{
    progress_clear(p);
    free(p);
}
