# A slow reader costs bounded memory (issue 30, item 4;
# tests/integration/slow_readers.mjs): 200 calls of the stream tool on
# SQLite whose answers are never read add under 50 MB of RSS, another
# client's initialize + tools/list is answered within 1 s meanwhile, the
# streams read late are whole, and RSS is within 40 MB of the start once
# they are gone (waited for up to 10 s: the janitor gives freed heap back). 2,500 events a call here (about 12 s); the issue's 10,000
# (about 40 s):
#   node tests/integration/slow_readers.mjs build/bin/tidemark-server 200 10000 50
if(NODE_EXECUTABLE)
  # RSS and latency are the measure: alone, and not under a sanitizer.
  add_test(NAME slow_readers
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/slow_readers.mjs
            $<TARGET_FILE:tidemark-server> 200 2500 50)
  set_tests_properties(slow_readers PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE LABELS nosan)
endif()
