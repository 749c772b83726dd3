/* pool.h - worker thread pool with a FIFO job queue. It starts with a few
 * threads and grows, one thread per job that finds none idle, up to its
 * maximum (handlers may block for long: a sleeping tool, a wait for the
 * client's answer); threads idle for a while beyond the minimum exit. */
#ifndef TM_POOL_H
#define TM_POOL_H

typedef struct tm_pool tm_pool;
typedef void (*tm_pool_fn)(void *arg);

/* Start a pool of exactly nthreads workers. Returns 0 or a negative
 * TIDEMARK_E* code. */
int tm_pool_new(unsigned nthreads, tm_pool **out);
/* Start min workers, growing to at most max on demand. */
int tm_pool_new_range(unsigned min, unsigned max, tm_pool **out);
/* Queue fn(arg). Returns TIDEMARK_ECLOSED once shutdown began. */
int tm_pool_submit(tm_pool *p, tm_pool_fn fn, void *arg);
/* 1 when the calling thread is a worker of pool p (it may block there),
 * 0 otherwise (an I/O thread, the store's writer, the application's). */
int tm_pool_is_worker(const tm_pool *p);
/* Finish queued jobs, join workers, free. */
void tm_pool_free(tm_pool *p);

#endif
