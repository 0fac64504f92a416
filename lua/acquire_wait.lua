-- acquire_wait.lua: a waiter's attempt on a lock another owner holds, the common case of
-- contention, answered before fence.lua, queue.lua and the rest of acquire.lua are made (see
-- acquire_plain.lua for why: each function a chunk defines is made anew on every call). Not a
-- script of its own: `src/scripts.rs` puts it after acquire_plain.lua and before fence.lua,
-- queue.lua and acquire.lua.
--
-- The waiter form (see acquire.lua) of an owner that holds nothing here, on a lock with a
-- holder, is refused and queued right here. Anything else (a re-entry, a grant to claim, a free
-- lock) falls through to acquire.lua with what was read.
--
-- Server instructions (callgrind on Redis 7.0.15): a W7-like contended cycle (the release that
-- grants the queue's head, and the releaser's next attempt refused and queued) 217k with this
-- attempt through the whole of acquire.lua, 203k with it answered here.

-- The queue's keys and entries are described in queue.lua.

-- Enqueues field (at the back when new; a refresh keeps its place) with an entry living ttl_ms
-- from now (the server's clock); terms is the rest of the entry, '<claim ms> <grace ms or ->
-- <delay ms> <nonce>': what a grant writes besides the hold, and what its message says.
-- Concatenation, not string.format (about 7k instructions a call on Redis 7.0): integers below
-- 2^47 print exactly with Lua's '%.14g', and a deadline in milliseconds is one.
local function enqueue(hash, field, ttl_ms, terms)
    local q, qd = hash .. ':q', hash .. ':qd'
    local t = redis.call('TIME')
    local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl_ms
    -- The list first: in a slot migration an error must come before a write it would orphan.
    if redis.call('HEXISTS', qd, field) == 0 then
        redis.call('RPUSH', q, field)
    end
    redis.call('HSET', qd, field, deadline .. ' ' .. terms)
    -- Each key on its own: one may exist without the other after a partial write.
    if redis.call('PTTL', q) < ttl_ms then
        redis.call('PEXPIRE', q, ttl_ms)
    end
    if redis.call('PTTL', qd) < ttl_ms then
        redis.call('PEXPIRE', qd, ttl_ms)
    end
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
            return refuse(hash, field, ttl, tonumber(ARGV[4]), ARGV[5] .. ' - 0 ' .. ARGV[6])
        end
        waited_ttl = ttl
    end
end
