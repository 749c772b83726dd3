/*
 * requests.pml - one tool call across crashes and retries: its request
 * record, its effect and its answer, on two server nodes sharing one store.
 * The client retries under the same request id (2025, legacy) or the same
 * idempotency key (2026-07-28, modern). model/README.md maps each element
 * to the code.
 *
 * Switches (spin -D...):
 *   MODERN              2026-07-28 keyed calls (default: 2025 legacy)
 *   EXTERNAL            the tool's effect is in an outside system (neither
 *                       atomic nor idempotent); default: an atomic tool whose
 *                       rows commit with its result
 *   ONE_NODE            node 2 never runs: one node with its own store
 *                       (memory, SQLite)
 *   BAD_EEXIST_RUNS     2025: a begin that finds the record already there
 *                       (EEXIST) still runs the tool: the unwaited begin
 *                       (writer.c note_failure does not tell the barrier),
 *                       as on a one-node store, and on every store before
 *                       the begin was waited for on shared ones
 *   BAD_NO_CLAIM        2025: no claim of the identity (record.c
 *                       tm_record_claim): a copy arriving on the node of a
 *                       request that found nothing finds nothing too
 *   BAD_RUN_BEFORE_DURABLE  the handler runs before its record is durable
 *   BAD_RERUN_EXTERNAL  recovery re-runs a tool that is not atomic
 *   BAD_NO_CLOSED_CHECK the final append does not refuse a closed stream
 */

#ifdef LTL_ONLY
#define must(c) skip
#else
#define must(c) assert(c)
#endif

#ifndef NATT
#define NATT   2   /* the call and its retries (at most 3) */
#endif
#ifndef NCRASH
#define NCRASH 2   /* node crashes in all */
#endif
#define NLAPSE 1   /* a live node's lease lapses (a pause, a partition) */

/* the record (tm_requests / the Redis hash) */
#define R_NONE      0
#define R_STARTED   1
#define R_COMPLETED 2
/* answers */
#define ANS_RESULT  1
#define ANS_UNKNOWN 2   /* outcome_unknown */
/* attempt phases */
#define A_LOOKUP 1      /* arrived: the repeat check pending */
#define A_NEW    2      /* found nothing: a new call */
#define A_QUEUED 3      /* 2025: record begin queued, call registered on its node */
#define A_RUN    4      /* record durable: the handler may run */
#define A_FINAL  5      /* handler returned: the final append pending */
#define A_WAIT   6      /* attached to the record's stream / waiting for it */
#define A_DONE   7
#define A_DEAD   8      /* its process died */

/* ---- the store ---- */
byte rec = R_NONE;
byte rec_owner;            /* node whose process began (or claimed) it */
bool owner_live;           /* ... that process is alive and holds its lease */
byte rec_stream;           /* the stream it names: that of the attempt that began it */
byte rec_resp;             /* the response it completed with */
bool closed[NATT + 1];     /* stream i (attempt i's POST stream) has its final event */
byte aeff = 0;             /* the atomic tool's rows, committed */
byte xeff = 0;             /* the outside system's effects */

/* ---- the nodes ---- */
bool up[3];                /* node n's process runs (a restart is a new process) */
bool lease[3];             /* ... and holds its lease */
byte kmu[3];               /* 2026: keyed_mu of node n (attempt holding it) */
byte rjob[3];              /* recovery job of node n: 0 none, 1 claimed */

/* ---- the attempts (one POST each) and the client ---- */
byte apc[NATT + 1];
byte anode[NATT + 1];
bool acut[NATT + 1];       /* the client no longer listens to it */
bool ran[NATT + 1];
byte natt = 0;
byte answer = 0;           /* the client's answer */

byte crashes = 0, lapses = 0;
byte j, n;                 /* scratch */
byte ok;

#ifdef MODERN
#define KEY_FREE(a) (kmu[anode[a]] == 0)
#else
#define KEY_FREE(a) (1)
#endif
#ifdef BAD_RUN_BEFORE_DURABLE
#define BEGIN_AFTER_RUN(a) (ran[a])
#define RUN_EARLY(a) (apc[a] == A_QUEUED)
#else
#define BEGIN_AFTER_RUN(a) (1)
#define RUN_EARLY(a) (0)
#endif

/* 2025: the phases in which an attempt is seen by another one arriving on
 * its node: from its lookup's claim (record.c tm_record_claim, held from
 * before the record is read until its call is freed), else only once its
 * call is registered (A_QUEUED) */
#ifdef BAD_NO_CLAIM
#define CLAIM_FROM A_QUEUED
#else
#define CLAIM_FROM A_NEW
#endif

#ifdef EXTERNAL
#define EFFECTS xeff
#else
#define EFFECTS aeff
#endif

inline told(a, what)
{
    if
    :: !acut[a] && answer == 0 ->
        answer = what;
        /* a result is told only for an effect made, once */
        must(what != ANS_RESULT || EFFECTS == 1)
    :: else -> skip
    fi
}

/* the final append of a result (or outcome_unknown) on stream st, one
 * transaction: refused whole on a closed stream (ECLOSED) */
#ifdef BAD_NO_CLOSED_CHECK
#define CLOSED_REFUSES 0
#else
#define CLOSED_REFUSES 1
#endif
inline final_append(st, what, ok)
{
    if
    :: closed[st] && CLOSED_REFUSES -> ok = 0
    :: else ->
        ok = 1;
        closed[st] = 1;
#ifndef EXTERNAL
        if
        :: what == ANS_RESULT -> aeff++; must(aeff <= 1)
        :: else -> skip
        fi;
#endif
        if
        :: rec != R_NONE -> rec = R_COMPLETED; rec_resp = what
        :: else -> skip
        fi
    fi
}

/* node m's process loses its lease and goes on running */
inline lapse(m)
{
    lapses++;
    lease[m] = 0;
    if
    :: rec_owner == m -> owner_live = 0
    :: else -> skip
    fi
}

inline crash(m)
{
    crashes++;
    up[m] = 0;
    lease[m] = 0;
    if
    :: rec_owner == m -> owner_live = 0
    :: else -> skip
    fi;
    j = 1;
    do
    :: j > NATT -> break
    :: else ->
        if
        :: anode[j] == m && apc[j] >= A_LOOKUP && apc[j] <= A_WAIT -> apc[j] = A_DEAD
        :: else -> skip
        fi;
        j++
    od;
    j = 0;
    kmu[m] = 0;
    rjob[m] = 0
}

/* One step of attempt a (a constant: the guards decide). */
inline attempt(a)
{
    atomic {
    if
    /* the repeat check (2025 post.c answer_repeat; 2026 modern.c keyed_replay) */
    :: apc[a] == A_LOOKUP && KEY_FREE(a) ->
#ifndef MODERN
        /* a call of this session running on this node attaches the retry */
        j = 1;
        do
        :: j > NATT -> break
        :: else ->
            if
            :: j != a && anode[j] == anode[a] && apc[j] >= CLAIM_FROM && apc[j] <= A_FINAL ->
                apc[a] = A_WAIT
            :: else -> skip
            fi;
            j++
        od;
        j = 0;
        if
        :: apc[a] == A_WAIT -> skip
        :: else ->
#endif
            if
            :: rec == R_COMPLETED -> told(a, rec_resp); apc[a] = A_DONE
            :: rec == R_STARTED -> apc[a] = A_WAIT
            :: rec == R_NONE -> apc[a] = A_NEW
#ifdef MODERN
                ; kmu[anode[a]] = a   /* replay check and begin as one on this node */
#endif
            fi
#ifndef MODERN
        fi
#endif

#ifdef MODERN
    /* 2026: the record begun and waited for (begin_records, wait_durable):
     * EEXIST means the key's first request began elsewhere: wait for it */
    :: apc[a] == A_NEW ->
        kmu[anode[a]] = 0;
        if
        :: rec == R_NONE ->
            rec = R_STARTED; rec_owner = anode[a]; owner_live = lease[anode[a]]; rec_stream = a; apc[a] = A_RUN
        :: else -> apc[a] = A_WAIT
        fi
#else
    /* 2025: the record's begin queued, the call registered (call_start) */
    :: apc[a] == A_NEW -> apc[a] = A_QUEUED

    /* 2025: the begin commits; the tool waits for it (tm_store_sync_since) */
    :: apc[a] == A_QUEUED && BEGIN_AFTER_RUN(a) ->
        if
        :: rec == R_NONE ->
            rec = R_STARTED; rec_owner = anode[a]; owner_live = lease[anode[a]]; rec_stream = a; apc[a] = A_RUN
        :: else ->
#ifdef BAD_EEXIST_RUNS
            apc[a] = A_RUN      /* EEXIST is not told to the barrier: it runs */
#else
            apc[a] = A_WAIT     /* the record is another attempt's: attach */
#endif
        fi;
        if
        :: ran[a] && apc[a] == A_RUN -> apc[a] = A_FINAL
        :: else -> skip
        fi
#endif

    /* the handler runs (dispatch.c tools_call) */
    :: (apc[a] == A_RUN || RUN_EARLY(a)) && !ran[a] ->
        ran[a] = 1;
#ifdef EXTERNAL
        xeff++;
        must(xeff <= 1);
#endif
        if
        :: apc[a] == A_RUN -> apc[a] = A_FINAL
        :: else -> skip
        fi

    /* its result: the final append, the record completed with it (and,
     * atomic, the tool's rows), then the answer */
    :: apc[a] == A_FINAL ->
        final_append(a, ANS_RESULT, ok);
        if
        :: ok -> told(a, ANS_RESULT)
        :: else -> skip       /* store_failed: the client may retry */
        fi;
        apc[a] = A_DONE;
        ok = 0

    /* attached / waiting: the record's answer once it has one */
    :: apc[a] == A_WAIT && rec == R_COMPLETED -> told(a, rec_resp); apc[a] = A_DONE
#ifdef MODERN
    /* wait_reissue's deadline: 409 request_in_flight, retry later */
    :: apc[a] == A_WAIT && rec != R_COMPLETED -> apc[a] = A_DONE
#endif
    fi
}
}


/* Recovery on node m (recovery.c tm_recover): a started record whose
 * process holds no lease is claimed by one node (claim.lua), then finished:
 * an atomic tool re-run on the record's stream, any other answered
 * outcome_unknown there. */
inline recover(m)
{
    atomic {
        if
        :: up[m] && rjob[m] == 0 && rec == R_STARTED && !owner_live ->
            rec_owner = m; owner_live = lease[m]; rjob[m] = 1
        :: up[m] && rjob[m] == 1 ->
#if defined(EXTERNAL) && !defined(BAD_RERUN_EXTERNAL)
            final_append(rec_stream, ANS_UNKNOWN, ok);    /* never re-run: typed */
#else
#ifdef EXTERNAL
            xeff++;                                       /* BAD: re-run */
            must(xeff <= 1);
#endif
            final_append(rec_stream, ANS_RESULT, ok);     /* atomic: re-run */
#endif
            rjob[m] = 0; ok = 0
        fi
    }
}

active proctype world()
{
    up[1] = 1; lease[1] = 1;
#ifndef ONE_NODE
    up[2] = 1; lease[2] = 1;
#endif
end:
    do
    /* the client sends the call, or retries it, to a node that is up */
    :: natt < NATT && answer == 0 && (up[1] || up[2]) &&
       (natt == 0 || acut[natt] || apc[natt] == A_DONE || apc[natt] == A_DEAD) -> atomic {
        if
        :: up[1] -> n = 1
        :: up[2] -> n = 2
        fi;
        natt++;
        anode[natt] = n; apc[natt] = A_LOOKUP;
        n = 0
       }

    /* the client stops listening to the attempt (its connection is cut) */
    :: natt > 0 && !acut[natt] && answer == 0 && apc[natt] != A_DONE && apc[natt] != A_DEAD ->
        acut[natt] = 1

    :: attempt(1)
    :: attempt(2)
#if NATT > 2
    :: attempt(3)
#endif

    /* a node crashes: its calls die, its lease lapses */
    :: crashes < NCRASH && up[1] -> atomic { crash(1) }
    :: crashes < NCRASH && up[2] -> atomic { crash(2) }

    /* a node starts again: a new process with its lease */
    :: !up[1] -> atomic { up[1] = 1; lease[1] = 1 }
#ifndef ONE_NODE
    :: !up[2] -> atomic { up[2] = 1; lease[2] = 1 }
#endif

    /* a live node loses its lease (paused, cut off) and goes on running */
    :: lapses < NLAPSE && up[1] && lease[1] -> atomic { lapse(1) }
    :: lapses < NLAPSE && up[2] && lease[2] -> atomic { lapse(2) }

    /* recovery (recovery.c tm_recover): a started record whose process has
     * no lease is claimed by one node (claim.lua), then finished */
    :: recover(1)
    :: recover(2)

    :: else -> break
    od;
    /* the end: every started call finished, its effect at most once; an
     * atomic tool's exactly once when its call was recorded */
    must(rec != R_STARTED);
    must(aeff <= 1 && xeff <= 1);
#ifndef EXTERNAL
    must((rec == R_COMPLETED && aeff == 1) || (rec == R_NONE && aeff == 0));
#endif
}

ltl at_most_once { [] (aeff <= 1 && xeff <= 1) }
ltl true_answer { [] (answer == ANS_RESULT -> EFFECTS == 1) }
ltl settles { <> [] (rec != R_STARTED) }
ltl exactly_once { <> [] ((rec == R_COMPLETED && EFFECTS == 1) || (rec == R_NONE && EFFECTS == 0) ||
                          (rec == R_COMPLETED && rec_resp == ANS_UNKNOWN && EFFECTS <= 1)) }
