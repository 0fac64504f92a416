-- release.lua: give back holds; on the last one delete the lock and wake waiters, or hand the
-- lock straight to a waiter of the releasing client.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  unlock channel       P:{N}:unlock
-- KEYS[3]  release latch        P:{N}:latch:<request id>  (makes a retried release idempotent)
-- KEYS[4]  fencing counter      P:{N}:fence  (only touched when handing over to a fenced waiter)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, applied again when holds remain
-- ARGV[3]  latch lifetime in milliseconds
-- ARGV[4]  how many holds to give back (1 for a guard; all of them at client shutdown)
-- ARGV[5]  '1' when this request id was sent before (a retry after a lost reply), else '0'
-- ARGV[6]  '1' write the latch whatever happens; '0' only when holds remain (a guard's release:
--          the client never lets the owner take the lock again while it is in flight, so a
--          retry that finds the field gone knows the first attempt released it)
-- ARGV[7]  hand-over: owner field of the releasing client's first waiter, or '' for none
-- ARGV[8]  hand-over: that waiter's lease in milliseconds
-- ARGV[9]  hand-over: '1' when that waiter takes a fencing token
-- ARGV[10] the releasing client's id: the unlock message, so that client's waiters can ignore
--          it (they hear of their own client's releases directly)
--
-- Returns {code, n}:
--   {-1, 0}  the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--   {0, 0}   the last hold was released: the hash is gone and one message was published
--   {0, n}   n holds remain (n > 0); the expiry was raised to ARGV[2] if it was shorter
--   {1, t}   the last hold was released and the lock handed to ARGV[7] (count 1, lease
--            ARGV[8], fencing token t, 0 when unfenced); nothing published, the lock never free
-- A retry with the same request id returns the first call's answer and changes nothing.
-- A lock key of another type fails with WRONGTYPE before anything is written.

-- Only a retry can find its latch: the first attempt skips the lookup (one call fewer on the
-- hot path).
local retry = ARGV[5] == '1'
if retry then
    local done = redis.call('GET', KEYS[3])
    if done then
        local code, n = string.match(done, '^(-?%d+) (%d+)$')
        return {tonumber(code), tonumber(n)}
    end
end

local held = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if not held then
    if retry and ARGV[6] == '0' then
        -- A guard's last hold leaves no latch: the first attempt ran. The waiter it was handed
        -- to is still waiting for this answer, so its field can only come from that attempt.
        if ARGV[7] ~= '' and redis.call('HEXISTS', KEYS[1], ARGV[7]) == 1 then
            local token = 0
            if ARGV[9] == '1' then
                token = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
            end
            return {1, token}
        end
        return {0, 0}
    end
    return {-1, 0}
end

local reply
local count = held - tonumber(ARGV[4])
if count > 0 then
    redis.call('HSET', KEYS[1], ARGV[1], count)
    -- Reset the lease, but never shorten it (see acquire.lua).
    if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    end
    reply = {0, count}
else
    -- Hand over only while nobody else listens: the waiter's own client is the channel's one
    -- subscriber. Another client's waiter gets the usual release and message instead.
    local token = 0
    local handover = ARGV[7] ~= ''
        and redis.call('PUBSUB', 'NUMSUB', KEYS[2])[2] <= 1
    if handover and ARGV[9] == '1' then
        -- pcall: a damaged counter must not keep the lock from being released; it only spoils
        -- the hand-over.
        token = redis.pcall('INCR', KEYS[4])
        handover = type(token) == 'number'
    end
    -- HDEL, not DEL: only our field goes; an emptied hash disappears by itself.
    redis.call('HDEL', KEYS[1], ARGV[1])
    if handover then
        redis.call('HSET', KEYS[1], ARGV[7], 1)
        redis.call('PEXPIRE', KEYS[1], ARGV[8])
        reply = {1, token}
    else
        redis.call('PUBLISH', KEYS[2], ARGV[10])
        reply = {0, 0}
    end
end
if count > 0 or ARGV[6] == '1' then
    redis.call('SET', KEYS[3], reply[1] .. ' ' .. reply[2], 'PX', ARGV[3])
end
return reply
