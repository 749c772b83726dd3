# The harness's own promises (harness_test.mjs):
#   harness_watchdog  a run whose event loop is stuck in a synchronous child
#                     is failed at its deadline with the step, the main
#                     thread's kernel wait and the child named, and killed
#                     with its descendants (watchdog.mjs)
#   harness_ports     ports picked before their server starts are below the
#                     ephemeral range and reserved among concurrent tests
#                     (ports.mjs)
if(NODE_EXECUTABLE)
  foreach(part watchdog ports)
    add_test(NAME harness_${part}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/harness_test.mjs ${part})
    set_tests_properties(harness_${part} PROPERTIES TIMEOUT 60 LABELS "harness;nosan")
  endforeach()
endif()
