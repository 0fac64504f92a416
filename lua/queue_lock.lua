-- queue_lock.lua: how a reentrant lock's queue (queue.lua) grants: the lock's waiters, and
-- grant-on-release. Not a script of its own: `src/scripts.rs` puts it (after queue.lua and
-- fence.lua) before acquire.lua, release.lua, withdraw.lua and force_release.lua.
--
-- P:{N}:q, P:{N}:qd  the lock's queue (queue.lua) on the lock's hash P:{N}; an entry's terms
--                    are '<claim ms> <fence grace ms or -> <delay ms> <nonce>': a grant to it
--                    lasts the claim lease, with a fencing token when a grace is given and the
--                    lock-delay marker when a delay is; the nonce names the attempt that wrote
--                    it
--
-- A refused waiter of another owner enqueues itself in the same call (acquire_wait.lua). A
-- release that frees the lock gives it to the first live entry: the hold is written with count
-- 0 (one hold, granted from the queue), the claim lease, the waiter's token and marker, and
-- queue.lua's one message on P:{N}:unlock:<client id>, the channel of the grantee's client
-- alone (queued waiters listen there, not on P:{N}:unlock). The grantee holds the lock from
-- that message on, without another round trip (the nonce tells it which of its attempts
-- queued it, so when the claim lease began), and its watchdog lengthens the claim lease to its
-- lease (or its next attempt claims the grant: count 1, its lease, when the message came too
-- late to trust). A grantee that died holds the lock for the claim lease at most; the waiters
-- behind it look again within a claim lease (`acquire.rs`), which also keeps their entries
-- alive.
--
-- Count 0 counts as one hold of its owner everywhere (release.lua, acquire.lua's re-entry);
-- only a first acquisition of that owner (a waiter that missed its message) turns it into 1
-- instead of 2, and only withdraw.lua (its waiter stopped waiting) passes it on.
--
-- The first live waiter of the lock `hash` (its field, and its terms: a table with claim,
-- grace, delay, nonce), taken out of the queue, or nil (queue.lua's first_live).
local function pop_head(hash, known_head)
    local head, _, claim, grace, delay, nonce =
        first_live(hash, known_head, '^(%d+) (%S+) (%d+) (%S+)$')
    if not head then
        return nil
    end
    pop(hash, head)
    return head, {claim = tonumber(claim), grace = tonumber(grace), delay = tonumber(delay),
        nonce = nonce}
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
