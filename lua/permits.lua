-- permits.lua: a semaphore whose permits have an id and a lease (`src/family/permits.rs`), and
-- its waiter queue with grant-on-release (queue.lua and queue_permits.lua, which
-- `src/family/permits.rs` puts before this file).
--
-- KEYS[1]  hash      P:{N}:permits           field 'total' -> permits in all; 'p:<id>' -> the
--                                            deadline of a permit given out (server clock, ms)
-- KEYS[2]  channel   P:{N}:permits:released  grants go to KEYS[2]:<client id> (queue_permits.lua)
-- ARGV[1]  operation: 'acquire', 'release', 'renew', 'set', 'try_set', 'available', 'withdraw'
-- ARGV[2]  the permit id ('acquire', 'release', 'renew', 'withdraw'; for 'acquire' and
--          'withdraw' also the waiter, '<client id>:<wait id>'), or the total ('set', 'try_set')
-- ARGV[3]  lease in milliseconds ('acquire', 'renew')
-- ARGV[4]  'release': the hand-over (queue_permits.lua's handing_to; no records): the releasing
--          client's id, whose own waiters are handed permits
-- 'acquire' also sends:
-- ARGV[4]  ('acquire') how long the waiter's queue entry lives without another attempt (ms); '0' for a
--          single attempt, which is never queued
-- ARGV[5]  how long a grant to the waiter waits for its claim (ms), its claim lease
--
-- Every call first drops permits past their deadline: a holder that crashed gives its permit
-- back when its lease ends, without anybody's help; the permits it frees go to the queue.
-- A grant is the waiter's permit, written with the claim lease as its lease; the waiter's
-- next attempt claims it (gives it the waiter's lease). A grantee that died holds it for the
-- claim lease. A permit handed to a waiter of the releasing client has the waiter's lease.
--
-- Returns
--   acquire     1 granted (or a grant claimed); refused: n <= -2 when permits are given out,
--               the first of which ends in -n - 2 ms at the latest; else -1 (the semaphore
--               was never set, or has no permits)
--   release     1 released, 0 the permit was not given out (expired); followed, in a table,
--               by the releasing client's waiters it handed permits to, if any
--   renew       1 renewed, 0 the permit is gone
--   set         the total. try_set: 1 set, 0 it was set before
--   available   total minus permits given out
--   withdraw    1 when a grant the waiter had not claimed was given back, else 0
-- A key of another type fails with WRONGTYPE before anything is written.

local key, op = KEYS[1], ARGV[1]

local fields = redis.call('HGETALL', key)
local total = nil
local out, first_end, freed = 0, nil, 0
for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'total' then
        total = tonumber(value)
    elseif string.sub(field, 1, 2) == 'p:' then
        local deadline = tonumber(value)
        if deadline > now() then
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

-- A grant: the waiter's permit, for its claim lease (handed over: its lease).
local function give(waiter, _, claim, lease, _, handed)
    if handed then
        claim = lease
    end
    redis.call('HSET', key, 'p:' .. waiter, now() + claim)
    out = out + 1
end

-- Grants what is free now to the queue's first waiters (a call that freed permits); returns
-- the waiters of client `own` handed permits.
local function grant_free(own)
    local head = total and queue_head()
    if not head then
        return {}
    end
    local _, _, handed = grant_heads(total - out, nil, give, own, head)
    return handed
end

-- (An acquisition grants in its own way; a release grants with its client's hand-overs.)
if freed > 0 and op ~= 'acquire' and op ~= 'release' then
    grant_free()
end

if op == 'acquire' then
    local id, lease, life, claim = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
    local permit = 'p:' .. id
    if redis.call('HEXISTS', key, permit) == 1 then
        -- Granted from the queue: claimed, with the waiter's own lease.
        redis.call('HSET', key, permit, now() + lease)
        if freed > 0 then
            -- Permits whose lease ran out: theirs go to the next waiters.
            grant_free()
        end
        return 1
    end
    if total then
        local free, head = total - out, queue_head()
        local took = not head and free >= 1
        -- With nothing free, nobody in the queue fits: it is not read further.
        if head and free >= 1 then
            took, free = grant_heads(free, id, give, nil, head)
            took = took or (free >= 1 and not queue_head())
        end
        if took then
            redis.call('HSET', key, permit, now() + lease)
            return 1
        end
    end
    if life > 0 then
        enqueue(fifo_key, id, life, claim .. ' 1 ' .. lease)
    end
    if not total or not first_end then
        return -1
    end
    return -2 - (first_end - now())
elseif op == 'release' then
    local removed = redis.call('HDEL', key, 'p:' .. ARGV[2])
    out = out - removed
    return with_handed(removed, grant_free(handing_to(ARGV[4], nil)))
elseif op == 'renew' then
    if redis.call('HEXISTS', key, 'p:' .. ARGV[2]) == 0 then
        return 0
    end
    redis.call('HSET', key, 'p:' .. ARGV[2], now() + tonumber(ARGV[3]))
    return 1
elseif op == 'set' then
    redis.call('HSET', key, 'total', ARGV[2])
    total = tonumber(ARGV[2])
    grant_free()
    return total
elseif op == 'try_set' then
    local set = redis.call('HSETNX', key, 'total', ARGV[2])
    if set == 1 then
        total = tonumber(ARGV[2])
        grant_free()
    end
    return set
elseif op == 'available' then
    if not total then
        return 0
    end
    return math.max(total - out, 0)
elseif op == 'withdraw' then
    dequeue(key, ARGV[2])
    -- Only a grant the waiter never claimed can be here: its wait ended without the permit.
    local removed = redis.call('HDEL', key, 'p:' .. ARGV[2])
    out = out - removed
    -- Free for the next waiters: its grant, or what it held them back from as the head.
    grant_free()
    return removed
end
return redis.error_reply('ERR unknown permits operation')
