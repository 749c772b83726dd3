# Crash test of durable tasks (included from tests/CMakeLists.txt):
# tasks_chaos.mjs, concurrent tidemark-client processes make task calls of
# ledger_append, stream and external_call (a unique idempotency key each)
# while server nodes are kill -9ed and restarted at seeded random moments:
# one node on SQLite (restarted on the same file), and three nodes on one
# Redis behind HAProxy (skipped, exit 77, when redis-server or haproxy is
# missing). Server starts armed with the crash point task_created_before_answer,
# clients armed with client crash points or SIGKILLed mid-poll and resumed.
# The seed is printed (TASKS_CHAOS_SEED=N reruns one). Short variant here
# (35 s of chaos per mode); long variant, e.g.:
#   node tests/integration/tasks_chaos.mjs --mode redis --server build/bin/tidemark-server-crashpoints \
#        --client build/bin/tidemark-client-crashpoints --seconds 600 --clients 6
if(NODE_EXECUTABLE AND TARGET tidemark-server-crashpoints AND TARGET tidemark-client-crashpoints)
  foreach(m sqlite redis)
    add_test(NAME tasks_chaos_${m}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_chaos.mjs --mode ${m}
              --server $<TARGET_FILE:tidemark-server-crashpoints>
              --client $<TARGET_FILE:tidemark-client-crashpoints> --seconds 35)
    set_tests_properties(tasks_chaos_${m} PROPERTIES TIMEOUT 150 SKIP_RETURN_CODE 77
                         LABELS "tasks;modern;chaos")
  endforeach()
endif()
