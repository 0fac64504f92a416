-- force_release.lua: delete a lock whoever holds it (operators, `force_unlock`) and give it to
-- the first queued waiter (queue.lua, fence.lua and queue_lock.lua, which `src/scripts.rs` puts
-- before this file); MultiLock members that watch it are told as their marker goes (queue.lua).
--
-- KEYS[1]  lock hash            P:{N}
--
-- Returns 1 when a lock was held and is now deleted, 0 when it was free.
-- A lock-delay (the marker P:{N}:delay, see acquire.lua) ends too: the lock is free at once.
-- A key of another type is left alone and fails with WRONGTYPE.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
-- Derived like the channel: the marker shares the lock's hash tag, so its slot.
local delayed = redis.call('DEL', KEYS[1] .. ':delay') == 1
if kind == 'none' and not delayed then
    return 0
end
redis.call('DEL', KEYS[1])
grant_head(KEYS[1])
if kind == 'none' then
    return 0
end
return 1
