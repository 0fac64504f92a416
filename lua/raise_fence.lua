-- raise_fence.lua: raise a node's fencing counter to at least a RedLock's token.
--
-- KEYS[1]  fencing counter      P:{N}:fence  (a string integer; never expires)
-- ARGV[1]  the token the RedLock hands out (the largest counter over the nodes it acquired)
--
-- Returns the counter after the call (>= ARGV[1]). Never lowers a counter.
-- A counter key of another type fails with WRONGTYPE and changes nothing.

local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local wanted = tonumber(ARGV[1])
if current < wanted then
    redis.call('SET', KEYS[1], ARGV[1])
    return wanted
end
return current
