#!lua flags=allow-cross-slot-keys,allow-oom
-- renew_node.lua: the watchdog's renewal on a Redis Cluster, one call per node rather than
-- per slot (`src/node/calls/renew_by_node.rs`). A script may declare keys of one slot only, so the
-- locks come as arguments, and the flag lets the script reach the keys of every slot this
-- node serves. A key the node does not serve (a stale slot map, a slot on the move) is not an
-- error of the call: it is answered 0, and the client renews it again the per-slot way,
-- which follows redirections. Only a 1 is trusted. `allow-oom`: a renewal extends what is
-- there (a lock-delay's marker written anew at most), so a full server (`noeviction`) runs it
-- rather than refusing the call, as it runs renew.lua, and no hold is lost to a full server.
--
-- ARGV[3i-2]  lock hash of the i-th lock
-- ARGV[3i-1]  owner field of the i-th lock
-- ARGV[3i]    lease in milliseconds for the i-th lock; '<lease>+<delay>' for a lock with a
--             lock-delay, as in renew.lua
--
-- Returns an array with one integer per lock: 1 renewed, 0 not renewed here.

local renewed = {}
for i = 1, #ARGV, 3 do
    local ok, held = pcall(redis.call, 'HEXISTS', ARGV[i], ARGV[i + 1])
    if ok and held == 1 then
        local lease = ARGV[i + 2]
        local plus = string.find(lease, '+', 1, true)
        local marked = true
        if plus then
            local delay = tonumber(string.sub(lease, plus + 1))
            lease = tonumber(string.sub(lease, 1, plus - 1))
            local marker, life = ARGV[i] .. ':delay', lease + delay
            local extended
            marked, extended = pcall(redis.call, 'PEXPIRE', marker, life)
            if marked and extended == 0 then
                marked = pcall(redis.call, 'SET', marker, '1', 'PX', life)
            end
        end
        if marked then
            redis.call('PEXPIRE', ARGV[i], lease)
            renewed[#renewed + 1] = 1
        else
            renewed[#renewed + 1] = 0
        end
    else
        renewed[#renewed + 1] = 0
    end
end
return renewed
