-- acquire.lua: take (or re-enter) a reentrant lock.
--
-- KEYS[1]  lock hash            P:{N}        field <client uuid>:<owner> -> hold count
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds (PEXPIRE of the hash)
-- ARGV[3]  '1' reentrant, '0' non-reentrant; '2' and '3' the same for an owner that holds the
--          lock already (the client knows: a re-entry), for which a grant from the queue it
--          was handed (count 0, queue_lock.lua) is one hold, so the re-entry counts two
-- The long form (fenced locks, locks with a lock-delay, and waiters) also sends:
-- KEYS[2]  fencing counter      P:{N}:fence
-- KEYS[3]  lock-delay marker    P:{N}:delay  (lives lease + delay; deleted by a release)
-- ARGV[4]  the fence grace in milliseconds (how long the counter outlives the lease it was
--          last written with), or '-' for an unfenced lock
-- ARGV[5]  the lock-delay in milliseconds, '0' for none
-- ARGV[6]  '0', or for a waiter: how long its queue entry outlives the wait it is told (ms);
--          '-1' for a single attempt of a strict lock (a FairLock): it respects the queue (never
--          takes a free lock while anybody live is queued) but does not enqueue
-- ARGV[7]  the waiter's claim lease in milliseconds (see queue_lock.lua)
-- ARGV[8]  the waiter's nonce for this attempt, echoed by a grant's message (see queue_lock.lua)
-- ARGV[4], ARGV[5], ARGV[7] and ARGV[8] are decimal integers ('-' for no grace): a refused waiter's
--          queue entry is made of them as sent
-- The waiter form is the long form of a plain lock (no fence, no lock-delay): KEYS[1] only, and
-- ARGV[1..3] as above, ARGV[4] as ARGV[6] above, ARGV[5] and ARGV[6] as ARGV[7] and ARGV[8]:
-- 1 key and 6 arguments instead of 3 and 8 (each costs the server about 1.6k instructions).
--
-- Waiters (queue.lua, queue_lock.lua): a refused waiter is queued (or its entry refreshed) in
-- the same call. A waiter that finds the lock free while others are queued before it gives
-- it to the first of them and is refused; one that finds its own grant (count 0) without holding it (a waiter
-- that missed its grant message, or trusts it no longer) claims it: count 1, its lease, a new
-- token, as a first acquisition, so it never counts two. The short form never queues and never
-- looks at the queue: a newcomer may take a lock that is free, which, while anybody is queued,
-- only happens when a holder's lease or a grant's claim lease ran out.
--
-- Returns one of
--   n >= 1        acquired (unfenced lock); n = this owner's hold count after the call
--   {n, token}    acquired (fenced lock); token = fencing token (re-entry keeps the token; see
--                 fence.lua for how tokens are made)
--   0             non-reentrant lock already held by this very owner
--   n <= -1       held by another owner (or granted to another waiter), or in its lock-delay;
--                 the wait left is -n - 2 ms (n = -1: no expiry)
-- A re-entry extends the expiry to ARGV[2] if that is longer.
-- A lock key of another type fails with WRONGTYPE before anything is written.
--
-- Lock-delay: a holder of a lock with a delay keeps the marker alive for its lease plus the
-- delay (here and in every renewal). A release deletes it; a lease that ran out leaves it for
-- the delay, and while it lives the free lock is refused to every acquirer, whatever delay it
-- asked for itself (every form, the short one and the batch too: acquire_plain.lua).
--
-- Batch (one client's concurrent acquisitions coalesced into one call, `src/node/calls/batch.rs`):
-- KEYS[i] and ARGV[3i-2 .. 3i] as above for i = 1..n, plain locks only (no fence, no delay);
-- the reply is a table of n such integers, in order. An entry that fails answers its error
-- message as a string instead, and the others go on (every error comes before an entry writes
-- anything).
--
-- Why this shape: every key and argument, and a table reply, costs the server about as much as
-- a command (measured with callgrind on Redis 7.0: ~1.2k instructions per argument, ~6k for a
-- three-element table against an integer), so the common case sends four and gets an integer.

-- acquire (the short form) and reentry_mode come from acquire_plain.lua, refuse (which
-- enqueues, queue.lua) and what the waiter form read from acquire_wait.lua, next_token and
-- held_token from fence.lua, pop_head and grant from queue_lock.lua, which `scripts.rs` puts
-- before this file.

-- How long the lock-delay marker of the free lock `hash` has left (ms; -1: no expiry), 0 when
-- there is none. The marker is derived like the channel: it shares the lock's hash tag.
local function delay_left(hash)
    local left = redis.call('PTTL', hash .. ':delay')
    if left == -2 then
        return 0
    end
    return left
end

-- A first acquisition (or a waiter's claim of its grant): count 1, the lease, a new token, the
-- lock-delay marker.
local function take(hash, field, lease, fence, grace, marker, delay)
    local token
    if grace then
        -- The token first: if the counter key is damaged, nothing has been written yet.
        token = next_token(fence, lease + grace)
    end
    redis.call('HSET', hash, field, '1')
    redis.call('PEXPIRE', hash, lease)
    if delay > 0 then
        redis.call('SET', marker, '1', 'PX', lease + delay)
    end
    if grace then
        return {1, token}
    end
    return 1
end

-- The long form: fenced, lock-delay, waiters.
local function acquire_long(hash, field, lease, reentrant, fence, grace, marker, delay, slack,
                            terms)
    -- acquire_wait.lua read it already when it fell through to here.
    local count
    if waited_read then
        count = waited_count
    else
        count = redis.call('HGET', hash, field)
    end
    local here, reenters = reentry_mode(reentrant)
    if count == '0' then
        if not here then
            -- Granted to us from the queue, and not taken from its message: claim it.
            return take(hash, field, lease, fence, grace, marker, delay)
        end
        -- Taken from its message: one hold.
        count = '1'
    end
    if count then
        if not reenters then
            return 0
        end
        local token
        if grace then
            -- Nobody else can have raised the counter while we hold the lock, so it is our token.
            -- A counter that expired under a long hold (only renewals outlive it) is made anew:
            -- a larger token is still a valid one. Checked before any write, so a damaged
            -- counter changes nothing.
            token = held_token(fence, lease + grace)
        end
        local n = tonumber(count) + 1
        redis.call('HSET', hash, field, n)
        if redis.call('PTTL', hash) < tonumber(lease) then
            redis.call('PEXPIRE', hash, lease)
            if delay > 0 then
                redis.call('SET', marker, '1', 'PX', lease + delay)
            end
        end
        if grace then
            return {n, token}
        end
        return n
    end
    local ttl = waited_ttl or redis.call('PTTL', hash)
    if ttl ~= -2 then
        return refuse(hash, field, ttl, slack, terms)
    end
    -- Every acquirer honours a lapsed holder's lock-delay, whatever its own (Chubby's rule: the
    -- delay protects the resource from the stale holder, whoever comes next).
    local left = delay_left(hash)
    if left ~= 0 then
        return refuse(hash, field, left, slack, terms)
    end
    -- A waiter (slack > 0) or a strict single attempt (-1) respects the queue; a newcomer (a
    -- single attempt, a MultiLock's first round) may take a lock that is free.
    if slack > 0 or slack == -1 then
        local head, head_terms = pop_head(hash)
        if head and head ~= field then
            -- Others came first: the lock is the first one's.
            grant(hash, head, head_terms)
            return refuse(hash, field, head_terms.claim, slack, terms)
        end
    end
    return take(hash, field, lease, fence, grace, marker, delay)
end

if #ARGV == 6 and #KEYS == 1 then
    -- The waiter form (unfenced, no lock-delay) that acquire_wait.lua did not answer.
    local terms = terms_of(ARGV[5], '-', '0', ARGV[6])
    return acquire_long(KEYS[1], ARGV[1], ARGV[2], ARGV[3], nil, nil, nil, 0, tonumber(ARGV[4]),
        terms)
end
if #ARGV == 8 then
    -- A queue entry's terms as the client sent them (queue_lock.lua): no formatting here.
    local terms = terms_of(ARGV[7], ARGV[4], ARGV[5], ARGV[8])
    return acquire_long(KEYS[1], ARGV[1], ARGV[2], ARGV[3], KEYS[2], tonumber(ARGV[4]), KEYS[3],
        tonumber(ARGV[5]), tonumber(ARGV[6]), terms)
end
if #ARGV ~= 3 * #KEYS then
    return redis.error_reply('ERR acquire.lua: ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
local replies = {}
for i = 1, #KEYS do
    local ok, reply = pcall(acquire, KEYS[i], ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i])
    if not ok then
        -- redis.call raises a table {err = message}; Lua itself raises a string.
        reply = type(reply) == 'table' and reply.err or tostring(reply)
    end
    replies[i] = reply
end
return replies
