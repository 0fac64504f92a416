-- fifo.lua: the waiter queue of the semaphores and the read-write lock, first come first
-- served whatever the client. Not a script of its own: `src/family/` puts it before
-- semaphore.lua, permits.lua and rwlock.lua; it starts on the queue of KEYS[1] (the object's
-- key) with KEYS[2] (its channel), and `fifo_on` moves it to another object's.
--
-- KEYS[1]:q   list  waiters, in arrival order ('<client id>:<wait id>', one per wait)
-- KEYS[1]:qd  hash  waiter -> '<deadline ms> <n> <claim ms> <lease ms>' (server clock): it
--                   wants n permits (for its lease, a PermitSemaphore's); its entry is dead past
--                   the deadline (dropped by whichever call next meets it), and a grant to it
--                   waits a claim lease for it
-- Both keys share the semaphore's hash tag (so its slot) and expire with the latest deadline
-- in them (clients may give their waiters' entries different lives).
--
-- A refused waiter queues itself (or keeps its place) in the same call. A call that frees
-- permits (a release, a `set`, a withdrawal, an acquisition or `available` that finds grants
-- or leases run out) grants them to the first waiters that fit, in order, and stops at the
-- first that does not: a waiter for many permits at the head holds back the waiters behind
-- it, and no waiter starves. Each grant is written by the script (`give`), and ONE message per grantee
-- is published on its client's channel, KEYS[2]:<client id>, as 'g <claim ms> - 0 <waiter>':
-- no other client hears of it. The grantee claims what it was given with its next attempt,
-- which the message makes at once.
--
-- Handed over: a grant to a waiter of the client that made the call (a release names its
-- client) is final at once, since that client is alive and hears the reply: the script hands
-- the permits over (`give` with handed = true), publishes nothing, and the reply names the
-- waiter, whom its client resolves from it. Its next attempt (the reply was lost) still finds
-- the grant and takes it; a withdrawal gives it back.

local fifo_queue, fifo_entries, fifo_channel

-- The queue of the object whose key is `key` and whose channel is `channel`: every function
-- below acts on it from now on (a batch of the read-write lock's calls may touch several).
local function fifo_on(key, channel)
    fifo_queue, fifo_entries, fifo_channel = key .. ':q', key .. ':qd', channel
end
fifo_on(KEYS[1], KEYS[2])

local fifo_now
-- The server's clock in ms, read once per call and only when a deadline is needed.
local function now()
    if not fifo_now then
        local t = redis.call('TIME')
        fifo_now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return fifo_now
end

-- Lengthens key k's expiry to ms from now (never shortens it).
local function outlive(k, ms)
    if redis.call('PTTL', k) < ms then
        redis.call('PEXPIRE', k, ms)
    end
end

-- The first waiter queued (live or not), or nil.
local function queue_head()
    return redis.call('LINDEX', fifo_queue, 0)
end

-- Takes `waiter` out of the queue, wherever it is.
local function dequeue(waiter)
    if redis.call('HDEL', fifo_entries, waiter) == 1 then
        redis.call('LREM', fifo_queue, 1, waiter)
    end
end

-- Queues `waiter` for n permits held `lease` ms, or keeps its place and moves its deadline:
-- its entry lives `life` ms, and a grant to it waits `claim` ms for its claim.
local function enqueue(waiter, n, life, claim, lease)
    local entry = (now() + life) .. ' ' .. n .. ' ' .. claim .. ' ' .. lease
    -- A live entry keeps its place. Anything else (none, a dead entry whose listing may be
    -- gone or still there, a record a kind keeps under a waiter's name) is listed anew.
    local old = redis.call('HGET', fifo_entries, waiter)
    redis.call('HSET', fifo_entries, waiter, entry)
    local deadline = tonumber(string.match(old or '', '^(%d+) '))
    if not deadline or deadline <= now() then
        if deadline then
            redis.call('LREM', fifo_queue, 1, waiter)
        end
        redis.call('RPUSH', fifo_queue, waiter)
    end
    outlive(fifo_queue, life)
    outlive(fifo_entries, life)
end

-- Gives `free` permits to the first live waiters that fit, in order, and stops at the first
-- that does not; dead entries met on the way are dropped. `give(waiter, n, claim, lease,
-- deadline, handed)` writes a grant (deadline: the waiter's entry's); a waiter of client `own`
-- is handed it (handed = true, listed in `handed`), any other told by its message. A head that
-- is `self` is taken out instead, and true returned: the caller takes its permits itself.
-- Returns that, the permits still free, and the waiters handed permits. known_head: the
-- queue's head when the caller has just read it.
local function grant_heads(free, self, give, own, known_head)
    local handed = {}
    -- Bounded: each round takes an entry out or returns.
    for _ = 1, 10000 do
        local head = known_head or queue_head()
        known_head = nil
        if not head then
            return false, free, handed
        end
        local entry = redis.call('HGET', fifo_entries, head)
        local deadline, n, claim, lease
        if entry then
            deadline, n, claim, lease = string.match(entry, '^(%d+) (%d+) (%d+) (%d+)$')
        end
        if deadline and tonumber(deadline) > now() then
            n = tonumber(n)
            if n > free then
                return false, free, handed
            end
            redis.call('LPOP', fifo_queue)
            redis.call('HDEL', fifo_entries, head)
            if head == self then
                return true, free, handed
            end
            free = free - n
            local client = string.match(head, '^[^:]*')
            local mine = client == own
            give(head, n, tonumber(claim), tonumber(lease), tonumber(deadline), mine)
            if mine then
                handed[#handed + 1] = head
            else
                redis.call('PUBLISH', fifo_channel .. ':' .. client, 'g ' .. claim .. ' - 0 ' .. head)
            end
        else
            -- Dead, or listed without an entry: it is gone now.
            redis.call('LPOP', fifo_queue)
            redis.call('HDEL', fifo_entries, head)
        end
    end
    return false, free, handed
end

-- A release's hand-over argument, '<client id> <waiter> ...' ('-' for the client while it
-- shuts down): deletes the named waiters' records in hash `records` (they took what a release
-- of that client handed them) and returns the client, whose waiters the call hands what it
-- frees ('' for none: its waiters are quitting).
local function handing_to(arg, records)
    local own, took = nil, {}
    for name in string.gmatch(arg or '', '%S+') do
        if own == nil then
            own = name
        else
            took[#took + 1] = name
        end
    end
    if #took > 0 then
        redis.call('HDEL', records, unpack(took))
    end
    if own == nil or own == '-' then
        return ''
    end
    return own
end

-- The reply of a call that may have handed permits over: `value` alone, or with the waiters
-- handed permits after it.
local function with_handed(value, handed)
    if #handed == 0 then
        return value
    end
    table.insert(handed, 1, value)
    return handed
end
