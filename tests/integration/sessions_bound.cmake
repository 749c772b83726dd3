# Sessions bounded (issue 30, item 3; tests/integration/sessions_bound.mjs):
# past --max-sessions-per-address a typed 429 while another address
# (127.0.0.2) is still served, past --max-sessions a 503, the count kept
# across a restart; and RSS per idle session on SQLite under 3 KB (7.8 KB
# before idle sessions left memory; 0.9 KB when first measured, 1.6-2.1 KB
# since 2026-12-06 on this machine, so 2 KB failed now and then). The long
# variant, 50,000 sessions:
#   node tests/integration/sessions_bound.mjs build/bin/tidemark-server memory 50000 3
if(NODE_EXECUTABLE)
  add_test(NAME sessions_bound_limit
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/sessions_bound.mjs
            $<TARGET_FILE:tidemark-server> limit)
  set_tests_properties(sessions_bound_limit PROPERTIES TIMEOUT 120)
  # RSS is the measure: not under a sanitizer (its shadow memory and
  # quarantine, not the server, would decide it).
  add_test(NAME sessions_bound_memory
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/sessions_bound.mjs
            $<TARGET_FILE:tidemark-server> memory 20000 3)
  set_tests_properties(sessions_bound_memory PROPERTIES TIMEOUT 180 RUN_SERIAL TRUE LABELS nosan)
endif()
