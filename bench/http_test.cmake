# The HTTP side-by-side benchmark runs (floor, TypeScript SDK, tidemark on
# memory / SQLite / Redis, echo and ledger_append, the raw SQLite loop, many
# streams and one fan-out, every answer checked): a smoke run of
# bench/http.sh, 0.5 s per cell, 500 streams, and 5,000 sessions in the
# flat-latency rows (above the default per-address session limit, which
# those rows lift); numbers not judged.
add_test(NAME bench_http_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/http.sh ${CMAKE_BINARY_DIR} 1 0.5 500)
set_tests_properties(bench_http_smoke PROPERTIES TIMEOUT 300 LABELS bench)
if(NODE_EXECUTABLE)
  set_tests_properties(bench_http_smoke PROPERTIES ENVIRONMENT "NODE=${NODE_EXECUTABLE}")
endif()
# The gateways side by side (bench/gateway.sh): tidemark-gateway and
# supergateway in front of server-everything; a smoke run, numbers not judged.
# Each of the 16 sessions per target starts its own server-everything (node),
# 2-4 s apiece on a loaded 2-core machine: ~150 s there, ~95 s when quieter.
add_test(NAME bench_gateway_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/gateway.sh ${CMAKE_BINARY_DIR} 1 0.5)
set_tests_properties(bench_gateway_smoke PROPERTIES TIMEOUT 300 LABELS bench)
if(NODE_EXECUTABLE)
  set_tests_properties(bench_gateway_smoke PROPERTIES ENVIRONMENT "NODE=${NODE_EXECUTABLE}")
endif()
# Instructions per call under callgrind (bench/instructions.sh): a smoke run
# that the measurement works; valgrind cannot run a sanitizer build (nosan).
add_test(NAME bench_instructions_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/instructions.sh ${CMAKE_BINARY_DIR} 0.5 0.5)
set_tests_properties(bench_instructions_smoke PROPERTIES TIMEOUT 120 LABELS "bench;nosan")
# The PostgreSQL store beside pgbench (bench/pg.sh): a smoke run, one round
# of 1 s on its own 3-node cluster, its report to /dev/null; it fails when a
# figure could not be taken (pgbench's run of a ledger_append's transaction
# refused by the schema, say). Skipped (77) without PostgreSQL. 40-60 s.
add_test(NAME bench_pg_smoke
  COMMAND bash ${CMAKE_SOURCE_DIR}/bench/pg.sh ${CMAKE_BINARY_DIR} 1 1)
set_tests_properties(bench_pg_smoke PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                     LABELS "bench;pg;nosan" ENVIRONMENT "PG_BENCH_OUT=/dev/null")
