-- release.lua: give back holds; on the last one delete the lock and wake waiters.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  unlock channel       P:{N}:unlock
-- KEYS[3]  release latch        P:{N}:latch:<request id>  (makes a retried release idempotent)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, applied again when holds remain
-- ARGV[3]  latch lifetime in milliseconds
-- ARGV[4]  how many holds to give back (1 for a guard; all of them at client shutdown)
-- ARGV[5]  '1' when this request id was sent before (a retry after a lost reply), else '0'
--
-- Returns
--   -1  the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--    0  the last hold was released: the hash is gone and one message was published
--    n  holds remain (n > 0); the expiry was raised to ARGV[2] if it was shorter
-- A retry with the same request id returns the first call's answer and changes nothing.
-- A key of another type fails with WRONGTYPE before anything is written.

-- Only a retry can find its latch: the first attempt skips the lookup (one call fewer on the
-- hot path).
if ARGV[5] == '1' then
    local done = redis.call('GET', KEYS[3])
    if done then
        return tonumber(done)
    end
end

local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not held then
    return -1
end

local count = held - tonumber(ARGV[4])
if count > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], count)
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
