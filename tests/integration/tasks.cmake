# The tasks extension (io.modelcontextprotocol/tasks) on the server
# (included from tests/CMakeLists.txt): every tasks-* scenario of the
# official conformance suite 0.2, one at a time, against tidemark-everything
# (memory), and tasks.mjs: create / get / cancel / input / TTL / re-issue on
# memory, SQLite and two Redis nodes, kill -9 of a task's node on SQLite and
# Redis; tasks_sdk_v2.mjs: that kill -9 on SQLite through the official
# TypeScript SDK v2 client.
if(NODE_EXECUTABLE)
  foreach(s tasks-lifecycle tasks-capability-negotiation tasks-wire-fields
            tasks-request-state-removal tasks-mrtr-input tasks-request-headers
            tasks-dispatch-and-envelope tasks-status-notifications
            tasks-required-task-error tasks-mrtr-composition)
    add_test(NAME tasks_conformance_${s}
      COMMAND ${WITH_SERVER} $<TARGET_FILE:tidemark-everything> --store memory --
              ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_conformance.mjs
              ${TIDEMARK_PEERS} @URL@ ${s})
    set_tests_properties(tasks_conformance_${s} PROPERTIES TIMEOUT 120 LABELS "tasks;modern")
  endforeach()
  foreach(k memory sqlite redis crash-sqlite crash-redis)
    add_test(NAME tasks_${k}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks.mjs
              $<TARGET_FILE:tidemark-everything> ${k})
    set_tests_properties(tasks_${k} PROPERTIES TIMEOUT 90 SKIP_RETURN_CODE 77 LABELS "tasks;modern")
  endforeach()
  # The official TypeScript SDK v2 client (peers/) follows a ledger_append
  # task across kill -9 and restart of a SQLite server.
  add_test(NAME tasks_sdk_v2
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_sdk_v2.mjs
            $<TARGET_FILE:tidemark-everything> ${TIDEMARK_PEERS})
  set_tests_properties(tasks_sdk_v2 PROPERTIES TIMEOUT 90 LABELS "tasks;modern")
endif()
# The tasks benchmark runs (create -> terminal, tasks/get on one SQLite node
# and on three Redis nodes behind HAProxy, every answer checked): a smoke run
# of bench/tasks.sh, numbers not judged.
add_test(NAME bench_tasks_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/tasks.sh ${CMAKE_BINARY_DIR} 1 0.5)
set_tests_properties(bench_tasks_smoke PROPERTIES TIMEOUT 120 LABELS bench)
if(NODE_EXECUTABLE)
  set_tests_properties(bench_tasks_smoke PROPERTIES ENVIRONMENT "NODE=${NODE_EXECUTABLE}")
endif()
# A task creation cut between its store writes (crash point
# task_session_created): finished by the re-issue under its key.
if(NODE_EXECUTABLE)
  add_test(NAME tasks_cut_creation
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_cut_creation.mjs
            $<TARGET_FILE:tidemark-server-crashpoints>)
  set_tests_properties(tasks_cut_creation PROPERTIES TIMEOUT 60 LABELS "tasks;modern")
  # ... cut after its stream was opened too: the response goes to that stream.
  add_test(NAME tasks_cut_creation_stream
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_cut_creation.mjs
            $<TARGET_FILE:tidemark-server-crashpoints> task_stream_opened)
  set_tests_properties(tasks_cut_creation_stream PROPERTIES TIMEOUT 60 LABELS "tasks;modern")
  add_test(NAME tasks_cut_creation_pg
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/tasks_cut_creation.mjs
            $<TARGET_FILE:tidemark-server-crashpoints> pg_stream_reserved pg)
  set_tests_properties(tasks_cut_creation_pg PROPERTIES TIMEOUT 120 LABELS "tasks;modern;pg"
                       SKIP_RETURN_CODE 77)
endif()
