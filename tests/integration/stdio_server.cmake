# The server on stdio (tidemark_server_run_stdio, tidemark-everything
# --stdio; docs/protocol.md "stdio"): bad lines answered typed, the
# official SDK v1 and v2 clients over stdio in both eras, ledger_append on
# SQLite with a kill -9 mid-call and recovery after the restart.
if(NODE_EXECUTABLE)
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/test-var)
  add_test(NAME stdio_server
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/stdio_server.mjs
            $<TARGET_FILE:tidemark-everything> ${TIDEMARK_PEERS} ${CMAKE_BINARY_DIR}/test-var)
  set_tests_properties(stdio_server PROPERTIES TIMEOUT 90)
endif()

# A `tidemark-server --stdio` process (SQLite) holds no TCP socket while it
# serves a call in either era (issue 31: the stdio adapter calls the core
# directly; before, every line was POSTed to a loopback port).
if(NODE_EXECUTABLE)
  add_test(NAME stdio_sockets
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/stdio_sockets.mjs
            $<TARGET_FILE:tidemark-server> ${CMAKE_BINARY_DIR}/test-var)
  set_tests_properties(stdio_sockets PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()
