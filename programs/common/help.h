/* help.h - --help texts whose defaults come from the library's tables of
 * defaults (TIDEMARK_SERVER_DEFAULTS, TIDEMARK_CLIENT_DEFAULTS), so the
 * text cannot drift from what tidemark_*_config_init gives. */
#ifndef TM_HELP_H
#define TM_HELP_H
#include <stddef.h>
#include <stdio.h>

typedef struct help_default {
    const char *field; /* a config field's name */
    const char *value; /* its default as written in the table, macros expanded */
} help_default;

#define HELP_STR_(v) #v
#define HELP_STR(v) HELP_STR_(v)
/* An X for the tables: {field, "value"}. */
#define HELP_DEFAULT(field, value) {#field, HELP_STR(value)},

/* Print text to f with every "{field}" of a field in defs (n of them)
 * replaced by its default (a string's without its quotes); any other
 * braces are printed as they are. */
void help_print(FILE *f, const char *text, const help_default *defs, size_t n);

#endif
