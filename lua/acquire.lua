-- acquire.lua: take (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash            P:{N}        field <client uuid>:<owner> -> hold count
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds (PEXPIRE of the hash)
-- ARGV[3]  '1' reentrant, '0' non-reentrant
-- Fenced locks and locks with a lock-delay also send:
-- KEYS[2]  fencing counter      P:{N}:fence
-- KEYS[3]  lock-delay marker    P:{N}:delay  (lives lease + delay; deleted by a release)
-- ARGV[4]  the fence grace in milliseconds (how long the counter outlives the lease it was
--          last written with), or '-' for an unfenced lock
-- ARGV[5]  the lock-delay in milliseconds, '0' for none
--
-- Returns one of
--   n >= 1        acquired (unfenced lock); n = this owner's hold count after the call
--   {n, token}    acquired (fenced lock); token = fencing token (re-entry keeps the token; see
--                 fence.lua for how tokens are made)
--   0             non-reentrant lock already held by this very owner
--   n <= -1       held by another owner, or in its lock-delay; the wait left is -n - 2 ms
--                 (n = -1: no expiry)
-- A re-entry extends the expiry to ARGV[2] if that is longer.
-- A lock key of another type fails with WRONGTYPE before anything is written.
--
-- Lock-delay: a holder of a lock with a delay keeps the marker alive for its lease plus the
-- delay (here and in every renewal). A release deletes it; a lease that ran out leaves it for
-- the delay, and while it lives the free lock is refused.
--
-- Batch (one client's concurrent acquisitions coalesced into one call, `src/batch.rs`):
-- KEYS[i] and ARGV[3i-2 .. 3i] as above for i = 1..n, plain locks only (no fence, no delay);
-- the reply is a table of n such integers, in order. An entry that fails answers its error
-- message as a string instead, and the others go on (every error comes before an entry writes
-- anything).
--
-- Why this shape: every key and argument, and a table reply, costs the server about as much as
-- a command (measured with callgrind on Redis 7.0: ~1.2k instructions per argument, ~6k for a
-- three-element table against an integer), so the common case sends four and gets an integer.

-- next_token and held_token come from fence.lua, which `scripts.rs` puts before this file.

local function acquire(hash, field, lease, reentrant, fence, grace, marker, delay)
    local fenced = grace ~= nil

    if redis.call('EXISTS', hash) == 0 then
        if delay > 0 then
            local left = redis.call('PTTL', marker)
            if left > 0 then
                return -2 - left
            end
        end
        local token
        if fenced then
            -- The token first: if the counter key is damaged, nothing has been written yet.
            token = next_token(fence, lease + grace)
        end
        redis.call('HSET', hash, field, '1')
        redis.call('PEXPIRE', hash, lease)
        if delay > 0 then
            redis.call('SET', marker, '1', 'PX', lease + delay)
        end
        if fenced then
            return {1, token}
        end
        return 1
    end

    if redis.call('HEXISTS', hash, field) == 1 then
        if reentrant == '0' then
            return 0
        end
        local token
        if fenced then
            -- Nobody else can have raised the counter while we hold the lock, so it is our token.
            -- A counter that expired under a long hold (only renewals outlive it) is made anew:
            -- a larger token is still a valid one. Checked before any write, so a damaged
            -- counter changes nothing.
            token = held_token(fence, lease + grace)
        end
        local count = redis.call('HINCRBY', hash, field, 1)
        -- A re-entry may lengthen the lease, never shorten it: a shorter inner lease would let the
        -- key expire under the outer hold, whose renewal schedule follows the outer lease.
        if redis.call('PTTL', hash) < tonumber(lease) then
            redis.call('PEXPIRE', hash, lease)
            if delay > 0 then
                redis.call('SET', marker, '1', 'PX', lease + delay)
            end
        end
        if fenced then
            return {count, token}
        end
        return count
    end

    return -2 - redis.call('PTTL', hash)
end

if #ARGV == 3 then
    return acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3], nil, nil, nil, 0)
end
if #ARGV == 5 then
    return acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3], KEYS[2], tonumber(ARGV[4]), KEYS[3],
        tonumber(ARGV[5]))
end
local replies = {}
for i = 1, #KEYS do
    local ok, reply = pcall(acquire, KEYS[i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i],
        nil, nil, nil, 0)
    if not ok then
        -- redis.call raises a table {err = message}; Lua itself raises a string.
        reply = type(reply) == 'table' and reply.err or tostring(reply)
    end
    replies[i] = reply
end
return replies
