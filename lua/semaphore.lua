-- semaphore.lua: the permits of a counting semaphore (`src/family/semaphore.rs`), and its
-- waiter queue with grant-on-release.
--
-- KEYS[1]  permits   P:{N}:semaphore           string: how many permits are available
-- KEYS[2]  channel   P:{N}:semaphore:released  a grant is published on KEYS[2]:<client id>, the
--                                              grantee's client's own channel
-- ARGV[1]  operation: 'acquire', 'release', 'set', 'try_set', 'available' or 'withdraw'
-- ARGV[2]  permits n: at least 1 for 'acquire' and 'release', at least 0 for 'set' and
--          'try_set', ignored by the others
-- 'acquire' and 'withdraw' also send:
-- ARGV[3]  the waiter: '<client id>:<wait id>', one per wait
-- 'acquire' also sends:
-- ARGV[4]  how long the waiter's queue entry lives without another attempt (ms); '0' for a
--          single attempt, which is never queued
-- ARGV[5]  how long a grant to the waiter waits for it to claim it (ms), its claim lease
--
-- The queue, first come first served (keys under the semaphore's hash tag, so one slot):
-- P:{N}:semaphore:q   list  waiters, in arrival order
-- P:{N}:semaphore:qd  hash  waiter -> '<deadline ms> <n> <claim ms>' (server clock); an entry past
--                           its deadline is dead, dropped by whichever call next meets it
-- P:{N}:semaphore:g   hash  waiter -> '<deadline ms> <n>': permits set aside for a waiter that
--                           was granted them and has not claimed them yet; past the deadline
--                           they are free again (the waiter died, or gave up unheard)
-- A refused waiter (ARGV[4] > 0) queues itself, or keeps its place, in the same call. A call
-- that frees permits ('release', 'set', a withdrawn grant, a claim lease that ran out) sets
-- them aside for the first waiters that fit, in order, and publishes ONE message per grantee
-- on its client's channel, 'g <claim ms> - 0 <waiter>'; nobody else wakes. The grantee claims
-- its permits with its next attempt (the message makes it attempt at once). A waiter for many
-- permits at the head holds back the waiters behind it, and a newcomer does not pass anybody
-- queued: no waiter starves.
--
-- Returns
--   acquire   1 when n permits were taken (or a grant claimed), 0 when not (queued as asked)
--   release   the permits available after adding n (before any grant it made)
--   set       the permits available now (n); permits granted and not yet claimed stay out,
--             as a holder's do
--   available the permits available: the count less the permits set aside for grantees
--   try_set   1 when the semaphore had no permits key and now has n, 0 when it existed
--   withdraw  1 when a grant the waiter had not claimed went back to the semaphore, else 0
-- A value that is not a non-negative integer fails with an error before anything is written;
-- a key of another type fails with WRONGTYPE.

local key, channel, op, n = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local queue, entries, grants = key .. ':q', key .. ':qd', key .. ':g'

local function available()
    local raw = redis.call('GET', key)
    if not raw then
        return nil
    end
    local value = tonumber(raw)
    if not value or value < 0 or value % 1 ~= 0 then
        return redis.error_reply('ERR the semaphore permits key does not hold a non-negative integer')
    end
    return value
end

local current = available()
if type(current) == 'table' then
    return current
end

local now_ms
-- The server's clock in ms, read once per call and only when a deadline is needed.
local function now()
    if not now_ms then
        local t = redis.call('TIME')
        now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return now_ms
end

-- Lengthens key's expiry to ms from now (never shortens it).
local function outlive(k, ms)
    if redis.call('PTTL', k) < ms then
        redis.call('PEXPIRE', k, ms)
    end
end

-- The permits set aside for grantees still within their claim lease; the others are dropped.
local function set_aside()
    local granted = redis.call('HGETALL', grants)
    local total = 0
    for i = 1, #granted, 2 do
        local deadline, m = string.match(granted[i + 1], '^(%d+) (%d+)$')
        if tonumber(deadline) > now() then
            total = total + tonumber(m)
        else
            redis.call('HDEL', grants, granted[i])
        end
    end
    return total
end

-- Takes the queue's head out.
local function pop(head)
    redis.call('LPOP', queue)
    redis.call('HDEL', entries, head)
end

-- Gives `free` permits to the first live waiters that fit, in order, and stops at the first
-- that does not; dead entries met on the way are dropped. A head that is `self` is taken out
-- instead and true returned: the caller takes its permits itself. Also returns the permits
-- still free.
local function grant_heads(free, self)
    -- Bounded: each round takes an entry out or returns.
    for _ = 1, 10000 do
        local head = redis.call('LINDEX', queue, 0)
        if not head then
            return false, free
        end
        local entry = redis.call('HGET', entries, head)
        local deadline, m, claim
        if entry then
            deadline, m, claim = string.match(entry, '^(%d+) (%d+) (%d+)$')
        end
        if deadline and tonumber(deadline) > now() then
            m = tonumber(m)
            if m > free then
                return false, free
            end
            pop(head)
            if head == self then
                return true, free
            end
            free = free - m
            redis.call('HSET', grants, head, (now() + tonumber(claim)) .. ' ' .. m)
            outlive(grants, tonumber(claim))
            local client = string.match(head, '^[^:]*')
            redis.call('PUBLISH', channel .. ':' .. client, 'g ' .. claim .. ' - 0 ' .. head)
        else
            pop(head)
        end
    end
    return false, free
end

-- Grants what is free now to the queue's first waiters (a call that freed permits).
local function grant_free(permits)
    if redis.call('EXISTS', queue) == 1 then
        grant_heads(permits - set_aside(), nil)
    end
end

if op == 'acquire' then
    local waiter, life, claim = ARGV[3], tonumber(ARGV[4]), ARGV[5]
    -- A grant set aside for this waiter: claimed, even past its claim lease if nobody took it.
    local mine = redis.call('HGET', grants, waiter)
    if mine then
        redis.call('HDEL', grants, waiter)
        redis.call('DECRBY', key, string.match(mine, ' (%d+)$'))
        return 1
    end
    local took, free = grant_heads((current or 0) - set_aside(), waiter)
    if took or (free >= n and redis.call('EXISTS', queue) == 0) then
        redis.call('DECRBY', key, n)
        return 1
    end
    if life > 0 then
        -- Queued, or its place kept: the deadline moves, the place does not.
        if redis.call('HSET', entries, waiter, (now() + life) .. ' ' .. n .. ' ' .. claim) == 1 then
            redis.call('RPUSH', queue, waiter)
        end
        outlive(queue, life)
        outlive(entries, life)
    end
    return 0
elseif op == 'release' then
    local now_available = redis.call('INCRBY', key, n)
    grant_free(now_available)
    return now_available
elseif op == 'set' then
    -- Permits granted and not yet claimed are out already, as a holder's are.
    local aside = set_aside()
    redis.call('SET', key, n + aside)
    grant_free(n + aside)
    return n
elseif op == 'available' then
    if not current then
        return 0
    end
    return math.max(current - set_aside(), 0)
elseif op == 'try_set' then
    if current then
        return 0
    end
    redis.call('SET', key, n)
    grant_free(n)
    return 1
elseif op == 'withdraw' then
    local waiter = ARGV[3]
    if redis.call('HDEL', entries, waiter) == 1 then
        redis.call('LREM', queue, 1, waiter)
    end
    if redis.call('HDEL', grants, waiter) == 0 then
        return 0
    end
    -- Its permits were never taken from the count: they are free for the next waiters.
    grant_free(current or 0)
    return 1
end
return redis.error_reply('ERR unknown semaphore operation')
