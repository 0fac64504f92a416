-- rwlock.lua: a read-write lock with a lease per hold (`src/family/rwlock.rs`).
--
-- KEYS[1]  lock hash   P:{N}:rw         fields below; PEXPIRE = the latest deadline in it
-- KEYS[2]  channel     P:{N}:rw:unlock  published when a release lets others in
-- ARGV[1]  operation: 'read', 'write', 'unread', 'unwrite', 'renew_read', 'renew_write',
--          'withdraw'
-- ARGV[2]  owner field <client uuid>:<owner>
-- ARGV[3]  lease in milliseconds ('read', 'write', 'renew_*')
-- ARGV[4]  write intent lease in milliseconds ('write'): how long a waiting writer keeps new
--          readers out without asking again; '0' for a single attempt, which leaves no intent
--
-- Fields (deadlines are the server's clock, TIME, in milliseconds):
--   w  wn  wd          the writer, its hold count, its deadline
--   r:<owner>  rd:<owner>   a reader's hold count and deadline (one lease per reader)
--   q:<owner>          a waiting writer's intent, until its deadline
-- Every call first drops the holds and intents past their deadline, so an expired reader never
-- keeps the lock for the others.
--
-- Returns
--   read, write   n >= 1: granted, this owner's hold count of that kind
--                 0: 'write' asked by an owner that reads and does not write (an upgrade would
--                    deadlock); nothing changed
--                 n <= -2: held by others; the blocking holds end in -n - 2 ms at the latest. A
--                    'write' that is refused leaves its intent: new readers wait for it
--   unread, unwrite   -1 the owner held nothing of that kind (expired, or never); else the holds
--                 left; '0' is published when the release lets others in
--   renew_*       1 renewed, 0 not held
--   withdraw      1 (the intent is gone; '0' is published when it held readers back)
-- A key of another type fails with WRONGTYPE before anything is written.

local key, channel, op, owner = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local lease = tonumber(ARGV[3] or '0')

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Drop what expired; learn who holds and waits.
local writer, writer_until = nil, 0
local readers, reader_until = 0, 0
local intents = 0
local fields = redis.call('HGETALL', key)
local values = {}
for i = 1, #fields, 2 do
    values[fields[i]] = fields[i + 1]
end
if values['w'] then
    writer_until = tonumber(values['wd'])
    if writer_until > now then
        writer = values['w']
    else
        redis.call('HDEL', key, 'w', 'wn', 'wd')
    end
end
-- One pass: who reads and waits, what expired (dropped), and the latest deadline. The key lives
-- as long as its latest deadline (at least: a release does not shorten it, and whatever ended
-- is dropped by the next call), and goes when nothing is left in it.
local latest = writer_until
for field, value in pairs(values) do
    local head = string.sub(field, 1, 3)
    if head == 'rd:' then
        local deadline = tonumber(value)
        latest = math.max(latest, deadline)
        if deadline > now then
            readers = readers + 1
            reader_until = math.max(reader_until, deadline)
        else
            redis.call('HDEL', key, 'r:' .. string.sub(field, 4), field)
        end
    elseif string.sub(head, 1, 2) == 'q:' then
        local deadline = tonumber(value)
        latest = math.max(latest, deadline)
        if deadline > now then
            if string.sub(field, 3) ~= owner then
                intents = intents + 1
            end
        else
            redis.call('HDEL', key, field)
        end
    end
end

-- A key that this call emptied is gone already; PEXPIRE on it does nothing.
local function settle()
    if latest > now then
        redis.call('PEXPIRE', key, latest - now)
    else
        redis.call('DEL', key)
    end
end

-- `values` is the hash as this call found it: nothing before `extend` changes these fields.
local function extend(deadline_field)
    local old = tonumber(values[deadline_field] or '0')
    local deadline = math.max(old, now + lease)
    redis.call('HSET', key, deadline_field, deadline)
    latest = math.max(latest, deadline)
end

local reads = tonumber(values['r:' .. owner] or '0')
if reads > 0 and tonumber(values['rd:' .. owner] or '0') <= now then
    reads = 0
end

if op == 'read' then
    if writer and writer ~= owner then
        return -2 - (writer_until - now)
    end
    -- A re-entry, or a writer taking the read lock, never waits; anybody else waits for the
    -- writers that wait.
    if reads == 0 and writer ~= owner and intents > 0 then
        return -2 - 1000
    end
    local count = redis.call('HINCRBY', key, 'r:' .. owner, 1)
    extend('rd:' .. owner)
    settle()
    return count
elseif op == 'write' then
    if writer == owner then
        local count = redis.call('HINCRBY', key, 'wn', 1)
        extend('wd')
        settle()
        return count
    end
    if reads > 0 then
        return 0
    end
    if writer or readers > 0 then
        if tonumber(ARGV[4]) > 0 then
            redis.call('HSET', key, 'q:' .. owner, now + tonumber(ARGV[4]))
            latest = math.max(latest, now + tonumber(ARGV[4]))
            settle()
        end
        if writer then
            return -2 - (writer_until - now)
        end
        return -2 - (reader_until - now)
    end
    redis.call('HDEL', key, 'q:' .. owner)
    redis.call('HSET', key, 'w', owner, 'wn', 1, 'wd', now + lease)
    latest = math.max(latest, now + lease)
    settle()
    return 1
elseif op == 'unread' then
    if reads == 0 then
        return -1
    end
    local count = redis.call('HINCRBY', key, 'r:' .. owner, -1)
    if count <= 0 then
        redis.call('HDEL', key, 'r:' .. owner, 'rd:' .. owner)
        if readers == 1 and not writer then
            redis.call('PUBLISH', channel, '0')
        end
    end
    settle()
    return math.max(count, 0)
elseif op == 'unwrite' then
    if writer ~= owner then
        return -1
    end
    local count = redis.call('HINCRBY', key, 'wn', -1)
    if count <= 0 then
        redis.call('HDEL', key, 'w', 'wn', 'wd')
        redis.call('PUBLISH', channel, '0')
    end
    settle()
    return math.max(count, 0)
elseif op == 'renew_read' or op == 'renew_write' then
    local held = (op == 'renew_read' and reads > 0) or (op == 'renew_write' and writer == owner)
    if not held then
        return 0
    end
    local field = 'wd'
    if op == 'renew_read' then
        field = 'rd:' .. owner
    end
    redis.call('HSET', key, field, now + lease)
    latest = math.max(latest, now + lease)
    settle()
    return 1
elseif op == 'withdraw' then
    -- Readers held back by this intent may come in now.
    if redis.call('HDEL', key, 'q:' .. owner) == 1 and not writer then
        redis.call('PUBLISH', channel, '0')
    end
    settle()
    return 1
end
return redis.error_reply('ERR unknown rwlock operation')
