-- rwlock.lua: a read-write lock with a lease per hold (`src/family/rwlock.rs`).
--
-- Always called as a batch of one or more entries (one client's concurrent calls coalesced,
-- `src/node/calls/family_calls.rs`); per entry:
-- KEYS     lock hash P:{N}:rw (fields below; PEXPIRE = the latest deadline in it), and channel
--          P:{N}:rw:unlock (published when a release lets others in)
-- ARGV     2 (its key count), 4 (its argument count), then
--          operation: 'read', 'reenter' (a read that a writer's intent does not hold back: the
--            owner already reads in another name), 'write', 'unread', 'unwrite', 'renew_read',
--            'renew_write', 'withdraw'
--          owner field <client uuid>:<owner>
--          lease in milliseconds ('read', 'reenter', 'write', 'renew_*')
--          write intent lease in milliseconds ('write'): how long a waiting writer keeps new
--            readers out without asking again; '0' for a single attempt, which leaves no intent
-- The entries run in order, exactly as the same calls sent one after another would; the reply
-- has a pair per entry, {1, reply} or {0, error message} (a key of another type: WRONGTYPE,
-- before anything of that key is written).
--
-- Fields (deadlines are the server's clock, TIME, in milliseconds):
--   w  wn  wd                the writer, its hold count, its deadline
--   r:<owner>  rd:<owner>    a reader's hold count and deadline (one lease per reader)
--   q:<owner>                a waiting writer's intent, until its deadline
--   rn  rlo  rhi             how many readers; a time at or before every reader's deadline;
--                            one at or after every reader's deadline (absent when none)
--   qn  qlo  qhi             the same for the intents
--
-- Why this shape: a batch reads the fields it needs of each lock once (one HMGET, whatever the
-- number of readers) and writes each lock once at the end, so an entry costs little more than
-- its arguments. Only when a deadline may have passed (now >= rlo or now >= qlo) is the whole
-- hash read, what ended dropped and the bounds made exact again; renewals only move deadlines
-- later, so the lower bounds stay true until then. An expired reader therefore never keeps the
-- lock for the others: the first call after its deadline drops it.
--
-- Replies
--   read, write   n >= 1: granted, this owner's hold count of that kind
--                 0: 'write' asked by an owner that reads and does not write (an upgrade would
--                    deadlock); nothing changed
--                 n <= -2: held by others; worth asking again in -n - 2 ms at the latest (the
--                    writer's deadline, or the next reader deadline that may free the lock). A
--                    'write' that is refused leaves its intent: new readers wait for it
--   unread, unwrite   -1 the owner held nothing of that kind (expired, or never); else the holds
--                 left; '0' is published when the release lets others in (not when a later
--                 entry of the batch took the write lock: nobody else could come in)
--   renew_*       1 renewed, 0 not held
--   withdraw      1 (the intent is gone; '0' is published when it held readers back)

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local COMMON = { 'w', 'wn', 'wd', 'rn', 'rlo', 'rhi', 'qn', 'qlo', 'qhi' }

-- The entries, and per lock a view: the fields this batch reads and writes.
local entries, views, order = {}, {}, {}
local k, a = 1, 1
while a <= #ARGV do
    local nkeys, nargs = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local e = {
        key = KEYS[k], channel = KEYS[k + 1], op = ARGV[a + 2], owner = ARGV[a + 3],
        lease = tonumber(ARGV[a + 4] or '0'), intent = tonumber(ARGV[a + 5] or '0'),
    }
    k, a = k + nkeys, a + 2 + nargs
    entries[#entries + 1] = e
    local v = views[e.key]
    if not v then
        v = { key = e.key, channel = e.channel, want = { unpack(COMMON) }, owners = {},
              f = {}, dirty = {}, latest = 0, publish = false }
        views[e.key] = v
        order[#order + 1] = e.key
    end
    if not v.owners[e.owner] then
        v.owners[e.owner] = true
        local w = v.want
        w[#w + 1], w[#w + 2], w[#w + 3] = 'r:' .. e.owner, 'rd:' .. e.owner, 'q:' .. e.owner
    end
end

local function num(v, field)
    return tonumber(v.f[field] or '0')
end

local function set(v, field, value)
    v.f[field] = value
    v.dirty[field] = true
end

-- Writes the count and bounds of one kind ('r' or 'q'); a kind with none has no fields.
local function store(v, kind, n, lo, hi)
    if n > 0 then
        set(v, kind .. 'n', n)
        set(v, kind .. 'lo', lo)
        set(v, kind .. 'hi', hi)
    else
        set(v, kind .. 'n', nil)
        set(v, kind .. 'lo', nil)
        set(v, kind .. 'hi', nil)
    end
end

-- A deadline may have passed: read everything, drop what ended, make the bounds exact.
local function scan(v)
    local fields = redis.call('HGETALL', v.key)
    v.f = {}
    for i = 1, #fields, 2 do
        v.f[fields[i]] = fields[i + 1]
    end
    local rn, rlo, rhi, qn, qlo, qhi = 0, 0, 0, 0, 0, 0
    for field, value in pairs(v.f) do
        local head, deadline = string.sub(field, 1, 2), tonumber(value)
        if head == 'rd' and string.sub(field, 3, 3) == ':' then
            if deadline > now then
                rn = rn + 1
                if rlo == 0 or deadline < rlo then rlo = deadline end
                if deadline > rhi then rhi = deadline end
            else
                set(v, 'r:' .. string.sub(field, 4), nil)
                set(v, field, nil)
            end
        elseif head == 'q:' then
            if deadline > now then
                qn = qn + 1
                if qlo == 0 or deadline < qlo then qlo = deadline end
                if deadline > qhi then qhi = deadline end
            else
                set(v, field, nil)
            end
        end
    end
    store(v, 'r', rn, rlo, rhi)
    store(v, 'q', qn, qlo, qhi)
end

for _, key in ipairs(order) do
    local v = views[key]
    local got = redis.pcall('HMGET', key, unpack(v.want))
    if got.err then
        v.err = got.err
    else
        for i, field in ipairs(v.want) do
            if got[i] then v.f[field] = got[i] end
        end
        if v.f.w and num(v, 'wd') <= now then
            set(v, 'w', nil)
            set(v, 'wn', nil)
            set(v, 'wd', nil)
        end
        if (num(v, 'rn') > 0 and num(v, 'rlo') <= now) or (num(v, 'qn') > 0 and num(v, 'qlo') <= now) then
            scan(v)
        end
    end
end

-- How long a refused caller may wait before asking again: until the writer's deadline, or
-- until the earliest reader deadline (a reader that ended by then is dropped by that call).
local function refused(v)
    if v.f.w then
        return -2 - (num(v, 'wd') - now)
    end
    return -2 - math.max(num(v, 'rlo') - now, 1)
end

local function drop_intent(v, owner)
    if not v.f['q:' .. owner] then
        return false
    end
    set(v, 'q:' .. owner, nil)
    store(v, 'q', num(v, 'qn') - 1, num(v, 'qlo'), num(v, 'qhi'))
    return true
end

local ops = {}

function ops.read(v, e)
    local owner, writer = e.owner, v.f.w
    if writer and writer ~= owner then
        return refused(v)
    end
    local reads = num(v, 'r:' .. owner)
    -- A re-entry, or a writer taking the read lock, never waits; anybody else waits for the
    -- writers that wait.
    local mine = v.f['q:' .. owner] and 1 or 0
    if reads == 0 and writer ~= owner and not e.reentry and num(v, 'qn') - mine > 0 then
        return -2 - 1000
    end
    local deadline = now + e.lease
    if reads == 0 then
        local rn = num(v, 'rn')
        if rn == 0 then
            store(v, 'r', 1, deadline, deadline)
        else
            store(v, 'r', rn + 1, math.min(num(v, 'rlo'), deadline), math.max(num(v, 'rhi'), deadline))
        end
    else
        deadline = math.max(deadline, num(v, 'rd:' .. owner))
        set(v, 'rhi', math.max(num(v, 'rhi'), deadline))
    end
    set(v, 'r:' .. owner, reads + 1)
    set(v, 'rd:' .. owner, deadline)
    v.latest = math.max(v.latest, deadline)
    return reads + 1
end

-- A read by an owner that already reads in another name (the client's shared read hold):
-- a re-entry, which a waiting writer's intent does not hold back.
function ops.reenter(v, e)
    e.reentry = true
    return ops.read(v, e)
end

function ops.write(v, e)
    local owner, writer = e.owner, v.f.w
    if writer == owner then
        local deadline = math.max(num(v, 'wd'), now + e.lease)
        local writes = num(v, 'wn') + 1
        set(v, 'wn', writes)
        set(v, 'wd', deadline)
        v.latest = math.max(v.latest, deadline)
        return writes
    end
    if num(v, 'r:' .. owner) > 0 then
        return 0
    end
    if writer or num(v, 'rn') > 0 then
        if e.intent > 0 then
            local deadline = now + e.intent
            local qn = num(v, 'qn')
            if not v.f['q:' .. owner] then
                qn = qn + 1
            end
            if qn == 1 then
                store(v, 'q', 1, deadline, deadline)
            else
                store(v, 'q', qn, math.min(num(v, 'qlo'), deadline), math.max(num(v, 'qhi'), deadline))
            end
            set(v, 'q:' .. owner, deadline)
            v.latest = math.max(v.latest, deadline)
        end
        return refused(v)
    end
    drop_intent(v, owner)
    local deadline = now + e.lease
    set(v, 'w', owner)
    set(v, 'wn', 1)
    set(v, 'wd', deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

function ops.unread(v, e)
    local reader = 'r:' .. e.owner
    local reads = num(v, reader)
    if reads == 0 then
        return -1
    end
    if reads > 1 then
        set(v, reader, reads - 1)
        return reads - 1
    end
    set(v, reader, nil)
    set(v, 'rd:' .. e.owner, nil)
    local rn = num(v, 'rn') - 1
    if rn > 0 then
        set(v, 'rn', rn)
    else
        store(v, 'r', 0)
        if not v.f.w then
            v.publish = true
        end
    end
    return 0
end

function ops.unwrite(v, e)
    if v.f.w ~= e.owner then
        return -1
    end
    local writes = num(v, 'wn') - 1
    if writes > 0 then
        set(v, 'wn', writes)
        return writes
    end
    set(v, 'w', nil)
    set(v, 'wn', nil)
    set(v, 'wd', nil)
    v.publish = true
    return 0
end

function ops.renew_read(v, e)
    if num(v, 'r:' .. e.owner) == 0 then
        return 0
    end
    local deadline = now + e.lease
    local rn = num(v, 'rn')
    if rn == 1 then
        store(v, 'r', 1, deadline, deadline)
    else
        store(v, 'r', rn, math.min(num(v, 'rlo'), deadline), math.max(num(v, 'rhi'), deadline))
    end
    set(v, 'rd:' .. e.owner, deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

function ops.renew_write(v, e)
    if v.f.w ~= e.owner then
        return 0
    end
    local deadline = now + e.lease
    set(v, 'wd', deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

function ops.withdraw(v, e)
    -- Readers held back by this intent may come in now.
    if drop_intent(v, e.owner) and not v.f.w then
        v.publish = true
    end
    return 1
end

local out = {}
for i, e in ipairs(entries) do
    local v, op = views[e.key], ops[e.op]
    if v.err then
        out[i] = { 0, v.err }
    elseif not op then
        out[i] = { 0, 'ERR unknown rwlock operation' }
    else
        out[i] = { 1, op(v, e) }
    end
end

-- Write each lock once. Nothing is left of a lock without a writer, readers or intents; the
-- key lives as long as the latest deadline in it (the upper bounds), never shorter.
for _, key in ipairs(order) do
    local v = views[key]
    if not v.err and next(v.dirty) then
        if not v.f.w and num(v, 'rn') == 0 and num(v, 'qn') == 0 then
            redis.call('DEL', key)
        else
            local sets, dels = {}, {}
            for field in pairs(v.dirty) do
                local value = v.f[field]
                if value then
                    sets[#sets + 1], sets[#sets + 2] = field, value
                else
                    dels[#dels + 1] = field
                end
            end
            if #dels > 0 then
                redis.call('HDEL', key, unpack(dels))
            end
            if #sets > 0 then
                redis.call('HSET', key, unpack(sets))
            end
            if v.latest > 0 then
                local latest = math.max(v.latest, num(v, 'rhi'), num(v, 'qhi'))
                if v.f.w then
                    latest = math.max(latest, num(v, 'wd'))
                end
                redis.call('PEXPIRE', key, latest - now)
            end
        end
    end
    -- A release that a later entry's write grant followed lets nobody else in: no message.
    if v.publish and not v.f.w then
        redis.call('PUBLISH', v.channel, '0')
    end
end
return out
