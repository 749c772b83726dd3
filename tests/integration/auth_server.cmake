# The server as an OAuth 2.1 resource server (docs/protocol.md,
# "Authorization"), against oidc-provider (authz_server.mjs):
#   auth_server_table    tidemark-everything with authorization on, both eras:
#                        401/403/503 and the metadata, every kind of bad token,
#                        principals (sessions, idempotency keys, requestState)
#   auth_server_sdk      the TypeScript SDK clients 1.32.2 and 2.4.0 with a
#                        bearer token over TLS (a CA made by the test)
#   auth_server_cluster  three Redis nodes behind HAProxy: another principal
#                        gets 404 for a session on another node
#   auth_server_introspect  opaque tokens by RFC 7662 introspection
#                        (--auth-client-secret-file); auth_* without
#                        --auth-resource refuses to start
if(NODE_EXECUTABLE)
  foreach(part table sdk cluster introspect)
    add_test(NAME auth_server_${part}
      COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/auth_server.mjs
              $<TARGET_FILE:tidemark-everything> ${part})
    set_tests_properties(auth_server_${part} PROPERTIES TIMEOUT 90 LABELS auth)
  endforeach()
endif()
