-- queue.lua: the waiter queue on the server, one for every kind (a lock, a fair lock, the
-- semaphores, the read-write lock). Not a script of its own: `src/scripts.rs` and
-- `src/family/` put it before the scripts that queue, and before queue_lock.lua (how a lock's
-- queue grants) or queue_permits.lua (how the others' grant, n of what is free).
--
-- <object>:q   list  the waiters' names, first come first (LINDEX, LPOP, RPUSH, LREM: the
--                    commands a least-privilege user has already, docs/acl.md)
-- <object>:qd  hash  name -> '<deadline ms> <claim ms> <the kind's terms>': the entry is dead
--                    past its deadline (the server's clock) and dropped by whichever call
--                    next meets it; a grant to it waits a claim lease for its claim. A kind
--                    may keep records of its own here under a name out of the list (they do
--                    not start with a digit). Beside each listed name, '@<name>' -> the
--                    server's clock when the name was listed, '<s> <us>' as TIME says it (how
--                    long it has waited: `Lock::waiters`, lua/waiters.lua): written with the
--                    listing, deleted with the entry, kept when a refresh keeps the place.
-- Both keys share the object's hash tag (so its slot) and expire with the latest deadline in
-- them (clients may give their waiters' entries different lives).
--
-- A refused waiter queues itself (or refreshes its entry, keeping its place) in the same call,
-- and a call that frees what the head wants grants it in the same call, to the first live
-- entries in order: nobody behind a live head is served before it, and no waiter starves. A
-- grantee is told by ONE message on its client's own channel, '<channel>:<client id>' (the
-- client id is the name's first part), 'g <claim ms> <token or -> <nonce> <name>': no other
-- client hears of it. Each kind's grant writer publishes it (queue_lock.lua, queue_permits.lua),
-- in this one form.
--
-- Why first in a lock's scripts: acquire_wait.lua's refusal queues the waiter, and each
-- function a chunk defines is made anew on every call (acquire_plain.lua), about 1k server
-- instructions each (callgrind, Redis 7.0.15: `bench/scripts/server_cost.sh`'s prelude phase,
-- 30.9k with the lock's queue and the family's apart, 34.8k with this file's six): a refused
-- waiter's attempt pays for them, so this file stays a handful of small functions.

local queue_clock, queue_time
-- The server's clock in ms, read once per call and only when a deadline is needed; queue_time
-- keeps TIME's reply (seconds, microseconds: strings).
local function now()
    if not queue_clock then
        queue_time = redis.call('TIME')
        queue_clock = tonumber(queue_time[1]) * 1000 + math.floor(tonumber(queue_time[2]) / 1000)
    end
    return queue_clock
end

-- Lengthens key k's expiry to ms from now (never shortens it).
local function outlive(k, ms)
    if redis.call('PTTL', k) < ms then
        redis.call('PEXPIRE', k, ms)
    end
end

-- Takes `name` out of the queue of `key`, wherever it is.
local function dequeue(key, name)
    if redis.call('HDEL', key .. ':qd', name, '@' .. name) > 0 then
        redis.call('LREM', key .. ':q', 1, name)
    end
end

-- Queues `name` in the queue of `key` with an entry living `life` ms from now, or refreshes
-- a live entry, which keeps its place; `terms` is the rest of the entry, '<claim ms> ...'.
-- Anything else under the name (none, a dead entry whose listing may be gone or still there,
-- a kind's record) is listed anew at the back. Concatenation, not string.format (about 7k
-- server instructions a call on Redis 7.0): integers below 10^14 print exactly with Lua's
-- '%.14g', and a deadline in milliseconds (about 1.8e12) is one.
local function enqueue(key, name, life, terms)
    local q, qd = key .. ':q', key .. ':qd'
    local old = tonumber(string.match(redis.call('HGET', qd, name) or '', '^(%d+) '))
    -- The list first: in a slot migration an error must come before a write it would orphan.
    local entry = (now() + life) .. ' ' .. terms
    if not old or old <= now() then
        if old then
            redis.call('LREM', q, 1, name)
        end
        redis.call('RPUSH', q, name)
        -- Listed now: when it was, in the same write (no call more), as TIME said it (no
        -- number printed: about half the cost of the record).
        redis.call('HSET', qd, name, entry, '@' .. name, queue_time[1] .. ' ' .. queue_time[2])
    else
        redis.call('HSET', qd, name, entry)
    end
    -- Each key on its own: one may exist without the other after a partial write.
    outlive(q, life)
    outlive(qd, life)
end

-- The queue of `key`'s first live entry whose terms (the entry after its deadline) match
-- `terms`, the kind's Lua pattern: its name, its deadline and the pattern's captures (up to
-- four); nil when nobody live waits. Dead entries met on the way are dropped, and so are
-- entries that are not the kind's (a damaged write); the live entry stays (see `pop`). An empty queue costs one call (no clock read).
-- known_head: the list's first element when the caller has just read it (one LINDEX less).
local function first_live(key, known_head, terms)
    local q, qd = key .. ':q', key .. ':qd'
    -- Bounded: each round drops an entry or returns.
    for _ = 1, 10000 do
        local head = known_head or redis.call('LINDEX', q, 0)
        known_head = nil
        if not head then
            return nil
        end
        local deadline, rest = string.match(redis.call('HGET', qd, head) or '', '^(%d+) (.*)$')
        deadline = tonumber(deadline)
        if deadline and deadline > now() then
            local a, b, c, d = string.match(rest, terms)
            if a then
                return head, deadline, a, b, c, d
            end
        end
        -- Dead, not the kind's, or listed without an entry: it is gone now.
        redis.call('LPOP', q)
        redis.call('HDEL', qd, head, '@' .. head)
    end
    return nil
end

-- Takes the queue of `key`'s head `name` out (first_live found it).
local function pop(key, name)
    redis.call('LPOP', key .. ':q')
    redis.call('HDEL', key .. ':qd', name, '@' .. name)
end
