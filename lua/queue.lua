-- queue.lua: the waiter queue of a reentrant lock, and grant-on-release. Not a script of its
-- own: `src/scripts.rs` puts it before acquire.lua, release.lua and withdraw.lua.
--
-- P:{N}:q   list  waiting owner fields, first come first (the commands of the fair lock's queue,
--                 so a least-privilege user needs no new right)
-- P:{N}:qd  hash  owner field -> '<deadline ms> <claim ms>': the entry is dead past its deadline
--                 (server clock); a grant to it lasts the claim lease until it is claimed
-- Both keys are derived from the lock's hash (they share its hash tag, so its slot) and expire
-- with the latest deadline in them.
--
-- A refused waiter of another owner enqueues itself in the same call (acquire.lua). A release
-- that frees the lock gives it to the first live entry: the hold is written with count 0 (granted,
-- not yet claimed) and the claim lease, and ONE message 'g <claim ms> <field>' is published.
-- Only the grantee's client acts on it: the grantee's next acquire finds its count 0 and claims
-- the hold (count 1, its own lease) as a first acquisition; everybody else keeps sleeping. A
-- grantee that died holds the lock for the claim lease at most.

-- The server's clock in microseconds.
local function queue_clock_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Enqueues field (at the back when new; a refresh keeps its place) with an entry living ttl_ms
-- from now.
local function enqueue(hash, field, now_us, ttl_ms, claim_ms)
    local q, qd = hash .. ':q', hash .. ':qd'
    local now_ms = math.floor(now_us / 1000)
    local entry = string.format('%d %d', now_ms + ttl_ms, claim_ms)
    -- The list first: in a slot migration an error must come before a write it would orphan.
    if redis.call('HEXISTS', qd, field) == 0 then
        redis.call('RPUSH', q, field)
    end
    redis.call('HSET', qd, field, entry)
    -- Each key on its own: one may exist without the other after a partial write.
    for _, key in ipairs({q, qd}) do
        if redis.call('PTTL', key) < ttl_ms then
            redis.call('PEXPIRE', key, ttl_ms)
        end
    end
end

-- Takes field out of the queue.
local function dequeue(hash, field)
    if redis.call('HDEL', hash .. ':qd', field) == 1 then
        redis.call('LREM', hash .. ':q', 1, field)
    end
end

-- The first live entry (field and claim ms), or nil; dead entries met on the way are dropped.
-- With take, the live entry is taken out too. An empty queue costs one call (no clock read).
local function queue_head(hash, take)
    local q, qd = hash .. ':q', hash .. ':qd'
    local now_ms
    -- Bounded: each round drops an entry or returns.
    for _ = 1, 10000 do
        local head = redis.call('LINDEX', q, 0)
        if not head then
            return nil
        end
        now_ms = now_ms or queue_clock_us() / 1000
        local entry = redis.call('HGET', qd, head)
        local deadline, claim
        local space = entry and string.find(entry, ' ', 1, true)
        if space then
            deadline = tonumber(string.sub(entry, 1, space - 1))
            claim = tonumber(string.sub(entry, space + 1))
        end
        if deadline and claim and deadline > now_ms then
            if take then
                redis.call('LPOP', q)
                redis.call('HDEL', qd, head)
            end
            return head, claim
        end
        -- Dead, or listed without an entry: it goes.
        redis.call('LPOP', q)
        redis.call('HDEL', qd, head)
    end
    return nil
end

-- Gives the free lock to field, taken out of the queue: its hold with count 0 and its claim
-- lease, and one message naming it.
local function grant(hash, field, claim)
    redis.call('HSET', hash, field, '0')
    redis.call('PEXPIRE', hash, claim)
    redis.call('PUBLISH', hash .. ':unlock', string.format('g %d %s', claim, field))
end

-- Gives the free lock to the first live waiter. Returns its field, or nil when nobody waits.
local function grant_head(hash)
    local head, claim = queue_head(hash, true)
    if head then
        grant(hash, head, claim)
    end
    return head
end
