# The multi-node suites on the PostgreSQL store (issue 29; included from
# tests/CMakeLists.txt after the Redis variants it mirrors). Each test is the
# Redis test's script run with TM_STORE=pg (tests/integration/store_env.mjs):
# it starts its own PostgreSQL cluster with tests/tools/pg_cluster.sh (a
# primary; TM_PG_STANDBYS=N adds N synchronous standbys) on loopback ports it
# picks, as the postgres user when run as root, never a system cluster, and
# passes its libpq URI to every node. Exit 77 (skipped) only when the
# PostgreSQL server binaries or HAProxy are not installed. The chaos variants
# are shorter than the Redis ones (fewer kills, fewer seconds). They run in
# the normal build only (label nosan): under ASan and TSan the store's code
# is covered by unit_store_pg (two nodes, claims, effects, a lost standby)
# and example_ledger_pg, and make test stays within its time. Long, e.g.:
#   TM_STORE=pg CRASH_KILLS=100 CRASH_CLIENTS=8 node tests/integration/multinode_crash.mjs \
#     build/bin/tidemark-server
#   node tests/integration/tasks_chaos.mjs --mode pg --server build/bin/tidemark-server-crashpoints \
#     --client build/bin/tidemark-client-crashpoints --seconds 600 --clients 6
if(NODE_EXECUTABLE AND TARGET tidemark-everything)
  add_test(NAME multinode_conformance_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/multinode_conformance.mjs
            $<TARGET_FILE:tidemark-everything>
            ${CMAKE_CURRENT_SOURCE_DIR}/integration/conformance_server.sh ${TIDEMARK_PEERS})
  add_test(NAME modern_cluster_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_cluster.mjs
            $<TARGET_FILE:tidemark-everything>)
  # tasks.mjs's two-node run: a task's input answered, or its cancel asked,
  # on the node that did not begin it
  add_test(NAME tasks_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks.mjs
            $<TARGET_FILE:tidemark-everything> redis)
  set_tests_properties(multinode_conformance_pg modern_cluster_pg tasks_pg PROPERTIES TIMEOUT 240
                       SKIP_RETURN_CODE 77 ENVIRONMENT "TM_STORE=pg" LABELS "nosan;pg;modern")
endif()
if(NODE_EXECUTABLE)
  add_test(NAME multinode_crash_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/multinode_crash.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(multinode_crash_pg PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                       ENVIRONMENT "TM_STORE=pg;CRASH_SEED=1;CRASH_KILLS=6" LABELS "nosan;pg;chaos")
  add_test(NAME gateway_exactly_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway_exactly.mjs
            $<TARGET_FILE:tidemark-gateway> $<TARGET_FILE:tidemark-client>
            $<TARGET_FILE:tidemark-everything>)
  set_tests_properties(gateway_exactly_pg PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                       ENVIRONMENT "TM_STORE=pg" LABELS "nosan;pg;gateway")
endif()
if(NODE_EXECUTABLE)
  add_test(NAME gateway_cluster_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway_cluster.mjs
            $<TARGET_FILE:tidemark-gateway> $<TARGET_FILE:tidemark-client> ${NODE_EXECUTABLE}
            ${TM_EVERYTHING_JS} ${CMAKE_CURRENT_SOURCE_DIR}/integration/sdk_client.mjs)
  set_tests_properties(gateway_cluster_pg PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       ENVIRONMENT "TM_STORE=pg" LABELS "nosan;pg;gateway")
endif()
if(NODE_EXECUTABLE AND TARGET tidemark-server-crashpoints AND TARGET tidemark-client-crashpoints)
  add_test(NAME tasks_chaos_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_chaos.mjs --mode pg
            --server $<TARGET_FILE:tidemark-server-crashpoints>
            --client $<TARGET_FILE:tidemark-client-crashpoints> --seconds 20 --seed 1)
  set_tests_properties(tasks_chaos_pg PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77
                       LABELS "nosan;pg;tasks;modern;chaos")
endif()
