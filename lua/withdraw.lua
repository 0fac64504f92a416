-- withdraw.lua: a waiter stops waiting (its wait ran out, it was cancelled, it failed): its
-- queue entry goes, and a grant it had not taken yet goes to the next waiter (queue.lua,
-- fence.lua and queue_lock.lua, which `scripts.rs` puts before this file).
--
-- KEYS[1]  lock hash            P:{N}
-- ARGV[1]  the waiter's owner field
--
-- Returns 1 when an unclaimed grant was given back, 0 otherwise. A claimed hold (count >= 1)
-- is never touched: that is the owner's, released by its guard.

local hash, field = KEYS[1], ARGV[1]
dequeue(hash, field)
if redis.call('HGET', hash, field) ~= '0' then
    return 0
end
-- The lock-delay marker the grant wrote for a hold nobody used (queue_lock.lua) goes with it,
-- before the next waiter's grant, which writes its own when its terms ask for one: a marker
-- left for a waiter without a delay would refuse every acquirer once that waiter released.
redis.call('DEL', hash .. ':delay')
-- The next waiter's hold first, while ours keeps the hash alive (see release.lua).
grant_head(hash)
redis.call('HDEL', hash, field)
return 1
