-- release.lua: give back some holds of an owner (a guard's release while more holds remain, a
-- grant given up on, shutdown); on the last one delete the owner's field and wake waiters.
-- A guard's last hold goes through unlock.lua instead.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  release latch        P:{N}:latch:<request id>  (makes a retried release idempotent)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, applied again when holds remain
-- ARGV[3]  latch lifetime in milliseconds
-- ARGV[4]  how many holds to give back
-- ARGV[5]  '1' when this request id was sent before (a retry after a lost reply), else '0'
-- ARGV[6]  the releasing client's id (the unlock message, as in unlock.lua)
--
-- Returns
--   -1       the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--   0        the last hold was released: the field is gone and one message was published
--   n > 0    n holds remain; the expiry was raised to ARGV[2] if it was shorter
-- A retry with the same request id returns the first call's answer and changes nothing: the
-- latch is written every time, as a give-back may race the owner's own acquisitions.
-- A lock key of another type fails with WRONGTYPE before anything is written.

-- Only a retry can find its latch: the first attempt skips the lookup.
if ARGV[5] == '1' then
    local done = redis.call('GET', KEYS[2])
    if done then
        return tonumber(done)
    end
end

local reply
local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not held then
    reply = -1
else
    local count = held - tonumber(ARGV[4])
    if count > 0 then
        redis.call('HSET', KEYS[1], ARGV[1], count)
        -- Reset the lease, but never shorten it (see acquire.lua).
        if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
            redis.call('PEXPIRE', KEYS[1], ARGV[2])
        end
        reply = count
    else
        -- HDEL, not DEL: only our field goes; an emptied hash disappears by itself.
        redis.call('HDEL', KEYS[1], ARGV[1])
        -- The channel's name follows the keys' naming (see unlock.lua).
        redis.call('PUBLISH', KEYS[1] .. ':unlock', ARGV[6])
        reply = 0
    end
end
redis.call('SET', KEYS[2], reply, 'PX', ARGV[3])
return reply
