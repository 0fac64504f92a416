-- election.lua: leader election on a fenced lock (`src/election/`).
--
-- The leader is the holder of the lock N; its term is its fencing token. This script keeps what
-- the lock does not: the leader's value and process, a revision counted up on every change, the
-- number of leaders so far (`transitions`, as client-go's `leaseTransitions`), the last 64
-- changes, and one message per change.
--
-- KEYS[1]  lock      P:{N}                    the lock's hash; a leader leads while it holds its field
-- KEYS[2]  state     P:{N}:election           hash: the fields of FIELDS below
-- KEYS[3]  log       P:{N}:election:log       list: the last 64 changes, oldest first, encoded
-- KEYS[4]  channel   P:{N}:election:changed   one message (the new revision) per change
-- ARGV[1]  operation: 'won', 'proclaim', 'resign', 'refresh' or 'read'
-- ARGV[2]  retention (ms): the state and log outlive the lock's lease by this long
--   won       ARGV[3] field, [4] term, [5] value, [6] client id, [7] host, [8] pid, [9] program,
--             [10] started_ms, [11] version
--   proclaim  ARGV[3] field, [4] term, [5] value
--   resign    ARGV[3] field, [4] term, [5] why: 'resigned' or 'lost'
--   refresh   ARGV[3] field, [4] term
--   read      ARGV[3] since: the last revision the caller saw (-1: only the current state)
--
-- Returns
--   won       {1, revision, vacant_ms}: recorded; vacant_ms is how long the election had been
--             recorded vacant before this win (-1 when unknown: the previous leader's lease ran
--             out unseen, or there was none); {0}: the lock does not hold `field` (its lease is
--             gone); {-1, term}: the recorded term is not below `term` (the fence went back)
--   proclaim, resign, refresh
--             {1, revision}: done; {0}: `field` with `term` does not lead (nothing changed)
--   read      {current state encoded, or '' when there is none; the lock's PTTL (-2: free);
--             the encoded changes after `since`, oldest first, at most 64}
-- Every operation but a leader's own 'resign' first records a leader whose field left the lock
-- (its lease ran out) as 'expired', so the first one to look records it. An encoded state is the values of FIELDS in
-- order, each as `<byte length>:<bytes>`.

local lock, state, log, channel = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local op, retention = ARGV[1], tonumber(ARGV[2])
local LOG_LENGTH = 64
local FIELDS = {
    'rev', 'transitions', 'state', 'why', 'term', 'field', 'client', 'host', 'pid', 'program',
    'started_ms', 'version', 'value', 'since_ms', 'at_ms',
}

local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function load()
    local flat = redis.call('HGETALL', state)
    local s = {}
    for i = 1, #flat, 2 do
        s[flat[i]] = flat[i + 1]
    end
    return s
end

local function encode(s)
    local out = {}
    for i, name in ipairs(FIELDS) do
        local v = tostring(s[name] or '')
        out[i] = #v .. ':' .. v
    end
    return table.concat(out)
end

-- The state lives as long as the lock, plus the retention.
local function keep()
    local ttl = redis.call('PTTL', lock)
    if ttl < 0 then
        ttl = 0
    end
    redis.call('PEXPIRE', state, ttl + retention)
    redis.call('PEXPIRE', log, ttl + retention)
end

-- Records the change `why` to `s` (already changed): a new revision, the log, the message.
local function record(s, why)
    s.rev = tostring((tonumber(s.rev) or 0) + 1)
    s.why = why
    s.at_ms = tostring(now_ms())
    local flat = {}
    for _, name in ipairs(FIELDS) do
        flat[#flat + 1] = name
        flat[#flat + 1] = tostring(s[name] or '')
    end
    redis.call('HSET', state, unpack(flat))
    -- RPUSH and LPOP, not LPUSH and LTRIM: the rights docs/acl.md grants already.
    local length = redis.call('RPUSH', log, encode(s))
    while length > LOG_LENGTH do
        redis.call('LPOP', log)
        length = length - 1
    end
    keep()
    redis.call('PUBLISH', channel, s.rev)
    return tonumber(s.rev)
end

-- A leader whose field left the lock lost it without telling: record that.
local function settle(s)
    if s.state == 'leading' and redis.call('HEXISTS', lock, s.field) == 0 then
        s.state = 'vacant'
        record(s, 'expired')
    end
end

local function leads(s, field, term)
    return s.state == 'leading' and s.field == field and s.term == term
end

local s = load()

if op == 'read' then
    if s.rev == nil then
        return {'', redis.call('PTTL', lock), {}}
    end
    settle(s)
    local since, rev = tonumber(ARGV[3]), tonumber(s.rev)
    local entries = {}
    if since >= 0 and rev > since then
        for k = math.min(rev - since, LOG_LENGTH), 1, -1 do
            local entry = redis.call('LINDEX', log, -k)
            if entry then
                entries[#entries + 1] = entry
            end
        end
    end
    return {encode(s), redis.call('PTTL', lock), entries}
end

local field, term = ARGV[3], ARGV[4]

if op == 'won' then
    if redis.call('HEXISTS', lock, field) == 0 then
        return {0}
    end
    if leads(s, field, term) then
        -- A retry of a win already recorded.
        return {1, tonumber(s.rev), -1}
    end
    local now = now_ms()
    local vacant_ms = -1
    if s.state == 'vacant' and tonumber(s.at_ms) then
        vacant_ms = now - tonumber(s.at_ms)
    end
    settle(s)
    if tonumber(s.term) and tonumber(s.term) >= tonumber(term) then
        return {-1, tonumber(s.term)}
    end
    s.state = 'leading'
    s.term, s.field, s.value = term, field, ARGV[5]
    s.client, s.host, s.pid, s.program = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
    s.started_ms, s.version = ARGV[10], ARGV[11]
    s.transitions = tostring((tonumber(s.transitions) or 0) + 1)
    s.since_ms = tostring(now)
    return {1, record(s, 'elected'), vacant_ms}
end

if op == 'resign' then
    -- Before `settle`: a leader that found its own lease gone says 'lost' rather than leaving
    -- the next reader to record 'expired'.
    if not leads(s, field, term) then
        settle(s)
        return {0}
    end
    s.state = 'vacant'
    return {1, record(s, ARGV[5])}
end

settle(s)

if op == 'proclaim' then
    if not leads(s, field, term) then
        return {0}
    end
    s.value = ARGV[5]
    return {1, record(s, 'proclaimed')}
elseif op == 'refresh' then
    if not leads(s, field, term) then
        return {0}
    end
    keep()
    return {1, tonumber(s.rev)}
end
return redis.error_reply('ERR unknown election operation')
