/*
 * store_base.c - what every store backend shares below the entry points of
 * store.c: the common part of a store (its ops, epoch, listeners and
 * metrics, made by tm_store_init_base), telling the listeners of a commit
 * or a bus message, freeing the records a read filled, the retention
 * limits, and the batch whose append callbacks this thread runs.
 */
#include "store.h"
#include "../base/metrics.h"
#include "../base/random.h"
#include "tidemark/tidemark.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const tm_hist_def batch_def = {
    "tidemark_commit_batch_size", "Operations per group commit.", 1,
    {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}};
static const tm_hist_def latency_def = {
    "tidemark_commit_latency_seconds", "Append queued to durable.", 1e6,
    {50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000,
     2500000, 5000000}};

static void register_metrics(tm_store_metrics *m, tm_metrics *r)
{
    m->appended = tm_metrics_counter(r, "tidemark_events_appended_total", "", "Events appended to the log.");
    m->commits = tm_metrics_counter(r, "tidemark_commits_total", "", "Group commits.");
    m->commit_failures = tm_metrics_counter(r, "tidemark_commit_failures_total", "",
                                            "Group commits that failed.");
    m->recoveries = tm_metrics_counter(r, "tidemark_store_write_recoveries_total", "",
                                       "Times a store accepted writes again after a failed write.");
    m->corrupt = tm_metrics_counter(r, "tidemark_store_corruption_total", "",
                                    "Damaged database files found, at open or at run time.");
    m->checkpoint_stalls = tm_metrics_counter(
        r, "tidemark_wal_checkpoint_stalls_total", "",
        "WAL checkpoints that could not complete for 5 s (counted every 10 s while it lasts).");
    m->loss = tm_metrics_counter(r, "tidemark_store_loss_detected_total", "",
                                 "Store opens that found fewer commits than the head file recorded.");
    m->commit_batch = tm_metrics_hist(r, &batch_def);
    m->commit_latency_us = tm_metrics_hist(r, &latency_def);
}

int tm_store_init_base(tm_store *st, const struct tm_store_ops *ops, const tm_store_options *opt)
{
    st->ops = ops;
    register_metrics(&st->m, opt ? opt->metrics : NULL);
    st->listener = opt ? opt->listener : NULL;
    st->listener_ud = opt ? opt->listener_ud : NULL;
    st->bus = opt ? opt->bus : NULL;
    st->bus_ud = opt ? opt->bus_ud : NULL;
    return tm_random_hex(st->epoch, TM_EPOCH_LEN / 2);
}

void tm_store_notify_bus(tm_store *st, const char *channel, const void *data, size_t len)
{
    if (st->bus)
        st->bus(st->bus_ud, channel, data, len);
}

void tm_store_notify_commit(tm_store *st, const char *session, const char *stream, uint64_t seq)
{
    if (st->listener)
        st->listener(st->listener_ud, session, stream, seq);
}

void tm_session_rec_clear(tm_session_rec *rec)
{
    free(rec->id);
    free(rec->protocol_version);
    free(rec->client);
    free(rec->attrs);
    json_decref(rec->attrs_obj);
    memset(rec, 0, sizeof *rec);
}

void tm_request_rec_clear(tm_request_rec *r)
{
    free(r->session);
    free(r->key);
    free(r->tool);
    free(r->stream);
    free(r->message);
    free(r->response);
    memset(r, 0, sizeof *r);
}

uint64_t tm_retain_first_by_count(const tm_store_options *opt, uint64_t first, uint64_t head)
{
    uint64_t keep = opt->retain_events;
    if (!keep || head < first || head - first + 1 <= keep)
        return first;
    return head - keep + 1;
}

int64_t tm_retain_cutoff_ms(const tm_store_options *opt, int64_t now_ms)
{
    return opt->retain_ms > 0 ? now_ms - opt->retain_ms : INT64_MIN;
}

/* The batch whose append callbacks this thread is running. */
static _Thread_local size_t tl_batch;
size_t tm_store_callback_batch(void) { return tl_batch; }
void tm_store_callback_batch_set(size_t n) { tl_batch = n; }
