/*
 * metrics.h - a registry of counters, gauges and histograms, rendered in the
 * Prometheus text format. A server owns one; each layer registers the
 * metrics it updates on the registry it is given and keeps the handles.
 * This file knows no metric by name: the vocabulary belongs to the layers.
 *
 * Registering takes the registry's lock; updating a handle is lock-free
 * (atomics), cheap enough for hot paths. Registering the same kind, name and
 * labels again returns the same series, so two objects on one registry
 * (a store and the server above it) can share a series. A NULL registry
 * registers nothing and returns NULL handles; updating a NULL handle does
 * nothing. Handles live as long as their registry.
 */
#ifndef TM_METRICS_H
#define TM_METRICS_H
#include "buf.h"
#include <stddef.h>
#include <stdint.h>

#define TM_HIST_BUCKETS 16   /* upper bounds per histogram (+Inf besides) */
#define TM_LHIST_SERIES 64   /* label sets per labelled histogram, then "overflow" */
#define TM_LHIST_LABELS 8    /* label names per labelled histogram */
#define TM_LABELS_MAX 192    /* bytes of one label set's values */

typedef struct tm_metrics tm_metrics;
typedef struct tm_counter tm_counter;
typedef struct tm_gauge tm_gauge;
typedef struct tm_hist tm_hist;
typedef struct tm_lhist tm_lhist;

/* A histogram's shape: raw values (and bounds) are divided by scale on
 * output (1e6 for microseconds shown as seconds). */
typedef struct tm_hist_def {
    const char *name, *help;
    double scale;
    uint64_t bounds[TM_HIST_BUCKETS];
} tm_hist_def;

/* NULL when memory ran out. */
tm_metrics *tm_metrics_new(void);
/* Frees the registry and every handle it gave out. NULL is fine. */
void tm_metrics_free(tm_metrics *m);

/* labels: "" or the series' fixed labels as k="v",... (already escaped).
 * help is printed once per name (the first series registered gives it).
 * name, labels and help are not copied: string literals. NULL when m is
 * NULL, memory ran out or the registry is full (logged). */
tm_counter *tm_metrics_counter(tm_metrics *m, const char *name, const char *labels,
                               const char *help);
tm_gauge *tm_metrics_gauge(tm_metrics *m, const char *name, const char *help);
tm_hist *tm_metrics_hist(tm_metrics *m, const tm_hist_def *d);
/* A histogram whose series are told apart by the values of n label names
 * (n <= TM_LHIST_LABELS); names are not copied. */
tm_lhist *tm_metrics_lhist(tm_metrics *m, const tm_hist_def *d, const char *const *names,
                           size_t n);

void tm_counter_inc(tm_counter *c);
void tm_counter_add(tm_counter *c, uint64_t n);
uint64_t tm_counter_get(const tm_counter *c);
void tm_gauge_add(tm_gauge *g, int64_t d);
void tm_hist_observe(tm_hist *h, uint64_t v);
/* Observe v under the label values (as many as the names; a NULL value
 * leaves its label out). Lock-free once the set is known; a set past
 * TM_LHIST_SERIES, or too long, counts in the overflow series. */
void tm_lhist_observe(tm_lhist *h, const char *const *values, uint64_t v);

/* Append every metric of m in the Prometheus text exposition format, the
 * series of one name together. */
int tm_metrics_render(tm_metrics *m, tm_buf *out);

#endif
