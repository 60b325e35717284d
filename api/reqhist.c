/* reqhist: request durations by route and status class, for ingestd_request_duration_seconds. */
#include "api/reqhist.h"

#include "api/internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/histogram.h"

#define CLASSES 5                          /* 1xx .. 5xx */
#define NAME    "request_duration_seconds" /* after the writer's "ingestd_" */

struct reqhist {
    const char **paths;
    size_t nroutes;
    /* (nroutes + 1) * CLASSES histograms, all made up front: a route and class seen for the
     * first time then costs no allocation on the request path, and ~100 small histograms are
     * a few KB. Row nroutes is "other". */
    histogram_t **h;
};

int reqhist_new(const char *const *paths, size_t nroutes, reqhist_t **out)
{
    reqhist_t *rh = calloc(1, sizeof(*rh));

    *out = NULL;
    if (!rh)
        return -1;
    rh->nroutes = nroutes;
    rh->paths = calloc(nroutes + 1, sizeof(*rh->paths));
    rh->h = calloc((nroutes + 1) * CLASSES, sizeof(*rh->h));
    if (!rh->paths || !rh->h)
        goto fail;
    for (size_t i = 0; i < nroutes; i++)
        rh->paths[i] = paths[i];
    for (size_t i = 0; i < (nroutes + 1) * CLASSES; i++)
        if (histogram_new(HISTOGRAM_SECONDS, HISTOGRAM_SECONDS_N, &rh->h[i]) != 0)
            goto fail;
    *out = rh;
    return 0;
fail:
    reqhist_free(rh);
    return -1;
}

void reqhist_free(reqhist_t *rh)
{
    if (!rh)
        return;
    for (size_t i = 0; rh->h && i < (rh->nroutes + 1) * CLASSES; i++)
        histogram_free(rh->h[i]);
    free(rh->h);
    free(rh->paths);
    free(rh);
}

void reqhist_observe(reqhist_t *rh, int route, int status, double seconds)
{
    if (!rh || status < 100 || status > 599)
        return;
    size_t row = route >= 0 && (size_t)route < rh->nroutes ? (size_t)route : rh->nroutes;
    histogram_observe(rh->h[row * CLASSES + (size_t)(status / 100 - 1)], seconds);
}

void reqhist_write(const reqhist_t *rh, prom_t *p)
{
    char labels[160];

    prom_head(p, NAME, PROM_HISTOGRAM,
              "Time from a request's arrival to its answer, by route and status class.");
    for (size_t row = 0; rh && row <= rh->nroutes; row++) {
        for (size_t k = 0; k < CLASSES; k++) {
            const histogram_t *h = rh->h[row * CLASSES + k];
            char status[8];
            /* Only what happened: 20 routes x 5 classes of zeros would drown the real series. */
            if (histogram_count(h) == 0)
                continue;
            labels[0] = '\0';
            snprintf(status, sizeof(status), "%zuxx", k + 1);
            prom_label(labels, sizeof(labels), "route",
                       row < rh->nroutes ? rh->paths[row] : "other");
            prom_label(labels, sizeof(labels), "status", status);
            histogram_write(h, p, NAME, labels);
        }
    }
}

/* One histogram without labels, with its head; nothing when the api was given none. */
static void one(prom_t *p, const histogram_t *h, const char *name, const char *help)
{
    if (!h)
        return;
    prom_head(p, name, PROM_HISTOGRAM, help);
    histogram_write(h, p, name, NULL);
}

void api_metrics_histograms(const api_t *api, prom_t *p)
{
    reqhist_write(api->reqhist, p);
    one(p, api->fsync_seconds, "fsync_duration_seconds", "Duration of each fsync of the log.");
    one(p, api->batch_events, "commit_batch_events", "Events in each successful group commit.");
    one(p, api->duplicate_ages, "duplicate_age_seconds",
        "Age of each duplicate: its receivedAt minus its first copy's.");
}
