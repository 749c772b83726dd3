/* pool.h - fixed-size worker thread pool with a FIFO job queue. */
#ifndef TM_POOL_H
#define TM_POOL_H

typedef struct tm_pool tm_pool;
typedef void (*tm_pool_fn)(void *arg);

/* Start nthreads workers. Returns 0 or a negative TIDEMARK_E* code. */
int tm_pool_new(unsigned nthreads, tm_pool **out);
/* Queue fn(arg). Returns TIDEMARK_ECLOSED once shutdown began. */
int tm_pool_submit(tm_pool *p, tm_pool_fn fn, void *arg);
/* Finish queued jobs, join workers, free. */
void tm_pool_free(tm_pool *p);

#endif
