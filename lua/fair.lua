-- fair.lua: a fair (FIFO) reentrant lock with a lease per holder and per waiter
-- (`src/family/fair.rs`).
--
-- KEYS[1]  hash     P:{N}:fair          'h' holder field, 'hn' its hold count, 'hd' its deadline
-- KEYS[2]  queue    P:{N}:fair:queue    list of waiting owner fields, first come first
-- KEYS[3]  waiters  P:{N}:fair:waiters  waiting owner field -> its deadline
-- ARGV[1]  operation: 'acquire', 'release', 'renew', 'withdraw'
-- ARGV[2]  owner field
-- ARGV[3]  lease in milliseconds ('acquire', 'renew')
-- ARGV[4]  waiter lease in milliseconds ('acquire'): how long a refused owner keeps its place
--          without asking again; '0' for a single attempt, which takes no place
-- ARGV[5]  wake channel prefix P:{N}:fair:wake: ; a waiter listens on the prefix + its field
-- ARGV[6]  ('release') the field of the caller's client's waiter it wakes itself, '' if none:
--          when that waiter is first, no message is published (its attempt rides behind)
--
-- Deadlines are the server's clock (TIME, ms). Every call first drops the holder and the
-- waiters at the head of the queue past their deadline, so a crashed waiter holds the others
-- up for its waiter lease at most, whatever the clients' clocks say.
--
-- Returns
--   acquire   n >= 1: granted (this owner's hold count); n <= -2: refused (queued unless a
--             single attempt); worth asking again in -n - 2 ms at the latest (the holder's
--             deadline, or 100 ms when the lock is free and another waiter is first)
--   release   -1 not the holder; n >= 0 the holds left (at 0 the first waiter is told)
--   renew     1 renewed, 0 not the holder
--   withdraw  1
-- A key of another type fails with WRONGTYPE before anything is written.

local hash, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local op, field = ARGV[1], ARGV[2]
local prefix = ARGV[5]

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local held = redis.call('HMGET', hash, 'h', 'hd')
local holder = held[1]
if holder and tonumber(held[2]) <= now then
    redis.call('DEL', hash)
    holder = nil
end
-- Drop the waiters at the head of the queue whose lease ended. Only the head can hold the
-- others up, so an ended waiter further back stays until it reaches the head (O(1) per call
-- rather than a scan of the queue). The waiters hash keeps, under '~', the latest deadline
-- ever given to a waiter still queued: the keys' TTL, so the queue outlives every waiter.
local first = redis.call('LINDEX', queue, 0)
local first_deadline = 0
while first do
    first_deadline = tonumber(redis.call('HGET', waiters, first) or '0')
    if first_deadline > now then
        break
    end
    redis.call('LPOP', queue)
    redis.call('HDEL', waiters, first)
    first = redis.call('LINDEX', queue, 0)
end
local latest = 0
if first then
    latest = tonumber(redis.call('HGET', waiters, '~') or '0')
end

local function settle()
    local until_ms = latest
    local deadline = redis.call('HGET', hash, 'hd')
    if deadline then
        until_ms = math.max(until_ms, tonumber(deadline))
    end
    for _, key in ipairs({hash, queue, waiters}) do
        if until_ms > now then
            redis.call('PEXPIRE', key, until_ms - now)
        else
            redis.call('DEL', key)
        end
    end
end

local function wake_first()
    local head = redis.call('LINDEX', queue, 0)
    if head and head ~= ARGV[6] then
        redis.call('PUBLISH', prefix .. head, '1')
    end
end

if op == 'acquire' then
    local lease = tonumber(ARGV[3])
    if holder == field then
        local count = redis.call('HINCRBY', hash, 'hn', 1)
        redis.call('HSET', hash, 'hd', math.max(tonumber(redis.call('HGET', hash, 'hd')), now + lease))
        settle()
        return count
    end
    if not holder and (not first or first == field) then
        if first then
            redis.call('LPOP', queue)
            redis.call('HDEL', waiters, field)
        end
        redis.call('HSET', hash, 'h', field, 'hn', 1, 'hd', now + lease)
        settle()
        return 1
    end
    local waiter_lease = tonumber(ARGV[4])
    if waiter_lease > 0 then
        if redis.call('HEXISTS', waiters, field) == 0 then
            redis.call('RPUSH', queue, field)
        end
        latest = math.max(latest, now + waiter_lease)
        redis.call('HSET', waiters, field, now + waiter_lease, '~', latest)
        settle()
    end
    if holder then
        return -2 - (tonumber(redis.call('HGET', hash, 'hd')) - now)
    end
    -- Free, but another waiter is first: it takes the lock in a moment (look again soon to
    -- learn the new holder's deadline), or it died and its place ends with its lease.
    return -2 - math.min(first_deadline - now, 100)
elseif op == 'release' then
    if holder ~= field then
        return -1
    end
    local count = redis.call('HINCRBY', hash, 'hn', -1)
    if count <= 0 then
        redis.call('DEL', hash)
        wake_first()
    end
    settle()
    return math.max(count, 0)
elseif op == 'renew' then
    if holder ~= field then
        return 0
    end
    redis.call('HSET', hash, 'hd', now + tonumber(ARGV[3]))
    settle()
    return 1
elseif op == 'withdraw' then
    redis.call('LREM', queue, 0, field)
    redis.call('HDEL', waiters, field)
    if first == field and not holder then
        wake_first()
    end
    settle()
    return 1
end
return redis.error_reply('ERR unknown fair lock operation')
