-- release_plain.lua: the common case of release.lua, answered before anything else of the
-- script is made (see acquire_plain.lua for why): a guard's last release (ARGV[5] '-': first
-- attempt, no latch, no lock-delay), without hand-over, of a lock nobody is queued for. It frees
-- the lock, as release.lua would, and answers 0 (no message: nobody waits, queue.lua). Anything else
-- (holds left, a retry, a give-back, a lock-delay, a queue to grant from, nothing held) falls
-- through to release.lua, which `src/scripts.rs` puts after queue.lua, fence.lua and
-- queue_lock.lua behind this.
--
-- The lean form is that case's own request, which the client sends for a guard's last hold of
-- a lock without lock-delay (first attempt, no hand-over): KEYS[1] the lock hash, ARGV[1] the
-- owner field, ARGV[2] how many holds to give back; 1 key and 2 arguments instead of 2 and 5
-- (each costs the server about 1.6k instructions). It answers as
-- release.lua does, except when holds would remain (the server counts more than the client
-- knew: a grant a cancelled waiter of the owner is giving back): then it changes nothing and
-- answers the status FULL, and the client sends the short form, which lengthens the lease and
-- writes the latch that a retry of such a release needs. A lean batch (release.lua) has KEYS[i],
-- ARGV[2i-1] and ARGV[2i] for i = 1..n.
--
-- Server instructions per call (callgrind on Redis 7.0.15, `bench/scripts/server_cost.sh`):
-- the lean form 37.5k (the short form, then with 2 keys and 6 arguments and the PUBLISH every
-- release once made, 49.7k; through release.lua 67.9k). rslock's compare-and-delete: 25.0k. A release that grants the lock to the queue's head falls through
-- with what it read here (below): about 135k, of which making fence.lua's and the queue's
-- functions is about 15k; a contended cycle (that release, and the releaser's next attempt
-- refused and queued) 234k, 248k before the reads were passed on and entries concatenated.

-- What this path read before falling through, so release.lua need not read it again: the
-- owner's count (HGET: false when absent), and the queue's first element (LINDEX: false when
-- empty), each with whether it was read.
local plain_held_read, plain_held, plain_head_read, plain_head = false, nil, false, nil

-- A guard's last release of field's holds (holds of them) where nobody is queued: the field
-- goes and it answers 0. Otherwise it answers nil and what it read: the count (false when
-- absent), and the queue's first element when the release would free the lock (nil when it
-- would not: holds would remain, or nothing is held).
local function last_hold(hash, field, holds)
    local held = redis.call('HGET', hash, field)
    -- Count 0 is a grant from the queue its waiter took: one hold (queue_lock.lua).
    if held == '1' or held == '0' or (held and tonumber(held) <= tonumber(holds)) then
        local head = redis.call('LINDEX', hash .. ':q', 0)
        if not head then
            -- The queue read before the field goes (see release.lua on slot migrations).
            redis.call('HDEL', hash, field)
            return 0
        end
        return nil, held, head
    end
    return nil, held, nil
end

local lean = #ARGV == 2 * #KEYS
if (lean and #KEYS == 1) or (#ARGV == 5 and ARGV[5] == '-') then
    local holds = lean and ARGV[2] or ARGV[4]
    local reply, held, head = last_hold(KEYS[1], ARGV[1], holds)
    if reply then
        return reply
    end
    if lean and held and not head then
        return redis.status_reply('FULL')
    end
    plain_held_read, plain_held, plain_head_read, plain_head = true, held, head ~= nil, head
end
