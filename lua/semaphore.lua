-- semaphore.lua: the permits of a counting semaphore (`src/family/semaphore.rs`).
--
-- KEYS[1]  permits   P:{N}:semaphore           string: how many permits are available
-- KEYS[2]  channel   P:{N}:semaphore:released  waiters listen here for released permits
-- ARGV[1]  operation: 'acquire', 'release', 'set' or 'try_set'
-- ARGV[2]  permits n: at least 1 for 'acquire' and 'release', at least 0 for the others
--
-- Returns
--   acquire   1 when n permits were taken, 0 when fewer than n are available (nothing changed;
--             a semaphore never set has none)
--   release   the permits available after adding n; publishes that number on KEYS[2]
--   set       the permits available now (n); publishes it, since waiters may now fit
--   try_set   1 when the semaphore had no permits key and now has n, 0 when it existed
-- A value that is not a non-negative integer fails with an error before anything is written;
-- a key of another type fails with WRONGTYPE.

local key, channel, op, n = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])

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

if op == 'acquire' then
    if current and current >= n then
        redis.call('DECRBY', key, n)
        return 1
    end
    return 0
elseif op == 'release' then
    local now = redis.call('INCRBY', key, n)
    redis.call('PUBLISH', channel, tostring(now))
    return now
elseif op == 'set' then
    redis.call('SET', key, n)
    redis.call('PUBLISH', channel, tostring(n))
    return n
elseif op == 'try_set' then
    if current then
        return 0
    end
    redis.call('SET', key, n)
    redis.call('PUBLISH', channel, tostring(n))
    return 1
end
return redis.error_reply('ERR unknown semaphore operation')
