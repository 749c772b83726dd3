# The 2026-07-28 era end to end (included from tests/CMakeLists.txt):
# the official TypeScript SDK v2 client against tidemark-everything, and
# three Redis nodes behind HAProxy with MRTR, listen and kill -9.
if(NODE_EXECUTABLE)
  add_test(NAME modern_sdk_v2
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_sdk_v2.mjs
            $<TARGET_FILE:tidemark-everything> ${TIDEMARK_PEERS})
  set_tests_properties(modern_sdk_v2 PROPERTIES TIMEOUT 120 LABELS modern)
  add_test(NAME modern_cluster
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_cluster.mjs
            $<TARGET_FILE:tidemark-everything>)
  set_tests_properties(modern_cluster PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS modern)
endif()
# The request-path benchmark runs (both eras, both stores, every answer
# checked): a smoke run of bench/requests.sh, numbers not judged.
add_test(NAME bench_requests_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/requests.sh ${CMAKE_BINARY_DIR} 1 0.5)
set_tests_properties(bench_requests_smoke PROPERTIES TIMEOUT 120 LABELS bench)
