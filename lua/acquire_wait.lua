-- acquire_wait.lua: a waiter's attempt on a lock another owner holds, the common case of
-- contention, answered before fence.lua, queue_lock.lua and the rest of acquire.lua are made
-- (see acquire_plain.lua for why: each function a chunk defines is made anew on every call).
-- Not a script of its own: `src/scripts.rs` puts it after acquire_plain.lua and queue.lua, and
-- before fence.lua, queue_lock.lua and acquire.lua.
--
-- The waiter form (see acquire.lua) of an owner that holds nothing here, on a lock with a
-- holder, is refused and queued right here. Anything else (a re-entry, a grant to claim, a free
-- lock) falls through to acquire.lua with what was read.
--
-- Server instructions (callgrind on Redis 7.0.15): a W7-like contended cycle (the release that
-- grants the queue's head, and the releaser's next attempt refused and queued) 217k with this
-- attempt through the whole of acquire.lua, 203k with it answered here (measured before
-- queue.lua, the queue of every kind, came ahead of this file: its functions add about 5k).

-- The queue's keys and entries are described in queue.lua (put before this file: enqueue)
-- and queue_lock.lua.

-- A refusal's terms from the client's arguments (claim, grace, delay, nonce, as sent): a
-- waiter's queue entry past its deadline.
local function terms_of(claim, grace, delay, nonce)
    return claim .. ' ' .. grace .. ' ' .. delay .. ' ' .. nonce
end

-- Refuses with the wait left (ttl ms, -1: no expiry), queuing a waiter (slack > 0) first, with
-- what a grant to it writes (terms, as the queue's entry has them). Never answers 0 (that is
-- "held by this very owner").
local function refuse(hash, field, ttl, slack, terms)
    if ttl < -1 then
        ttl = 0
    end
    if slack > 0 then
        -- Without an expiry the waiter looks again within a second (`acquire.rs`).
        local told = ttl >= 0 and ttl or 1000
        enqueue(hash, field, told + slack, terms)
    end
    return -2 - ttl
end

-- What this path read before falling through, for acquire.lua: the owner's count (HGET: false
-- when absent) and, when it was absent, the lock's PTTL.
local waited_read, waited_count, waited_ttl = false, nil, nil
if #ARGV == 6 and #KEYS == 1 then
    local hash, field = KEYS[1], ARGV[1]
    local count = redis.call('HGET', hash, field)
    waited_read, waited_count = true, count
    if not count then
        local ttl = redis.call('PTTL', hash)
        if ttl ~= -2 then
            local terms = terms_of(ARGV[5], '-', '0', ARGV[6])
            return refuse(hash, field, ttl, tonumber(ARGV[4]), terms)
        end
        waited_ttl = ttl
    end
end
