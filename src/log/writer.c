/* writer.c - the group-commit writer (writer.h). */
#include "writer.h"
#include "../base/clock.h"
#include "../base/log.h"
#include "../base/map.h"
#include "../base/metrics.h"
#include "tidemark/tidemark.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_MIN_MS 100   /* after a failed commit: first probe, then doubling ... */
#define PROBE_MAX_MS 5000  /* ... up to this */
#define TOUCH_EVERY_MS 5000
#define TOUCH_MAX 4096     /* sessions whose last touch is kept; past it they start over */

/* A failed report op not yet told to its thread (tm_wop.report). */
typedef struct unreported_op {
    pthread_t thread;
    uint64_t ctr;
} unreported_op;

typedef struct wake_item {
    char *session, *stream; /* one allocation: session, then stream */
    uint64_t seq;
} wake_item;

struct tm_writer {
    tm_writer_config cfg;
    tm_writer_hooks hooks;
    char *name;
    tm_opqueue queue;
    pthread_t thread;
    int started;

    atomic_int refusing;        /* a commit failed and no probe has succeeded since */
    atomic_ullong fail_ctr_hi;  /* highest queue position of an op that failed */
    atomic_llong fail_enq_hi;   /* latest enqueue time (us) of an op that failed */

    /* the writer thread's own */
    int64_t probe_at_ms, probe_every_ms, failed_since_ms;
    unreported_op *unreported;  /* report ops that failed, their threads not yet told */
    size_t nunreported;
    tm_map *wake_index;         /* of the batch being settled: stream -> 1 + index */
    wake_item *wakes;
    size_t nwakes, capwakes;

    pthread_mutex_t t_mu;       /* session touches */
    tm_map *touched;            /* session -> int64_t ms of the last touch written */
};

static void free_value(const char *k, void *v, void *ud)
{
    (void)k;
    (void)ud;
    free(v);
}

int tm_writer_new(const tm_writer_config *cfg, tm_writer **out)
{
    tm_writer *w = calloc(1, sizeof *w);
    if (!w)
        return TIDEMARK_ENOMEM;
    w->cfg = *cfg;
    w->hooks = *cfg->hooks;
    w->cfg.hooks = &w->hooks;
    w->name = strdup(cfg->name ? cfg->name : "store");
    w->touched = tm_map_new();
    int qrc = tm_opqueue_init(&w->queue);
    pthread_mutex_init(&w->t_mu, NULL);
    if (qrc || !w->name || !w->touched) {
        if (!qrc)
            tm_opqueue_destroy(&w->queue);
        pthread_mutex_destroy(&w->t_mu);
        tm_map_free(w->touched);
        free(w->name);
        free(w);
        return TIDEMARK_ENOMEM;
    }
    *out = w;
    return 0;
}

void tm_writer_push(tm_writer *w, tm_wop *o)
{
    if (!o->enq_us)
        o->enq_us = tm_now_us();
    tm_opqueue_push(&w->queue, &o->q);
}

int tm_writer_run(tm_writer *w, tm_wop *o)
{
    o->q.sync = 1;
    tm_writer_push(w, o);
    return tm_opqueue_wait(&w->queue, &o->q);
}

int tm_writer_await(tm_writer *w, tm_wop *o) { return tm_opqueue_wait(&w->queue, &o->q); }

uint64_t tm_writer_mark(tm_writer *w) { return tm_opqueue_mark(&w->queue); }

void tm_writer_wait_settled(tm_writer *w, uint64_t mark)
{
    tm_opqueue_wait_settled(&w->queue, mark);
}

void tm_writer_hold(tm_writer *w) { tm_opqueue_hold(&w->queue); }

void tm_writer_release(tm_writer *w) { tm_opqueue_release(&w->queue); }

int tm_writer_refusing(tm_writer *w) { return atomic_load(&w->refusing) ? TIDEMARK_EIO : 0; }

/* ---- settling a batch ------------------------------------------------------------- */

void tm_writer_wake(tm_writer *w, const char *session, const char *stream, uint64_t seq)
{
    size_t ls = strlen(session), lt = strlen(stream);
    char buf[160], *key = ls + lt + 24 <= sizeof buf ? buf : malloc(ls + lt + 24);
    if (!key || (!w->wake_index && !(w->wake_index = tm_map_new())))
        goto out;
    snprintf(key, ls + lt + 24, "%zu:%s/%s", ls, session, stream);
    uintptr_t at = (uintptr_t)tm_map_get(w->wake_index, key);
    if (at) {
        if (seq > w->wakes[at - 1].seq)
            w->wakes[at - 1].seq = seq;
        goto out;
    }
    if (w->nwakes == w->capwakes) {
        size_t cap = w->capwakes ? w->capwakes * 2 : 16;
        wake_item *v = realloc(w->wakes, cap * sizeof *v);
        if (!v)
            goto out;
        w->wakes = v;
        w->capwakes = cap;
    }
    char *p = malloc(ls + lt + 2);
    if (!p)
        goto out;
    memcpy(p, session, ls + 1);
    memcpy(p + ls + 1, stream, lt + 1);
    w->wakes[w->nwakes] = (wake_item){p, p + ls + 1, seq};
    if (tm_map_put(w->wake_index, key, (void *)(uintptr_t)(w->nwakes + 1)) != 0)
        free(p);
    else
        w->nwakes++;
out:
    if (key != buf)
        free(key);
}

/* The listener hears of every stream named, with no lock held. */
static void notify_wakes(tm_writer *w)
{
    for (size_t i = 0; i < w->nwakes; i++) {
        if (w->cfg.store)
            tm_store_notify_commit(w->cfg.store, w->wakes[i].session, w->wakes[i].stream,
                                   w->wakes[i].seq);
        free(w->wakes[i].session);
    }
    w->nwakes = 0;
    tm_map_free(w->wake_index);
    w->wake_index = NULL;
}

/* What a failed op leaves for the barriers that come after it. */
static void note_failure(tm_writer *w, tm_wop *o, int batch_failed)
{
    int st = o->q.status;
    if (batch_failed || st == TIDEMARK_EIO) {
        if (o->q.ctr > atomic_load(&w->fail_ctr_hi))
            atomic_store(&w->fail_ctr_hi, o->q.ctr);
        if (o->enq_us > atomic_load(&w->fail_enq_hi))
            atomic_store(&w->fail_enq_hi, o->enq_us);
    }
    if (o->report && !o->q.sync && st != 0 && st != TIDEMARK_EEXIST) {
        unreported_op *v = realloc(w->unreported, (w->nunreported + 1) * sizeof *v);
        if (v) {
            w->unreported = v;
            w->unreported[w->nunreported++] = (unreported_op){o->thread, o->q.ctr};
        }
    }
}

/* A barrier: failed with its batch or while writes are refused, and told
 * (once) of its thread's failed report ops. Every op its thread queued
 * before it is settled by now: a waiting thread queues nothing after it. */
static void settle_barrier(tm_writer *w, tm_wop *b, int rc)
{
    b->q.status = rc ? rc : atomic_load(&w->refusing) ? TIDEMARK_EIO : 0;
    for (size_t i = 0; i < w->nunreported; i++) {
        if (pthread_equal(w->unreported[i].thread, b->thread)) {
            if (w->unreported[i].ctr >= b->since) /* else queued before what b asks about */
                b->q.status = TIDEMARK_EIO;
            w->unreported[i--] = w->unreported[--w->nunreported];
        }
    }
}

/* The store's metrics (none for a writer without a store). */
static const tm_store_metrics *metrics_of(const tm_writer *w)
{
    static const tm_store_metrics none;
    return w->cfg.store ? &w->cfg.store->m : &none;
}

static void tell_callbacks(const tm_writer *w, tm_wop *ops, size_t n)
{
    int64_t now_us = tm_now_us();
    tm_store_callback_batch_set(n);
    for (tm_wop *o = ops; o; o = (tm_wop *)o->q.next) {
        if (!o->append)
            continue;
        int st = o->q.status;
        if (st == 0)
            tm_hist_observe(metrics_of(w)->commit_latency_us, (uint64_t)(now_us - o->enq_us));
        if (o->cb)
            o->cb(o->cb_ud, st, st ? 0 : o->seq);
    }
    tm_store_callback_batch_set(0);
}

static void release_qop(tm_qop *o, void *ud)
{
    tm_writer *w = ud;
    w->hooks.release((tm_wop *)o);
}

/* Settle a batch: its ops committed (rc 0) or failed (rc), n ops taken in
 * all (barriers included). Backend state first, then callbacks, then the
 * listener, then the waiters. */
static void finish(tm_writer *w, tm_wop *ops, tm_wop *barriers, size_t n, int rc)
{
    int failed = rc != 0;
    for (tm_wop *o = ops; o; o = (tm_wop *)o->q.next) {
        if (rc)
            o->q.status = rc;
        note_failure(w, o, rc != 0);
        failed |= o->q.status == TIDEMARK_EIO;
    }
    for (tm_wop *b = barriers; b; b = (tm_wop *)b->q.next)
        settle_barrier(w, b, rc);
    tm_wop *all = barriers;
    if (ops) {
        w->hooks.settle(w->cfg.be, ops, rc);
        size_t nops = 0;
        for (tm_wop *o = ops; o; o = (tm_wop *)o->q.next)
            nops++;
        tell_callbacks(w, ops, nops);
        tm_counter_inc(failed ? metrics_of(w)->commit_failures : metrics_of(w)->commits);
        tm_hist_observe(metrics_of(w)->commit_batch, n);
        notify_wakes(w);
        if (w->hooks.after)
            w->hooks.after(w->cfg.be, ops);
        tm_wop *last = ops;
        while (last->q.next)
            last = (tm_wop *)last->q.next;
        last->q.next = barriers ? &barriers->q : NULL;
        all = ops;
    }
    if (all)
        tm_opqueue_settle(&w->queue, &all->q, release_qop, w);
}

/* ---- the thread --------------------------------------------------------------------- */

/* Take the barriers out of a taken list (they are the writer's, not the
 * backend's). OUT ops, nops, barriers: both lists in queue order. */
static void split(tm_qop *got, tm_wop **ops, size_t *nops, tm_wop **barriers)
{
    tm_qop *o_head = NULL, **o_tail = &o_head, *b_head = NULL, **b_tail = &b_head;
    size_t k = 0;
    for (tm_qop *o = got, *next; o; o = next) {
        next = o->next;
        o->next = NULL;
        if (((tm_wop *)o)->barrier) {
            *b_tail = o;
            b_tail = &o->next;
        } else {
            *o_tail = o;
            o_tail = &o->next;
            k++;
        }
    }
    *ops = (tm_wop *)o_head;
    *nops = k;
    *barriers = (tm_wop *)b_head;
}

static void append_list(tm_wop **list, tm_wop *more)
{
    tm_wop **at = list;
    while (*at)
        at = (tm_wop **)&(*at)->q.next;
    *at = more;
}

/* A commit failed: every op queued behind it may carry a seq computed on top
 * of it, so writes are refused first (a backend with a probe), then
 * everything queued fails with the batch. */
static void enter_failed(tm_writer *w, tm_wop **ops, tm_wop **barriers, size_t *n, int rc)
{
    int64_t now = tm_now_ms();
    if (w->hooks.probe) {
        w->hooks.refuse(w->cfg.be, 1);
        if (!atomic_exchange(&w->refusing, 1)) {
            w->failed_since_ms = now;
            w->probe_every_ms = PROBE_MIN_MS;
            w->probe_at_ms = now + PROBE_MIN_MS;
            TM_ERROR("%s: a write failed (%s): writes are refused until a probe write succeeds "
                     "(retried with backoff)", w->name, tidemark_strerror(rc));
        }
    }
    size_t more;
    int stop;
    tm_qop *rest = tm_opqueue_take(&w->queue, 0, now, &more, &stop);
    tm_wop *rops, *rbar;
    size_t nrops;
    split(rest, &rops, &nrops, &rbar);
    append_list(ops, rops);
    append_list(barriers, rbar);
    *n += more;
}

static void run_batch(tm_writer *w, tm_qop *got, size_t n)
{
    tm_wop *ops, *barriers;
    size_t nops;
    split(got, &ops, &nops, &barriers);
    int rc = 0;
    if (atomic_load(&w->refusing)) {
        rc = TIDEMARK_EIO; /* refused without a try: the probe decides when to try again */
    } else if (ops) {
        if (w->hooks.between)
            w->hooks.between(w->cfg.be);
        rc = w->hooks.commit(w->cfg.be, ops, nops);
        if (rc)
            enter_failed(w, &ops, &barriers, &n, rc);
    }
    finish(w, ops, barriers, n, rc);
}

/* While refusing: the backend's probe, with backoff; once one succeeds the
 * backend resets its caches and writes are accepted again. */
static void probe_writes(tm_writer *w)
{
    int64_t now = tm_now_ms();
    if (!w->hooks.probe || now < w->probe_at_ms)
        return;
    if (w->hooks.probe(w->cfg.be) != 0) {
        w->probe_every_ms = w->probe_every_ms * 2 > PROBE_MAX_MS ? PROBE_MAX_MS : w->probe_every_ms * 2;
        w->probe_at_ms = tm_now_ms() + w->probe_every_ms;
        TM_DEBUG("%s: probe write failed; next in %lld ms", w->name, (long long)w->probe_every_ms);
        return;
    }
    w->hooks.refuse(w->cfg.be, 0);
    atomic_store(&w->refusing, 0);
    tm_counter_inc(metrics_of(w)->recoveries);
    TM_WARN("%s: writes succeed again after %lld ms: the store accepts writes", w->name,
            (long long)(tm_now_ms() - w->failed_since_ms));
}

static void *writer_main(void *arg)
{
    tm_writer *w = arg;
    int64_t every = w->hooks.maintain ? w->cfg.maintain_ms : 0;
    int64_t next_maint = every > 0 ? tm_now_ms() + every : 0;
    for (;;) {
        int64_t wake = next_maint;
        int refusing = atomic_load(&w->refusing); /* only this thread changes it */
        if (refusing && w->hooks.probe && (wake == 0 || w->probe_at_ms < wake))
            wake = w->probe_at_ms;
        size_t n;
        int stop;
        tm_qop *got = tm_opqueue_take(&w->queue, w->cfg.batch_max, wake, &n, &stop);
        if (next_maint && tm_now_ms() >= next_maint) {
            if (!atomic_load(&w->refusing))
                w->hooks.maintain(w->cfg.be);
            next_maint = tm_now_ms() + every;
        }
        if (stop)
            break;
        if (atomic_load(&w->refusing))
            probe_writes(w);
        if (got)
            run_batch(w, got, n);
    }
    return NULL;
}

int tm_writer_start(tm_writer *w)
{
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        return TIDEMARK_EIO;
    w->started = 1;
    return 0;
}

void tm_writer_stop(tm_writer *w)
{
    if (!w || !w->started)
        return;
    tm_opqueue_stop(&w->queue);
    pthread_join(w->thread, NULL);
    w->started = 0;
}

void tm_writer_free(tm_writer *w)
{
    if (!w)
        return;
    tm_writer_stop(w);
    tm_opqueue_destroy(&w->queue);
    pthread_mutex_destroy(&w->t_mu);
    tm_map_each(w->touched, free_value, NULL);
    tm_map_free(w->touched);
    tm_map_free(w->wake_index);
    free(w->wakes);
    free(w->unreported);
    free(w->name);
    free(w);
}

/* ---- barriers ----------------------------------------------------------------------- */

static int sync_barrier(tm_writer *w, int exact, uint64_t mark)
{
    tm_wop *b = calloc(1, sizeof *b);
    if (!b)
        return TIDEMARK_ENOMEM;
    b->barrier = 1;
    b->since = exact ? mark : 0;
    b->thread = pthread_self();
    int64_t enq = b->enq_us = tm_now_us();
    int rc = tm_writer_run(w, b);
    free(b);
    if (rc == 0 && atomic_load(&w->refusing))
        rc = TIDEMARK_EIO;
    if (rc == 0 && w->hooks.refusing && w->hooks.refusing(w->cfg.be))
        rc = TIDEMARK_EIO;
    if (rc == 0 && exact && atomic_load(&w->fail_ctr_hi) >= (mark ? mark : 1))
        rc = TIDEMARK_EIO;
    if (rc == 0 && !exact && w->cfg.sync_window_us > 0) {
        int64_t hi = atomic_load(&w->fail_enq_hi);
        if (hi && hi >= enq - w->cfg.sync_window_us)
            rc = TIDEMARK_EIO;
    }
    return rc;
}

int tm_writer_sync(tm_writer *w) { return sync_barrier(w, 0, 0); }

int tm_writer_sync_since(tm_writer *w, uint64_t mark) { return sync_barrier(w, 1, mark); }

/* ---- session touches ------------------------------------------------------------------- */

int tm_writer_touch_due(tm_writer *w, const char *id, int64_t now_ms, int *first)
{
    int64_t every = w->cfg.touch_every_ms > 0 ? w->cfg.touch_every_ms : TOUCH_EVERY_MS;
    pthread_mutex_lock(&w->t_mu);
    int64_t *t = tm_map_get(w->touched, id);
    if (t && now_ms - *t < every) {
        pthread_mutex_unlock(&w->t_mu);
        *first = 0;
        return 0;
    }
    *first = t == NULL;
    if (!t && tm_map_count(w->touched) >= TOUCH_MAX) { /* forget them all: they start over */
        tm_map_each(w->touched, free_value, NULL);
        tm_map_free(w->touched);
        w->touched = tm_map_new();
    }
    if (!t && w->touched && (t = malloc(sizeof *t)) != NULL && tm_map_put(w->touched, id, t) != 0) {
        free(t);
        t = NULL;
    }
    if (t)
        *t = now_ms;
    pthread_mutex_unlock(&w->t_mu);
    return 1;
}

void tm_writer_touch_note(tm_writer *w, const char *id, int64_t ms)
{
    pthread_mutex_lock(&w->t_mu);
    int64_t *t = w->touched ? tm_map_get(w->touched, id) : NULL;
    if (!t && w->touched && (t = malloc(sizeof *t)) != NULL && tm_map_put(w->touched, id, t) != 0) {
        free(t);
        t = NULL;
    }
    if (t)
        *t = ms;
    pthread_mutex_unlock(&w->t_mu);
}

void tm_writer_touch_forget(tm_writer *w, const char *id)
{
    pthread_mutex_lock(&w->t_mu);
    if (w->touched)
        free(tm_map_del(w->touched, id));
    pthread_mutex_unlock(&w->t_mu);
}
