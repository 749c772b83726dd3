# PostgreSQL store under failover (issue 29; included from tests/CMakeLists.txt).
# Each test starts its own PostgreSQL 15 cluster with tests/tools/pg_cluster.sh
# (initdb, pg_basebackup -R, pg_ctl; as the postgres user when run as root)
# on loopback ports it picks, never a system cluster; exit 77 (skipped) only
# when the PostgreSQL server binaries or HAProxy are not installed.
#
# pg_outage: a primary and one synchronous standby, one tidemark-server with
# --durability replicated; the standby stopped (a stream call and an append
# refused typed, never an empty stream), then back (both re-sent under their
# ids reach their end, the append once). 20-40 s.
if(NODE_EXECUTABLE)
  add_test(NAME pg_outage
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_outage.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(pg_outage PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "pg")
endif()

# pg_twin_posts: one request POSTed to two nodes at the same moment (commits
# slowed, so both read its record as absent): both POSTs reach its one
# response, one stream holds its events. 10-20 s.
if(NODE_EXECUTABLE AND TARGET tidemark-server-crashpoints)
  add_test(NAME pg_twin_posts
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_twin_posts.mjs
            $<TARGET_FILE:tidemark-server-crashpoints>)
  set_tests_properties(pg_twin_posts PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77 LABELS "pg")
endif()

# pg_unsettled_elsewhere: a call refused on node 0 while the only synchronous
# standby is stopped (its record not confirmed), re-sent to node 1 alone once
# the standby is back: node 0 settles it by itself, the retry gets the result,
# the ledger holds it once. The recoverer is slowed between its two questions
# (is a commit in doubt, is the record there), where the record's commit
# lands. 10-20 s.
if(NODE_EXECUTABLE AND TARGET tidemark-server-crashpoints)
  add_test(NAME pg_unsettled_elsewhere
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_unsettled_elsewhere.mjs
            $<TARGET_FILE:tidemark-server-crashpoints>)
  set_tests_properties(pg_unsettled_elsewhere PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77 LABELS "pg")
endif()

# pg_unsettled_progress: a streaming call whose writes wait for the only
# synchronous standby (stopped) is unsettled; while its COMMITs are in doubt
# the recoverer does not run it again (a re-run would read the stream
# without them and send their progress again once they land). Once the
# standby is back: one result, progress strictly rising, ids dense. 10-15 s.
if(NODE_EXECUTABLE)
  add_test(NAME pg_unsettled_progress
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_unsettled_progress.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(pg_unsettled_progress PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77 LABELS "pg")
endif()

# pg_failover: a primary and two synchronous standbys ('ANY 1 (s1, s2)'), two
# tidemark-server nodes behind HAProxy, clients appending ledger entries and
# streaming; kill -9 of the primary, the most advanced standby promoted, the
# other following; exactly-once ledger, every event seen still there, resume
# by tidemark-client and the TypeScript SDK, writes back within a bound; one
# and both standbys lost; --durability replicated without a synchronous
# standby. Short here (1 failover, seed 1: 1-2 minutes); long:
#   PG_FAILOVERS=20 PG_SEED=7 node tests/integration/pg_failover.mjs \
#     build/bin/tidemark-server build/bin/tidemark-client
if(NODE_EXECUTABLE)
  add_test(NAME pg_failover
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_failover.mjs
            $<TARGET_FILE:tidemark-server> $<TARGET_FILE:tidemark-client>)
  # Alone (RUN_SERIAL): its bounds on when writes are back are wall-clock
  # ones, and the promotion is bash and psql.
  set_tests_properties(pg_failover PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       ENVIRONMENT "PG_SEED=1;PG_FAILOVERS=1" LABELS "nosan;pg;chaos")
endif()

# pg_patroni: Patroni (examples/patroni/patroni-n*.yml) and etcd manage three
# PostgreSQL members; two tidemark-server nodes, one on the multi-host URI,
# one through HAProxy checking Patroni's /primary (examples/patroni/
# haproxy.cfg); kill -9 of the leader member, Patroni fails over; exactly-once
# ledger, every event seen still there, writes back within a bound. One
# failover here (1.5-2 minutes, most of it Patroni's bootstrap and its leader
# key's ttl); many: make soak-ha. Exit 77 without patroni, etcd or haproxy.
if(NODE_EXECUTABLE)
  add_test(NAME pg_patroni
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_patroni.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(pg_patroni PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE
                       ENVIRONMENT "PATRONI_SEED=1;PATRONI_FAILOVERS=1" LABELS "nosan;pg;chaos")
endif()

# pg_commits: a primary and one synchronous standby, one node with
# --durability replicated: N serial 2025 ledger_append calls cost at most 2N
# commits that wait for the standby (its record with its priming event, then
# its row with its result), each answered, each row once. 10-20 s.
if(NODE_EXECUTABLE)
  add_test(NAME pg_commits
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/pg_commits.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(pg_commits PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77 LABELS "pg")
endif()
