-- release.lua: give back holds; on the last one delete the lock and wake waiters.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  unlock channel       P:{N}:unlock
-- KEYS[3]  release latch        P:{N}:latch:<request id>  (makes a retried release idempotent)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, applied again when holds remain
-- ARGV[3]  latch lifetime in milliseconds
-- ARGV[4]  how many holds to give back (1 for a guard; all of them at client shutdown)
--
-- Returns
--   -1  the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--    0  the last hold was released: the hash is gone and one message was published
--    n  holds remain (n > 0); the expiry was raised to ARGV[2] if it was shorter
-- A retry with the same request id returns the first call's answer and changes nothing.

local done = redis.call('GET', KEYS[3])
if done then
    return tonumber(done)
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return -1
end

local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -tonumber(ARGV[4]))
if count > 0 then
    -- Reset the lease, but never shorten it (see acquire.lua).
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
else
    count = 0
    -- HDEL, not DEL: only our field goes; an emptied hash disappears by itself.
    redis.call('HDEL', KEYS[1], ARGV[1])
    redis.call('PUBLISH', KEYS[2], '0')
end
redis.call('SET', KEYS[3], count, 'PX', ARGV[3])
return count
