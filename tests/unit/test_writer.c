/* test_writer.c - the queue (opqueue.h) and the group-commit writer
 * (writer.h) on their own, with a fake backend whose commit can be held,
 * made to fail, and counted: batching while a commit is in flight, barriers
 * and what they report, a failed commit and what is queued behind it, the
 * probe that lets writes in again, stopping with ops queued, maintenance,
 * the wake-ups and the touch throttle. Every wait has a deadline. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "log/opqueue.h"
#include "log/writer.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the queue ------------------------------------------------------------------------ */

typedef struct qop {
    tm_qop q;
    int id;
} qop;

static atomic_int g_released;

static void count_release(tm_qop *o, void *ud)
{
    atomic_fetch_add(&g_released, *(int *)ud);
    free(o);
}

static qop *qop_new(int id)
{
    qop *o = calloc(1, sizeof *o);
    assert_non_null(o);
    o->id = id;
    return o;
}

typedef struct waiter {
    tm_opqueue *q;
    qop *o;
    int status;
    atomic_int done;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    w->status = tm_opqueue_wait(w->q, &w->o->q);
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_opqueue_order_max_mark(void **state)
{
    (void)state;
    tm_opqueue q;
    assert_int_equal(tm_opqueue_init(&q), 0);
    assert_int_equal(tm_opqueue_mark(&q), 1);
    for (int i = 1; i <= 5; i++)
        tm_opqueue_push(&q, &qop_new(i)->q);
    assert_int_equal(tm_opqueue_mark(&q), 6); /* the next push gets 6 */
    size_t n;
    int stop;
    tm_qop *b = tm_opqueue_take(&q, 2, 0, &n, &stop); /* at most 2, oldest first */
    assert_int_equal(n, 2);
    assert_int_equal(stop, 0);
    assert_int_equal(((qop *)b)->id, 1);
    assert_int_equal(b->ctr, 1);
    assert_int_equal(((qop *)b->next)->id, 2);
    assert_null(b->next->next);
    int one = 1;
    atomic_store(&g_released, 0);
    tm_opqueue_settle(&q, b, count_release, &one); /* nobody waits: released */
    assert_int_equal(atomic_load(&g_released), 2);
    b = tm_opqueue_take(&q, 0, 0, &n, &stop); /* 0: all */
    assert_int_equal(n, 3);
    assert_int_equal(((qop *)b)->id, 3);
    assert_int_equal(b->next->next->ctr, 5);
    tm_opqueue_settle(&q, b, count_release, &one);
    assert_int_equal(atomic_load(&g_released), 5);
    tm_opqueue_destroy(&q);
}

static void test_opqueue_wake_wait_stop(void **state)
{
    (void)state;
    tm_opqueue q;
    assert_int_equal(tm_opqueue_init(&q), 0);
    size_t n;
    int stop;
    long long t0 = now_ms();
    assert_null(tm_opqueue_take(&q, 0, t0 + 60, &n, &stop)); /* nothing: back at the deadline */
    assert_true(now_ms() - t0 >= 55);
    assert_int_equal(n, 0);
    assert_int_equal(stop, 0);

    /* a waiter is let go when its op is settled, with the op's status */
    waiter w = {.q = &q, .o = qop_new(7)};
    w.o->q.sync = 1;
    tm_opqueue_push(&q, &w.o->q);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, wait_main, &w), 0);
    tm_qop *b = tm_opqueue_take(&q, 0, 0, &n, &stop);
    assert_ptr_equal(b, &w.o->q);
    nap_ms(20);
    assert_int_equal(atomic_load(&w.done), 0); /* not before */
    b->status = TIDEMARK_EEXIST;
    int one = 1;
    atomic_store(&g_released, 0);
    tm_opqueue_settle(&q, b, count_release, &one);
    pthread_join(th, NULL);
    assert_int_equal(w.status, TIDEMARK_EEXIST);
    assert_int_equal(atomic_load(&g_released), 0); /* the waiter frees it */
    free(w.o);

    /* stopped with ops queued: they are still taken, and only then stop */
    tm_opqueue_push(&q, &qop_new(8)->q);
    tm_opqueue_push(&q, &qop_new(9)->q);
    tm_opqueue_stop(&q);
    b = tm_opqueue_take(&q, 0, 0, &n, &stop);
    assert_int_equal(n, 2);
    assert_int_equal(stop, 0);
    tm_opqueue_settle(&q, b, count_release, &one);
    assert_null(tm_opqueue_take(&q, 0, 0, &n, &stop));
    assert_int_equal(stop, 1);
    tm_opqueue_destroy(&q);
}

/* ---- a fake backend ------------------------------------------------------------------- */

#define MAX_BATCHES 64

typedef struct fop {
    tm_wop w;
    int id;
    const char *stream; /* settle names it to wake */
} fop;

typedef struct fake {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int hold;              /* commits wait while set */
    int in_commit;         /* a commit is waiting on hold */
    int fail;              /* commits fail while set */
    int probe_ok;          /* probes succeed while set */
    int probes, refuse_on, refuse_off, maint, commits;
    size_t batch[MAX_BATCHES];
    int settled_rc[MAX_BATCHES];
    atomic_int released;
    atomic_int callbacks;  /* append callbacks run */
    int listened;          /* listener calls */
    int cb_at_listen;      /* callbacks that had run when the listener ran */
    uint64_t listen_seq;
    char listen_stream[16];
    int refusing_mode;     /* the refusing hook says so */
    int bad;               /* a commit was handed a batch of another size than n */
    tm_store st;           /* only its listener is used */
    tm_writer *w;
} fake;

static int f_commit(void *be, tm_wop *batch, size_t n)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    f->in_commit = 1;
    pthread_cond_broadcast(&f->cv);
    while (f->hold)
        pthread_cond_wait(&f->cv, &f->mu);
    f->in_commit = 0;
    size_t k = 0;
    for (tm_wop *o = batch; o; o = (tm_wop *)o->q.next)
        k++;
    f->bad += k != n; /* (no assert off the test's thread) */
    if (f->commits < MAX_BATCHES)
        f->batch[f->commits] = n;
    f->commits++;
    int rc = f->fail ? TIDEMARK_EIO : 0;
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void f_settle(void *be, tm_wop *batch, int rc)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    int k = f->commits ? f->commits - 1 : 0;
    if (k < MAX_BATCHES)
        f->settled_rc[k] = rc;
    pthread_mutex_unlock(&f->mu);
    for (fop *o = (fop *)batch; o; o = (fop *)o->w.q.next)
        if (rc == 0 && o->stream)
            tm_writer_wake(f->w, "s", o->stream, o->w.seq);
}

static void f_maintain(void *be)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    f->maint++;
    pthread_mutex_unlock(&f->mu);
}

static int f_probe(void *be)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    f->probes++;
    int ok = f->probe_ok;
    pthread_mutex_unlock(&f->mu);
    return ok ? 0 : TIDEMARK_EIO;
}

static void f_refuse(void *be, int on)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    if (on)
        f->refuse_on++;
    else
        f->refuse_off++;
    pthread_mutex_unlock(&f->mu);
}

static int f_refusing(void *be)
{
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    int r = f->refusing_mode;
    pthread_mutex_unlock(&f->mu);
    return r;
}

static fake *g_fake; /* the test's: for the release hook and the callbacks */

/* Ops live in the tests' arrays: release only counts them. */
static void f_release_count(tm_wop *o)
{
    (void)o;
    atomic_fetch_add(&g_fake->released, 1);
}

static void f_listener(void *ud, const char *session, const char *stream, uint64_t seq)
{
    fake *f = ud;
    (void)session;
    pthread_mutex_lock(&f->mu); /* the writer holds no lock of ours: this cannot deadlock */
    f->listened++;
    f->cb_at_listen = atomic_load(&f->callbacks);
    f->listen_seq = seq;
    snprintf(f->listen_stream, sizeof f->listen_stream, "%s", stream);
    pthread_mutex_unlock(&f->mu);
}

static const tm_writer_hooks f_hooks = {
    .commit = f_commit, .settle = f_settle, .release = f_release_count,
    .maintain = f_maintain, .probe = f_probe, .refuse = f_refuse, .refusing = f_refusing,
};

static fake *fake_new(int64_t maintain_ms, int64_t window_us, size_t batch_max)
{
    fake *f = calloc(1, sizeof *f);
    assert_non_null(f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->st.listener = f_listener;
    f->st.listener_ud = f;
    tm_writer_config c = {.name = "fake", .store = &f->st, .be = f, .hooks = &f_hooks,
                          .batch_max = batch_max, .maintain_ms = maintain_ms,
                          .sync_window_us = window_us, .touch_every_ms = 100};
    assert_int_equal(tm_writer_new(&c, &f->w), 0);
    assert_int_equal(tm_writer_start(f->w), 0);
    g_fake = f;
    return f;
}

static void fake_free(fake *f)
{
    tm_writer_free(f->w);
    assert_int_equal(f->bad, 0);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f);
}

static void hold(fake *f, int on)
{
    pthread_mutex_lock(&f->mu);
    f->hold = on;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Wait (2 s at most) until a commit is held. */
static void wait_in_commit(fake *f)
{
    long long deadline = now_ms() + 2000;
    pthread_mutex_lock(&f->mu);
    while (!f->in_commit && now_ms() < deadline) {
        pthread_mutex_unlock(&f->mu);
        nap_ms(2);
        pthread_mutex_lock(&f->mu);
    }
    int in = f->in_commit;
    pthread_mutex_unlock(&f->mu);
    assert_true(in);
}

static void on_cb(void *ud, int status, uint64_t seq)
{
    fop *o = ud;
    o->w.q.status = status; /* the test reads it back: settled ops are not touched after */
    o->id = seq ? (int)seq : -1;
    atomic_fetch_add(&g_fake->callbacks, 1);
}

/* An append-like op: told through its callback. */
static void mk_append(fop *o, uint64_t seq, const char *stream)
{
    memset(o, 0, sizeof *o);
    o->w.append = 1;
    o->w.seq = seq;
    o->w.cb = on_cb;
    o->w.cb_ud = o;
    o->stream = stream;
}

/* ---- the writer ----------------------------------------------------------------------- */

/* Everything queued while a commit is held rides in the next one, callbacks
 * before the listener, one wake-up per stream with its highest seq. */
static void test_writer_batches_while_committing(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0);
    static fop ops[21];
    hold(f, 1);
    mk_append(&ops[0], 1, "r1");
    tm_writer_push(f->w, &ops[0].w);
    wait_in_commit(f);
    for (int i = 1; i <= 20; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, i % 2 ? "r1" : "r2");
        tm_writer_push(f->w, &ops[i].w);
    }
    hold(f, 0);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 2);
    assert_int_equal(f->batch[0], 1);
    assert_int_equal(f->batch[1], 20); /* one commit for all that piled up */
    assert_int_equal(atomic_load(&f->callbacks), 21);
    for (int i = 0; i <= 20; i++) {
        assert_int_equal(ops[i].w.q.status, 0);
        assert_int_equal(ops[i].id, i + 1); /* the callback heard its seq */
    }
    assert_int_equal(atomic_load(&f->released), 21);
    /* batch 1: r1; batch 2: r1 and r2, once each */
    assert_int_equal(f->listened, 3);
    assert_int_equal(f->cb_at_listen, 21); /* the batch's callbacks ran first */
    assert_string_equal(f->listen_stream, "r2");
    assert_int_equal(f->listen_seq, 21); /* a stream's highest seq of the batch */
    fake_free(f);
}

static void test_writer_batch_max(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 4);
    static fop ops[11];
    hold(f, 1);
    mk_append(&ops[0], 1, NULL);
    tm_writer_push(f->w, &ops[0].w);
    wait_in_commit(f);
    for (int i = 1; i <= 10; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, NULL);
        tm_writer_push(f->w, &ops[i].w);
    }
    hold(f, 0);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 4); /* 1, then 4 + 4 + 2 */
    assert_int_equal(f->batch[1], 4);
    assert_int_equal(f->batch[3], 2);
    fake_free(f);
}

/* Ops pushed under a hold commit in one batch, however slowly they are
 * pushed to an idle writer; a wait of the holding thread ends its hold
 * (no deadlock on its own op); holds nest; another thread's hold keeps
 * the writer back too. Without the hold the first push commits alone. */
static void test_writer_hold_one_batch(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0);
    static fop ops[8];
    mk_append(&ops[0], 1, "r1");
    tm_writer_push(f->w, &ops[0].w); /* unheld: commits by itself */
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 1);
    tm_writer_hold(f->w);
    tm_writer_hold(f->w); /* nested: one hold */
    for (int i = 1; i <= 4; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, "r1");
        tm_writer_push(f->w, &ops[i].w);
        nap_ms(5); /* an idle writer would have taken each alone */
    }
    assert_int_equal(f->commits, 1); /* nothing committed while held */
    tm_writer_release(f->w);
    nap_ms(10);
    assert_int_equal(f->commits, 1); /* the outer hold still holds */
    tm_writer_release(f->w);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 2);
    assert_int_equal(f->batch[1], 4);
    /* a sync while holding lets go first: it returns, with the ops committed */
    tm_writer_hold(f->w);
    mk_append(&ops[5], 6, "r1");
    tm_writer_push(f->w, &ops[5].w);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 3);
    tm_writer_release(f->w); /* no-op: the sync ended the hold */
    mk_append(&ops[6], 7, "r1");
    tm_writer_push(f->w, &ops[6].w);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(f->commits, 4);
    assert_int_equal(atomic_load(&f->callbacks), 7);
    fake_free(f);
}

/* A hold keeps back at most TM_HOLD_MAX_OPS: a thread that pushes more
 * under one hold (an inline call's thousands of events) sees them commit
 * while it still holds; the rest waits for the release. */
static void test_writer_hold_bounded(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0);
    enum { N = TM_HOLD_MAX_OPS * 2 + 10 };
    static fop ops[N];
    tm_writer_hold(f->w);
    for (int i = 0; i < N; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, "r1");
        tm_writer_push(f->w, &ops[i].w);
    }
    /* still holding: the first 2 x TM_HOLD_MAX_OPS commit (10 s deadline) */
    for (int t = 0; t < 10000 && atomic_load(&f->callbacks) < 2 * TM_HOLD_MAX_OPS; t++)
        nap_ms(1);
    assert_int_equal(atomic_load(&f->callbacks), 2 * TM_HOLD_MAX_OPS);
    tm_writer_release(f->w);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(atomic_load(&f->callbacks), N);
    fake_free(f);
}

/* A barrier is settled after everything queued before it and never goes to
 * the backend: a sync of an idle writer commits nothing. */
static void test_writer_barriers(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0);
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(tm_writer_sync_since(f->w, tm_writer_mark(f->w)), 0);
    assert_int_equal(f->commits, 0);
    static fop ops[3];
    for (int i = 0; i < 3; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, NULL);
        tm_writer_push(f->w, &ops[i].w);
    }
    assert_int_equal(tm_writer_sync(f->w), 0);
    assert_int_equal(atomic_load(&f->callbacks), 3); /* all settled before sync returned */
    /* the backend's own refusal (a damaged file) makes a barrier fail */
    pthread_mutex_lock(&f->mu);
    f->refusing_mode = 1;
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(tm_writer_sync(f->w), TIDEMARK_EIO);
    pthread_mutex_lock(&f->mu);
    f->refusing_mode = 0;
    pthread_mutex_unlock(&f->mu);
    /* tm_writer_run: the caller waits and keeps the op */
    fop o;
    memset(&o, 0, sizeof o);
    assert_int_equal(tm_writer_run(f->w, &o.w), 0);
    assert_int_equal(atomic_load(&f->released), 3);
    fake_free(f);
}

/* A failed commit fails its batch and everything queued behind it; writes
 * are refused (new ops fail without a commit) until a probe succeeds; the
 * barriers report what failed. */
static void test_writer_failure_settle(void **state)
{
    (void)state;
    fake *f = fake_new(0, 5LL * 1000000, 0);
    static fop ops[8];
    uint64_t mark = tm_writer_mark(f->w);
    hold(f, 1);
    pthread_mutex_lock(&f->mu);
    f->fail = 1;
    pthread_mutex_unlock(&f->mu);
    mk_append(&ops[0], 1, "r1");
    tm_writer_push(f->w, &ops[0].w);
    wait_in_commit(f);
    for (int i = 1; i < 6; i++) { /* queued behind the failing commit */
        mk_append(&ops[i], (uint64_t)i + 1, "r1");
        tm_writer_push(f->w, &ops[i].w);
    }
    hold(f, 0);
    assert_int_equal(tm_writer_sync(f->w), TIDEMARK_EIO);
    assert_int_equal(f->commits, 1); /* the ones behind were failed, not tried */
    for (int i = 0; i < 6; i++)
        assert_int_equal(ops[i].w.q.status, TIDEMARK_EIO);
    assert_int_equal(atomic_load(&f->callbacks), 6);
    assert_int_equal(f->listened, 0); /* nothing became durable */
    assert_int_equal(f->refuse_on, 1);
    assert_int_equal(tm_writer_refusing(f->w), TIDEMARK_EIO);
    assert_int_equal(f->settled_rc[0], TIDEMARK_EIO);
    /* refused: failed at once, no commit */
    pthread_mutex_lock(&f->mu);
    f->fail = 0;
    pthread_mutex_unlock(&f->mu);
    mk_append(&ops[6], 7, "r1");
    tm_writer_push(f->w, &ops[6].w);
    assert_int_equal(tm_writer_sync(f->w), TIDEMARK_EIO);
    assert_int_equal(ops[6].w.q.status, TIDEMARK_EIO);
    assert_int_equal(f->commits, 1);
    /* the probe fails (backoff) until it succeeds; then writes go through */
    nap_ms(350); /* probes at ~100 and ~300 ms */
    pthread_mutex_lock(&f->mu);
    int probes = f->probes;
    f->probe_ok = 1;
    pthread_mutex_unlock(&f->mu);
    assert_true(probes >= 1 && probes <= 3);
    long long deadline = now_ms() + 3000;
    while (tm_writer_refusing(f->w) && now_ms() < deadline)
        nap_ms(5);
    assert_int_equal(tm_writer_refusing(f->w), 0);
    assert_int_equal(f->refuse_off, 1);
    mk_append(&ops[7], 1, "r1");
    tm_writer_push(f->w, &ops[7].w);
    assert_int_equal(tm_writer_sync_since(f->w, tm_writer_mark(f->w)), 0);
    assert_int_equal(ops[7].w.q.status, 0);
    assert_int_equal(f->listened, 1);
    /* exact: a mark before the failure still hears of it; the window too */
    assert_int_equal(tm_writer_sync_since(f->w, mark), TIDEMARK_EIO);
    assert_int_equal(tm_writer_sync(f->w), TIDEMARK_EIO);
    fake_free(f);
}

typedef struct report_ctx {
    fake *f;
    fop *o;
    int sync_rc[2];
} report_ctx;

static void *report_main(void *arg)
{
    report_ctx *c = arg;
    c->o->w.report = 1;
    c->o->w.thread = pthread_self();
    tm_writer_push(c->f->w, &c->o->w);
    c->sync_rc[0] = tm_writer_sync(c->f->w);
    c->sync_rc[1] = tm_writer_sync(c->f->w);
    return NULL;
}

/* The same thread's next call (a worker's): its report op failed, then
 * sync_since with a mark taken after it, and one taken before it. */
static void *report_since_main(void *arg)
{
    report_ctx *c = arg;
    uint64_t before = tm_writer_mark(c->f->w);
    c->o->w.report = 1;
    c->o->w.thread = pthread_self();
    tm_writer_push(c->f->w, &c->o->w);
    assert_int_equal(tm_writer_sync_since(c->f->w, before), TIDEMARK_EIO);
    c->o[1].w.report = 1;
    c->o[1].w.thread = pthread_self();
    tm_writer_push(c->f->w, &c->o[1].w);
    c->sync_rc[0] = tm_writer_sync_since(c->f->w, tm_writer_mark(c->f->w));
    c->sync_rc[1] = tm_writer_sync(c->f->w);
    return NULL;
}

/* An op queued without waiting and without a callback (a request record)
 * reports its failure to its own thread's next sync, once; a duplicate
 * (TIDEMARK_EEXIST) is no failure. */
static int g_report_status;

static int f_commit_status(void *be, tm_wop *batch, size_t n)
{
    (void)be;
    (void)n;
    for (tm_wop *o = batch; o; o = (tm_wop *)o->q.next)
        o->q.status = g_report_status;
    return 0;
}

static void test_writer_reports_to_thread(void **state)
{
    (void)state;
    tm_writer_hooks h = f_hooks;
    h.commit = f_commit_status;
    fake *f = fake_new(0, 0, 0);
    tm_writer_free(f->w);
    tm_writer_config c = {.name = "fake", .store = &f->st, .be = f, .hooks = &h};
    assert_int_equal(tm_writer_new(&c, &f->w), 0);
    assert_int_equal(tm_writer_start(f->w), 0);
    static fop o1, o2;
    g_report_status = TIDEMARK_ENOTFOUND;
    report_ctx rc1 = {.f = f, .o = &o1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, report_main, &rc1), 0);
    pthread_join(th, NULL);
    assert_int_equal(rc1.sync_rc[0], TIDEMARK_EIO);
    assert_int_equal(rc1.sync_rc[1], 0); /* told once */
    assert_int_equal(tm_writer_sync(f->w), 0); /* another thread's: not ours to hear */
    g_report_status = TIDEMARK_EEXIST;
    report_ctx rc2 = {.f = f, .o = &o2};
    assert_int_equal(pthread_create(&th, NULL, report_main, &rc2), 0);
    pthread_join(th, NULL);
    assert_int_equal(rc2.sync_rc[0], 0);
    /* a failure queued before a later call's mark is not that call's */
    static fop o3[2];
    g_report_status = TIDEMARK_ENOTFOUND;
    report_ctx rc3 = {.f = f, .o = o3};
    assert_int_equal(pthread_create(&th, NULL, report_since_main, &rc3), 0);
    pthread_join(th, NULL);
    assert_int_equal(rc3.sync_rc[0], 0);
    assert_int_equal(rc3.sync_rc[1], 0); /* forgotten, not held for later */
    fake_free(f);
}

typedef struct stopper {
    fake *f;
    atomic_int stopped;
} stopper;

static void *stop_main(void *arg)
{
    stopper *s = arg;
    tm_writer_stop(s->f->w);
    atomic_store(&s->stopped, 1);
    return NULL;
}

/* Stopping commits what is queued first, then ends the thread. */
static void test_writer_stop_with_ops_queued(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0);
    static fop ops[50];
    hold(f, 1);
    for (int i = 0; i < 50; i++) {
        mk_append(&ops[i], (uint64_t)i + 1, "r1");
        tm_writer_push(f->w, &ops[i].w);
    }
    wait_in_commit(f);
    stopper s = {.f = f};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stop_main, &s), 0);
    nap_ms(30);
    assert_int_equal(atomic_load(&s.stopped), 0); /* waits for the held commit */
    hold(f, 0);
    pthread_join(th, NULL);
    assert_int_equal(atomic_load(&f->callbacks), 50);
    assert_int_equal(atomic_load(&f->released), 50);
    for (int i = 0; i < 50; i++)
        assert_int_equal(ops[i].w.q.status, 0);
    tm_writer_stop(f->w); /* again: nothing */
    fake_free(f);
}

/* Maintenance runs every maintain_ms, whether or not ops come, and not while
 * writes are refused. */
static void test_writer_maintenance(void **state)
{
    (void)state;
    fake *f = fake_new(40, 0, 0);
    nap_ms(300);
    pthread_mutex_lock(&f->mu);
    int m = f->maint;
    pthread_mutex_unlock(&f->mu);
    assert_true(m >= 3 && m <= 9);
    pthread_mutex_lock(&f->mu);
    f->fail = 1;
    pthread_mutex_unlock(&f->mu);
    static fop o;
    mk_append(&o, 1, NULL);
    tm_writer_push(f->w, &o.w);
    assert_int_equal(tm_writer_sync(f->w), TIDEMARK_EIO);
    pthread_mutex_lock(&f->mu);
    m = f->maint;
    pthread_mutex_unlock(&f->mu);
    nap_ms(200);
    pthread_mutex_lock(&f->mu);
    int later = f->maint;
    f->probe_ok = 1;
    pthread_mutex_unlock(&f->mu);
    assert_int_equal(later, m); /* refused: no maintenance */
    fake_free(f);
}

static void test_writer_touch_throttle(void **state)
{
    (void)state;
    fake *f = fake_new(0, 0, 0); /* touch_every_ms 100 */
    int first = -1;
    assert_int_equal(tm_writer_touch_due(f->w, "a", 1000, &first), 1);
    assert_int_equal(first, 1); /* unknown: the caller checks it exists */
    assert_int_equal(tm_writer_touch_due(f->w, "a", 1050, &first), 0);
    assert_int_equal(first, 0);
    assert_int_equal(tm_writer_touch_due(f->w, "a", 1100, &first), 1);
    assert_int_equal(first, 0);
    tm_writer_touch_forget(f->w, "a");
    assert_int_equal(tm_writer_touch_due(f->w, "a", 1101, &first), 1);
    assert_int_equal(first, 1);
    tm_writer_touch_note(f->w, "b", 5000); /* made at 5000 */
    assert_int_equal(tm_writer_touch_due(f->w, "b", 5099, &first), 0);
    assert_int_equal(tm_writer_touch_due(f->w, "b", 5100, &first), 1);
    assert_int_equal(first, 0);
    fake_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_opqueue_order_max_mark),
        cmocka_unit_test(test_opqueue_wake_wait_stop),
        cmocka_unit_test(test_writer_batches_while_committing),
        cmocka_unit_test(test_writer_batch_max),
        cmocka_unit_test(test_writer_hold_one_batch),
        cmocka_unit_test(test_writer_hold_bounded),
        cmocka_unit_test(test_writer_barriers),
        cmocka_unit_test(test_writer_failure_settle),
        cmocka_unit_test(test_writer_reports_to_thread),
        cmocka_unit_test(test_writer_stop_with_ops_queued),
        cmocka_unit_test(test_writer_maintenance),
        cmocka_unit_test(test_writer_touch_throttle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
