-- semaphore.lua: the permits of a counting semaphore (`src/family/semaphore.rs`), and its
-- waiter queue with grant-on-release (queue.lua and queue_permits.lua, which
-- `src/family/semaphore.rs` puts before this file).
--
-- KEYS[1]  permits   P:{N}:semaphore           string: how many permits are available
-- KEYS[2]  channel   P:{N}:semaphore:released  grants go to KEYS[2]:<client id> (queue_permits.lua)
-- ARGV[1]  operation: 'acquire', 'release', 'set', 'try_set', 'available', 'withdraw' or
--          'delete'
-- ARGV[2]  permits n: at least 1 for 'acquire' and 'release', at least 0 for 'set' and
--          'try_set', ignored by the others
-- 'acquire' and 'withdraw' also send:
-- ARGV[3]  the waiter: '<client id>:<wait id>', one per wait
-- 'release' also sends:
-- ARGV[3]  the hand-over (queue_permits.lua's handing_to): the releasing client's id, whose
--          own waiters are handed permits, then names of that client's calls whose records
--          go (below): waiters that took permits, releases whose reply came
-- ARGV[4]  the release's name, '<client id>:r<n>', one per call
-- ARGV[5]  '1' when the release is sent again (its connection dropped), else '0'
-- ARGV[6]  how many minutes a record of the client's calls must be found for (below)
-- 'acquire' also sends:
-- ARGV[4]  how long the waiter's queue entry lives without another attempt (ms); '0' for a
--          single attempt, which is never queued
-- ARGV[5]  how long a grant to the waiter waits for its claim (ms), its claim lease
-- ARGV[6]  '1' when the attempt is sent again (its connection dropped), else '0'
-- ARGV[7]  how many minutes a record of the client's calls must be found for (below)
-- 'withdraw' also sends:
-- ARGV[4]  as ARGV[7] of 'acquire': how many minutes back to look for the waiter's record
--
-- P:{N}:semaphore:g  hash  waiter -> 's <deadline ms> <n>': permits set aside for a waiter that
--                          was granted them and has not claimed them yet (they are still in the
--                          count); past the deadline they are free again (the waiter died, or
--                          gave up unheard). 't <deadline ms> <n>': permits handed over to a
--                          waiter of the releasing client (out of the count already), kept
--                          for its attempt or withdrawal should the reply be lost, until a
--                          minute after its place would have ended; the client's next release
--                          deletes it once the waiter took them. Calls empty it.
-- A grantee's next attempt claims its grant: set-aside permits leave the count then.
-- P:{N}:semaphore:t:<client id>:<m>  hash  call -> n: the calls of that client in minute m
--                          (server clock) that changed the count by n permits (an acquisition
--                          by its waiter's name, a release by its own), so a call sent again
--                          after its connection dropped does nothing twice, and a withdrawal
--                          gives back what an acquisition took unheard. Its client's next
--                          release deletes a record once it has the call's reply; else a record
--                          is found for the k minutes its client asks (longer than an
--                          acquisition's reply is waited for and its withdrawal is retried),
--                          and its hash ends k + 1 minutes after its last write.
--
-- Returns
--   acquire   1 when n permits were taken (or a grant claimed), 0 when not (queued as asked)
--   release   the permits available after adding n (before any grant it made); followed, in
--             a table, by the releasing client's waiters it handed permits to, if any; sent
--             again, the permits available (nothing added twice)
--   set       n; permits granted and not yet claimed stay out, as a holder's do
--   try_set   1 when the semaphore had no permits key and now has n, 0 when it existed
--   available the permits available: the count less the permits set aside for grantees
--   withdraw  1 when permits granted to the waiter or taken by it unheard went back to the
--             semaphore, else 0
--   delete    1 when the semaphore or its queue existed (all deleted, with the records of the
--             calling client, ARGV[3]), else 0
-- A value that is not a non-negative integer fails with an error before anything is written;
-- a key of another type fails with WRONGTYPE ('delete' deletes whatever the key holds).

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


-- How long a handed grant's record outlives the place of its waiter: only a waiter that died
-- (or lost its reply and then could not reach the server for this long) leaves its record
-- to this deadline, and its permits stay with it, as a crashed holder's do.
local HANDED_KEPT = 60000

-- The records of the calls of the client of `name` ('<client id>:...') made in this minute
-- (`ago` 0) or `ago` minutes before.
local function calls_of(name, ago)
    local minute = math.floor(now() / HANDED_KEPT) - ago
    return key .. ':t:' .. string.match(name, '^[^:]*') .. ':' .. minute
end

-- What the call `name` changed the count by, if it did (a record not deleted yet), and where
-- its record is, looking back `minutes` minutes before this one: a call sent again comes
-- within seconds of the first send, a withdrawal may come minutes after it (its request's
-- reply is waited for up to the watchdog lease, then the withdrawal is retried).
local function recorded(name, minutes)
    for ago = 0, tonumber(minutes) do
        local calls = calls_of(name, ago)
        local m = redis.call('HGET', calls, name)
        if m then
            return m, calls
        end
    end
    return nil
end

-- The call `name` changed the count by `m`; its record is found for `minutes` minutes.
local function record(name, m, minutes)
    local calls = calls_of(name, 0)
    redis.call('HSET', calls, name, m)
    redis.call('PEXPIRE', calls, (tonumber(minutes) + 1) * HANDED_KEPT)
end

-- Deletes the records a call's hand-over argument names (see ARGV[3]): handed grants and
-- calls. Returns handing_to's answer: the client whose waiters the call hands permits.
local function forget(arg)
    local own, took = handing_to(arg, grants)
    -- Most were made this minute: the minute before is looked at only for the others.
    if #took > 0 and redis.call('HDEL', calls_of(took[1], 0), unpack(took)) < #took then
        redis.call('HDEL', calls_of(took[1], 1), unpack(took))
    end
    return own
end

-- The permits set aside for grantees still within their claim lease, and the record of
-- `waiter`'s own grant if it has one; the other grants past their deadline are dropped
-- (set-aside permits are free again, handed ones stay with their waiter). Also returns
-- whether set-aside permits were freed so.
local function set_aside(waiter)
    local granted = redis.call('HGETALL', grants)
    local total, mine, freed = 0, nil, false
    for i = 1, #granted, 2 do
        local kind, deadline, m = string.match(granted[i + 1], '^(%a) (%d+) (%d+)$')
        if granted[i] == waiter then
            mine = granted[i + 1]
        elseif tonumber(deadline) <= now() then
            redis.call('HDEL', grants, granted[i])
            freed = freed or kind == 's'
        elseif kind == 's' then
            total = total + tonumber(m)
        end
    end
    return total, mine, freed
end

-- A grant: set aside for the waiter for its claim lease (the permits stay in the count), or
-- handed over (out of the count) and kept for its waiter (see HANDED_KEPT).
local function grant_to(waiter, m, claim, _, deadline, handed)
    local record = 's ' .. (now() + claim) .. ' ' .. m
    local keep = claim
    if handed then
        redis.call('DECRBY', key, m)
        keep = math.max(deadline - now(), claim) + HANDED_KEPT
        record = 't ' .. (now() + keep) .. ' ' .. m
    end
    redis.call('HSET', grants, waiter, record)
    outlive(grants, keep)
end

-- Grants what is free now to the queue's first waiters (a call that freed permits); returns
-- the waiters of client `own` handed permits.
local function grant_free(permits, own)
    local head = queue_head()
    if not head then
        return {}
    end
    local _, _, handed = grant_heads(permits - set_aside(nil), nil, grant_to, own, head)
    return handed
end

if op == 'delete' then
    -- ARGV[3]: the deleting client's id, whose records of calls go too (others' end by
    -- themselves). Whatever the key holds.
    local existed = redis.call('DEL', key, key .. ':q', key .. ':qd', grants)
    local own = ARGV[3] .. ':'
    -- Its records of the last minutes (older ones end by themselves).
    redis.call('DEL', calls_of(own, 0), calls_of(own, 1), calls_of(own, 2))
    return existed > 0 and 1 or 0
end

local current = available()
if type(current) == 'table' then
    return current
end

if op == 'acquire' then
    local waiter, life, claim = ARGV[3], tonumber(ARGV[4]), ARGV[5]
    -- Sent again after its connection dropped: the first send took them.
    if ARGV[6] == '1' and recorded(waiter, 1) then
        return 1
    end
    local aside, mine, freed = set_aside(waiter)
    -- A grant to this waiter: claimed, even past its claim lease if nobody took it.
    if mine then
        redis.call('HDEL', grants, waiter)
        local kind, _, m = string.match(mine, '^(%a) (%d+) (%d+)$')
        local left = current or 0
        if kind == 's' then
            left = redis.call('DECRBY', key, m)
        end
        record(waiter, m, ARGV[7])
        if freed then
            -- Others' grants that ran out: theirs go to the next waiters.
            grant_free(left)
        end
        return 1
    end
    local free, head = (current or 0) - aside, queue_head()
    local took = not head and free >= n
    -- With nothing free, nobody in the queue fits: it is not read further.
    if head and free >= 1 then
        took, free = grant_heads(free, waiter, grant_to, nil, head)
        took = took or (free >= n and not queue_head())
    end
    if took then
        redis.call('DECRBY', key, n)
        record(waiter, n, ARGV[7])
        return 1
    end
    if life > 0 then
        enqueue(fifo_key, waiter, life, claim .. ' ' .. n .. ' 0')
    end
    return 0
elseif op == 'release' then
    local own, call = forget(ARGV[3]), ARGV[4]
    -- Sent again after its connection dropped: the first send added them.
    if ARGV[5] == '1' and recorded(call, 1) then
        return current or 0
    end
    local now_available = redis.call('INCRBY', key, n)
    record(call, n, ARGV[6])
    return with_handed(now_available, grant_free(now_available, own))
elseif op == 'set' then
    -- Permits granted and not yet claimed are out already, as a holder's are.
    local aside = set_aside(nil)
    redis.call('SET', key, n + aside)
    grant_free(n + aside)
    return n
elseif op == 'available' then
    if not current then
        return 0
    end
    local aside, _, freed = set_aside(nil)
    if freed then
        grant_free(current)
        aside = set_aside(nil)
    end
    return math.max(current - aside, 0)
elseif op == 'try_set' then
    if current then
        return 0
    end
    redis.call('SET', key, n)
    grant_free(n)
    return 1
elseif op == 'withdraw' then
    local waiter = ARGV[3]
    dequeue(key, waiter)
    local granted = redis.call('HGET', grants, waiter)
    if granted then
        redis.call('HDEL', grants, waiter)
        local kind, _, m = string.match(granted, '^(%a) (%d+) (%d+)$')
        if kind == 't' then
            current = redis.call('INCRBY', key, m)
        end
    end
    -- Taken by an acquisition whose reply was lost (or given up on).
    local took, calls = recorded(waiter, ARGV[4])
    if took then
        redis.call('HDEL', calls, waiter)
        -- Not into a semaphore deleted since: that would set it anew.
        if current then
            current = redis.call('INCRBY', key, took)
        end
    end
    -- Free for the next waiters: its grant, or what it held them back from as the head.
    grant_free(current or 0)
    return (granted or took) and 1 or 0
end
return redis.error_reply('ERR unknown semaphore operation')
