-- raise_fence.lua: raise a node's fencing counter to at least a RedLock's token.
--
-- KEYS[1]  fencing counter      P:{N}:fence  (see fence.lua, which `scripts.rs` puts before
--          this file)
-- ARGV[1]  the token the RedLock hands out (the largest counter over the nodes it acquired)
-- ARGV[2]  how long the counter lives from now, in milliseconds (the lease plus the grace);
--          an expiry already longer is kept
--
-- Returns the counter after the call (>= ARGV[1]). Never lowers a counter.
-- A counter key of another type fails with WRONGTYPE and changes nothing; one that is not an
-- integer fails with an error and changes nothing.

local current = last_token(KEYS[1])
local wanted = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
if current < wanted then
    store_token(KEYS[1], wanted, ttl)
    return wanted
end
if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
end
return current
