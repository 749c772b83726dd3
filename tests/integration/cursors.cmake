# Forged cursors (issue 30, item 5; tests/integration/cursors.mjs): 100
# forged Last-Event-IDs "ahead" are malformed_cursor and leave
# tidemark_resumes_total{outcome="ahead"} at 0 on every store (Redis: two
# nodes, exit 77 = skipped when redis-server is missing); a real id above
# the head of a SQLite database put back from an older copy still counts.
if(NODE_EXECUTABLE)
  foreach(store memory sqlite redis)
    add_test(NAME cursors_forged_${store}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/cursors.mjs
              $<TARGET_FILE:tidemark-server> ${store} forged)
    set_tests_properties(cursors_forged_${store} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
  add_test(NAME cursors_lost_sqlite
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/cursors.mjs
            $<TARGET_FILE:tidemark-server> sqlite lost)
  set_tests_properties(cursors_lost_sqlite PROPERTIES TIMEOUT 120)
endif()
