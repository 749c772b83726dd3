-- session_delete.lua - delete a session with everything it holds (after
-- token.lua). KEYS sessions, started. ARGV token(1-3), 4 id.
if not del_session(ARGV[4], KEYS[1], KEYS[2]) then return {TIDEMARK_ENOTFOUND} end
return ok(0)
