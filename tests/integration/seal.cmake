# Sealed request state (src/server/seal.c): unit_seal, cmocka, on the memory
# and SQLite stores, and on a redis-server of its own when one is installed.
if(CMOCKA_FOUND)
  add_executable(test_seal ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_seal.c)
  target_link_libraries(test_seal PRIVATE tidemark_static PkgConfig::CMOCKA)
  add_test(NAME unit_seal COMMAND test_seal)
  set_tests_properties(unit_seal PROPERTIES TIMEOUT 120)
endif()
