# bench/http.sh's programs (included from the top-level CMakeLists.txt, next
# to tidemark-rps): the floor server, the raw SQLite commit loop and the
# many-streams client. Its smoke test is registered by bench/http_test.cmake.
add_executable(tidemark-floor bench/floor.c bench/net.c bench/ledger_db.c)
target_link_libraries(tidemark-floor PRIVATE Threads::Threads PkgConfig::SQLITE PkgConfig::HIREDIS)
add_executable(tidemark-sqlite-floor bench/sqlite_floor.c bench/ledger_db.c)
target_link_libraries(tidemark-sqlite-floor PRIVATE PkgConfig::SQLITE)
add_executable(tidemark-streams bench/streams.c bench/net.c)
target_link_libraries(tidemark-streams PRIVATE Threads::Threads)
add_executable(tidemark-deps-floor bench/deps_floor.c)
target_link_libraries(tidemark-deps-floor PRIVATE PkgConfig::MHD PkgConfig::JANSSON)
add_executable(tidemark-redis-call bench/redis_call.c bench/net.c)
target_link_libraries(tidemark-redis-call PRIVATE Threads::Threads PkgConfig::HIREDIS)
