-- renew.lua: extend the leases of many held locks in one round trip (the watchdog's batch).
--
-- KEYS[i]      lock hash of the i-th lock
-- ARGV[2i-1]   owner field of the i-th lock
-- ARGV[2i]     lease in milliseconds for the i-th lock
--
-- Returns an array with one integer per lock: 1 renewed, 0 not held any more (expired, deleted,
-- force-unlocked, or the key now has another type). One bad key never fails the batch.

local renewed = {}
for i, key in ipairs(KEYS) do
    local held = redis.pcall('HEXISTS', key, ARGV[2 * i - 1])
    if held == 1 then
        redis.call('PEXPIRE', key, ARGV[2 * i])
        renewed[i] = 1
    else
        renewed[i] = 0
    end
end
return renewed
