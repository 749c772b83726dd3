/*
 * failover.pml - the PostgreSQL store's replication protocol: a primary and
 * two synchronous candidates, synchronous_standby_names = 'ANY 1 (s1, s2)'
 * and synchronous_commit on (remote flush), plus one asynchronous standby
 * s3; Tidemark commits, then emits; a node is lost; the failover manager
 * promotes the most advanced candidate. model/README.md maps each element
 * to the code and the configuration.
 *
 * Switches (spin -D...):
 *   BAD_PROMOTE_ASYNC    the failover may promote s3, not in the quorum
 *   BAD_PROMOTE_LAGGING  the failover may promote the less advanced candidate
 *   BAD_ACK_UNKNOWN      a commit whose wait for a standby was cancelled
 *                        ("committed locally, might not be replicated") is
 *                        taken as acknowledged
 *   BAD_LOCAL_ACK        synchronous_commit = local: acknowledged when the
 *                        primary alone flushed
 *   TWO_LOSSES           two nodes may be lost (beyond what ANY 1 tolerates)
 */

#ifdef LTL_ONLY
#define must(c) skip
#else
#define must(c) assert(c)
#endif

#define NC 4                /* commits Tidemark attempts */
#ifdef TWO_LOSSES
#define NLOSS 2
#else
#define NLOSS 1             /* nodes lost: any one of primary, s1, s2 */
#endif

/* nodes: 0 the first primary, 1 s1, 2 s2 (the quorum), 3 s3 (asynchronous) */
byte wal[4];                /* commits each node flushed (a prefix of the history) */
bool gone[4];               /* node lost, its disk with it */
byte prim = 0;              /* the primary */
byte next = 1;              /* commits Tidemark sent, plus one */
byte waiting = 0;           /* position of the commit whose COMMIT waits (0: none) */
byte acked = 0;             /* highest commit whose COMMIT returned OK */
byte emitted = 0;           /* highest seq put on the wire (commit, then emit) */
bool refusing = 0;          /* writer refuses writes until a probe commits */
byte losses = 0;
byte k, best;               /* scratch */

/* a standby in the quorum set has flushed commit c */
#define QUORUM_HAS(c) ((prim != 1 && !gone[1] && wal[1] >= (c)) || \
                       (prim != 2 && !gone[2] && wal[2] >= (c)))

/* Nothing acknowledged is lost; nothing on the wire above what is durable. */
inline check()
{
    must(gone[prim] || acked <= wal[prim]);
    must(gone[prim] || emitted <= wal[prim])
}

inline promote()
{
    /* the failover manager: the most advanced candidate of the quorum set */
    best = 0;
    if
    :: !gone[1] && (gone[2] || wal[1] >= wal[2]) -> best = 1
    :: !gone[2] && (gone[1] || wal[2] >= wal[1]) -> best = 2
#ifdef BAD_PROMOTE_LAGGING
    :: !gone[1] -> best = 1
    :: !gone[2] -> best = 2
#endif
#ifdef BAD_PROMOTE_ASYNC
    :: !gone[3] -> best = 3
#endif
    :: gone[1] && gone[2] -> best = 0       /* no candidate: no primary */
    fi;
    prim = best;
    /* the others follow the new primary: a standby ahead of it would be
     * rewound (pg_rewind), losing what it had beyond */
    k = 1;
    do
    :: k > 3 -> break
    :: else ->
        if
        :: k != prim && !gone[k] && wal[k] > wal[prim] -> wal[k] = wal[prim]
        :: else -> skip
        fi;
        k++
    od;
    k = 0; best = 0
}

active proctype world()
{
end:
    do
    /* the writer sends a commit (one batch); the primary flushes it */
    :: !gone[prim] && waiting == 0 && !refusing && next <= NC -> atomic {
        wal[prim]++;
        waiting = wal[prim];
        next++;
        check()
       }

    /* a standby streams one more commit from the primary and flushes it */
    :: atomic {
        if
        :: prim != 1 && !gone[1] && !gone[prim] && wal[1] < wal[prim] -> wal[1]++
        :: prim != 2 && !gone[2] && !gone[prim] && wal[2] < wal[prim] -> wal[2]++
        :: prim != 3 && !gone[3] && !gone[prim] && wal[3] < wal[prim] -> wal[3]++
        fi;
        check()
       }

    /* COMMIT returns OK: a standby of the quorum flushed it */
    :: waiting != 0 && !gone[prim] &&
#ifdef BAD_LOCAL_ACK
       true
#else
       QUORUM_HAS(waiting)
#endif
       -> atomic { acked = waiting; waiting = 0; check() }

    /* the wait is cancelled, or the connection drops: outcome unknown, not
     * acknowledged; nothing of it is emitted and writes are refused */
    :: waiting != 0 -> atomic {
#ifdef BAD_ACK_UNKNOWN
        acked = waiting;
#endif
        waiting = 0; refusing = 1;
        check()
       }

    /* a probe write commits on a primary with a quorum: writes again */
    :: refusing && !gone[prim] && QUORUM_HAS(wal[prim]) -> refusing = 0

    /* emit: only what is acknowledged */
    :: emitted < acked -> atomic { emitted++; check() }

    /* a node is lost; losing the primary makes the manager promote */
    :: losses < NLOSS -> atomic {
        losses++;
        if
        :: k = 0
        :: k = 1
        :: k = 2
        fi;
        gone[k] = 1;
        if
        :: k == prim ->
            if
            :: waiting != 0 -> waiting = 0; refusing = 1   /* outcome unknown */
            :: else -> skip
            fi;
            promote()
        :: else -> skip
        fi;
        k = 0;
        check()
       }
    od
}

/* Nothing acknowledged is lost: the primary holds every acknowledged commit. */
ltl acked_survive { [] (gone[prim] || acked <= wal[prim]) }
/* No id on the wire above what the primary holds durable. */
ltl wire_le_durable { [] (gone[prim] || emitted <= wal[prim]) }
