# The gateway's groundwork (docs/design.md "Gateway (groundwork)"): the stdio
# transport's framing (unit_stdio), one supervised child (unit_stdio_child:
# sh and cat as children), the upstream session's edges against a fake child
# (unit_stdio_upstream: gateway_fake_child.mjs) and against the official
# server-everything over stdio (gateway_stdio_everything).
if(CMOCKA_FOUND)
  foreach(t stdio stdio_child)
    add_executable(test_${t} ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_${t}.c)
    target_link_libraries(test_${t} PRIVATE tidemark_static PkgConfig::CMOCKA)
    add_test(NAME unit_${t} COMMAND test_${t})
    set_tests_properties(unit_${t} PROPERTIES TIMEOUT 60)
  endforeach()
endif()
find_program(TM_GATEWAY_NODE node)
if(CMOCKA_FOUND AND TM_GATEWAY_NODE)
  add_executable(test_stdio_upstream ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_stdio_upstream.c)
  target_link_libraries(test_stdio_upstream PRIVATE tidemark_static PkgConfig::CMOCKA)
  add_test(NAME unit_stdio_upstream
    COMMAND test_stdio_upstream ${TM_GATEWAY_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/gateway_fake_child.mjs)
  set_tests_properties(unit_stdio_upstream PROPERTIES TIMEOUT 90)
endif()
set(TM_EVERYTHING_JS ${CMAKE_SOURCE_DIR}/peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js)
add_executable(test_stdio_everything ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_stdio_everything.c)
target_link_libraries(test_stdio_everything PRIVATE tidemark_static)
if(TM_GATEWAY_NODE)
  add_test(NAME gateway_stdio_everything
    COMMAND test_stdio_everything ${TM_GATEWAY_NODE} ${TM_EVERYTHING_JS} stdio)
  set_tests_properties(gateway_stdio_everything PROPERTIES TIMEOUT 90)
endif()
