-- queue.lua: the waiter queue of a reentrant lock, and grant-on-release. Not a script of its
-- own: `src/scripts.rs` puts it (after fence.lua) before acquire.lua, release.lua and
-- withdraw.lua.
--
-- P:{N}:q   list  waiting owner fields, first come first (the commands of the fair lock's queue,
--                 so a least-privilege user needs no new right)
-- P:{N}:qd  hash  owner field -> '<deadline ms> <claim ms> <fence grace ms or -> <delay ms>
--                 <nonce>': the entry is dead past its deadline (server clock); a grant to it
--                 lasts the claim lease, with a fencing token when a grace is given and the
--                 lock-delay marker when a delay is; the nonce names the attempt that wrote it
-- Both keys are derived from the lock's hash (they share its hash tag, so its slot) and expire
-- with the latest deadline in them.
--
-- A refused waiter of another owner enqueues itself in the same call (acquire_wait.lua's
-- enqueue, which only the acquisition needs; clock_us is fence.lua's, put before this). A release
-- that frees the lock gives it to the first live entry: the hold is written with count 0 (one
-- hold, granted from the queue), the claim lease, the waiter's token and marker, and ONE
-- message 'g <claim ms> <token> <nonce> <field>' is published on P:{N}:unlock:<client id>,
-- the channel of the grantee's client alone (queued waiters listen there, not on P:{N}:unlock):
-- no other client hears of it. The grantee holds the lock from that message on, without
-- another round trip (the nonce tells it which of its attempts queued it, so when the claim
-- lease began), and its watchdog lengthens the claim lease to its lease (or its next attempt
-- claims the grant: count 1, its lease, when the message came too late to trust). A grantee
-- that died holds the lock for the claim lease at most; the waiters behind it look again
-- within a claim lease (`acquire.rs`), which also keeps their entries alive.
--
-- Count 0 counts as one hold of its owner everywhere (release.lua, acquire.lua's re-entry);
-- only a first acquisition of that owner (a waiter that missed its message) turns it into 1
-- instead of 2, and only withdraw.lua (its waiter stopped waiting) passes it on.
--
-- Watchers: MultiLock members do not queue (a member queued on some locks would be granted
-- holds its MultiLock never claims); a refused member leaves the watch marker '~' in the queue
-- instead (acquire_wait.lua: an entry like a waiter's, never granted), and listens on
-- P:{N}:unlock. The first call that takes the queue's head past the marker drops it and
-- publishes one unlock message there. That is the only unlock message: a release with nobody
-- queued and no marker publishes nothing (it used to publish on every release, for the
-- members' sake).

-- Takes field out of the queue.
local function dequeue(hash, field)
    if redis.call('HDEL', hash .. ':qd', field) == 1 then
        redis.call('LREM', hash .. ':q', 1, field)
    end
end

-- The first live entry (field, and its terms: a table with claim, grace, delay, nonce), or nil; dead
-- entries met on the way are dropped, and a watch marker met on the way is dropped and its
-- watchers told (one message). The live entry is taken out too. An empty queue costs one call
-- (no clock read). known_head: the list's first element when the caller has just read it (one
-- LINDEX less), else nil.
local function pop_head(hash, known_head)
    local q, qd = hash .. ':q', hash .. ':qd'
    local now_ms
    -- Bounded: each round drops an entry or returns.
    for _ = 1, 10000 do
        local head = known_head or redis.call('LINDEX', q, 0)
        known_head = nil
        if not head then
            return nil
        end
        local entry = redis.call('HGET', qd, head)
        redis.call('LPOP', q)
        redis.call('HDEL', qd, head)
        if head == '~' then
            -- MultiLock members watch: the lock is free now, or about to go to the waiter behind.
            redis.call('PUBLISH', hash .. ':unlock', '0')
            entry = nil
        end
        now_ms = now_ms or clock_us() / 1000
        local deadline, claim, grace, delay, nonce
        if entry then
            deadline, claim, grace, delay, nonce =
                string.match(entry, '^(%d+) (%d+) (%S+) (%d+) (%S+)$')
        end
        deadline, claim = tonumber(deadline), tonumber(claim)
        if deadline and claim and deadline > now_ms then
            return head, {claim = claim, grace = tonumber(grace), delay = tonumber(delay),
                nonce = nonce}
        end
        -- Dead, or listed without an entry: it is gone now.
    end
    return nil
end

-- Gives the free lock to field, taken out of the queue: its hold with count 0, its claim lease,
-- a new fencing token and the lock-delay marker when its terms ask for them, and one message
-- naming it with the token ('-' for none) and the nonce of its entry.
local function grant(hash, field, terms)
    local token = '-'
    if terms.grace then
        -- pcall: a damaged counter must not keep the lock from its waiter; without a token in
        -- the message the waiter claims the grant with an attempt, which reports the damage.
        local ok, t = pcall(next_token, hash .. ':fence', terms.claim + terms.grace)
        if ok then
            token = string.format('%d', t)
        end
    end
    if terms.delay > 0 then
        redis.call('SET', hash .. ':delay', '1', 'PX', terms.claim + terms.delay)
    end
    redis.call('HSET', hash, field, '0')
    redis.call('PEXPIRE', hash, terms.claim)
    -- On the grantee's client's own channel: no other client hears of it. Concatenated (the
    -- claim lease is a small integer, which Lua prints exactly), not string.format (~7k
    -- instructions a call).
    local client = string.match(field, '^[^:]*')
    redis.call('PUBLISH', hash .. ':unlock:' .. client,
        'g ' .. terms.claim .. ' ' .. token .. ' ' .. terms.nonce .. ' ' .. field)
end

-- Gives the free lock to the first live waiter. Returns its field and terms, or nil when
-- nobody waits.
local function grant_head(hash)
    local head, terms = pop_head(hash)
    if head then
        grant(hash, head, terms)
    end
    return head, terms
end
