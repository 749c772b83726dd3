# Regression tests for the server holes of issue 10 (tests/integration/server_holes.mjs).
# Each scenario runs per store; the Redis variants start their own redis-server
# and two nodes (exit 77 = skipped when redis-server is missing).
if(NODE_EXECUTABLE)
  foreach(store memory sqlite redis)
    add_test(NAME holes_ids_${store}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/server_holes.mjs
              $<TARGET_FILE:tidemark-server> ${store} ids)
    set_tests_properties(holes_ids_${store} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endif()
