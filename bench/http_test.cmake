# The HTTP side-by-side benchmark runs (floor, TypeScript SDK, tidemark on
# memory / SQLite / Redis, echo and ledger_append, the raw SQLite loop, many
# streams and one fan-out, every answer checked): a smoke run of
# bench/http.sh, 0.5 s per cell and 200 streams; numbers not judged.
add_test(NAME bench_http_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/http.sh ${CMAKE_BINARY_DIR} 1 0.5 200)
set_tests_properties(bench_http_smoke PROPERTIES TIMEOUT 90 LABELS bench)
if(NODE_EXECUTABLE)
  set_tests_properties(bench_http_smoke PROPERTIES ENVIRONMENT "NODE=${NODE_EXECUTABLE}")
endif()
