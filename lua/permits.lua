-- permits.lua: a semaphore whose permits have an id and a lease (`src/family/permits.rs`).
--
-- KEYS[1]  hash      P:{N}:permits           field 'total' -> permits in all; 'p:<id>' -> the
--                                            deadline of a permit given out (server clock, ms)
-- KEYS[2]  channel   P:{N}:permits:released  waiters listen here for released permits
-- ARGV[1]  operation: 'acquire', 'release', 'renew', 'set', 'try_set', 'available'
-- ARGV[2]  the permit id ('acquire', 'release', 'renew'), or the total ('set', 'try_set')
-- ARGV[3]  lease in milliseconds ('acquire', 'renew')
--
-- Every call first drops permits past their deadline: a holder that crashed gives its permit
-- back when its lease ends, without anybody's help.
--
-- Returns
--   acquire     1 granted; -1 the semaphore was never set; n <= -2: none free, the first
--               permit given out ends in -n - 2 ms at the latest
--   release     1 released (and '1' published), 0 the permit was not given out (expired)
--   renew       1 renewed, 0 the permit is gone
--   set         the total; publishes it. try_set: 1 set (and published), 0 it was set before
--   available   total minus permits given out
-- A key of another type fails with WRONGTYPE before anything is written.

local key, channel, op = KEYS[1], KEYS[2], ARGV[1]

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local fields = redis.call('HGETALL', key)
local total = nil
local out, first_end, freed = 0, nil, 0
for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'total' then
        total = tonumber(value)
    elseif string.sub(field, 1, 2) == 'p:' then
        local deadline = tonumber(value)
        if deadline > now then
            out = out + 1
            if not first_end or deadline < first_end then
                first_end = deadline
            end
        else
            redis.call('HDEL', key, field)
            freed = freed + 1
        end
    end
end
if freed > 0 then
    redis.call('PUBLISH', channel, tostring(freed))
end

if op == 'acquire' then
    if not total then
        return -1
    end
    if total - out >= 1 then
        redis.call('HSET', key, 'p:' .. ARGV[2], now + tonumber(ARGV[3]))
        return 1
    end
    if not first_end then
        return -2 - 1000
    end
    return -2 - (first_end - now)
elseif op == 'release' then
    local removed = redis.call('HDEL', key, 'p:' .. ARGV[2])
    if removed == 1 then
        redis.call('PUBLISH', channel, '1')
    end
    return removed
elseif op == 'renew' then
    if redis.call('HEXISTS', key, 'p:' .. ARGV[2]) == 0 then
        return 0
    end
    redis.call('HSET', key, 'p:' .. ARGV[2], now + tonumber(ARGV[3]))
    return 1
elseif op == 'set' then
    redis.call('HSET', key, 'total', ARGV[2])
    redis.call('PUBLISH', channel, ARGV[2])
    return tonumber(ARGV[2])
elseif op == 'try_set' then
    local set = redis.call('HSETNX', key, 'total', ARGV[2])
    if set == 1 then
        redis.call('PUBLISH', channel, ARGV[2])
    end
    return set
elseif op == 'available' then
    if not total then
        return 0
    end
    return math.max(total - out, 0)
end
return redis.error_reply('ERR unknown permits operation')
