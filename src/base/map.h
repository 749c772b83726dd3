/* map.h - string-keyed hash map of pointers (open addressing). Not thread-safe. */
#ifndef TM_MAP_H
#define TM_MAP_H
#include <stddef.h>
#include <stdint.h>

typedef struct tm_map tm_map;

/* FNV-1a of a NUL-terminated string (the map's hash). */
uint64_t tm_str_hash(const char *s);

/* Create an empty map. Returns NULL on allocation failure. */
tm_map *tm_map_new(void);
/* Free the map; values are not touched. */
void tm_map_free(tm_map *m);
/* Insert or replace. The key is copied. Returns 0 or TIDEMARK_ENOMEM. */
int tm_map_put(tm_map *m, const char *key, void *val);
/* Look up; NULL when absent. */
void *tm_map_get(const tm_map *m, const char *key);
/* Remove; returns the old value or NULL. */
void *tm_map_del(tm_map *m, const char *key);
size_t tm_map_count(const tm_map *m);
/* Visit every entry; fn may not modify the map. */
void tm_map_each(const tm_map *m, void (*fn)(const char *key, void *val, void *ud), void *ud);

#endif
