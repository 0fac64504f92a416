-- semaphore.lua: the permits of a counting semaphore (`src/family/semaphore.rs`), and its
-- waiter queue with grant-on-release (fifo.lua, which `src/family/semaphore.rs` puts before
-- this file).
--
-- KEYS[1]  permits   P:{N}:semaphore           string: how many permits are available
-- KEYS[2]  channel   P:{N}:semaphore:released  grants go to KEYS[2]:<client id> (fifo.lua)
-- ARGV[1]  operation: 'acquire', 'release', 'set', 'try_set', 'available' or 'withdraw'
-- ARGV[2]  permits n: at least 1 for 'acquire' and 'release', at least 0 for 'set' and
--          'try_set', ignored by the others
-- 'acquire' and 'withdraw' also send:
-- ARGV[3]  the waiter: '<client id>:<wait id>', one per wait
-- 'acquire' also sends:
-- ARGV[4]  how long the waiter's queue entry lives without another attempt (ms); '0' for a
--          single attempt, which is never queued
-- ARGV[5]  how long a grant to the waiter waits for its claim (ms), its claim lease
--
-- P:{N}:semaphore:g  hash  waiter -> '<deadline ms> <n>': permits set aside for a waiter that
--                          was granted them and has not claimed them yet (they are still in the
--                          count); past the deadline they are free again (the waiter died, or
--                          gave up unheard). No expiry: calls empty it.
-- A grantee's next attempt claims its grant: the permits leave the count then.
--
-- Returns
--   acquire   1 when n permits were taken (or a grant claimed), 0 when not (queued as asked)
--   release   the permits available after adding n (before any grant it made)
--   set       n; permits granted and not yet claimed stay out, as a holder's do
--   try_set   1 when the semaphore had no permits key and now has n, 0 when it existed
--   available the permits available: the count less the permits set aside for grantees
--   withdraw  1 when a grant the waiter had not claimed went back to the semaphore, else 0
-- A value that is not a non-negative integer fails with an error before anything is written;
-- a key of another type fails with WRONGTYPE.

local key, channel, op, n = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local grants = key .. ':g'

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

-- A grant: the permits stay in the count, set aside for the waiter for its claim lease.
local function set_aside_for(waiter, m, claim)
    redis.call('HSET', grants, waiter, (now() + claim) .. ' ' .. m)
    outlive(grants, claim)
end

-- Grants what is free now to the queue's first waiters (a call that freed permits).
local function grant_free(permits)
    if queued() then
        grant_heads(permits - set_aside(), nil, set_aside_for)
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
    local took, free = grant_heads((current or 0) - set_aside(), waiter, set_aside_for)
    if took or (free >= n and not queued()) then
        redis.call('DECRBY', key, n)
        return 1
    end
    if life > 0 then
        enqueue(waiter, n, life, claim)
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
    dequeue(waiter)
    if redis.call('HDEL', grants, waiter) == 0 then
        return 0
    end
    -- Its permits were never taken from the count: they are free for the next waiters.
    grant_free(current or 0)
    return 1
end
return redis.error_reply('ERR unknown semaphore operation')
