-- fifo.lua: the waiter queue of the semaphores, first come first served whatever the client.
-- Not a script of its own: `src/family/` puts it before semaphore.lua and permits.lua, whose
-- KEYS[1] is the semaphore's key and KEYS[2] its channel.
--
-- KEYS[1]:q   list  waiters, in arrival order ('<client id>:<wait id>', one per wait)
-- KEYS[1]:qd  hash  waiter -> '<deadline ms> <n> <claim ms>' (server clock): it wants n
--                   permits; its entry is dead past the deadline (dropped by whichever call
--                   next meets it), and a grant to it waits a claim lease for it
-- Both keys share the semaphore's hash tag (so its slot) and expire with the latest deadline
-- in them.
--
-- A refused waiter queues itself (or keeps its place) in the same call. A call that frees
-- permits grants them to the first waiters that fit, in order, and stops at the first that
-- does not: a waiter for many permits at the head holds back the waiters behind it, and no
-- waiter starves. Each grant is written by the script (`give`), and ONE message per grantee
-- is published on its client's channel, KEYS[2]:<client id>, as 'g <claim ms> - 0 <waiter>':
-- no other client hears of it. The grantee claims what it was given with its next attempt,
-- which the message makes at once.

local fifo_queue, fifo_entries, fifo_channel = KEYS[1] .. ':q', KEYS[1] .. ':qd', KEYS[2]

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

-- Whether anybody is queued (live or not).
local function queued()
    return redis.call('EXISTS', fifo_queue) == 1
end

-- Takes `waiter` out of the queue, wherever it is.
local function dequeue(waiter)
    if redis.call('HDEL', fifo_entries, waiter) == 1 then
        redis.call('LREM', fifo_queue, 1, waiter)
    end
end

-- Queues `waiter` for n permits, or keeps its place and moves its deadline: its entry lives
-- `life` ms, and a grant to it waits `claim` ms for its claim.
local function enqueue(waiter, n, life, claim)
    if redis.call('HSET', fifo_entries, waiter, (now() + life) .. ' ' .. n .. ' ' .. claim) == 1 then
        redis.call('RPUSH', fifo_queue, waiter)
    end
    outlive(fifo_queue, life)
    outlive(fifo_entries, life)
end

-- Gives `free` permits to the first live waiters that fit, in order, and stops at the first
-- that does not; dead entries met on the way are dropped. `give(waiter, n, claim)` writes a
-- grant; then its message goes out. A head that is `self` is taken out instead, and true
-- returned: the caller takes its permits itself. Also returns the permits still free.
local function grant_heads(free, self, give)
    -- Bounded: each round takes an entry out or returns.
    for _ = 1, 10000 do
        local head = redis.call('LINDEX', fifo_queue, 0)
        if not head then
            return false, free
        end
        local entry = redis.call('HGET', fifo_entries, head)
        local deadline, n, claim
        if entry then
            deadline, n, claim = string.match(entry, '^(%d+) (%d+) (%d+)$')
        end
        if deadline and tonumber(deadline) > now() then
            n = tonumber(n)
            if n > free then
                return false, free
            end
            redis.call('LPOP', fifo_queue)
            redis.call('HDEL', fifo_entries, head)
            if head == self then
                return true, free
            end
            free = free - n
            give(head, n, tonumber(claim))
            local client = string.match(head, '^[^:]*')
            redis.call('PUBLISH', fifo_channel .. ':' .. client, 'g ' .. claim .. ' - 0 ' .. head)
        else
            -- Dead, or listed without an entry: it is gone now.
            redis.call('LPOP', fifo_queue)
            redis.call('HDEL', fifo_entries, head)
        end
    end
    return false, free
end
