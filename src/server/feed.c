/* feed.c - the store side of an SSE connection (see feed.h). */
#include "feed.h"
#include "seal.h"
#include "../base/clock.h"
#include "../base/map.h"
#include "../base/str.h"
#include "../base/metrics.h"
#include "../transport/sse.h"
#include "tidemark/tidemark.h"
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define READ_BATCH 64

typedef struct feed {
    tidemark_server_t *srv;
    tm_store *store;
    tm_sealer *sealer;     /* the ids' macs (lives as long as the store) */
    tm_seal_mac_prefix *macs; /* this stream's, for the epoch it names (or NULL) */
    char wepoch[TM_EPOCH_LEN + 1]; /* the writer epoch of the last event framed ("": none) */
    char sepoch[TM_EPOCH_LEN + 1]; /* ... and the session's epoch made of it */
    char *session, *stream;
    uint64_t delivered;
    uint64_t began;        /* delivered when attached (feed_has_events) */
    uint64_t replay_until;
    int announce;          /* emit-early: announce the durable head */
    uint64_t announced;    /* last durable head announced */
    tm_buf head;           /* retry, first announcement, prelude: sent first */
    int close_requested;
    uint64_t close_after;  /* with close_requested: end once delivered >= this */
    tm_buf *last_words;    /* tm_feed_fail: sent once caught up, then the end */
    int awaits_open;       /* tm_feed_opts.defer */
    tm_buf *out;           /* during a pull */
    void (*on_end)(void *ud, int completed);
    void *end_ud;
    int counted;           /* in live_feeds */
    int64_t woken_us;      /* the first commit wake-up not yet followed by a live
                              event framed (0: none); under the connection's lock */
} feed;

/* Feeds that a connection holds, per session (srv->live_feeds: session ->
 * count), so "is a stream of this session attached?" is one lookup. The
 * janitor asks it of every session every second; a scan of every open
 * stream for each was quadratic (10,000 streams: ~270 ms of every second,
 * under the server's lock and the hub's). Counted from just before the
 * connection takes the feed (never fewer than the hub holds) until the feed
 * is freed, which is before its server is. */

/* One more (up) or one fewer feed of session; 0, or TIDEMARK_ENOMEM. */
static int live_count(tidemark_server_t *srv, const char *session, int up)
{
    int rc = 0;
    pthread_mutex_lock(&srv->live_mu);
    uintptr_t n = (uintptr_t)tm_map_get(srv->live_feeds, session);
    n = up ? n + 1 : n - (n > 0);
    if (n == 0)
        tm_map_del(srv->live_feeds, session);
    else
        rc = tm_map_put(srv->live_feeds, session, (void *)n); /* down: a failure keeps it high */
    pthread_mutex_unlock(&srv->live_mu);
    return up ? rc : 0;
}

static int live_any(tidemark_server_t *srv, const char *session)
{
    pthread_mutex_lock(&srv->live_mu);
    int any = tm_map_get(srv->live_feeds, session) != NULL;
    pthread_mutex_unlock(&srv->live_mu);
    return any;
}

static void key_of(char *out, size_t n, const char *session, const char *stream)
{
    tm_strjoin(out, n, session, "/", stream, (const char *)NULL);
}

static int frame_event(void *ud, const tm_event *ev)
{
    feed *f = ud;
    char id[TM_EVENT_ID_MAX], mac[TM_EVENT_MAC_LEN + 1];
    /* The session's epoch is a hash of the writer's and the session id: the
     * same for every event of one writer epoch, so made once for a run of
     * them, not per event. */
    if (!f->wepoch[0] || strcmp(ev->epoch, f->wepoch) != 0) {
        tm_epoch_for_session(ev->epoch, f->session, f->sepoch);
        size_t wl = strlen(ev->epoch);
        if (wl <= TM_EPOCH_LEN)
            memcpy(f->wepoch, ev->epoch, wl + 1);
        else
            f->wepoch[0] = '\0'; /* too long to keep: made again next time */
    }
    const char *epoch = f->sepoch;
    if (!f->macs || strcmp(tm_seal_mac_prefix_epoch(f->macs), epoch) != 0) {
        tm_seal_mac_prefix_free(f->macs);
        if (tm_seal_mac_prefix_new(f->sealer, f->session, epoch, f->stream, &f->macs) != 0)
            return 1;
    }
    if (tm_seal_mac_prefix_seq(f->macs, ev->seq, mac) != 0 ||
        tm_event_id_format_mac(id, sizeof id, epoch, f->stream, ev->seq, mac) < 0)
        return 1;
    if (tm_sse_frame(f->out, NULL, id, ev->data, ev->len) != 0)
        return 1;
    f->delivered = ev->seq;
    tm_counter_inc(ev->seq <= f->replay_until ? f->srv->m.replayed : f->srv->m.emitted);
    if (ev->seq > f->replay_until && f->woken_us) { /* commit -> emit */
        tm_hist_observe(f->srv->m.commit_to_emit_us, (uint64_t)(tm_now_us() - f->woken_us));
        f->woken_us = 0;
    }
    return 0;
}

/* "event: tidemark-durable" (no id: not an event of the stream). */
static int frame_durable(tm_buf *out, uint64_t head)
{
    char txt[64];
    int n = snprintf(txt, sizeof txt, "{\"durable_head\":%llu}", (unsigned long long)head);
    return tm_sse_frame(out, "tidemark-durable", NULL, txt, (size_t)n);
}

/* Retention trimmed events this connection had not sent yet: say so with a
 * typed gap event (never skip silently), then go on from the first retained
 * event. */
static int pull_gap(feed *f, tm_buf *out)
{
    tm_stream_bounds gb;
    if (tm_store_bounds(f->store, f->session, f->stream, &gb) != 0 ||
        gb.first_retained <= f->delivered + 1)
        return TM_SRC_END;
    char txt[96];
    int n = snprintf(txt, sizeof txt, "{\"missing\":[%llu,%llu]}",
                     (unsigned long long)f->delivered + 1,
                     (unsigned long long)gb.first_retained - 1);
    if (tm_sse_frame(out, "gap", NULL, txt, (size_t)n) != 0)
        return TM_SRC_END;
    f->delivered = gb.first_retained - 1;
    return TM_SRC_MORE;
}

/* tm_feed_fail's words, then the end. */
static int send_last_words(feed *f, tm_buf *out)
{
    int rc = tm_buf_add(out, f->last_words->data, f->last_words->len);
    tm_buf_free(f->last_words);
    free(f->last_words);
    f->last_words = NULL;
    f->close_requested = 1;
    f->close_after = f->delivered;
    return rc == 0 ? TM_SRC_MORE : TM_SRC_END;
}

/* The stream cannot be read. Last words if any, then the end. A POST's
 * stream that has given nothing yet waits instead: the client holds no
 * cursor to resume from, and its calls' last commit (or, failing, their
 * last words: tm_feed_fail) wakes it. Not found, its opening may not be
 * durable yet, or was lost (then no call's response can be made durable);
 * unreadable, the store may be failing over. Any other stream ends: its
 * client resumes. */
static int pull_lost(feed *f, tm_buf *out)
{
    if (f->last_words)
        return send_last_words(f, out);
    if (f->awaits_open && f->delivered == f->began && !f->close_requested)
        return TM_SRC_WAIT;
    return TM_SRC_END;
}

/* Caught up with the store: announce, end, last words, or wait. */
static int pull_caught_up(feed *f, tm_buf *out)
{
    tm_stream_bounds b;
    if (tm_store_bounds_live(f->store, f->session, f->stream, &b) != 0)
        return pull_lost(f, out);
    if (f->announce && b.head > f->announced && f->delivered > f->announced) {
        /* Tell the client how far what it holds is durable: it never keeps
         * a cursor above this. No id: not an event of the stream. */
        uint64_t d = b.head < f->delivered ? b.head : f->delivered;
        frame_durable(out, d);
        f->announced = d;
        return TM_SRC_MORE;
    }
    if (b.closed && f->delivered >= b.head)
        return TM_SRC_END;
    if (f->close_requested && f->delivered >= f->close_after)
        return TM_SRC_END;
    if (f->last_words) /* nothing more will be committed: say why, then end */
        return send_last_words(f, out);
    return TM_SRC_WAIT;
}

static int feed_pull(void *ud, tm_buf *out)
{
    feed *f = ud;
    if (f->head.len > 0) {
        int rc = tm_buf_add(out, f->head.data, f->head.len);
        tm_buf_free(&f->head);
        return rc == 0 ? TM_SRC_MORE : TM_SRC_END;
    }
    f->out = out;
    size_t before = out->len;
    int rc = tm_store_read_live(f->store, f->session, f->stream, f->delivered, READ_BATCH,
                                frame_event, f);
    f->out = NULL;
    if (rc == TIDEMARK_ERANGE)
        return pull_gap(f, out);
    if (rc)
        return pull_lost(f, out);
    if (out->len > before)
        return TM_SRC_MORE;
    return pull_caught_up(f, out);
}

/* Whether the feed has given an event (or a gap) past where it began. */
static int feed_has_events(void *ud)
{
    const feed *f = ud;
    return f->delivered > f->began;
}

static void feed_free(void *ud)
{
    feed *f = ud;
    if (f->on_end) {
        tm_stream_bounds b;
        int done = tm_store_bounds(f->store, f->session, f->stream, &b) == 0 && b.closed &&
                   f->delivered >= b.head;
        f->on_end(f->end_ud, done);
    }
    if (f->counted)
        live_count(f->srv, f->session, 0);
    tm_buf_free(&f->head);
    tm_seal_mac_prefix_free(f->macs);
    if (f->last_words) {
        tm_buf_free(f->last_words);
        free(f->last_words);
    }
    free(f->session);
    free(f->stream);
    free(f);
}

static feed *feed_new(tidemark_server_t *srv, const tm_feed_opts *o)
{
    feed *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->srv = srv;
    f->store = srv->store;
    f->sealer = srv->sealer;
    f->session = strdup(o->session);
    f->stream = strdup(o->stream);
    f->delivered = o->after_seq;
    f->began = o->after_seq;
    f->replay_until = o->replay_until;
    f->announce = o->announce_durable;
    f->announced = o->after_seq;
    f->on_end = o->on_end;
    f->end_ud = o->end_ud;
    f->awaits_open = o->defer;
    tm_buf_init(&f->head, 1u << 20);
    int bad = !f->session || !f->stream ||
              (o->retry_ms && tm_sse_frame_retry(&f->head, o->retry_ms)) ||
              (f->announce && frame_durable(&f->head, o->after_seq)) || /* durable so far */
              (o->prelude && tm_buf_add(&f->head, o->prelude, o->prelude_len));
    if (bad) {
        feed_free(f);
        return NULL;
    }
    return f;
}

int tm_feed_attach(tidemark_server_t *srv, tm_req *r, const tm_feed_opts *o)
{
    feed *f = feed_new(srv, o);
    if (!f)
        return TIDEMARK_ENOMEM;
    char key[TM_SRC_KEY_MAX];
    key_of(key, sizeof key, o->session, o->stream);
    tm_source src = {.pull = feed_pull, .free = feed_free, .ud = f,
                          .has_events = o->defer ? feed_has_events : NULL};
    int rc = live_count(f->srv, f->session, 1);
    f->counted = rc == 0;
    if (rc == 0)
        rc = tm_req_reply_stream(r, key, &src);
    if (rc) {
        f->on_end = NULL; /* not attached: the caller still owns what end_ud names */
        feed_free(f);
    }
    return rc;
}

/* The wake-up of a commit: its time, unless an earlier one is still
 * waiting for its event to be framed. Runs under the connection's lock. */
static int mark_woken(void *ud, void *arg)
{
    feed *f = ud;
    if (!f->woken_us)
        f->woken_us = *(const int64_t *)arg;
    return 0;
}

void tm_feed_wake(tidemark_server_t *srv, const char *session, const char *stream)
{
    tm_hub *h = atomic_load(&srv->hub);
    if (!h)
        return;
    char key[TM_SRC_KEY_MAX];
    key_of(key, sizeof key, session, stream);
    int64_t now = tm_now_us();
    (void)h->ops->signal(h->impl, key, mark_woken, &now); /* a wake, with the commit's time */
}

static int set_close_after(void *ud, void *arg)
{
    feed *f = ud;
    f->close_requested = 1;
    f->close_after = *(const uint64_t *)arg;
    return 1; /* ending: a resume may take over */
}

void tm_feed_close_after(tidemark_server_t *srv, const char *session, const char *stream,
                         uint64_t after_seq)
{
    char key[TM_SRC_KEY_MAX];
    key_of(key, sizeof key, session, stream);
    tm_hub *h = atomic_load(&srv->hub);
    if (h)
        h->ops->signal(h->impl, key, set_close_after, &after_seq);
}

typedef struct words {
    const char *data;
    size_t len;
} words;

static int set_last_words(void *ud, void *arg)
{
    feed *f = ud;
    const words *w = arg;
    tm_buf *b = f->last_words ? NULL : calloc(1, sizeof *b);
    if (!b)
        return 0;
    tm_buf_init(b, w->len + 64);
    if (tm_sse_frame(b, NULL, NULL, w->data, w->len) == 0) {
        f->last_words = b;
    } else {
        tm_buf_free(b);
        free(b);
    }
    return 0;
}

void tm_feed_fail(tidemark_server_t *srv, const char *session, const char *stream,
                  const char *data, size_t len)
{
    char key[TM_SRC_KEY_MAX];
    key_of(key, sizeof key, session, stream);
    words w = {data, len};
    tm_hub *h = atomic_load(&srv->hub);
    if (h)
        h->ops->signal(h->impl, key, set_last_words, &w);
}

int tm_feed_session_attached(tidemark_server_t *srv, const char *session)
{
    return live_any(srv, session);
}

void tm_feed_end_session(tidemark_server_t *srv, const char *session)
{
    if (!live_any(srv, session))
        return; /* no connection holds a stream of it: no scan of them all */
    char prefix[TM_SRC_KEY_MAX];
    key_of(prefix, sizeof prefix, session, "");
    tm_hub *h = atomic_load(&srv->hub);
    if (h)
        h->ops->end(h->impl, prefix);
}
