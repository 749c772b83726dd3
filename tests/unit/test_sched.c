/*
 * test_sched.c - the fair admission of handler calls (src/server/sched.c):
 * caps per session, per address and in all; waiting sessions served
 * round-robin; the queue bound; every submitted call runs exactly once,
 * even when the pool closes under it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/clock.h"
#include "base/pool.h"
#include "server/sched.h"
#include "tidemark/tidemark.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* A job that blocks until released, recording the order it started in. */
typedef struct world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, max_running, released, ran;
    char order[64];
    int norder;
} world;

typedef struct job {
    world *w;
    char tag;
} job;

static void blocker(void *arg)
{
    job *j = arg;
    world *w = j->w;
    pthread_mutex_lock(&w->mu);
    w->running++;
    if (w->running > w->max_running)
        w->max_running = w->running;
    if (w->norder < (int)sizeof w->order - 1)
        w->order[w->norder++] = j->tag;
    pthread_cond_broadcast(&w->cv);
    while (!w->released)
        pthread_cond_wait(&w->cv, &w->mu);
    w->running--;
    w->ran++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    tm_cond_init_monotonic(&w->cv);
}

/* Wait (bounded) until cond on w holds. */
#define WAIT_FOR(w, cond)                                                             \
    do {                                                                              \
        struct timespec dl_ = tm_deadline_ms(5000);                                   \
        pthread_mutex_lock(&(w)->mu);                                                 \
        while (!(cond) && pthread_cond_timedwait(&(w)->cv, &(w)->mu, &dl_) == 0)      \
            ;                                                                         \
        int ok_ = (cond);                                                             \
        pthread_mutex_unlock(&(w)->mu);                                               \
        assert_true(ok_);                                                             \
    } while (0)

static void release(world *w)
{
    pthread_mutex_lock(&w->mu);
    w->released = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void test_session_cap_and_others_go_first(void **state)
{
    (void)state;
    tm_pool *p;
    assert_int_equal(tm_pool_new_range(2, 16, &p), 0);
    tm_sched *s;
    tm_sched_limits lim = {.per_session = 2, .per_address = 0, .total = 0, .queue = 0};
    assert_int_equal(tm_sched_new(p, &lim, &s), 0);
    world w;
    world_init(&w);
    job a[6], b = {&w, 'B'};
    for (int i = 0; i < 6; i++) {
        a[i] = (job){&w, 'A'};
        assert_int_equal(tm_sched_submit(s, "sessA", "10.0.0.1", blocker, &a[i]), 0);
    }
    WAIT_FOR(&w, w.running == 2); /* session A at its cap, 4 waiting */
    assert_int_equal(tm_sched_submit(s, "sessB", "10.0.0.2", blocker, &b), 0);
    WAIT_FOR(&w, w.running == 3); /* B starts at once, not behind A's queue */
    assert_int_equal(w.order[2], 'B');
    release(&w);
    WAIT_FOR(&w, w.ran == 7);
    assert_int_equal(w.max_running, 3);
    tm_pool_free(p);
    tm_sched_free(s);
}

static void test_address_and_total_caps(void **state)
{
    (void)state;
    tm_pool *p;
    assert_int_equal(tm_pool_new_range(2, 32, &p), 0);
    tm_sched *s;
    tm_sched_limits lim = {.per_session = 8, .per_address = 3, .total = 5, .queue = 0};
    assert_int_equal(tm_sched_new(p, &lim, &s), 0);
    world w;
    world_init(&w);
    job j[12];
    char sid[12][8];
    for (int i = 0; i < 8; i++) { /* 8 sessions, one address */
        j[i] = (job){&w, 'x'};
        snprintf(sid[i], sizeof sid[i], "s%d", i);
        assert_int_equal(tm_sched_submit(s, sid[i], "10.0.0.9", blocker, &j[i]), 0);
    }
    WAIT_FOR(&w, w.running == 3); /* the address's cap */
    for (int i = 8; i < 12; i++) { /* another address: up to the total cap */
        j[i] = (job){&w, 'y'};
        snprintf(sid[i], sizeof sid[i], "t%d", i);
        assert_int_equal(tm_sched_submit(s, sid[i], "10.0.0.8", blocker, &j[i]), 0);
    }
    WAIT_FOR(&w, w.running == 5);
    assert_int_equal(tm_sched_running(s), 5);
    release(&w);
    WAIT_FOR(&w, w.ran == 12);
    assert_true(w.max_running <= 5);
    tm_pool_free(p);
    tm_sched_free(s);
}

static void test_round_robin_between_waiting_sessions(void **state)
{
    (void)state;
    tm_pool *p;
    assert_int_equal(tm_pool_new_range(1, 1, &p), 0); /* one worker: order is visible */
    tm_sched *s;
    tm_sched_limits lim = {.per_session = 1, .per_address = 0, .total = 1, .queue = 0};
    assert_int_equal(tm_sched_new(p, &lim, &s), 0);
    world w;
    world_init(&w);
    w.released = 1; /* each job returns at once */
    job j[9];
    /* hold the only slot while the queues fill */
    world hold;
    world_init(&hold);
    job h = {&hold, 'h'};
    assert_int_equal(tm_sched_submit(s, "H", "", blocker, &h), 0);
    WAIT_FOR(&hold, hold.running == 1);
    const char tags[] = "AAABBBCCC";
    for (int i = 0; i < 9; i++) {
        j[i] = (job){&w, tags[i]};
        char sid[2] = {tags[i], 0};
        assert_int_equal(tm_sched_submit(s, sid, "", blocker, &j[i]), 0);
    }
    release(&hold);
    WAIT_FOR(&w, w.ran == 9);
    assert_string_equal(w.order, "ABCABCABC");
    tm_pool_free(p);
    tm_sched_free(s);
}

static void test_queue_bound(void **state)
{
    (void)state;
    tm_pool *p;
    assert_int_equal(tm_pool_new_range(1, 4, &p), 0);
    tm_sched *s;
    tm_sched_limits lim = {.per_session = 1, .per_address = 0, .total = 0, .queue = 2};
    assert_int_equal(tm_sched_new(p, &lim, &s), 0);
    world w;
    world_init(&w);
    job j[3] = {{&w, 'a'}, {&w, 'b'}, {&w, 'c'}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(tm_sched_submit(s, "q", "", blocker, &j[i]), 0);
    WAIT_FOR(&w, w.running == 1); /* 1 runs, 2 wait: the queue is full */
    assert_true(tm_sched_would_refuse(s, "q", 1));
    assert_false(tm_sched_would_refuse(s, "other", 2));
    release(&w);
    WAIT_FOR(&w, w.ran == 3);
    assert_false(tm_sched_would_refuse(s, "q", 2));
    tm_pool_free(p);
    tm_sched_free(s);
}

/* Closing the pool while calls wait: each still runs exactly once (inline
 * on the thread that frees a slot), none is dropped. */
static void test_every_call_runs_when_the_pool_closes(void **state)
{
    (void)state;
    tm_pool *p;
    assert_int_equal(tm_pool_new_range(1, 2, &p), 0);
    tm_sched *s;
    tm_sched_limits lim = {.per_session = 1, .per_address = 0, .total = 0, .queue = 0};
    assert_int_equal(tm_sched_new(p, &lim, &s), 0);
    world w;
    world_init(&w);
    job j[5];
    for (int i = 0; i < 5; i++) {
        j[i] = (job){&w, 'z'};
        assert_int_equal(tm_sched_submit(s, "one", "", blocker, &j[i]), 0);
    }
    WAIT_FOR(&w, w.running == 1);
    release(&w);
    tm_pool_free(p); /* closes: the 4 waiting run inline as slots free */
    assert_int_equal(w.ran, 5);
    tm_sched_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_session_cap_and_others_go_first),
        cmocka_unit_test(test_address_and_total_caps),
        cmocka_unit_test(test_round_robin_between_waiting_sessions),
        cmocka_unit_test(test_queue_bound),
        cmocka_unit_test(test_every_call_runs_when_the_pool_closes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
