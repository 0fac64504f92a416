-- fence.lua: how fencing tokens are made. Not a script of its own: `src/scripts.rs` puts it
-- before each script that hands out tokens (acquire.lua, release.lua, raise_fence.lua).
--
-- A token is max(last + 1, the server's clock in microseconds), where last is the counter
-- P:{N}:fence. The counter lives only as long as the lease it was written with plus a grace
-- period, so fencing costs memory only for locks in use. A token made after the counter
-- expired is still above every earlier one, because the clock moved on; the grace covers a
-- server clock stepped backwards by up to that much. After a failover the new primary's clock
-- counts: a token lost with an unreplicated write is below every token the new primary makes
-- unless its clock is behind the old one's by more than the failover took.
-- Old counters (small integers from before tokens followed the clock) are far below the clock,
-- so the first new token is above them: no migration.
-- Lua numbers are doubles: microseconds since 1970 (about 2^50.6) stay exact below 2^53.

-- The server's clock in microseconds.
local function clock_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The counter's value, or 0 when absent; an error reply when it is not an integer.
local function last_token(fence)
    local last = redis.call('GET', fence)
    if not last then
        return 0
    end
    local n = tonumber(last)
    if not n then
        error({err = 'ERR the fencing counter is not an integer'})
    end
    return n
end

-- Writes token n with expiry ttl_ms. '%d' keeps every digit ('%.14g' would not).
local function store_token(fence, n, ttl_ms)
    redis.call('SET', fence, string.format('%d', n), 'PX', ttl_ms)
end

-- A new token, larger than every token this lock name had, written back with expiry ttl_ms.
local function next_token(fence, ttl_ms)
    local last = last_token(fence)
    local token = clock_us()
    if token <= last then
        token = last + 1
    end
    store_token(fence, token, ttl_ms)
    return token
end

-- The token of the current holder (the counter), its expiry made at least ttl_ms; a new token
-- when the counter expired under a long hold.
local function held_token(fence, ttl_ms)
    local last = last_token(fence)
    if last == 0 then
        return next_token(fence, ttl_ms)
    end
    if redis.call('PTTL', fence) < ttl_ms then
        redis.call('PEXPIRE', fence, ttl_ms)
    end
    return last
end
