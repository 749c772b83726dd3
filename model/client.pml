/*
 * client.pml - the client's persistence of one stream: each event's effect,
 * its dispatch row and the cursor, in one of the three orders, with a crash
 * between any two transactions, reconnects, and the resumption validator.
 * model/README.md maps each element to the code.
 *
 * Switches (spin -D...):
 *   (none)          atomic: effect + dispatch row + cursor in one transaction
 *   CURSOR_AFTER    cursor_after_dispatch: effect + row (processed), commit,
 *                   then cursor (+ row committed)
 *   CURSOR_BEFORE   cursor_before_dispatch: cursor, commit, then effect + row
 *   IDEMPOTENT      idempotent_handlers: an event already dispatched is skipped
 *   CURSOR_ONLY     the seeds' client: it trusts its cursor (no dispatch log:
 *                   the validator checks only head against cursor)
 *   ANY_REPLAY      a server that may start a resumed stream at any seq (not
 *                   only cursor + 1): what a faulty or hostile server could send
 */

#ifdef LTL_ONLY
#define must(c) skip
#else
#define must(c) assert(c)
#endif

#define N      3   /* events of the stream: seq 1..N; N carries the response */
#define NCRASH 3   /* client crashes (killed; restarted on its state file) */
#define NDROP  1   /* connections dropped without a crash */

/* verdicts (src/client/validator.h) */
#define V_DISPATCH     0
#define V_NOT_MONO     1   /* replay_not_monotonic */
#define V_GAP          2   /* resumption_gap */
#define V_DUPLICATE    3   /* duplicate_effect */
#define V_INCONSISTENT 4   /* dispatch_log_inconsistent */
#define V_SUPPRESS     5

/* ---- the state file (SQLite; each step below is one transaction) ---- */
byte cursor = 0;           /* tmc_cursor: seq of the saved cursor */
byte dl[N + 1];            /* tmc_dispatch: 0 none, 1 processed, 2 committed */
byte eff[N + 1];           /* the application's effect of each event (its rows
                              live in the same state database) */

/* ---- the process (memory) ---- */
byte nextev = 1;           /* seq the server sends next (0: no connection) */
byte cur = 0;              /* event between two transactions of its persistence */
bool need_load = 0;        /* restarted: load the saved cursor first */
bool stopped = 0;          /* stopped with a typed error */
byte why = 0;              /* ... its verdict */
bool done = 0;             /* the response (event N) was applied */
byte crashes = 0, drops = 0;
byte v, last, i;           /* scratch */

#define ALL_ONCE (eff[1] == 1 && eff[2] == 1 && eff[3] == 1)
#define NONE_TWICE (eff[1] <= 1 && eff[2] <= 1 && eff[3] <= 1)

/* tm_cstate_last_dispatched: the highest seq with a dispatch row */
inline last_dispatched()
{
    last = 0;
    i = 1;
    do
    :: i > N -> break
    :: else ->
        if
        :: dl[i] != 0 -> last = i
        :: else -> skip
        fi;
        i++
    od;
    i = 0
}

/* tm_validate_seq(): the verdict on event h */
inline validate(h)
{
    last_dispatched();
    if
    :: h <= cursor -> v = V_NOT_MONO
    :: h > cursor + 1 -> v = V_GAP
#ifndef CURSOR_ONLY
    :: h == cursor + 1 && dl[h] != 0 ->
#ifdef IDEMPOTENT
        v = V_SUPPRESS
#else
        v = V_DUPLICATE
#endif
    :: h == cursor + 1 && dl[h] == 0 && last != 0 && h != last + 1 -> v = V_INCONSISTENT
    :: h == cursor + 1 && dl[h] == 0 && last == 0 && cursor > 0 && h != 1 -> v = V_INCONSISTENT
    :: h == cursor + 1 && dl[h] == 0 && (last == 0 || h == last + 1) &&
       !(last == 0 && cursor > 0 && h != 1) -> v = V_DISPATCH
#else
    :: h == cursor + 1 -> v = V_DISPATCH
#endif
    fi
}

inline stop(verdict)
{
    stopped = 1;
    why = verdict;
    nextev = 0
}

inline apply(h)
{
    eff[h]++;
    must(eff[h] <= 1)   /* never applied twice */
}

/* The event's persistence is over: the next one, or the end. */
inline next_event(h)
{
    if
    :: h == N -> done = 1; nextev = 0
    :: else -> nextev = h + 1
    fi;
    cur = 0
}

active proctype client()
{
end:
    do
    /* restarted on its state file: load_cursor (resume.c) */
    :: need_load && !stopped -> atomic {
        need_load = 0;
#ifndef CURSOR_ONLY
        last_dispatched();
        if
        :: cursor > last -> stop(V_INCONSISTENT)   /* tm_validate_saved */
        :: else -> skip
        fi
#endif
       }

    /* reconnect (after a drop or a restart): resumed from the cursor */
    :: !need_load && !stopped && !done && nextev == 0 && cur == 0 -> atomic {
#ifdef ANY_REPLAY
        if
        :: nextev = 1
        :: nextev = 2
        :: nextev = 3
        fi
#else
        if
        :: cursor < N -> nextev = cursor + 1
        :: else -> done = 1   /* nothing after the cursor: the stream is complete */
        fi
#endif
       }

    /* an event arrives: judge, then the first transaction of its mode */
    :: nextev != 0 && cur == 0 && !stopped && !need_load -> atomic {
        validate(nextev);
        if
        :: v == V_SUPPRESS ->
            cursor = nextev; dl[nextev] = 2;   /* persist(): the cursor catches up */
            next_event(nextev)
        :: v == V_DISPATCH ->
#if defined(CURSOR_AFTER)
            apply(nextev); dl[nextev] = 1;     /* persist_after, first transaction */
            cur = nextev
#elif defined(CURSOR_BEFORE)
            cursor = nextev;                   /* persist_before, first transaction */
            cur = nextev
#else
            apply(nextev); dl[nextev] = 2; cursor = nextev;   /* persist_atomic */
            next_event(nextev)
#endif
        :: else -> stop(v)                     /* refuse(): typed */
        fi;
        v = 0; last = 0
       }

#if defined(CURSOR_AFTER) || defined(CURSOR_BEFORE)
    /* the second transaction of a two-step mode */
    :: cur != 0 -> atomic {
#ifdef CURSOR_AFTER
        cursor = cur; dl[cur] = 2;
#else
        apply(cur); dl[cur] = 2;
#endif
        next_event(cur)
       }
#endif

    /* the connection drops between events */
    :: nextev != 0 && cur == 0 && drops < NDROP -> atomic { drops++; nextev = 0 }

    /* the client is killed between any two transactions and restarted */
    :: !stopped && !done && crashes < NCRASH -> atomic {
        crashes++;
        cur = 0; nextev = 0; need_load = 1
       }

    :: else -> break
    od;
    /* the end: every effect exactly once, or a typed stop */
    must(stopped || (done && ALL_ONCE))
}

/* Never applied twice. */
ltl never_twice { [] NONE_TWICE }
/* Every event's effect exactly once, or a typed stop (both final). */
ltl once_or_stop { <> [] (stopped || (done && ALL_ONCE)) }
/* No typed stop at all (against a server that resumes exactly). */
ltl no_stop { [] !stopped }
