# The client against a hostile fake server (issue 11): one CTest per way a
# server can walk around the resumption validator (client_holes.mjs plays
# them with hostile_server.mjs). Each asserts the client's exit code, typed
# reason, the state it leaves (cursor, dispatch log, effects), how often the
# call was POSTed, bounded reconnects, time and memory.
if(NODE_EXECUTABLE)
  set(TM_CLIENT_HOLES
    stream_switch opaque_switch empty_id missing_id json_on_resume
    malformed_utf8 not_json
    garbage_sse garbage_http silent_close call_headers_cut resume_headers_cut resume_attached
    empty_answer accepted_answer
    retry_timeout retry_sigterm storm early_flood long_id nul_id)
  foreach(s ${TM_CLIENT_HOLES})
    add_test(NAME client_holes_${s}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_holes.mjs
              $<TARGET_FILE:tidemark-client> ${s})
    set_tests_properties(client_holes_${s} PROPERTIES TIMEOUT 90 LABELS "client")
  endforeach()
endif()

# The first hour of tidemark-client (issue 12): --version, --help, and what
# each first-hour mistake says (cannot connect, no MCP endpoint, unknown
# command, resume without --state), progress on a terminal and off it.
if(NODE_EXECUTABLE)
  add_test(NAME client_first_hour
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_first_hour.mjs
            $<TARGET_FILE:tidemark-client> ${PROJECT_VERSION})
  set_tests_properties(client_first_hour PROPERTIES TIMEOUT 120 LABELS "client")
endif()
