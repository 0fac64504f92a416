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
        local ok = true
        if plus then
            local delay = tonumber(string.sub(lease, plus + 1))
            lease = tonumber(string.sub(lease, 1, plus - 1))
            -- Derived like the channel: the marker shares the lock's hash tag, so its slot; in
            -- a slot migration it may be elsewhere already, and this lock is then not renewed
            -- here (0) rather than failing the batch.
            -- Extended first, which needs no memory: a full server (`noeviction`) refuses only
            -- a script's first write that needs memory, so a missing marker is written anew
            -- after it, and a full server never makes a renewal read as a lost hold.
            local marker, life = key .. ':delay', lease + delay
            local set = redis.pcall('PEXPIRE', marker, life)
            if set == 0 then
                set = redis.pcall('SET', marker, '1', 'PX', life)
            end
            ok = not (type(set) == 'table' and set.err)
        end
        if ok then
            redis.call('PEXPIRE', key, lease)
            renewed[i] = 1
        else
            renewed[i] = 0
        end
    else
        renewed[i] = 0
    end
end
return renewed
