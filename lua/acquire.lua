-- acquire.lua: take (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash            P:{N}        field <client uuid>:<owner> -> hold count
-- KEYS[2]  fencing counter      P:{N}:fence  (only touched when ARGV[4] == '1'; never expires)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds (PEXPIRE of the hash)
-- ARGV[3]  '1' reentrant, '0' non-reentrant
-- ARGV[4]  '1' fenced, '0' plain
--
-- Returns one of
--   {1, count, token}  acquired; count = this owner's hold count after the call,
--                      token = fencing token (0 when not fenced; re-entry keeps the token).
--                      A re-entry extends the expiry to ARGV[2] if that is longer.
--   {0, pttl}          held by another owner; pttl = remaining lease in ms (-1: no expiry)
--   {2, count}         non-reentrant lock already held by this very owner
-- A lock key of another type fails with WRONGTYPE before anything is written.

if redis.call('EXISTS', KEYS[1]) == 0 then
    local token = 0
    if ARGV[4] == '1' then
        -- INCR first: if the counter key has a wrong type, nothing has been written yet.
        token = redis.call('INCR', KEYS[2])
    end
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 1, token}
end

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
    if ARGV[3] == '0' then
        return {2, tonumber(redis.call('HGET', KEYS[1], ARGV[1]))}
    end
    local token = 0
    if ARGV[4] == '1' then
        -- Nobody else can have incremented the counter while we hold the lock. Checked before
        -- any write, so a damaged counter changes nothing.
        token = tonumber(redis.call('GET', KEYS[2]) or '0')
        if not token then
            return redis.error_reply('ERR the fencing counter is not an integer')
        end
    end
    local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
    -- A re-entry may lengthen the lease, never shorten it: a shorter inner lease would let the
    -- key expire under the outer hold, whose renewal schedule follows the outer lease.
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    return {1, count, token}
end

return {0, redis.call('PTTL', KEYS[1])}
