-- latch.lua: a count-down latch (`src/family/latch.rs`).
--
-- KEYS[1]  count     P:{N}:countdown        string: '<count left> <round>'; absent means zero.
--                                           The round is the server's time (microseconds) when
--                                           it was set: a waiter that sees a later round knows
--                                           the one it waited for opened (it may be set again at
--                                           once, before the waiter looks). A bare count (an
--                                           older client's) is round 0.
-- KEYS[2]  channel   P:{N}:countdown:zero   waiters listen here for the count reaching zero
-- ARGV[1]  operation: 'try_set' or 'count_down'
-- ARGV[2]  the count n (>= 1) for 'try_set'
--
-- Returns
--   try_set      1 when the latch was at zero (no key) and now counts n, 0 when it was counting
--   count_down   the count left (0: the key is gone and '0' was published; a latch already at
--                zero stays there and publishes nothing)
-- A value that is not a positive integer (and a round) fails with an error before anything is
-- written; a key of another type fails with WRONGTYPE.

local key, channel, op = KEYS[1], KEYS[2], ARGV[1]

local raw = redis.call('GET', key)
local count, round = 0, nil
if raw then
    local n, r = string.match(raw, '^(%d+) (%d+)$')
    count, round = tonumber(n or raw), r
    if not count or count < 1 or count % 1 ~= 0 then
        return redis.error_reply('ERR the latch count key does not hold a positive integer')
    end
end

if op == 'try_set' then
    if count > 0 then
        return 0
    end
    local now = redis.call('TIME')
    redis.call('SET', key, ARGV[2] .. ' ' .. now[1] .. string.format('%06d', now[2]))
    return 1
elseif op == 'count_down' then
    if count == 0 then
        return 0
    end
    if count == 1 then
        redis.call('DEL', key)
        redis.call('PUBLISH', channel, '0')
        return 0
    end
    if not round then
        return redis.call('DECR', key)
    end
    redis.call('SET', key, string.format('%d %s', count - 1, round))
    return count - 1
end
return redis.error_reply('ERR unknown latch operation')
