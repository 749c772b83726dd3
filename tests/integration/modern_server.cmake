# The server's 2026-07-28 era (included from tests/CMakeLists.txt): the
# official conformance suite 0.2 against tidemark-everything on memory and
# SQLite (every scored scenario of --requirements 2026-07-28), its two
# pending header scenarios, its 2025-11-25 run, and modern_server.mjs (what
# the suite does not check: both eras on one endpoint, errors and reasons,
# MRTR state, idempotency keys, listen across processes).
if(NODE_EXECUTABLE)
  set(TM_MODERN_CONF ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_server_conformance.sh)
  set(TM_VAR ${CMAKE_BINARY_DIR}/test-var)
  file(MAKE_DIRECTORY ${TM_VAR})
  add_test(NAME modern_server_conformance_memory
    COMMAND ${WITH_SERVER} $<TARGET_FILE:tidemark-everything> --store memory --
            ${TM_MODERN_CONF} ${TIDEMARK_PEERS} @URL@ requirements)
  add_test(NAME modern_server_conformance_sqlite
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/with_fresh_db.sh ${TM_VAR}/modern_conformance.db
            ${WITH_SERVER} $<TARGET_FILE:tidemark-everything> --store sqlite:${TM_VAR}/modern_conformance.db --
            ${TM_MODERN_CONF} ${TIDEMARK_PEERS} @URL@ requirements)
  add_test(NAME modern_server_conformance_2025
    COMMAND ${WITH_SERVER} $<TARGET_FILE:tidemark-everything> --store memory --
            ${TM_MODERN_CONF} ${TIDEMARK_PEERS} @URL@ 2025-11-25)
  set_tests_properties(modern_server_conformance_memory modern_server_conformance_sqlite
                       modern_server_conformance_2025 PROPERTIES TIMEOUT 240 LABELS modern)
  foreach(s http-header-validation http-custom-header-server-validation)
    add_test(NAME modern_server_pending_${s}
      COMMAND ${WITH_SERVER} $<TARGET_FILE:tidemark-everything> --store memory --
              ${TM_MODERN_CONF} ${TIDEMARK_PEERS} @URL@ scenario ${s})
    set_tests_properties(modern_server_pending_${s} PROPERTIES TIMEOUT 120 LABELS modern)
  endforeach()
  add_test(NAME modern_server
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/modern_server.mjs
            $<TARGET_FILE:tidemark-everything> ${TM_VAR})
  set_tests_properties(modern_server PROPERTIES TIMEOUT 120 LABELS modern)
endif()

# The era and the header checks on their own (src/server/era.c).
if(CMOCKA_FOUND)
  add_executable(test_era ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_era.c)
  target_link_libraries(test_era PRIVATE tidemark_static PkgConfig::CMOCKA)
  add_test(NAME unit_era COMMAND test_era)
  set_tests_properties(unit_era PROPERTIES TIMEOUT 60)
endif()
