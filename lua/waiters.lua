-- waiters.lua: reads a waiter queue (queue.lua) without changing it: `Lock::waiters` and the
-- family's, `Lock::status`, the CLI's `status` and `watch`. Only reads (LINDEX, HGETALL, TIME:
-- rights every user of the locks has already, docs/acl.md), so reading never moves a waiter,
-- drops an entry or grants anything; a script so that the clock and the queue are read at
-- one instant, on the server of the queue's slot.
--
-- KEYS[1]  the queue's list   <object>:q
-- KEYS[2]  its entries        <object>:qd
-- ARGV[1]  how many names to read at most, from the head
--
-- Returns {now ms, name, deadline ms, listed ms or '', name, ...}: the live waiters in queue
-- order (the order they are granted in). Left out: dead entries (past their deadline: the
-- next call that meets them drops them), names listed without an entry (the same). 'listed' is when the name was put in the list ('@<name>',
-- queue.lua: '<s> <us>'); '' for an entry written by a version that did not keep it.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local flat = redis.call('HGETALL', KEYS[2])
local entries = {}
for i = 1, #flat, 2 do
    entries[flat[i]] = flat[i + 1]
end
local reply = {now}
-- Bounded by ARGV[1]; LINDEX, not LRANGE: a right the locks' users have already.
for i = 0, tonumber(ARGV[1]) - 1 do
    local name = redis.call('LINDEX', KEYS[1], i)
    if not name then
        break
    end
    local deadline = tonumber(string.match(entries[name] or '', '^(%d+) '))
    if deadline and deadline > now then
        reply[#reply + 1] = name
        reply[#reply + 1] = deadline
        reply[#reply + 1] = entries['@' .. name] or ''
    end
end
return reply
