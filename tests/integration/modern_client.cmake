# The client in the 2026-07-28 ("modern") era.
#  - modern_client_conformance: the official suite's client scenarios of the
#    2026-07-28 requirements (conformance 0.2.0-alpha.12), authorization aside,
#    each with its exact count of checks passed (modern_client_conformance_2025:
#    the same suite's 2025-11-25 requirements, the legacy era);
#  - modern_client_sdk: tidemark-client against the TypeScript SDK v2 server
#    (modern: tools, resources, prompts, an elicitation round, listen) and the
#    v1 server (legacy fallback);
#  - modern_client_reissue: a cut call re-issued only when safe (key, or a
#    read-only tool), with the same key and a new id, also after a kill;
#  - modern_client_errors: the typed errors (input rounds, malformed
#    InputRequiredResult, no common version), the fall back to legacy, logLevel,
#    the cache of cacheable results;
#  - modern_client_tidemark: against tidemark-everything in the modern era:
#    a client killed mid-call resumes with its saved key, the ledger holds the
#    entry once; an elicitation round; listen.
#  - client_tasks: `call --task` (tasks extension): polled to the end, the
#    outcome applied once; killed at each step and resumed; the server killed
#    and restarted mid-poll; cancel-task.
if(NODE_EXECUTABLE)
  add_test(NAME modern_client_conformance
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_conformance.sh ${TIDEMARK_PEERS}
            $<TARGET_FILE:tidemark-conformance-client>)
  set_tests_properties(modern_client_conformance PROPERTIES TIMEOUT 90 LABELS "client;conformance")
  # The same suite's 2025-11-25 requirements: the legacy era, through the new runner.
  add_test(NAME modern_client_conformance_2025
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_conformance.sh ${TIDEMARK_PEERS}
            $<TARGET_FILE:tidemark-conformance-client> 2025-11-25)
  set_tests_properties(modern_client_conformance_2025 PROPERTIES TIMEOUT 90 LABELS "client;conformance")
  add_test(NAME modern_client_sdk
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_sdk.mjs
            $<TARGET_FILE:tidemark-client>
            ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_sdk_server.mjs
            ${CMAKE_CURRENT_SOURCE_DIR}/integration/sdk_server.mjs)
  set_tests_properties(modern_client_sdk PROPERTIES TIMEOUT 90 LABELS "client")
  add_test(NAME modern_client_reissue
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_reissue.mjs
            $<TARGET_FILE:tidemark-client>)
  set_tests_properties(modern_client_reissue PROPERTIES TIMEOUT 90 LABELS "client")
  add_test(NAME modern_client_errors
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_errors.mjs
            $<TARGET_FILE:tidemark-client>)
  set_tests_properties(modern_client_errors PROPERTIES TIMEOUT 90 LABELS "client")
  add_test(NAME modern_client_tidemark
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_client_tidemark.mjs
            $<TARGET_FILE:tidemark-client> $<TARGET_FILE:tidemark-everything>)
  set_tests_properties(modern_client_tidemark PROPERTIES TIMEOUT 90 LABELS "client")
  add_test(NAME client_tasks
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_tasks.mjs
            $<TARGET_FILE:tidemark-client> $<TARGET_FILE:tidemark-client-crashpoints>
            $<TARGET_FILE:tidemark-everything>)
  set_tests_properties(client_tasks PROPERTIES TIMEOUT 120 LABELS "client;tasks;modern")
endif()
