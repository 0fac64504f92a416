-- unlock.lua: give back an owner's last hold (a guard's release, the hot path): delete the
-- owner's field and wake waiters, or hand the lock straight to a waiter of the releasing client.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  fencing counter      P:{N}:fence  (given only when handing over to a fenced waiter)
-- ARGV[1]  owner field
-- ARGV[2]  '1' when this request was sent before (a retry after a lost reply), else '0'
-- ARGV[3]  the releasing client's id: the unlock message, so that client's waiters can ignore
--          it (they hear of their own client's releases directly)
-- ARGV[4]  hand-over (optional): owner field of the releasing client's first waiter
-- ARGV[5]  hand-over (optional): that waiter's lease in milliseconds
--
-- Returns
--   -1       the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--   0        released: the owner's field is gone and one message was published on P:{N}:unlock
--   1 + t    released and handed to ARGV[4] (count 1, lease ARGV[5], fencing token t, 0 when
--            unfenced); nothing published, the lock never free
-- A lock key of another type fails with WRONGTYPE before anything is written.
--
-- The whole field goes, whatever its count: the client sends this only for its last hold, so a
-- larger count on the server is a grant it gave up on and is giving back anyway (`acquire.rs`).
-- No idempotence latch either: the client lets the owner take the lock again only after this
-- answer (`sequence.rs`), so a retry that finds the field gone knows the first attempt ran.
-- Unlike release.lua, no count is read: one command fewer on every unlock.

if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
    if ARGV[2] == '0' then
        return -1
    end
    -- A retry. The waiter it was handing to is still waiting for this answer, so that waiter's
    -- field can only come from the first attempt.
    if ARGV[4] and redis.call('HEXISTS', KEYS[1], ARGV[4]) == 1 then
        local token = 0
        if KEYS[2] then
            token = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
        end
        return 1 + token
    end
    return 0
end

-- The channel's name follows the keys' naming (`keys.rs`); a channel is not a key, so deriving
-- it here is fine in Redis Cluster, and cheaper than another argument.
local channel = KEYS[1] .. ':unlock'
-- Hand over only while nobody else listens: the waiter's own client is the channel's one
-- subscriber. Another client's waiter gets the usual release and message instead.
local handover = ARGV[4] ~= nil and redis.call('PUBSUB', 'NUMSUB', channel)[2] <= 1
local token = 0
if handover and KEYS[2] then
    -- pcall: a damaged counter must not keep the lock from being released; it only spoils the
    -- hand-over.
    token = redis.pcall('INCR', KEYS[2])
    handover = type(token) == 'number'
end
if handover then
    redis.call('HSET', KEYS[1], ARGV[4], '1')
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    return 1 + token
end
redis.call('PUBLISH', channel, ARGV[3])
return 0
