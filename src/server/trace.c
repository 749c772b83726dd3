/*
 * trace.c - what the server records of a call for OpenTelemetry
 * (src/otel/) and for the MCP duration metrics: the call's SERVER span and
 * mcp.server.operation.duration, the span of the commit that made its
 * answer durable, the span of a resume and of a request answered from its
 * record. Every span function does nothing but a NULL test when tracing is
 * off (srv->otel NULL); the duration is observed always.
 */
#include "server_int.h"
#include "call_trace.h"
#include "../base/clock.h"
#include "../base/metrics.h"
#include "../log/resume.h"
#include <string.h>

tm_otel *tm_server_otel(const tidemark_server_t *srv) { return srv->otel; }
const tm_span *tm_call_span(const tidemark_call_t *c) { return c->span; }

/* The SERVER span of a message (method, params, id: NULL for a
 * notification), child of params._meta.traceparent, else of the HTTP
 * traceparent header of r (may be NULL); NULL when tracing is off. */
static tm_span *server_span(tidemark_server_t *srv, const tm_req *r, const char *method,
                            const json_t *params, const json_t *id)
{
    if (!srv->otel)
        return NULL;
    tm_trace_ctx parent;
    const char *ts = NULL;
    (void)tm_mcp_trace_from(params, r ? r->traceparent : NULL, &parent, &ts);
    return tm_mcp_span_start(srv->otel, TM_SPAN_SERVER, method, params, id, &parent, ts);
}

/* The SERVER span of a call. */
void tm_call_trace_start(tidemark_call_t *c, tm_req *r)
{
    if (!(c->span = server_span(c->srv, r, c->method, c->params, c->id)))
        return;
    if (c->sess) {
        tm_span_set_str(c->span, "mcp.session.id", c->sess->id);
        tm_span_set_str(c->span, "mcp.protocol.version", c->sess->version);
    }
    tm_span_set_str(c->span, "network.transport", "tcp");
}

/* mcp.server.operation.duration of a call, labelled as the conventions
 * say; e: the response's error.type (tm_mcp_error_type). */
static void observe_call(tidemark_call_t *c, const char *e)
{
    const char *name = json_string_value(json_object_get(c->params, "name"));
    int tool = !strcmp(c->method, "tools/call"), prompt = !strcmp(c->method, "prompts/get");
    tm_mcp_labels l = {.method = c->method, .tool = tool ? name : NULL, .prompt = prompt ? name : NULL,
                       .error = e, .version = c->sess ? c->sess->version : NULL, .transport = "tcp"};
    tm_mcp_observe(c->srv->m.mcp.operation, &l, (uint64_t)(tm_now_us() - c->t0_us));
    c->t0_us = 0;
}

static const char *durability_name(tidemark_durability_t d)
{
    return d == TIDEMARK_DURABILITY_PROCESS ? "process"
           : d == TIDEMARK_DURABILITY_REPLICATED ? "replicated" : "power";
}

/* A recorded call's response goes to the store: the span of the commit
 * that makes it durable starts here, under the call's span. */
static void commit_start(tidemark_call_t *c)
{
    c->commit_span = tm_span_start(c->srv->otel, TM_SPAN_INTERNAL, "tidemark.store.commit",
                                   tm_span_ctx(c->span), tm_span_tracestate(c->span));
    tm_span_set_str(c->commit_span, "tidemark.store.durability",
                    durability_name(c->srv->cfg.durability));
    tm_span_set_str(c->commit_span, "tidemark.store.stream", c->job ? c->job->stream : NULL);
}

void tm_call_trace_end(tidemark_call_t *c, const json_t *response)
{
    char buf[24];
    const char *e = c->t0_us || c->span ? tm_mcp_error_type(response, buf) : NULL;
    if (c->t0_us)
        observe_call(c, e);
    if (!c->span)
        return;
    tm_mcp_span_outcome(c->span, e, buf);
    if (response && c->recorded && !c->commit_span)
        commit_start(c);
    tm_span_end(c->span);
    c->span = NULL;
}

void tm_call_commit_end(tidemark_call_t *c, int status, uint64_t seq)
{
    if (!c->commit_span)
        return;
    tm_span_set_int(c->commit_span, "tidemark.store.seq", (int64_t)seq);
    size_t batch = tm_store_callback_batch(); /* 0: not told by a writer */
    if (batch)
        tm_span_set_int(c->commit_span, "tidemark.store.batch_size", (int64_t)batch);
    if (status)
        tm_span_set_error(c->commit_span, tidemark_strerror(status));
    tm_span_end(c->commit_span);
    c->commit_span = NULL;
}

void tm_msg_trace_start(tm_msg_trace *t, tidemark_server_t *srv, tm_req *r, const tm_msg *m)
{
    t->srv = srv;
    t->m = m;
    t->t0_us = tm_now_us();
    t->span = server_span(srv, r, m->method, m->params, m->id);
    tm_span_set_str(t->span, "network.transport", "tcp");
}

void tm_msg_trace_end(tm_msg_trace *t, const json_t *response, const tm_sess *sess)
{
    char buf[24];
    const char *e = tm_mcp_error_type(response, buf);
    tm_mcp_labels l = {.method = t->m->method, .error = e,
                       .version = sess ? sess->version : NULL, .transport = "tcp"};
    tm_mcp_observe(t->srv->m.mcp.operation, &l, (uint64_t)(tm_now_us() - t->t0_us));
    if (!t->span)
        return;
    if (sess) {
        tm_span_set_str(t->span, "mcp.session.id", sess->id);
        tm_span_set_str(t->span, "mcp.protocol.version", sess->version);
    }
    tm_mcp_span_outcome(t->span, e, buf);
    tm_span_end(t->span);
    t->span = NULL;
}

/* The SERVER span of a GET resuming a stream, under its traceparent
 * header; NULL when tracing is off. */
static tm_span *resume_span_start(tidemark_server_t *srv, tm_req *r)
{
    if (!srv->otel)
        return NULL;
    const char *h = r->traceparent;
    tm_trace_ctx parent;
    (void)tm_traceparent_parse(h, h ? strlen(h) : 0, &parent);
    return tm_span_start(srv->otel, TM_SPAN_SERVER, "tidemark.resume", &parent, NULL);
}

/* A GET resuming a stream: a SERVER span under the traceparent header. */
void tm_resume_trace(tidemark_server_t *srv, tm_req *r, const char *session,
                     const tm_resume_decision *d, int64_t t0_us)
{
    tm_span *s = resume_span_start(srv, r);
    if (!s)
        return;
    tm_span_set_str(s, "mcp.session.id", session);
    tm_span_set_str(s, "tidemark.resume.stream", d->stream);
    tm_span_set_int(s, "tidemark.resume.replayed", (int64_t)(d->head > d->after_seq ? d->head - d->after_seq : 0));
    tm_span_set_int(s, "tidemark.resume.waited_us", tm_now_us() - t0_us);
    if (d->outcome == TM_RESUME_GAP) {
        tm_span_set_int(s, "tidemark.resume.gap_from", (int64_t)d->gap_from);
        tm_span_set_int(s, "tidemark.resume.gap_to", (int64_t)d->gap_to);
    }
    tm_span_end(s);
}

/* A resume refused (typed): its span, with the reason as error.type. */
void tm_resume_refused_trace(tidemark_server_t *srv, tm_req *r, const char *reason)
{
    tm_span *s = resume_span_start(srv, r);
    tm_span_set_error(s, reason);
    tm_span_end(s);
}

/* A request answered from its record (nothing ran): a SERVER span named
 * as the request's, under its context, marked tidemark.record=answered. */
void tm_record_trace(tidemark_server_t *srv, tm_req *r, const tm_msg *m, const char *verdict)
{
    tm_span *s = server_span(srv, r, m->method, m->params, m->id);
    tm_span_set_str(s, "tidemark.record", verdict);
    tm_span_end(s);
}

/* A notification from the client: a SERVER span named as its method,
 * under its context (params._meta, else the traceparent header). */
void tm_notification_trace(tidemark_server_t *srv, tm_req *r, const tm_msg *m, const char *session,
                           const char *version)
{
    tm_span *s = server_span(srv, r, m->method, m->params, NULL);
    tm_span_set_str(s, "mcp.session.id", session);
    tm_span_set_str(s, "mcp.protocol.version", version);
    tm_span_set_str(s, "network.transport", "tcp");
    tm_span_end(s);
}
