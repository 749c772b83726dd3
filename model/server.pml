/*
 * server.pml - one stream of the event log: appends, group commit, emit,
 * a crash at any step, restart with a new or the same epoch, a store that
 * loses acknowledged commits, trimming, and the resume table against every
 * cursor a client could hold. model/README.md maps each element to the code.
 *
 * Switches (spin -D...):
 *   EMIT_EARLY          emit-then-reconcile (--emit early): the feed reads
 *                       up to the assigned seq and announces the durable head
 *   BAD_EMIT_BEFORE_COMMIT  commit-then-emit broken: the feed reads up to the
 *                       assigned seq (must give a counterexample)
 *   BAD_ANNOUNCE        emit-early announces what it sent, not what is durable
 *   BAD_SAME_EPOCH      a store that lost commits reopens under the old epoch
 *   BAD_NO_MAC          ids carry no MAC: a forged cursor above the head
 *                       is taken for one this store issued
 *
 * Every step is atomic: between two steps the server may crash, the store
 * may lose commits, the connection may drop, and every cursor the client
 * holds is run through the resume table (check_resume).
 */

/* Safety runs check the assertions; LTL runs (-DLTL_ONLY) only the claim. */
#ifdef LTL_ONLY
#define must(c) skip
#else
#define must(c) assert(c)
#endif

#define NAPP   4   /* appends in all: event identities 1..NAPP (so seqs <= NAPP);
                      the resume step below names identities 1..4 */
#define NCRASH 2   /* server crashes (process killed; restart) */
#define NLOSS  1   /* store losses of acknowledged commits (power loss under
                      'process', restored backup, asynchronous failover) */
#define NTRIM  1   /* retention trims */

/* resume outcomes, in the table's order (src/log/resume.h) */
#define R_OK        0
#define R_MALFORMED 1
#define R_UNKNOWN   2
#define R_AHEAD     3
#define R_GAP       4
#define R_EPOCH     5

/* ---- the store (durable) ---- */
byte dhead = 0;            /* durable head: highest committed seq */
byte first = 1;            /* first retained seq (trim record: seq first-1) */
byte dev[NAPP + 1];        /* identity of the event stored at seq (kept as a
                              ghost once trimmed) */
byte dep[NAPP + 1];        /* its epoch (at first-1: the trim record's epoch) */
bool lost = 0;             /* the store lost a commit it had acknowledged */

/* ---- the server process (memory; reset by a crash) ---- */
byte epoch = 1;            /* the writer generation of this open */
byte nep = 1;              /* epochs used so far */
byte next = 1;             /* next seq to assign (stream's next_seq) */
byte phead = 0;            /* head published to readers after settle (s->head) */
byte mev[NAPP + 1];        /* identity appended at seq, queued for the writer */
byte nid = 0;              /* identities handed out */

/* ---- the feed: one SSE connection of the stream ---- */
bool conn = 1;             /* attached (the POST's own stream, from seq 0) */
byte deliv = 0;            /* highest seq sent on it */
byte ann = 0;              /* durable head announced on it (emit-early) */

/* ---- the wire and the client ---- */
bool onwire[NAPP + 1];     /* identity was sent with an id */
byte iep[NAPP + 1];        /* ... its id's epoch */
byte iseq[NAPP + 1];       /* ... its id's seq */
bool oncur[NAPP + 1];      /* ... on the current connection */
bool held[NAPP + 1];       /* the client may persist its id as a cursor */
byte wmax = 0;             /* highest seq ever sent */

byte crashes = 0, losses = 0, trims = 0;
byte out;                  /* scratch: a resume's outcome */
byte k, s;                 /* scratch */

#ifdef BAD_NO_MAC
#define FORGED_MACD 1
#else
#define FORGED_MACD 0
#endif

#ifdef EMIT_EARLY
#define LIMIT (next - 1)   /* q_read: emit_early reads the assigned tail */
#else
#ifdef BAD_EMIT_BEFORE_COMMIT
#define LIMIT (next - 1)
#else
#define LIMIT phead        /* q_read: up to s->head */
#endif
#endif

/* tm_resume_decide_auth(): cursor (e, q) of this session's stream; macd:
 * its MAC verifies (a MAC that does not verify is malformed_cursor before
 * this table; an id without one cannot prove it was issued). */
inline decide(e, q, macd)
{
    if
    :: q > phead && macd -> out = R_AHEAD
    :: q > phead && !macd -> out = R_MALFORMED
    :: else ->
        if
        :: q + 1 < first -> out = R_GAP
        :: else ->
            /* tm_store_event_epoch: the event at q, or the trim record at first-1 */
            if
            :: dep[q] != e -> out = R_EPOCH
            :: else -> out = R_OK
            fi
        fi
    fi
}

/* Every cursor the client could hold, and forged ones, through the table. */
inline check_resume()
{
    k = 1;
    do
    :: k > NAPP -> break
    :: else ->
        if
        :: held[k] ->
            decide(iep[k], iseq[k], 1);
            /* cursor_ahead and epoch_mismatch only after the store lost
             * acknowledged commits */
            must(out != R_AHEAD || lost);
            must(out != R_EPOCH || lost);
            /* a resume that goes ahead starts after the very event the
             * cursor names: what follows is what followed it */
            must(out != R_OK || dev[iseq[k]] == k);
            must(out != R_GAP || iseq[k] + 1 < first)
        :: else -> skip
        fi;
        k++
    od;
    /* forged ids: any epoch, any seq, without a MAC (one with a MAC that
     * does not verify is refused before the table) */
    k = 1;
    do
    :: k > nep -> break
    :: else ->
        s = 1;
        do
        :: s > NAPP -> break
        :: else -> decide(k, s, FORGED_MACD); must(out != R_AHEAD || lost); s++
        od;
        k++
    od;
    k = 0; s = 0; out = 0
}

inline new_epoch()
{
    nep++;
    epoch = nep
}

/* A connection is gone: the client keeps only what it may persist. */
inline drop()
{
    conn = 0;
    deliv = 0;
    ann = 0;
    k = 1;
    do
    :: k > NAPP -> break
    :: else -> oncur[k] = 0; k++
    od;
    k = 0
}

active proctype world()
{
end:
    do
    /* tm_store_append (q_append_ex): a seq from next_seq, queued for the writer */
    :: nid < NAPP -> atomic {
        nid++;
        mev[next] = nid;
        next++;
        check_resume()
       }

    /* the writer: a batch of the queue, one transaction (sq_commit). A crash
     * before COMMIT leaves none of it, after it all of it. */
    :: dhead < next - 1 -> atomic {
        do
        :: dhead < next - 1 ->
            dhead++;
            dev[dhead] = mev[dhead];
            dep[dhead] = epoch;
            if
            :: dhead < next - 1 -> skip   /* take more into the batch */
            :: true -> break
            fi
        :: else -> break
        od;
        check_resume()
       }

    /* settle: the committed head published to readers (sq_settle), then the
     * callbacks and wake-ups (tell_callbacks, notify_wakes) */
    :: phead < dhead -> atomic { phead = dhead; check_resume() }

    /* the feed sends the next event it may read (feed_pull, frame_event) */
    :: conn && deliv < LIMIT -> atomic {
        s = deliv + 1;
        if
        :: s < first ->
            /* trimmed under the reader: a typed gap event, never a skip */
            deliv = first - 1
        :: else ->
            if
            :: s <= dhead && dev[s] != 0 && s <= phead ->
                k = dev[s];
                iep[k] = dep[s]
            :: else ->
                /* read from the not yet durable tail */
#if !defined(EMIT_EARLY) && !defined(BAD_EMIT_BEFORE_COMMIT)
                must(false);
#endif
                k = mev[s];
                iep[k] = epoch
            fi;
            onwire[k] = 1;
            iseq[k] = s;
            oncur[k] = 1;
#ifndef EMIT_EARLY
            held[k] = 1;   /* commit-then-emit: the client may persist every id */
#endif
            if
            :: s > wmax -> wmax = s
            :: else -> skip
            fi;
            deliv = s
        fi;
        check_resume()
       }

#ifdef EMIT_EARLY
    /* caught up: announce how far what was sent is durable (pull_caught_up);
     * the client releases what it held up to there (on_durable) */
    :: conn && deliv >= LIMIT && phead > ann && deliv > ann -> atomic {
#ifdef BAD_ANNOUNCE
        ann = deliv;
#else
        if
        :: phead < deliv -> ann = phead
        :: else -> ann = deliv
        fi;
#endif
        k = 1;
        do
        :: k > NAPP -> break
        :: else ->
            if
            :: oncur[k] && iseq[k] <= ann -> held[k] = 1
            :: else -> skip
            fi;
            k++
        od;
        check_resume()
       }
#endif

    /* the connection drops */
    :: conn -> atomic { drop(); check_resume() }

    /* the client resumes from a cursor it holds (get.c stream_start); a
     * typed refusal leaves it detached (the client stops that stream) */
    :: !conn && (held[1] || held[2] || held[3] || held[4]) -> atomic {
        if
        :: held[1] -> k = 1
        :: held[2] -> k = 2
        :: held[3] -> k = 3
        :: held[4] -> k = 4
        fi;
        decide(iep[k], iseq[k], 1);
        if
        :: out == R_OK ->
            conn = 1; deliv = iseq[k]; ann = iseq[k]
        :: else -> skip
        fi;
        check_resume()
       }

    /* the server process dies at any step and restarts: what was queued is
     * gone; a new epoch (store open) or the same (a store that kept running) */
    :: crashes < NCRASH -> atomic {
        crashes++;
        drop();
        next = dhead + 1;
        phead = dhead;
        if
        :: new_epoch()
        :: skip
        fi;
        check_resume()
       }

    /* the store loses a suffix of acknowledged commits and reopens: always
     * under a new epoch (every open; Redis: a changed run_id) */
    :: losses < NLOSS && dhead >= first -> atomic {
        losses++;
        lost = 1;
        do
        :: dhead >= first ->
            dev[dhead] = 0; dep[dhead] = 0; dhead--;
            if
            :: true -> break
            :: dhead >= first -> skip
            fi
        :: else -> break
        od;
        drop();
        next = dhead + 1;
        phead = dhead;
#ifndef BAD_SAME_EPOCH
        new_epoch();
#endif
        check_resume()
       }

    /* retention trims the oldest durable event (its epoch stays as the trim
     * record) */
    :: trims < NTRIM && first <= phead -> atomic { trims++; first++; check_resume() }
    od
}

/* The seeds' invariant: no id on the wire above the durable head. */
ltl wire_le_durable { [] (lost || wmax <= dhead) }
/* Emit-early: the announced durable head never above the durable head. */
ltl announced_le_durable { [] (lost || ann <= dhead) }
