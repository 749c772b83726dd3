# Client authorization (src/client/oauth*.c).
#  - client_auth_conformance_2025 / _2025_03 / _2026: the official suite's
#    authorization scenarios (conformance 0.2.0-alpha.12) against
#    tidemark-conformance-client, each with its exact count of checks:
#    client --suite auth --spec-version 2025-11-25 (14 scenarios), the two
#    2025-03-26 backcompat scenarios, and the auth/* scenarios of
#    --requirements 2026-07-28 (25, extensions not scored);
#  - client_auth_oidc: tidemark-client against a real oidc-provider: login by
#    authorization code + PKCE (the test drives the login and consent pages
#    as the browser, to the client's loopback redirect), a tool called on a
#    protected MCP server, the token reused from the state file (0600), a
#    Client ID Metadata Document served on loopback, client credentials.
if(NODE_EXECUTABLE)
  foreach(rev 2025-11-25 2025-03-26 2026-07-28)
    string(REPLACE "-" "_" tag ${rev})
    add_test(NAME client_auth_conformance_${tag}
      COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_auth_conformance.sh ${TIDEMARK_PEERS}
              $<TARGET_FILE:tidemark-conformance-client> ${rev})
    set_tests_properties(client_auth_conformance_${tag} PROPERTIES TIMEOUT 60
                         LABELS "client;conformance;auth")
  endforeach()
endif()
if(NODE_EXECUTABLE)
  add_test(NAME client_auth_oidc
    COMMAND ${NODE_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/integration/client_auth_oidc.mjs
            $<TARGET_FILE:tidemark-client>)
  set_tests_properties(client_auth_oidc PROPERTIES TIMEOUT 60 LABELS "client;auth")
endif()
