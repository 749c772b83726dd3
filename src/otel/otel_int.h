/* otel_int.h - what otel.c, config.c and export.c share (not installed). */
#ifndef TM_OTEL_INT_H
#define TM_OTEL_INT_H
#include "otel.h"
#include <pthread.h>
#include <stdatomic.h>

typedef struct tm_attr {
    const char *key; /* a string literal */
    const char *s;   /* in the span's text; NULL: an int */
    int64_t i;
} tm_attr;

/* A span's name and string values live in its own text (one allocation
 * per span, freed by the exporter: no malloc per attribute). */
#define TM_SPAN_TEXT 768

struct tm_span {
    tm_otel *o;
    tm_trace_ctx ctx;
    uint8_t parent[8];
    uint8_t has_parent, sampled, error;
    tm_span_kind kind;
    const char *name;        /* in text */
    char *tracestate;        /* NULL when none (malloc: rare) */
    int64_t start_ns, end_ns; /* Unix ns */
    tm_attr a[TM_SPAN_MAX_ATTRS];
    int na;
    struct tm_span *next;    /* the queue's link */
    size_t used;             /* bytes of text taken */
    char text[TM_SPAN_TEXT];
};

typedef enum tm_sampler {
    TM_SAMPLE_ON = 0,
    TM_SAMPLE_OFF,
    TM_SAMPLE_RATIO,
} tm_sampler;

/* Resource attributes kept for http/protobuf; more are left out (warned). */
#define TM_OTEL_RES_MAX 32

typedef struct tm_otel_cfg {
    char *url;             /* the traces endpoint, full */
    int protobuf;          /* 1: http/protobuf (the default), 0: http/json */
    char *resource;        /* OTLP JSON of the resource's attributes array */
    char *res_key[TM_OTEL_RES_MAX], *res_val[TM_OTEL_RES_MAX]; /* the same, for protobuf */
    int n_res;
    char **headers;        /* "Name: value", NULL-terminated */
    tm_sampler root;       /* for spans without a parent */
    int parentbased;       /* with a parent: the parent's flag decides */
    double ratio;          /* TM_SAMPLE_RATIO */
    int queue_max, batch_max, delay_ms, timeout_ms;
} tm_otel_cfg;

struct tm_otel {
    tm_otel_cfg cfg;
    pthread_mutex_t mu;     /* guards the queue and stopping */
    pthread_cond_t cv;      /* a full batch, or stop */
    tm_span *head, *tail;   /* mu: spans ended, oldest first */
    int n;                  /* mu: spans queued, <= cfg.queue_max */
    int stopping;           /* mu */
    pthread_t thread;
    atomic_uint_fast64_t dropped;
    /* on the owner's registry (NULL: not counted); set at most before spans */
    _Atomic(tm_counter *) m_exported, m_dropped;
};

/* config.c: the environment read once; 0 and *on = 0 when tracing is off. */
int tm_otel_cfg_read(tm_otel_cfg *cfg, const char *service, int *on);
void tm_otel_cfg_free(tm_otel_cfg *cfg);
/* export.c: the exporter thread's body, and a span freed. */
void *tm_otel_exporter_main(void *arg);
void tm_span_free(tm_span *s);
/* export_pb.c: the first n spans of batch as a packed OTLP
 * ExportTraceServiceRequest (malloc, *len bytes), or NULL (memory). */
unsigned char *tm_otlp_pb_body(const tm_otel *o, const tm_span *batch, int n, size_t *len);
/* At least the size of s as a packed Span, counted without writing it:
 * the room reserved before s is written. */
size_t tm_otlp_span_bound(const tm_span *s);

#endif
