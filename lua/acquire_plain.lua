-- acquire_plain.lua: the short form of acquire.lua (a plain lock: no fence, no lock-delay,
-- never queued), answered before anything else of the script is made. Not a script of its own:
-- `src/scripts.rs` puts it first, before queue.lua, fence.lua, queue_lock.lua and acquire.lua,
-- whose long form and batch come after it.
--
-- Why first: a script's chunk runs whole on every call, and each function it defines is a
-- closure made anew; the dozen of fence.lua and the queue's cost a free lock's acquisition about
-- a fifth of its server instructions, for nothing.
--
-- Server instructions per call (callgrind on Redis 7.0.15, `bench/scripts/server_cost.sh`):
-- this path on a free lock 39.4k (47.0k with the prelude before it, when measured at 37.6k),
-- of which the EVALSHA itself is 12.2k, its key and 3 arguments 6.8k, each redis.call about
-- 2.2k plus the command (EXISTS, HSET, PEXPIRE), and Lua's GC step about 2k. rslock's SET NX
-- PX: 11.2k. Asking EXISTS about the lock-delay marker too (every acquirer honours it) costs
-- 1.8k of the 39.4k: the lock and the marker in one call, not a second redis.call.

-- Whether ARGV[3] says this owner holds the lock already, and whether the lock is reentrant.
local function reentry_mode(reentrant)
    return reentrant == '2' or reentrant == '3', reentrant == '1' or reentrant == '2'
end

-- The short form: a plain lock (no fence, no lock-delay), never queued. A grant to this owner
-- (count 0) that it does not hold yet (a wait that ended before it could take it) is claimed
-- like a free lock.
local function acquire(hash, field, lease, reentrant)
    -- The lock and its lock-delay marker in one call: a free lock with no marker is the common
    -- case, and the marker binds every acquirer whatever its own options (acquire.lua).
    if redis.call('EXISTS', hash, hash .. ':delay') == 0 then
        redis.call('HSET', hash, field, '1')
        redis.call('PEXPIRE', hash, lease)
        return 1
    end
    local held = redis.call('HGET', hash, field)
    if not held then
        local ttl = redis.call('PTTL', hash)
        if ttl == -2 then
            -- Free, but in a lapsed holder's lock-delay: refused until the marker ends (not
            -- acquire.lua's delay_left: a function defined here is made on every call).
            ttl = redis.call('PTTL', hash .. ':delay')
            if ttl == -2 then
                redis.call('HSET', hash, field, '1')
                redis.call('PEXPIRE', hash, lease)
                return 1
            end
        end
        return -2 - ttl
    end
    local here, reenters = reentry_mode(reentrant)
    if held == '0' then
        if not here then
            redis.call('HSET', hash, field, '1')
            redis.call('PEXPIRE', hash, lease)
            return 1
        end
        held = '1'
    end
    if not reenters then
        return 0
    end
    local count = tonumber(held) + 1
    redis.call('HSET', hash, field, count)
    -- A re-entry may lengthen the lease, never shorten it: a shorter inner lease would let the
    -- key expire under the outer hold, whose renewal schedule follows the outer lease.
    if redis.call('PTTL', hash) < tonumber(lease) then
        redis.call('PEXPIRE', hash, lease)
    end
    return count
end

if #ARGV == 3 then
    return acquire(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
end
