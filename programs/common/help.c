/* help.c - see help.h. */
#include "help.h"
#include <string.h>

static const help_default *find(const char *name, size_t len, const help_default *defs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(defs[i].field) == len && memcmp(defs[i].field, name, len) == 0)
            return &defs[i];
    return NULL;
}

void help_print(FILE *f, const char *text, const help_default *defs, size_t n)
{
    const char *p = text;
    while (*p) {
        const char *open = strchr(p, '{');
        if (!open) {
            fputs(p, f);
            return;
        }
        size_t len = strspn(open + 1, "abcdefghijklmnopqrstuvwxyz_");
        const help_default *d = open[1 + len] == '}' ? find(open + 1, len, defs, n) : NULL;
        fwrite(p, 1, (size_t)(open - p), f);
        if (!d) {
            fputc('{', f);
            p = open + 1;
            continue;
        }
        size_t vl = strlen(d->value);
        if (vl >= 2 && d->value[0] == '"' && d->value[vl - 1] == '"')
            fwrite(d->value + 1, 1, vl - 2, f);
        else
            fputs(d->value, f);
        p = open + len + 2;
    }
}
