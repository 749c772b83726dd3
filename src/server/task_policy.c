/*
 * task_policy.c - each tool's task policy (tidemark_tool_t.task and its
 * TTL), kept per server under srv->task_mu: set when a tool is added, read
 * by every call of it (tasks.h).
 */
#include "tasks.h"
#include "tidemark/tidemark.h"
#include <stdlib.h>
#include <string.h>

typedef struct tm_task_policy {
    char *name;
    unsigned task;
    int64_t ttl_ms;
    struct tm_task_policy *next;
} policy;

int tm_tasks_tool_policy(tidemark_server_t *srv, const char *name, unsigned task, int64_t ttl_ms)
{
    int rc = 0;
    pthread_mutex_lock(&srv->task_mu);
    policy *p = srv->task_policies;
    while (p && strcmp(p->name, name) != 0)
        p = p->next;
    if (!p && task) {
        p = calloc(1, sizeof *p);
        char *n = p ? strdup(name) : NULL;
        if (!n) {
            free(p);
            p = NULL;
            rc = TIDEMARK_ENOMEM;
        } else {
            *p = (policy){n, 0, 0, srv->task_policies};
            srv->task_policies = p;
        }
    }
    if (p) {
        p->task = task;
        p->ttl_ms = ttl_ms;
    }
    pthread_mutex_unlock(&srv->task_mu);
    return rc;
}

void tm_tasks_forget(tidemark_server_t *srv)
{
    pthread_mutex_lock(&srv->task_mu);
    while (srv->task_policies) {
        policy *p = srv->task_policies;
        srv->task_policies = p->next;
        free(p->name);
        free(p);
    }
    pthread_mutex_unlock(&srv->task_mu);
}

int tm_tasks_policy_of(tidemark_server_t *srv, const char *name, unsigned *task, int64_t *ttl_ms)
{
    *task = TIDEMARK_TASK_NEVER;
    *ttl_ms = 0;
    pthread_mutex_lock(&srv->task_mu);
    for (policy *p = srv->task_policies; p; p = p->next)
        if (name && strcmp(p->name, name) == 0) {
            *task = p->task;
            *ttl_ms = p->ttl_ms;
        }
    pthread_mutex_unlock(&srv->task_mu);
    return 0;
}
