# The public API and ABI (docs/design.md, "The public API and ABI"):
#  unit_api     the API through the shared library, as a program links it: the
#               tables of defaults against the headers' comments and --help,
#               every error code, memory that changes hands, older and newer
#               struct layouts
#  abi_layout   no hole and no tail padding in a growable public struct (pahole)
#  abi_symbols  the exported symbols are exactly src/tidemark.sym (nm -D)
#  abi_diff     the ABI against the last release tag (abidiff); skipped (77)
#               while there is none
#  layers       the layers' arrows point down and no cycle of calls inside a
#               layer runs through more than 3 files (nm over the objects)
find_program(PAHOLE_EXECUTABLE pahole)
find_program(ABIDIFF_EXECUTABLE abidiff)
find_program(NM_EXECUTABLE nm)
if(NOT PAHOLE_EXECUTABLE OR NOT ABIDIFF_EXECUTABLE OR NOT NM_EXECUTABLE)
  message(FATAL_ERROR "TIDEMARK_TESTS=ON, but the ABI tests need pahole (dwarves), abidiff "
                      "(abigail-tools) and nm (binutils): 'make test-deps' installs them.")
endif()
set(TM_ABI ${CMAKE_CURRENT_SOURCE_DIR}/abi)

add_executable(test_api ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_api.c)
target_link_libraries(test_api PRIVATE tidemark PkgConfig::CMOCKA)
add_dependencies(test_api tidemark-server tidemark-client)
add_test(NAME unit_api COMMAND test_api)
set_tests_properties(unit_api PROPERTIES LABELS abi
  ENVIRONMENT "TM_SOURCE_DIR=${CMAKE_SOURCE_DIR};TM_BIN_DIR=${CMAKE_BINARY_DIR}/bin")

add_test(NAME abi_layout
  COMMAND ${TM_ABI}/pahole.sh $<TARGET_FILE:tidemark> tidemark_server_config tidemark_client_config
          tidemark_tool tidemark_resource tidemark_prompt tidemark_event)
set_tests_properties(abi_layout PROPERTIES LABELS abi SKIP_RETURN_CODE 77 TIMEOUT 60)

# A sanitizer's build may export symbols of its own: the list is the plain build's.
add_test(NAME abi_symbols
  COMMAND ${TM_ABI}/symbols.sh $<TARGET_FILE:tidemark> ${CMAKE_SOURCE_DIR}/src/tidemark.sym
          ${CMAKE_SOURCE_DIR}/include/tidemark/tidemark.h ${CMAKE_SOURCE_DIR}/include/tidemark/server.h
          ${CMAKE_SOURCE_DIR}/include/tidemark/client.h ${CMAKE_SOURCE_DIR}/include/tidemark/txn.h)
set_tests_properties(abi_symbols PROPERTIES LABELS "abi;nosan" TIMEOUT 60)

# The ABI does not depend on a sanitizer: compared in the plain build only.
add_test(NAME abi_diff
  COMMAND ${TM_ABI}/abidiff.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR} $<TARGET_FILE:tidemark>)
set_tests_properties(abi_diff PROPERTIES LABELS "abi;nosan" SKIP_RETURN_CODE 77 TIMEOUT 900)

add_test(NAME layers
  COMMAND ${NODE_EXECUTABLE} ${TM_ABI}/layers.mjs "$<TARGET_OBJECTS:tidemark_obj>")
set_tests_properties(layers PROPERTIES LABELS "abi;nosan" TIMEOUT 120)
