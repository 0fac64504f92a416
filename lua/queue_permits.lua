-- queue_permits.lua: how the queue (queue.lua) of the semaphores and the read-write lock
-- grants: each waiter wants n of what the object has (permits; a share of the lock or all of
-- it), first come first served whatever the client. Not a script of its own: `src/family/`
-- puts it after queue.lua and before semaphore.lua, permits.lua and rwlock.lua; it starts on
-- the queue of KEYS[1] (the object's key) with KEYS[2] (its channel), and `fifo_on` moves it
-- to another object's.
--
-- An entry's terms (queue.lua) are '<claim ms> <n> <lease ms>': the waiter wants n (for its
-- lease, a PermitSemaphore's). A refused waiter queues itself with queue.lua's enqueue on
-- `fifo_key`, its entry living `life` ms. A call that frees what waiters want (a release, a `set`, a
-- withdrawal, an acquisition or `available` that finds grants or leases run out) grants it to
-- the first waiters that fit, in order, and stops at the first that does not: a waiter for
-- many at the head holds back the waiters behind it. Each grant is written by the script
-- (`give`), and its waiter told by one message (queue.lua's form, published here),
-- 'g <claim ms> - 0 <waiter>', on '<channel>:<client id>' (the channel of the object `fifo_on`
-- names, KEYS[2] at first); its next attempt, which the message makes at once, claims it.
--
-- Handed over: a grant to a waiter of the client that made the call (a release names its
-- client) is final at once, since that client is alive and hears the reply: the script hands
-- it over (`give` with handed = true), publishes nothing, and the reply names the waiter,
-- whom its client resolves from it. Its next attempt (the reply was lost) still finds the
-- grant and takes it; a withdrawal gives it back.

local fifo_key, fifo_queue, fifo_entries, fifo_channel

-- The queue of the object whose key is `key` and whose channel is `channel`: every function
-- below acts on it from now on (a batch of the read-write lock's calls may touch several).
local function fifo_on(key, channel)
    fifo_key, fifo_queue, fifo_entries, fifo_channel = key, key .. ':q', key .. ':qd', channel
end
fifo_on(KEYS[1], KEYS[2])

-- The first waiter queued (live or not), or nil.
local function queue_head()
    return redis.call('LINDEX', fifo_queue, 0)
end

-- Gives `free` to the first live waiters that fit, in order, and stops at the first that does
-- not. `give(waiter, n, claim, lease, deadline, handed)` writes a grant (deadline: the
-- waiter's entry's); a waiter of client `own` is handed it (handed = true, listed in
-- `handed`), any other told by its message. A head that is `self` is taken out instead, and
-- true returned: the caller takes what it wants itself. Returns that, what is still free, and
-- the waiters handed grants. known_head: the queue's head when the caller has just read it.
local function grant_heads(free, self, give, own, known_head)
    local handed = {}
    -- Bounded: each round takes an entry out or returns.
    for _ = 1, 10000 do
        -- An entry that is not a waiter's of these kinds is dropped there, whoever it names (a
        -- caller that found its own so queues anew).
        local head, deadline, claim, n, lease =
            first_live(fifo_key, known_head, '^(%d+) (%d+) (%d+)$')
        known_head = nil
        if not head then
            return false, free, handed
        end
        n = tonumber(n)
        if n > free then
            return false, free, handed
        end
        pop(fifo_key, head)
        if head == self then
            return true, free, handed
        end
        free = free - n
        local client = string.match(head, '^[^:]*')
        local mine = client == own
        give(head, n, tonumber(claim), tonumber(lease), deadline, mine)
        if mine then
            handed[#handed + 1] = head
        else
            redis.call('PUBLISH', fifo_channel .. ':' .. client, 'g ' .. claim .. ' - 0 ' .. head)
        end
    end
    return false, free, handed
end

-- A release's hand-over argument, '<client id> <waiter> ...' ('-' for the client while it
-- shuts down): deletes the named waiters' records in hash `records` (they took what a release
-- of that client handed them) and returns the client, whose waiters the call hands what it
-- frees ('' for none: its waiters are quitting), and the names.
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
        return '', took
    end
    return own, took
end

-- The reply of a call that may have handed grants over: `value` alone, or with the waiters
-- handed grants after it.
local function with_handed(value, handed)
    if #handed == 0 then
        return value
    end
    table.insert(handed, 1, value)
    return handed
end
