# A 2025 request and a copy of it (same session, same request id) sent at
# once (tests/integration/same_id.mjs; model/requests.pml, the 2025 begin):
# one ledger row per call and both copies answered with its one result,
# inline and on a worker. Redis: exit 77 (skipped) without redis-server.
if(NODE_EXECUTABLE)
  foreach(store memory sqlite redis)
    add_test(NAME same_id_${store}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/same_id.mjs
              $<TARGET_FILE:tidemark-server> ${store} 60)
    set_tests_properties(same_id_${store} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77)
  endforeach()
endif()
