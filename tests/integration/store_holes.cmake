# The store's holes of issue 10 (tests/unit/test_store_holes.c): linked with
# the crash-points library for its fault VFS (a full disk on demand).
if(CMOCKA_FOUND)
  add_executable(test_store_holes unit/test_store_holes.c)
  target_link_libraries(test_store_holes PRIVATE tidemark_crashpoints PkgConfig::CMOCKA)
  add_test(NAME unit_store_holes COMMAND test_store_holes)
  set_tests_properties(unit_store_holes PROPERTIES TIMEOUT 300)
endif()
# The queue and the group-commit writer on their own (a fake backend).
if(CMOCKA_FOUND)
  add_executable(test_writer unit/test_writer.c)
  target_link_libraries(test_writer PRIVATE tidemark_static PkgConfig::CMOCKA)
  add_test(NAME unit_writer COMMAND test_writer)
  set_tests_properties(unit_writer PROPERTIES TIMEOUT 120)
endif()
# The same holes through tidemark-server: two servers on one file, an older
# copy put back (--accept-loss), a damaged file, a full disk that comes back.
find_program(TM_STORE_NODE node)
if(TM_STORE_NODE)
  add_test(NAME store_faults
    COMMAND ${TM_STORE_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/store_faults.mjs
            $<TARGET_FILE:tidemark-server> $<TARGET_FILE:tidemark-server-crashpoints>)
  set_tests_properties(store_faults PROPERTIES TIMEOUT 240)
endif()
# The VFS that writes a commit's WAL frames in few writes (src/log/walbuf.c).
if(CMOCKA_FOUND)
  add_executable(test_walbuf unit/test_walbuf.c)
  target_link_libraries(test_walbuf PRIVATE tidemark_static PkgConfig::CMOCKA)
  add_test(NAME unit_walbuf COMMAND test_walbuf)
  set_tests_properties(unit_walbuf PROPERTIES TIMEOUT 120)
endif()
