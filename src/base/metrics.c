/* metrics.c - a registry of atomics, rendered as Prometheus text; see metrics.h. */
#include "metrics.h"
#include "log.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define METRICS_MAX 128 /* series per registry: every layer's together */

typedef struct counts {
    atomic_uint_fast64_t b[TM_HIST_BUCKETS + 1], sum, n;
} counts;

struct tm_counter {
    atomic_uint_fast64_t v;
};
struct tm_gauge {
    atomic_int_fast64_t v;
};
struct tm_hist {
    uint64_t bounds[TM_HIST_BUCKETS]; /* written before the handle is returned */
    counts c;
};

/* A label set is found by the key of its values (each value, or \x1e
 * for none, ended by \x1f: no snprintf on the request path); its text,
 * escaped as the exposition format says, is made once, with the series. */
#define LTEXT_MAX (2 * TM_LABELS_MAX + 256)
typedef struct lseries {
    char key[TM_LABELS_MAX]; /* written once before published */
    size_t keylen;
    char labels[LTEXT_MAX]; /* k="v",...: written once before published */
    counts c;
} lseries;

/* s[TM_LHIST_SERIES] is the overflow series. Series [0, count) are
 * published (release store of count after key and labels are written). */
struct tm_lhist {
    uint64_t bounds[TM_HIST_BUCKETS];
    const char *names[TM_LHIST_LABELS];
    size_t nnames;
    atomic_int count;
    pthread_mutex_t mu; /* makes series */
    lseries s[TM_LHIST_SERIES + 1];
};

typedef enum kind { K_COUNTER, K_GAUGE, K_HIST, K_LHIST } kind;
typedef struct entry {
    kind k;
    const char *name, *labels, *help;
    double scale; /* K_HIST, K_LHIST */
    void *obj;
} entry;

struct tm_metrics {
    pthread_mutex_t mu; /* guards e[] and n; handles are updated without it */
    size_t n;
    entry e[METRICS_MAX];
};

static const char *const kind_name[] = {"counter", "gauge", "histogram", "histogram"};

tm_metrics *tm_metrics_new(void)
{
    tm_metrics *m = calloc(1, sizeof *m);
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

void tm_metrics_free(tm_metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        if (m->e[i].k == K_LHIST)
            pthread_mutex_destroy(&((tm_lhist *)m->e[i].obj)->mu);
        free(m->e[i].obj);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void init_hist(void *obj, kind k, const tm_hist_def *d, const char *const *names, size_t n)
{
    if (k == K_HIST) {
        memcpy(((tm_hist *)obj)->bounds, d->bounds, sizeof d->bounds);
    } else if (k == K_LHIST) {
        tm_lhist *h = obj;
        memcpy(h->bounds, d->bounds, sizeof d->bounds);
        memcpy(h->names, names, n * sizeof *names);
        h->nnames = n;
        pthread_mutex_init(&h->mu, NULL);
    }
}

/* The object of (k, name, labels): found, or made with size bytes (a
 * histogram's shape written before anyone else can see it). */
static void *enter(tm_metrics *m, kind k, const char *name, const char *labels, const char *help,
                   const tm_hist_def *d, const char *const *names, size_t nnames, size_t size)
{
    if (!m)
        return NULL;
    void *obj = NULL;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n && !obj; i++)
        if (m->e[i].k == k && strcmp(m->e[i].name, name) == 0 && strcmp(m->e[i].labels, labels) == 0)
            obj = m->e[i].obj;
    if (!obj && m->n < METRICS_MAX && (obj = calloc(1, size))) {
        init_hist(obj, k, d, names, nnames);
        m->e[m->n++] = (entry){.k = k, .name = name, .labels = labels, .help = help,
                               .scale = d ? d->scale : 1, .obj = obj};
    } else if (!obj) {
        TM_ERROR("metrics: %s not registered (registry full or out of memory)", name);
    }
    pthread_mutex_unlock(&m->mu);
    return obj;
}

tm_counter *tm_metrics_counter(tm_metrics *m, const char *name, const char *labels, const char *help)
{
    return enter(m, K_COUNTER, name, labels ? labels : "", help, NULL, NULL, 0, sizeof(tm_counter));
}

tm_gauge *tm_metrics_gauge(tm_metrics *m, const char *name, const char *help)
{
    return enter(m, K_GAUGE, name, "", help, NULL, NULL, 0, sizeof(tm_gauge));
}

tm_hist *tm_metrics_hist(tm_metrics *m, const tm_hist_def *d)
{
    return enter(m, K_HIST, d->name, "", d->help, d, NULL, 0, sizeof(tm_hist));
}

tm_lhist *tm_metrics_lhist(tm_metrics *m, const tm_hist_def *d, const char *const *names, size_t n)
{
    if (n > TM_LHIST_LABELS)
        return NULL;
    return enter(m, K_LHIST, d->name, "", d->help, d, names, n, sizeof(tm_lhist));
}

void tm_counter_inc(tm_counter *c)
{
    if (c)
        atomic_fetch_add_explicit(&c->v, 1, memory_order_relaxed);
}

void tm_counter_add(tm_counter *c, uint64_t n)
{
    if (c)
        atomic_fetch_add_explicit(&c->v, n, memory_order_relaxed);
}

uint64_t tm_counter_get(const tm_counter *c)
{
    return c ? atomic_load((atomic_uint_fast64_t *)&c->v) : 0;
}

void tm_gauge_add(tm_gauge *g, int64_t d)
{
    if (g)
        atomic_fetch_add_explicit(&g->v, d, memory_order_relaxed);
}

static void observe(counts *c, const uint64_t *bounds, uint64_t v)
{
    size_t i = 0;
    while (i < TM_HIST_BUCKETS && v > bounds[i])
        i++;
    atomic_fetch_add_explicit(&c->b[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->sum, v, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->n, 1, memory_order_relaxed);
}

void tm_hist_observe(tm_hist *h, uint64_t v)
{
    if (h)
        observe(&h->c, h->bounds, v);
}

/* ---- labelled histograms ------------------------------------------------ */

/* Append name="value" (escaped as the text format says) to out[*n..max). */
static int label(char *out, size_t *n, size_t max, const char *name, const char *v)
{
    if (!v)
        return 0;
    size_t need = strlen(name) + 4 + (*n ? 1 : 0);
    if (*n + need >= max)
        return -1;
    *n += (size_t)snprintf(out + *n, max - *n, "%s%s=\"", *n ? "," : "", name);
    for (; *v; v++) {
        int esc = *v == '\\' || *v == '"' || *v == '\n';
        if (*n + 3 >= max)
            return -1;
        if (esc)
            out[(*n)++] = '\\';
        out[(*n)++] = *v == '\n' ? 'n' : *v;
    }
    out[(*n)++] = '"';
    out[*n] = '\0';
    return 0;
}

static int render_labels(const tm_lhist *h, const char *const *v, char out[LTEXT_MAX])
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < h->nnames; i++)
        if (label(out, &n, LTEXT_MAX, h->names[i], v[i]))
            return -1;
    return 0;
}

/* The key of the values; -1 when it does not fit or a value holds a
 * separator (such a set goes to the overflow series). */
static int values_key(const tm_lhist *h, const char *const *v, char out[TM_LABELS_MAX], size_t *len)
{
    size_t n = 0;
    for (size_t i = 0; i < h->nnames; i++) {
        size_t k = v[i] ? strlen(v[i]) : 0;
        if (n + k + 2 >= TM_LABELS_MAX || (v[i] && (memchr(v[i], 0x1e, k) || memchr(v[i], 0x1f, k))))
            return -1;
        if (v[i])
            memcpy(out + n, v[i], k);
        else
            out[n++] = 0x1e;
        n += k;
        out[n++] = 0x1f;
    }
    *len = n;
    return 0;
}

static int series_find(const tm_lhist *h, const char *key, size_t len, int from, int to)
{
    for (int i = from; i < to; i++)
        if (h->s[i].keylen == len && memcmp(h->s[i].key, key, len) == 0)
            return i;
    return -1;
}

/* The series of a key: found without a lock, else made under h->mu. */
static lseries *series_of(tm_lhist *h, const char *const *v, const char *key, size_t len)
{
    int n = atomic_load_explicit(&h->count, memory_order_acquire);
    int i = series_find(h, key, len, 0, n);
    if (i >= 0)
        return &h->s[i];
    pthread_mutex_lock(&h->mu);
    int m = atomic_load_explicit(&h->count, memory_order_relaxed);
    i = series_find(h, key, len, n, m);
    if (i < 0 && m < TM_LHIST_SERIES && render_labels(h, v, h->s[m].labels) == 0) {
        i = m;
        memcpy(h->s[i].key, key, len);
        h->s[i].keylen = len;
        atomic_store_explicit(&h->count, m + 1, memory_order_release);
    }
    pthread_mutex_unlock(&h->mu);
    return &h->s[i < 0 ? TM_LHIST_SERIES : i];
}

void tm_lhist_observe(tm_lhist *h, const char *const *values, uint64_t v)
{
    if (!h)
        return;
    char key[TM_LABELS_MAX];
    size_t len;
    lseries *s = values_key(h, values, key, &len) ? &h->s[TM_LHIST_SERIES]
                                                   : series_of(h, values, key, len);
    observe(&s->c, h->bounds, v);
}

/* ---- rendering ---------------------------------------------------------- */

/* One histogram series: name_bucket{labels,le=...}, _sum, _count. */
static int render_counts(tm_buf *out, const entry *e, const uint64_t *bounds, const char *labels,
                         counts *c)
{
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    int rc = 0;
    for (int i = 0; i < TM_HIST_BUCKETS && !rc; i++) {
        cum += atomic_load(&c->b[i]);
        rc = tm_buf_printf(out, "%s_bucket{%s%sle=\"%g\"} %llu\n", e->name, labels, sep,
                           (double)bounds[i] / e->scale, (unsigned long long)cum);
    }
    cum += atomic_load(&c->b[TM_HIST_BUCKETS]);
    const char *o = labels[0] ? "{" : "", *x = labels[0] ? "}" : "";
    if (!rc)
        rc = tm_buf_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n%s_sum%s%s%s %g\n%s_count%s%s%s %llu\n",
                           e->name, labels, sep, (unsigned long long)cum, e->name, o, labels, x,
                           (double)atomic_load(&c->sum) / e->scale, e->name, o, labels, x,
                           (unsigned long long)atomic_load(&c->n));
    return rc;
}

static int render_entry(tm_buf *out, const entry *e)
{
    const char *o = e->labels[0] ? "{" : "", *x = e->labels[0] ? "}" : "";
    switch (e->k) {
    case K_COUNTER:
        return tm_buf_printf(out, "%s%s%s%s %llu\n", e->name, o, e->labels, x,
                             (unsigned long long)atomic_load(&((tm_counter *)e->obj)->v));
    case K_GAUGE:
        return tm_buf_printf(out, "%s%s%s%s %lld\n", e->name, o, e->labels, x,
                             (long long)atomic_load(&((tm_gauge *)e->obj)->v));
    case K_HIST:
        return render_counts(out, e, ((tm_hist *)e->obj)->bounds, "", &((tm_hist *)e->obj)->c);
    case K_LHIST: {
        tm_lhist *h = e->obj;
        int rc = 0, n = atomic_load_explicit(&h->count, memory_order_acquire);
        for (int i = 0; i < n && !rc; i++)
            rc = render_counts(out, e, h->bounds, h->s[i].labels, &h->s[i].c);
        if (!rc && atomic_load(&h->s[TM_LHIST_SERIES].c.n))
            rc = render_counts(out, e, h->bounds, "overflow=\"true\"", &h->s[TM_LHIST_SERIES].c);
        return rc;
    }
    }
    return 0;
}

int tm_metrics_render(tm_metrics *m, tm_buf *out)
{
    if (!m)
        return 0;
    pthread_mutex_lock(&m->mu);
    size_t n = m->n;
    pthread_mutex_unlock(&m->mu); /* entries below n never change */
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t first = 0;
        while (strcmp(m->e[first].name, m->e[i].name) != 0)
            first++;
        if (first < i)
            continue; /* printed with the first series of its name */
        const entry *e = &m->e[i];
        rc = tm_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", e->name, e->help ? e->help : "",
                           e->name, kind_name[e->k]);
        for (size_t j = i; j < n && !rc; j++)
            if (strcmp(m->e[j].name, e->name) == 0)
                rc = render_entry(out, &m->e[j]);
    }
    return rc;
}
