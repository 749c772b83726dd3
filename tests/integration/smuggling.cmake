# Request smuggling and body limits at the HTTP layer (issue 30, items 1
# and 2; tests/integration/smuggling.mjs): every ambiguous framing gets a
# typed 400 and a closed connection, with nothing hidden in it run; a body
# over --max-body gets 413 at once (declared, or a chunk size seen) or as it
# passes the limit (chunked); a chunk size no body can have gets a typed 400.
if(NODE_EXECUTABLE)
  add_test(NAME smuggling
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/smuggling.mjs
            $<TARGET_FILE:tidemark-server>)
  set_tests_properties(smuggling PROPERTIES TIMEOUT 120)
endif()
