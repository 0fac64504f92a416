-- rwlock.lua: a read-write lock with a lease per hold (`src/family/rwlock.rs`), and its waiter
-- queue with grant-on-release (queue.lua and queue_permits.lua, which `src/family/rwlock.rs` puts
-- before this file).
--
-- Always called as a batch of one or more entries (one client's concurrent calls coalesced,
-- `src/node/calls/family_calls.rs`); per entry:
-- KEYS     lock hash P:{N}:rw (fields below; PEXPIRE = the latest deadline in it), and channel
--          P:{N}:rw:unlock (grants go to <channel>:<client id>, queue_permits.lua)
-- ARGV     2 (its key count), 7 (its argument count), then
--          operation: 'read', 'reenter' (a read that passes the queue: the owner already reads
--            in another name), 'write', 'unread', 'unwrite', 'renew_read', 'renew_write',
--            'withdraw'
--          owner field <client uuid>:<owner>
--          lease in milliseconds ('read', 'reenter', 'write', 'renew_*')
--          place life in milliseconds ('read', 'write'): how long a refused waiter's place in the
--            queue lives without another attempt; '0' for a single attempt, never queued
--          claim lease in milliseconds ('read', 'write'): how long a grant to it waits for its
--            claim
--          waiter ('read', 'write', 'withdraw'): its name in the queue, '<owner field>#<wait id>',
--            one per wait
--          hand-over ('unread', 'unwrite', 'withdraw'): the caller's client id, to whose waiters
--            the call hands the lock ('-' while that client shuts down: to nobody), then,
--            separated by spaces, waiters of that client that took what a release of it handed
--            them: their records go
-- The entries run in order, exactly as the same calls sent one after another would; the reply
-- has a pair per entry, {1, reply} or {0, error message} (a key of another type: WRONGTYPE,
-- before anything of that key is written).
--
-- Fields (deadlines are the server's clock, TIME, in milliseconds):
--   w  wn  wd                the writer, its hold count, its deadline
--   r:<owner>  rd:<owner>    a reader's hold count and deadline (one lease per reader)
--   rn  rlo  rhi             how many readers; a time at or before every reader's deadline;
--                            one at or after every reader's deadline (absent when none)
-- A negative hold count -k: k grants from the queue to waits of that owner (tasks may share an
-- owner) not claimed yet. They hold the lock against the others until their deadline (the
-- claim lease); the owner's next attempt claims them (count 1, its own lease; the other waits
-- then re-enter), and a grant is never taken for a re-entry.
--
-- P:{N}:rw:qd also keeps records under a waiter's name, once it left the queue:
--   'h r <deadline>', 'h w <deadline>'  a release of the waiter's own client handed it the hold
--       (read or write) outright, until that deadline. Should the waiter miss the reply that
--       says so, its next attempt finds the record and takes the hold without counting it
--       twice, and a withdrawal gives the hold back (both only before the deadline: past it,
--       the owner's hold is not that one any more). The client's next release deletes the
--       records of waiters that took theirs; any other lives as long as the waiter's place
--       would have.
--   'g r <deadline>', 'g w <deadline>'  the waiter was granted the lock until that deadline
--       (its claim lease), not claimed yet: its withdrawal gives that grant back before the
--       deadline (not another wait's of the same owner, not a later grant).
-- A waiter that gets the lock past the queue (a claim, a re-entry, a downgrade) deletes its
-- records and its place.
--
-- Why this shape: a batch reads the fields it needs of each lock once (one HMGET, whatever the
-- number of readers) and writes each lock once at the end, so an entry costs little more than
-- its arguments. Only when a deadline may have passed (now >= rlo) is the whole hash read, what
-- ended dropped and the bounds made exact again; renewals only move deadlines later, so the
-- lower bound stays true until then. An expired reader therefore never keeps the lock for the
-- others: the first call after its deadline drops it.
--
-- The queue: a newcomer (not a re-entry, nor the writer reading) that finds the lock taken, or
-- anybody queued before it, is refused and queued (unless it makes a single attempt). A reader
-- wants one share of the lock and a writer all of it (WHOLE), so queue_permits.lua grants the first
-- readers together and a writer alone, in order. A call that frees the lock (a release, a
-- withdrawal, any call that finds a hold or grant run out) grants it to the queue's head in the
-- same call. It hands the lock outright to a waiter of the caller's own client (a release's or
-- a withdrawal's), named in the reply; anybody else hears of it on its client's channel and
-- claims it with its next attempt.
--
-- Replies
--   read, write   n >= 1: granted (or a grant claimed), this owner's hold count of that kind
--                 0: 'write' asked by an owner that reads and does not write (an upgrade would
--                    deadlock); nothing changed
--                 n <= -2: held by others, or others are queued first (the caller is queued
--                    as asked); worth asking again in -n - 2 ms at the latest (the writer's
--                    deadline, the next reader deadline that may free the lock, or a second)
--   unread, unwrite   -1 the owner held nothing of that kind (expired, or never); else the holds
--                 left; followed, in a table, by the waiters of the releasing client it granted
--                 the lock to (queue_permits.lua's with_handed)
--   renew_*       1 renewed, 0 not held (a grant not claimed is not renewed)
--   withdraw      1 when a grant to the owner went back, else 0; followed by the waiters of
--                 its client granted the lock instead, as a release's

local now = now()

-- What a writer wants of the lock: all of it. A reader wants one share.
local WHOLE = 1000000000

local COMMON = { 'w', 'wn', 'wd', 'rn', 'rlo', 'rhi' }

-- The entries, and per lock a view: the fields this batch reads and writes.
local entries, views, order = {}, {}, {}
local k, a = 1, 1
while a <= #ARGV do
    local nkeys, nargs = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
    local e = {
        key = KEYS[k], channel = KEYS[k + 1], op = ARGV[a + 2], owner = ARGV[a + 3],
        lease = tonumber(ARGV[a + 4] or '0'), life = tonumber(ARGV[a + 5] or '0'),
        claim = tonumber(ARGV[a + 6] or '0'), waiter = ARGV[a + 7] or '',
        hand_over = ARGV[a + 8] or '',
    }
    k, a = k + nkeys, a + 2 + nargs
    entries[#entries + 1] = e
    local v = views[e.key]
    if not v then
        v = { key = e.key, channel = e.channel, want = { unpack(COMMON) }, owners = {},
              f = {}, dirty = {}, latest = 0 }
        views[e.key] = v
        order[#order + 1] = e.key
    end
    if not v.owners[e.owner] then
        v.owners[e.owner] = true
        local w = v.want
        w[#w + 1], w[#w + 2] = 'r:' .. e.owner, 'rd:' .. e.owner
    end
end

local function num(v, field)
    return tonumber(v.f[field] or '0')
end

local function set(v, field, value)
    v.f[field] = value
    v.dirty[field] = true
end

-- Writes the readers' count and bounds; with none, there are no such fields.
local function store_readers(v, n, lo, hi)
    if n > 0 then
        set(v, 'rn', n)
        set(v, 'rlo', lo)
        set(v, 'rhi', hi)
    else
        set(v, 'rn', nil)
        set(v, 'rlo', nil)
        set(v, 'rhi', nil)
    end
end

-- One more reader, until `deadline`.
local function add_reader(v, deadline)
    local rn = num(v, 'rn')
    if rn == 0 then
        store_readers(v, 1, deadline, deadline)
    else
        store_readers(v, rn + 1, math.min(num(v, 'rlo'), deadline), math.max(num(v, 'rhi'), deadline))
    end
end

-- `owner` reads no more (its hold or grant goes).
local function drop_reader(v, owner)
    set(v, 'r:' .. owner, nil)
    set(v, 'rd:' .. owner, nil)
    local rn = num(v, 'rn') - 1
    if rn > 0 then
        set(v, 'rn', rn)
    else
        store_readers(v, 0)
    end
end

local function drop_writer(v)
    set(v, 'w', nil)
    set(v, 'wn', nil)
    set(v, 'wd', nil)
end

-- A deadline may have passed: read everything, drop what ended, make the bounds exact.
-- Returns whether a reader was dropped.
local function scan(v)
    local fields = redis.call('HGETALL', v.key)
    -- Every owner's fields are in the view now (a grant must not read them back: `giver`).
    v.f, v.whole = {}, true
    for i = 1, #fields, 2 do
        v.f[fields[i]] = fields[i + 1]
    end
    local rn, rlo, rhi, dropped = 0, 0, 0, false
    for field, value in pairs(v.f) do
        if string.sub(field, 1, 3) == 'rd:' then
            local deadline = tonumber(value)
            if deadline > now then
                rn = rn + 1
                if rlo == 0 or deadline < rlo then rlo = deadline end
                if deadline > rhi then rhi = deadline end
            else
                set(v, 'r:' .. string.sub(field, 4), nil)
                set(v, field, nil)
                dropped = true
            end
        end
    end
    store_readers(v, rn, rlo, rhi)
    return dropped
end

-- How much of the lock the queue's head may be granted now: nothing while a writer holds it
-- (or was granted it), all of it while nobody holds it.
local function free(v)
    if v.f.w then
        return 0
    end
    return WHOLE - num(v, 'rn')
end

-- The owner field of a waiter's name.
local function owner_of(waiter)
    return string.match(waiter, '^(.*)#[^#]*$') or waiter
end

-- `owner` counts `count` read holds (negative: grants not claimed) until `deadline`.
local function set_reader(v, owner, count, deadline)
    if not v.f['r:' .. owner] then
        add_reader(v, deadline)
    else
        set(v, 'rlo', math.min(num(v, 'rlo'), deadline))
        set(v, 'rhi', math.max(num(v, 'rhi'), deadline))
    end
    set(v, 'r:' .. owner, count)
    set(v, 'rd:' .. owner, deadline)
    v.latest = math.max(v.latest, deadline)
    return count
end

-- `owner` reads once more (`counted` 1), or takes a read hold handed to it (`counted` 0),
-- for `lease` ms from now; an owner with grants not claimed claims them (count 1). Returns
-- the hold count.
local function read_hold(v, owner, lease, counted)
    local reads, deadline = num(v, 'r:' .. owner), now + lease
    if reads > 0 then
        deadline = math.max(deadline, num(v, 'rd:' .. owner))
    end
    return set_reader(v, owner, math.max(reads, 0) + counted, deadline)
end

-- queue_permits.lua's `give` for lock v: to a waiter of another client, an unclaimed grant
-- until the claim lease ends; handed to one of the caller's client, the hold itself; a record
-- of each.
local function giver(v)
    return function(waiter, n, claim, lease, deadline, handed)
        local owner = owner_of(waiter)
        local field = 'r:' .. owner
        if n < WHOLE and not v.owners[owner] and not v.whole then
            -- A reader the batch has not read yet: its fields join the view.
            local got = redis.call('HMGET', v.key, field, 'rd:' .. owner)
            v.f[field], v.f['rd:' .. owner] = got[1] or nil, got[2] or nil
            v.owners[owner] = true
        end
        if handed then
            if n >= WHOLE then
                set(v, 'w', owner)
                set(v, 'wn', 1)
                set(v, 'wd', now + lease)
                v.latest = math.max(v.latest, now + lease)
            else
                read_hold(v, owner, lease, 1)
            end
            local record = (n >= WHOLE and 'h w ' or 'h r ') .. (now + lease)
            redis.call('HSET', fifo_entries, waiter, record)
            outlive(fifo_entries, math.max(deadline - now, 1))
            return
        end
        local until_claimed = now + claim
        local reads = num(v, field)
        if n >= WHOLE then
            set(v, 'w', owner)
            set(v, 'wn', 0)
            set(v, 'wd', until_claimed)
        elseif reads <= 0 then
            -- One grant more for the owner (other waits of it may have theirs); an owner that
            -- reads already takes it as a re-entry when it asks.
            local until_all = until_claimed
            if reads < 0 then
                until_all = math.max(until_all, num(v, 'rd:' .. owner))
            end
            set_reader(v, owner, reads - 1, until_all)
        else
            return
        end
        redis.call('HSET', fifo_entries, waiter, (n >= WHOLE and 'g w ' or 'g r ') .. until_claimed)
        outlive(fifo_entries, claim)
        v.latest = math.max(v.latest, until_claimed)
    end
end

-- Grants what is free of lock v to the queue's first waiters; a waiter of client `own` is
-- handed its grant (listed in v.handed), and a head that is `self` is taken out instead
-- (returns true: the caller takes the lock itself).
local function grant(v, self, own)
    fifo_on(v.key, v.channel)
    local head = queue_head()
    if not head then
        return false
    end
    local took, _, handed = grant_heads(free(v), self, giver(v), own, head)
    for _, waiter in ipairs(handed) do
        v.handed[#v.handed + 1] = waiter
    end
    return took
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
        local freed = false
        if v.f.w and num(v, 'wd') <= now then
            drop_writer(v)
            freed = true
        end
        if num(v, 'rn') > 0 and num(v, 'rlo') <= now then
            freed = scan(v) or freed
        end
        if freed then
            -- A hold or grant ran out: the queue's head may come in (told by its message).
            v.handed = {}
            grant(v, nil, '')
        end
    end
end

-- How long a refused caller may wait before asking again: until the writer's deadline, or
-- until the earliest reader deadline (a reader that ended by then is dropped by that call);
-- a second when it waits for others queued before it.
local function refused(v)
    if v.f.w then
        return -2 - math.max(num(v, 'wd') - now, 1)
    end
    if num(v, 'rn') > 0 then
        return -2 - math.max(num(v, 'rlo') - now, 1)
    end
    return -2 - 1000
end

-- Whether newcomer e, wanting n of the lock, may take it now: the lock is free for it and
-- nobody is queued before it (the queue's first waiters are granted what is free first).
local function admitted(v, e, n)
    if free(v) < n then
        return false
    end
    fifo_on(v.key, v.channel)
    if not queue_head() then
        return true
    end
    return grant(v, e.waiter, '') or (free(v) >= n and not queue_head())
end

-- A refused newcomer: queued (or its place kept) unless it makes a single attempt.
local function refuse(v, e, n)
    if e.life > 0 then
        fifo_on(v.key, v.channel)
        enqueue(fifo_key, e.waiter, e.life, e.claim .. ' ' .. n .. ' ' .. e.lease)
    end
    return refused(v)
end

-- The client a release or withdrawal hands the lock to ('' for none), once it deleted the
-- records its client's waiters took (see above).
local function releasing(v, e)
    fifo_on(v.key, v.channel)
    return handing_to(e.hand_over, fifo_entries)
end

-- A record under a waiter's name (see above): its kind ('h' handed, 'g' granted), its side
-- ('r', 'w'), and whether its deadline is still ahead; nil for a queue entry or nothing.
local function record_of(value)
    local kind, side, deadline = string.match(value or '', '^(%a) (%a) (%d+)$')
    if not kind then
        return nil
    end
    return kind, side, tonumber(deadline) > now
end

-- Deletes what is kept under waiter name `name` (`value`): its record, or its place.
local function forget(name, value)
    if value then
        redis.call('HDEL', fifo_entries, name, '@' .. name)
        if not record_of(value) then
            redis.call('LREM', fifo_queue, 1, name)
        end
    end
end

-- Waiter e gets the lock past the queue (a re-entry, a downgrade, a claim) after it may have
-- been queued, granted or handed it: its place and records go. Returns whether it was handed
-- its hold of `side` by a release of its own client whose reply it missed: it takes that one,
-- which counts nothing more. (A newcomer admitted by the queue has neither place nor record.)
local function settle(v, e, side)
    if e.waiter == '' then
        return false
    end
    fifo_on(v.key, v.channel)
    local value = redis.call('HGET', fifo_entries, e.waiter)
    forget(e.waiter, value)
    local kind, s, live = record_of(value)
    return kind == 'h' and s == side and live
end

local ops = {}

function ops.read(v, e)
    local owner, writer = e.owner, v.f.w
    local reads = num(v, 'r:' .. owner)
    if reads < 0 then
        -- Granted from the queue: claimed, under the reader's own lease from now.
        settle(v, e, 'r')
        return read_hold(v, owner, e.lease, 1)
    end
    if writer and writer ~= owner then
        return refuse(v, e, 1)
    end
    -- A re-entry, or a writer taking the read lock, never queues; anybody else comes after
    -- the waiters queued before it.
    local past = reads > 0 or writer == owner or e.reentry
    if not past and not admitted(v, e, 1) then
        return refuse(v, e, 1)
    end
    -- A hold handed over and taken now gets its lease from now, as a claim does: the client
    -- times it from this call.
    local counted = (past and settle(v, e, 'r')) and 0 or 1
    return read_hold(v, owner, e.lease, counted)
end

-- A read by an owner that already reads in another name (the client's shared read hold):
-- a re-entry, which does not queue.
function ops.reenter(v, e)
    e.reentry = true
    return ops.read(v, e)
end

function ops.write(v, e)
    local owner, writer = e.owner, v.f.w
    local deadline = now + e.lease
    if writer == owner then
        -- A re-entry, or the claim of a grant from the queue (count 0), whose lease starts
        -- now; a hold handed over and taken now counts nothing more (see read).
        local writes = num(v, 'wn')
        local counted = settle(v, e, 'w') and writes > 0 and 0 or 1
        if writes > 0 then
            deadline = math.max(num(v, 'wd'), deadline)
        end
        set(v, 'wn', writes + counted)
        set(v, 'wd', deadline)
        v.latest = math.max(v.latest, deadline)
        return writes + counted
    end
    if num(v, 'r:' .. owner) > 0 then
        return 0
    end
    if not admitted(v, e, WHOLE) then
        return refuse(v, e, WHOLE)
    end
    set(v, 'w', owner)
    set(v, 'wn', 1)
    set(v, 'wd', deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

function ops.unread(v, e)
    local own = releasing(v, e)
    local reader = 'r:' .. e.owner
    local reads = num(v, reader)
    if reads <= 0 then
        return -1
    end
    if reads > 1 then
        set(v, reader, reads - 1)
        return reads - 1
    end
    drop_reader(v, e.owner)
    if num(v, 'rn') == 0 and not v.f.w then
        grant(v, nil, own)
    end
    return 0
end

function ops.unwrite(v, e)
    local own = releasing(v, e)
    if v.f.w ~= e.owner or num(v, 'wn') == 0 then
        return -1
    end
    local writes = num(v, 'wn') - 1
    if writes > 0 then
        set(v, 'wn', writes)
        return writes
    end
    drop_writer(v)
    grant(v, nil, own)
    return 0
end

-- A renewal never shortens the owner's hold: a longer lease of another of its holds of this
-- side (a fixed one, taken before a watchdog re-entry) runs on, as acquisitions keep it.
function ops.renew_read(v, e)
    if num(v, 'r:' .. e.owner) <= 0 then
        return 0
    end
    local deadline = math.max(now + e.lease, num(v, 'rd:' .. e.owner))
    local rn = num(v, 'rn')
    if rn == 1 then
        store_readers(v, 1, deadline, deadline)
    else
        store_readers(v, rn, math.min(num(v, 'rlo'), deadline), math.max(num(v, 'rhi'), deadline))
    end
    set(v, 'rd:' .. e.owner, deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

function ops.renew_write(v, e)
    if v.f.w ~= e.owner or num(v, 'wn') == 0 then
        return 0
    end
    local deadline = math.max(now + e.lease, num(v, 'wd'))
    set(v, 'wd', deadline)
    v.latest = math.max(v.latest, deadline)
    return 1
end

-- A waiter stops waiting: its place goes, a grant to it not claimed yet goes to the next
-- waiters, and a hold handed to it and not taken is given back (a record past its deadline
-- is not: the owner's hold is not that one any more).
function ops.withdraw(v, e)
    local owner = e.owner
    fifo_on(v.key, v.channel)
    local value = redis.call('HGET', fifo_entries, e.waiter)
    forget(e.waiter, value)
    local kind, side, live = record_of(value)
    if kind == 'h' and live then
        local release = (side == 'w') and ops.unwrite or ops.unread
        release(v, e)
        return 1
    end
    local back, field = 0, 'r:' .. owner
    if kind == 'g' and live and side == 'w' and v.f.w == owner and num(v, 'wn') == 0 then
        drop_writer(v)
        back = 1
    elseif kind == 'g' and live and side == 'r' and num(v, field) < 0 then
        -- Its grant goes; the owner's other waits granted keep theirs.
        if num(v, field) == -1 then
            drop_reader(v, owner)
        else
            set(v, field, num(v, field) + 1)
        end
        back = 1
    end
    -- Free for the next waiters: its grant, or what it held them back from as the head.
    grant(v, nil, releasing(v, e))
    return back
end

local out = {}
for i, e in ipairs(entries) do
    local v, op = views[e.key], ops[e.op]
    if v.err then
        out[i] = { 0, v.err }
    elseif not op then
        out[i] = { 0, 'ERR unknown rwlock operation' }
    else
        v.handed = {}
        out[i] = { 1, with_handed(op(v, e), v.handed) }
    end
end

-- Write each lock once. Nothing is left of a lock without a writer or readers; the key lives
-- as long as the latest deadline in it (the upper bounds), never shorter.
for _, key in ipairs(order) do
    local v = views[key]
    if not v.err and next(v.dirty) then
        if not v.f.w and num(v, 'rn') == 0 then
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
                local latest = math.max(v.latest, num(v, 'rhi'))
                if v.f.w then
                    latest = math.max(latest, num(v, 'wd'))
                end
                redis.call('PEXPIRE', key, latest - now)
            end
        end
    end
end
return out
