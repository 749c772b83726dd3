/*
 * registry.h - what a server offers: tools, resources, resource templates,
 * prompts. Thread-safe; lookups copy what a handler needs out of the lock.
 */
#ifndef TM_REGISTRY_H
#define TM_REGISTRY_H
#include "tidemark/server.h"
#include <jansson.h>

typedef struct tm_registry tm_registry;

typedef enum tm_reg_kind { TM_REG_TOOL = 0, TM_REG_RESOURCE, TM_REG_TEMPLATE, TM_REG_PROMPT } tm_reg_kind;

/* A looked-up entry: desc is a new reference the caller decrefs. */
typedef struct tm_reg_entry {
    json_t *desc;  /* the list item as sent to clients */
    void *fn;      /* tidemark_tool_fn / tidemark_resource_fn / tidemark_prompt_fn */
    void *ud;
    unsigned hints;
} tm_reg_entry;

tm_registry *tm_registry_new(void);
void tm_registry_free(tm_registry *r);
/* Add or replace by key (name, or uri / uriTemplate). desc is stolen. */
int tm_registry_put(tm_registry *r, tm_reg_kind k, const char *key, json_t *desc, void *fn,
                    void *ud, unsigned hints);
int tm_registry_remove(tm_registry *r, tm_reg_kind k, const char *key);
/* Exact lookup. TIDEMARK_ENOTFOUND if absent. */
int tm_registry_get(tm_registry *r, tm_reg_kind k, const char *key, tm_reg_entry *out);
/* Find the first template whose uriTemplate matches uri. */
int tm_registry_match_template(tm_registry *r, const char *uri, tm_reg_entry *out);
/* Build one page: {"<field>": [...], "nextCursor"?}. cursor NULL = first
 * page. TIDEMARK_EINVAL for a cursor we did not issue. OUT page. */
int tm_registry_page(tm_registry *r, tm_reg_kind k, const char *field, const char *cursor,
                     unsigned page_size, json_t **page);
/* 1 if uri matches template tpl ("{var}" matches one or more chars without '/';
 * "{+var}" / "{/var}" etc. match anything). */
int tm_uri_template_match(const char *tpl, const char *uri);

#endif
