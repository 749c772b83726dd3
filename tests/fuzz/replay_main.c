/*
 * replay_main.c - a main() for the fuzz targets in builds without libFuzzer
 * (the normal and the ASan+UBSan builds): runs LLVMFuzzerTestOneInput once
 * per file named on the command line, or per file in a named directory, so
 * the committed corpus and regression inputs are replayed by every build
 * (ctest: fuzz_replay_<target>). Exit 0 when every input ran; a broken
 * invariant aborts.
 */
#include "fuzz_util.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return 1;
    }
    /* An exact-size copy, so ASan sees reads past the input's end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return 1;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int fails = 0, runs = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            perror(argv[i]);
            fails++;
            continue;
        }
        if (!S_ISDIR(sb.st_mode)) {
            fails += run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            fails++;
            continue;
        }
        char **names = NULL;
        size_t n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char **nn = realloc(names, (n + 1) * sizeof *names);
            if (!nn)
                abort();
            names = nn;
            size_t l = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(l);
            if (!names[n])
                abort();
            snprintf(names[n], l, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        if (n)
            qsort(names, n, sizeof *names, cmp);
        for (size_t k = 0; k < n; k++) {
            fails += run_file(names[k]);
            runs++;
            free(names[k]);
        }
        free(names);
    }
    printf("replayed %d input(s), %d unreadable\n", runs, fails);
    return fails ? 1 : 0;
}
