/*
 * tasks.h - the io.modelcontextprotocol/tasks extension (2026-07-28): a
 * tools/call that runs as a task, and tasks/get, tasks/update, tasks/cancel.
 *
 * A task is a store session whose id is the task id (128 random bits, or
 * derived from (principal, idempotency key)), holding:
 *  - attribute "task": {c: created ms, ttl: ms, poll: ms, p: principal};
 *  - the request record "t" (started when the task is created, completed
 *    with the call's final response, with the tool's atomic effect riding in
 *    the same transaction) on the stream its record names;
 *  - attribute "ir": {n: round, u: ms, q: inputRequests} when the handler
 *    asked for input; "in.<key>" the client's answers (tasks/update);
 *  - attribute "cancel" once tasks/cancel came.
 * Nothing else: memory, SQLite and Redis stores hold it as they are, any node
 * answers for any task, and recovery.c finishes the record of a dead node.
 */
#ifndef TM_TASKS_H
#define TM_TASKS_H
#include "server_int.h"

#define TM_TASKS_EXT "io.modelcontextprotocol/tasks"
#define TM_TASK_RECORD "t"

/* Remember a tool's task policy (tidemark_tool_t.task, .task_ttl_ms). */
int tm_tasks_tool_policy(tidemark_server_t *srv, const char *name, unsigned task, int64_t ttl_ms);
/* Forget every policy of srv (at free). */
void tm_tasks_forget(tidemark_server_t *srv);
/* A 2026-07-28 request the tasks extension answers (tasks/get, tasks/update,
 * tasks/cancel, a tools/call of a task tool): 1 when taken (answered now or
 * on a worker), 0 for the ordinary path. Never blocks the I/O thread. The
 * principal is ctx's: a task is bound to it (another's reads as none). */
int tm_tasks_route(tidemark_server_t *srv, tm_req *r, const tm_reqctx *ctx, post_msgs *pm);
/* From the recoverer (every 500 ms): cancellations asked on other nodes
 * reach the tasks running here. */
void tm_tasks_tick(tidemark_server_t *srv);
/* recovery.c: a task's unfinished record r (key "t" or a round's "u<n>").
 * 1 when handled here (re-run, outcome_unknown, or left waiting for input). */
int tm_tasks_recover(tidemark_server_t *srv, const tm_request_rec *r);

/* subscriptions/listen asking for notifications.taskIds (f: its filter):
 * -32021 without the extension, -32602 for a bad list; else NULL and *ids
 * the ids of this principal's tasks it will hear of (new ref, maybe empty). */
json_t *tm_tasks_listen_ids(tidemark_server_t *srv, const tm_msg *m, const char *principal,
                            const json_t *f, json_t **ids);
/* Send notifications/tasks (the task as tasks/get shows it) to every
 * listener of task id, on any node sharing the store. */
int tm_task_notify(tidemark_server_t *srv, const char *id);

/* task_run.c, for tasks.c */
/* Run round n of task id on this node (a worker): the handler, with every
 * answer so far; its final response goes to stream (the one its record
 * names) and completes the record. */
int tm_task_start(tidemark_server_t *srv, const char *id, const char *stream, const char *message,
                  int recovering);
/* Set the cancel flag of task id if it runs here. 1 when it does. */
int tm_task_cancel_local(tidemark_server_t *srv, const char *id);
/* End task id's record with response (stolen) on stream, the one its record
 * names, now (cancelled while waiting for input, outcome_unknown). */
int tm_task_finish(tidemark_server_t *srv, const char *id, const char *stream, json_t *response);
/* The policy of tool name: *task (TIDEMARK_TASK_*) and *ttl_ms. */
int tm_tasks_policy_of(tidemark_server_t *srv, const char *name, unsigned *task, int64_t *ttl_ms);

#endif
