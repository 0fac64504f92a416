-- renew.lua: extend the leases of many held locks in one round trip (the watchdog's batch).
--
-- KEYS[i]      lock hash of the i-th lock
-- ARGV[2i-1]   owner field of the i-th lock
-- ARGV[2i]     lease in milliseconds for the i-th lock; '<lease>+<delay>' for a lock with a
--              lock-delay, whose marker P:{N}:delay then lives lease + delay (see acquire.lua)
--
-- Returns an array with one integer per lock: 1 renewed, 0 not held any more (expired, deleted,
-- force-unlocked, or the key now has another type). One bad key never fails the batch.

local renewed = {}
for i, key in ipairs(KEYS) do
    local held = redis.pcall('HEXISTS', key, ARGV[2 * i - 1])
    if held == 1 then
        local lease = ARGV[2 * i]
        local plus = string.find(lease, '+', 1, true)
        if plus then
            local delay = tonumber(string.sub(lease, plus + 1))
            lease = tonumber(string.sub(lease, 1, plus - 1))
            -- Derived like the channel: the marker shares the lock's hash tag, so its slot.
            redis.call('SET', key .. ':delay', '1', 'PX', lease + delay)
        end
        redis.call('PEXPIRE', key, lease)
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
