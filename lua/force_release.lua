-- force_release.lua: delete a lock whoever holds it (operators, `force_unlock`) and wake waiters.
--
-- KEYS[1]  lock hash            P:{N}
-- KEYS[2]  unlock channel       P:{N}:unlock
--
-- Returns 1 when a lock was held and is now deleted, 0 when it was free.
-- A key of another type is left alone and fails with WRONGTYPE.

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then
    return 0
end
if kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], '0')
return 1
