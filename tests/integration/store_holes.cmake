# The store's holes of issue 10 (tests/unit/test_store_holes.c): linked with
# the crash-points library for its fault VFS (a full disk on demand).
if(CMOCKA_FOUND)
  add_executable(test_store_holes unit/test_store_holes.c)
  target_link_libraries(test_store_holes PRIVATE tidemark_crashpoints PkgConfig::CMOCKA)
  add_test(NAME unit_store_holes COMMAND test_store_holes)
  set_tests_properties(unit_store_holes PROPERTIES TIMEOUT 300)
endif()
