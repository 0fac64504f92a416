-- release.lua: give back holds; on the last one delete the owner's field and give the lock to
-- the first queued waiter (queue_lock.lua), or hand it straight to a waiter of the releasing
-- client, or, with nobody queued, just free it.
--
-- (The lean form, 1 key and 2 arguments, is described in release_plain.lua.)
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  release latch        P:{N}:latch:<request id>  (makes a retried release idempotent)
-- KEYS[3]  fencing counter      P:{N}:fence  (given only when handing over to a fenced waiter)
-- ARGV[1]  owner field
-- ARGV[2]  lease in milliseconds, applied again when holds remain
-- ARGV[3]  latch lifetime in milliseconds
-- ARGV[4]  how many holds to give back (a guard's own; all of them at client shutdown)
-- ARGV[5]  mode: 'r' when this request was sent before (a retry after a lost reply), and 'a'
--          when the latch is written whatever happens (give-backs, which may race the owner's
--          own acquisitions); '-' for neither. Without 'a' the latch is written only when holds
--          remain: a guard's last release, during which the client never lets the owner take
--          the lock again (`sequence.rs`), so a retry that finds the field gone knows the first
--          attempt released it. A trailing 'd<ms>' ('d3000', 'rd0', ...) marks a lock that may
--          have a lock-delay of <ms>: a release that frees it deletes its marker P:{N}:delay
--          (see acquire.lua), so the next owner need not wait; one that leaves holds (and
--          lengthens the lease) lengthens the marker to the lease plus the delay. A 'g' before
--          it ('ag', 'agd0') keeps an unclaimed grant (count 0): the undo of an attempt whose
--          connection dropped, by a waiter that still waits, whose next attempt claims it.
-- ARGV[6]  hand-over (optional): owner field of the releasing client's first waiter
-- ARGV[7]  hand-over (optional): that waiter's lease in milliseconds
-- ARGV[8]  hand-over to a fenced waiter: the fence grace in milliseconds (see fence.lua and
--          queue_lock.lua, which `scripts.rs` puts before this file)
--
-- Returns
--   -1       the owner holds nothing (never held, expired, or force-unlocked); nothing changed
--   0        the last hold was released: the field is gone, and the lock was granted to the
--            first queued waiter (one message names it) or, with nobody queued, freed
--   n > 0    n holds remain; the expiry was raised to ARGV[2] if it was shorter
--   -2 - t   the last hold was released and the lock handed to ARGV[6] (count 1, lease
--            ARGV[7], fencing token t, 0 when unfenced); nothing published, the lock never free
-- A retry with the same request id returns the first call's answer and changes nothing.
-- A lock key of another type fails with WRONGTYPE before anything is written.
--
-- Batch (one client's concurrent releases coalesced into one call, `src/node/calls/batch.rs`): KEYS[2i-1],
-- KEYS[2i] and ARGV[5i-4 .. 5i] as above for i = 1..n, without hand-over; the reply is a table of
-- n such integers, in order. An entry that fails answers its error message as a string instead,
-- and the others go on (every error comes before an entry writes anything).
--
-- Counts, not "delete the field": a larger count than the client's may be a grant a cancelled
-- caller is giving back by itself (`acquire.rs`); deleting it would let that give-back take the
-- owner's next hold instead.
--
-- Why this shape: every key and argument, and a table reply, costs the server about as much as
-- a command (see acquire.lua), so a guard's last release sends 1 key and 2 arguments (the lean
-- form), any other 2 keys and 5 arguments, and gets an integer.

local function release(hash, latch, fence, field, lease, latch_ms, holds, mode, successor,
                       successor_lease, grace)
    local delayed, delay = false, 0
    local d = string.find(mode, 'd', 1, true)
    if d then
        delayed, delay = true, tonumber(string.sub(mode, d + 1)) or 0
        mode = string.sub(mode, 1, d - 1)
    end
    local keep_grant = string.sub(mode, -1) == 'g'
    if keep_grant then
        mode = string.sub(mode, 1, -2)
    end
    local retry = mode == 'r' or mode == 'ra'
    local always = mode == 'a' or mode == 'ra'

    -- Only a retry can find its latch: the first attempt skips the lookup.
    if retry then
        local done = redis.call('GET', latch)
        if done then
            return tonumber(done)
        end
    end

    -- The short path (release_plain.lua) read it already when it fell through to here.
    local held
    if plain_held_read then
        held = tonumber(plain_held)
    else
        held = tonumber(redis.call('HGET', hash, field))
    end
    if held == 0 and keep_grant then
        -- Not a hold: the grant waits for the waiter's next attempt (or its withdrawal).
        held = nil
    elseif held == 0 then
        -- A grant from the queue (queue_lock.lua) is one hold of its owner, which took it from the
        -- grant's message. (A waiter that stopped waiting passes its grant on with withdraw.lua,
        -- never with a release: its client orders the two, `turns.rs`.)
        held = 1
    end
    if not held then
        if retry and not always then
            -- A guard's last hold leaves no latch: the first attempt ran. The waiter it was handing
            -- to is still waiting for this answer, so that waiter's hold can only come from it;
            -- a hand-over writes count 1, while a grant from the queue (count 0, queue_lock.lua) is
            -- not one, and is claimed by that waiter's own attempt.
            if successor and (tonumber(redis.call('HGET', hash, successor)) or 0) >= 1 then
                local token = 0
                if fence then
                    token = tonumber(redis.call('GET', fence) or '0') or 0
                end
                return -2 - token
            end
            return 0
        end
        if always then
            redis.call('SET', latch, -1, 'PX', latch_ms)
        end
        return -1
    end

    local reply
    local count = held - tonumber(holds)
    if count > 0 then
        redis.call('HSET', hash, field, count)
        -- Reset the lease, but never shorten it (see acquire.lua); the lock-delay marker keeps
        -- outliving it by the delay.
        if redis.call('PTTL', hash) < tonumber(lease) then
            if delay > 0 then
                redis.call('SET', hash .. ':delay', '1', 'PX', lease + delay)
            end
            redis.call('PEXPIRE', hash, lease)
        end
        reply = count
    else
        -- Hand over only while no other client waits: nobody queued before the successor (a
        -- waiter of another client there, a MultiLock's member among them, gets the lock from
        -- the queue).
        local hand_over = false
        -- Never from an owner to itself: its hold would go with the field it leaves.
        if successor ~= nil and successor ~= field then
            local first = redis.call('LINDEX', hash .. ':q', 0)
            hand_over = not first or first == successor
        end
        -- Reads and writes of the keys derived from the hash (marker, queue) come before the
        -- field goes: during a cluster slot migration such a key may already be elsewhere, and
        -- the error must come before anything was written.
        if delayed then
            -- Derived like the channel: the marker shares the lock's hash tag, so its slot.
            -- A hand-over ends it too: the successor's hold did not ask for it.
            redis.call('DEL', hash .. ':delay')
        end
        local head, terms
        if hand_over then
            -- The successor may have queued itself on the server too.
            dequeue(hash, successor)
        else
            -- The short path's read of the queue's head, when it made one (nothing changed the
            -- queue since: it falls through only without a hand-over or a lock-delay).
            head, terms = pop_head(hash, plain_head_read and plain_head or nil)
        end
        local token = 0
        if hand_over and fence then
            -- pcall: a damaged counter must not keep the lock from being released; it only spoils
            -- the hand-over.
            local ok
            ok, token = pcall(next_token, fence, successor_lease + grace)
            hand_over = ok
        end
        -- The next holder's field is written while ours still keeps the hash alive: during a
        -- slot migration a write to a hash that no longer exists here is redirected, which
        -- would fail the script after the writes above. HDEL, not DEL: only our field goes; an
        -- emptied hash disappears by itself.
        if hand_over then
            redis.call('HSET', hash, successor, '1')
            redis.call('HDEL', hash, field)
            redis.call('PEXPIRE', hash, successor_lease)
            reply = -2 - token
        else
            -- The first queued waiter gets the lock, and only it is told; with nobody queued,
            -- nobody.
            if head then
                grant(hash, head, terms)
            end
            redis.call('HDEL', hash, field)
            reply = 0
        end
    end
    if count > 0 or always then
        redis.call('SET', latch, reply, 'PX', latch_ms)
    end
    return reply
end

-- One entry of a lean batch, as release_plain.lua answers the lean form.
local function release_lean(hash, field, holds)
    local reply, held, head = last_hold(hash, field, holds)
    if reply then
        return reply
    end
    if held and not head then
        return {ok = 'FULL'}
    end
    -- What release() would read first, as release_plain.lua passes it on.
    plain_held_read, plain_held, plain_head_read, plain_head = true, held, head ~= nil, head
    return release(hash, nil, nil, field, nil, nil, holds, '-')
end

if lean and #KEYS == 1 then
    -- release_plain.lua's lean form, falling through: the last hold, given back to the queue
    -- (no lease to apply, no latch to write), or nothing held.
    return release(KEYS[1], nil, nil, ARGV[1], nil, nil, ARGV[2], '-')
end
-- One call per entry of a batch, in order: an entry that fails answers its error message (a
-- string) instead, and the others go on.
local function each_entry(n, call)
    local replies = {}
    for i = 1, n do
        local ok, reply = pcall(call, i)
        if not ok then
            -- redis.call raises a table {err = message}; Lua itself raises a string.
            reply = type(reply) == 'table' and reply.err or tostring(reply)
        end
        replies[i] = reply
    end
    return replies
end

if lean then
    return each_entry(#KEYS, function(i)
        return release_lean(KEYS[i], ARGV[2 * i - 1], ARGV[2 * i])
    end)
end
if #ARGV <= 8 then
    return release(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
        ARGV[6], ARGV[7], tonumber(ARGV[8] or '0'))
end
return each_entry(#KEYS / 2, function(i)
    local k, a = 2 * i - 2, 5 * i - 5
    return release(KEYS[k + 1], KEYS[k + 2], nil, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3],
        ARGV[a + 4], ARGV[a + 5])
end)
