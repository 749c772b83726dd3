# Authorization (src/auth/, docs/design.md "Authorization"): the resource
# server's building blocks and the transport's TLS.
#   unit_auth         cmocka: scopes, metadata, challenges, header parsing,
#                     claims, JWKS parsing, configuration; no network
#   auth_oidc         test_auth_driver driven by auth_driver.mjs against a real
#                     authorization server (oidc-provider, authz_server.mjs)
#   auth_http         test_auth_http (src/auth/ wired into the transport as the
#                     request path should) on the wire: by hand and with the
#                     TypeScript SDK's client-credentials client
#   tls_transport     the HTTP transport over TLS with a CA and certificates
#                     made by the test (openssl): verified clients succeed,
#                     others fail; client certificates
if(CMOCKA_FOUND)
  add_executable(test_auth ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_auth.c)
  target_link_libraries(test_auth PRIVATE tidemark_static PkgConfig::CMOCKA)
  # signed tokens and their key set are shared with fuzz_jwt's corpus
  target_compile_definitions(test_auth PRIVATE TM_FUZZ_CORPUS="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus")
  add_test(NAME unit_auth COMMAND test_auth)
  set_tests_properties(unit_auth PROPERTIES TIMEOUT 60)
endif()
add_executable(test_auth_driver ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_auth_driver.c)
target_link_libraries(test_auth_driver PRIVATE tidemark_static)
add_executable(test_auth_http ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_auth_http.c)
target_link_libraries(test_auth_http PRIVATE tidemark_static)
add_executable(test_auth_tls ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_auth_tls.c)
target_link_libraries(test_auth_tls PRIVATE tidemark_static)
if(NODE_EXECUTABLE)
  add_test(NAME auth_oidc
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/auth_driver.mjs
            $<TARGET_FILE:test_auth_driver>)
  set_tests_properties(auth_oidc PROPERTIES TIMEOUT 90)
  add_test(NAME auth_http
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/auth_http.mjs
            $<TARGET_FILE:test_auth_http>)
  set_tests_properties(auth_http PROPERTIES TIMEOUT 90)
endif()
find_program(OPENSSL_EXECUTABLE openssl)
if(OPENSSL_EXECUTABLE)
  add_test(NAME tls_transport
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/tls_certs.sh ${OPENSSL_EXECUTABLE}
            ${CMAKE_BINARY_DIR}/test-var/tls $<TARGET_FILE:test_auth_tls>
            ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus)
  set_tests_properties(tls_transport PROPERTIES TIMEOUT 60)
endif()
