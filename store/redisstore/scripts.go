package redisstore

import "github.com/redis/go-redis/v9"

// The scripts run atomically in Redis: each decision is one round trip, and no
// other instance can slip a reservation between the check and the record.
//
// A model's keys share the hash tag {provider/model}, so a script only
// touches one Redis Cluster slot. Its window is three of them, and its state:
//
//	…:w   sorted set: entry id → admission time (ms)
//	…:t   hash: entry id → tokens (the reservation, then the real usage)
//	…:s   the sum of …:t, kept so a check is O(1) and not a scan
//	…:o   hash: the ids not settled yet → their nonce, so a settle counts once,
//	      wherever it comes from, and only with the nonce the reservation got
//	      (":sent" appended once a send was reported: see sentScript)
//	…:q   the id sequence
//	…:cd  the cooldown's end (ms)
//	…:i   sorted set: the instances competing for the model → when they last did (ms)
//
// and, for a model with an output limit (gate.SharedReserve.OutputBudget),
// its output window: the calls recorded with an output reserve, in a window
// of their own so an instance that does not keep it (an older version, during
// a rolling upgrade) neither breaks nor empties it — it only leaves its own
// calls' output out (so while both versions run, the key can go over its
// output limit by what the older instances write):
//
//	…:ow  sorted set: entry id → admission time (ms), as in …:w
//	…:ot  hash: entry id → output tokens (the reserve, then what it wrote)
//	…:os  the sum of …:ot
//
// Every write refreshes a TTL of two windows: a model nobody calls leaves
// nothing behind.

// expireLua drops the entries older than cutoff from a window (zset w, hash
// t, sum s; o, the open entries' nonces, for the token window, nil for the
// output window) and returns the new sum; untilFits is how long until a
// window has room for need under budget: 0 when it has. They are the common
// prologue of the scripts that read a window.
const expireLua = `
local function expire(w, t, s, o, cutoff, ttl)
  local sum = tonumber(redis.call('GET', s) or '0')
  if redis.call('EXISTS', w) == 0 then sum = 0 end -- the entries expired before their sum: nothing is left to count
  while true do
    local old = redis.call('ZRANGEBYSCORE', w, '-inf', cutoff, 'LIMIT', 0, 500)
    if #old == 0 then break end
    local ts = redis.call('HMGET', t, unpack(old))
    for i = 1, #ts do
      if ts[i] then sum = sum - tonumber(ts[i]) end
    end
    redis.call('ZREM', w, unpack(old))
    redis.call('HDEL', t, unpack(old))
    if o then redis.call('HDEL', o, unpack(old)) end
  end
  if sum < 0 then sum = 0 end
  redis.call('SET', s, sum, 'PX', ttl)
  return sum
end
local function untilFits(w, t, sum, need, budget, now, span)
  if sum + need <= budget then return 0 end
  -- walk from the oldest entry until enough of the window has left
  local freed, off = 0, 0
  while true do
    local es = redis.call('ZRANGE', w, off, off + 199, 'WITHSCORES')
    if #es == 0 then break end
    local ids = {}
    for i = 1, #es, 2 do ids[#ids + 1] = es[i] end
    local ts = redis.call('HMGET', t, unpack(ids))
    for i = 1, #ids do
      freed = freed + tonumber(ts[i] or '0')
      if sum - freed + need <= budget then
        return math.max(1, tonumber(es[2 * i]) + span - now)
      end
    end
    off = off + 200
  end
  return span
end
`

// reserveScript: KEYS w t s q cd o ow ot os i; ARGV now span tokens need budget
// rpm force ttl nonce output outputBudget instance activeSpan queued, then n
// and the entry and output of n calls in flight, then the time (ms) and
// output of settled calls: what the instance's output window held before the
// output limit was known, added to the output window first. Returns {id, wait
// ms, reason, window tokens, window output, instances}: an id when the call
// was recorded, else the time until it could fit and what holds it; and how
// many instances compete for the model: those that queued a call (queued 1)
// or had one refused here within activeSpan ms.
// outputBudget 0 leaves the output window alone; below 0 records the output
// without checking it (a call larger than the whole output budget, which goes
// at once).
//
// …:i is a sorted set of the instances competing: instance id → when it last
// queued a call or had one refused (ms). Each paces its calls at its share of
// the key's pace (gate's pacing.go, paceShareLocked).
var reserveScript = redis.NewScript(expireLua + `
local now, span = tonumber(ARGV[1]), tonumber(ARGV[2])
local tokens, need, budget = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local rpm, force, ttl = tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
local out, outBudget = tonumber(ARGV[10]), tonumber(ARGV[11])
-- the instances competing for the model: this one counts from a call it
-- queues or that is refused here (one granted at once, with nothing queued,
-- does not compete) until activeSpan later
local function asking(competes)
  if competes then
    redis.call('ZADD', KEYS[10], now, ARGV[12])
    redis.call('PEXPIRE', KEYS[10], ttl)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', now - tonumber(ARGV[13]))
  return redis.call('ZCARD', KEYS[10])
end
local sum = expire(KEYS[1], KEYS[2], KEYS[3], KEYS[6], now - span, ttl)
local osum = 0
if outBudget ~= 0 then
  osum = expire(KEYS[7], KEYS[8], KEYS[9], nil, now - span, ttl)
  -- what the instance's output window held before the output limit was
  -- known: its calls in flight (entry, output: from when the entry counts,
  -- unless there already), then what settled (at, output: a closed entry)
  local open = tonumber(ARGV[15] or '0')
  for i = 16, 15 + 2 * open, 2 do
    local at = redis.call('ZSCORE', KEYS[1], ARGV[i])
    if at and redis.call('HEXISTS', KEYS[8], ARGV[i]) == 0 then
      redis.call('ZADD', KEYS[7], at, ARGV[i])
      redis.call('HSET', KEYS[8], ARGV[i], ARGV[i + 1])
      osum = osum + tonumber(ARGV[i + 1])
    end
  end
  for i = 16 + 2 * open, #ARGV - 1, 2 do
    if tonumber(ARGV[i]) > now - span then
      local id = 'b' .. redis.call('INCR', KEYS[4])
      while redis.call('HEXISTS', KEYS[8], id) == 1 do id = 'b' .. redis.call('INCR', KEYS[4]) end -- (see the entry's id below)
      redis.call('ZADD', KEYS[7], ARGV[i], id)
      redis.call('HSET', KEYS[8], id, ARGV[i + 1])
      osum = osum + tonumber(ARGV[i + 1])
    end
  end
  redis.call('SET', KEYS[9], osum, 'PX', ttl)
  for _, i in ipairs({4, 7, 8}) do redis.call('PEXPIRE', KEYS[i], ttl) end -- (none on a key that is not there)
end
if not force then
  local cd = tonumber(redis.call('GET', KEYS[5]) or '0')
  if cd > now then return {'', cd - now, 'cooldown', sum, osum, asking(true)} end
  if rpm > 0 then
    local n = redis.call('ZCARD', KEYS[1])
    if n >= rpm then
      local e = redis.call('ZRANGE', KEYS[1], n - rpm, n - rpm, 'WITHSCORES')
      return {'', math.max(1, tonumber(e[2]) + span - now), 'rpm', sum, osum, asking(true)}
    end
  end
  if budget > 0 then
    local wait = untilFits(KEYS[1], KEYS[2], sum, need, budget, now, span)
    if wait > 0 then return {'', wait, 'tpm', sum, osum, asking(true)} end
  end
  if outBudget > 0 then
    local wait = untilFits(KEYS[7], KEYS[8], osum, out, outBudget, now, span)
    if wait > 0 then return {'', wait, 'otpm', sum, osum, asking(true)} end
  end
end
-- The sequence may be gone while entries it gave out are not (its TTL runs
-- from the last reservation, a sent entry's from its send; an eviction policy
-- may drop it alone): an id still in the window is never given out again —
-- the new entry would overwrite the old one, whose settle would then be
-- refused and whose tokens would stay in the sum.
local id = redis.call('INCR', KEYS[4])
while redis.call('ZSCORE', KEYS[1], id) or redis.call('HEXISTS', KEYS[6], id) == 1 or
    (outBudget ~= 0 and redis.call('HEXISTS', KEYS[8], id) == 1) do
  id = redis.call('INCR', KEYS[4])
end
redis.call('ZADD', KEYS[1], now, id)
redis.call('HSET', KEYS[2], id, tokens)
redis.call('HSET', KEYS[6], id, ARGV[9])
redis.call('PEXPIRE', KEYS[6], ttl)
sum = sum + tokens
redis.call('SET', KEYS[3], sum, 'PX', ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[4], ttl)
if outBudget ~= 0 and out > 0 then
  redis.call('ZADD', KEYS[7], now, id)
  redis.call('HSET', KEYS[8], id, out)
  osum = osum + out
  redis.call('SET', KEYS[9], osum, 'PX', ttl)
  redis.call('PEXPIRE', KEYS[7], ttl)
  redis.call('PEXPIRE', KEYS[8], ttl)
end
return {tostring(id), 0, '', sum, osum, asking(ARGV[14] == '1')}
`)

// writeBackScript: KEYS w t s q o ow ot os; ARGV cutoff ttl, then at tokens
// output for each call. Records closed calls an instance admitted while the
// store was down (gate.SharedWriteBack), each from its time, those at cutoff
// or before left out; a call's output goes to the output window when it is
// above 0. Closed: no nonce in …:o, so no settle touches them. Returns the
// window's tokens.
var writeBackScript = redis.NewScript(expireLua + `
local cutoff, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local sum = expire(KEYS[1], KEYS[2], KEYS[3], KEYS[5], cutoff, ttl)
local withOut = false -- the output window only for a model whose calls carry output
for i = 5, #ARGV, 3 do
  if tonumber(ARGV[i]) > 0 then withOut = true end
end
local osum = 0
if withOut then osum = expire(KEYS[6], KEYS[7], KEYS[8], nil, cutoff, ttl) end
for i = 3, #ARGV - 2, 3 do
  local at, tokens, out = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  if at > cutoff then
    local id = redis.call('INCR', KEYS[4])
    redis.call('ZADD', KEYS[1], at, id)
    redis.call('HSET', KEYS[2], id, tokens)
    sum = sum + tokens
    if out > 0 then
      redis.call('ZADD', KEYS[6], at, id)
      redis.call('HSET', KEYS[7], id, out)
      osum = osum + out
    end
  end
end
redis.call('SET', KEYS[3], sum, 'PX', ttl)
for _, i in ipairs({1, 2, 4}) do redis.call('PEXPIRE', KEYS[i], ttl) end
if withOut then
  redis.call('SET', KEYS[8], osum, 'PX', ttl)
  for _, i in ipairs({6, 7}) do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return sum
`)

// closeScript: KEYS w t s o [ow ot os]; ARGV id tokens channel note nonce [output]. Replaces an open
// entry's reservation with the real usage (0 for a release: the request still
// counts, its tokens do not) and announces the refund on the model's channel so
// waiting instances try again; note, when not empty, is announced too (a
// ticket settled on another instance than its own). Returns the tokens
// refunded (below 0 when the call used more than it reserved), or nil when
// the entry is closed already or left the window.
// tokens -1 keeps the reservation (an abandoned call: the provider had it):
// note is then the ticket alone, announced as "s <kept> <ticket>", and the
// return is the tokens kept.
//
// KEYS ow ot os and ARGV output, when given, settle the entry's output too:
// output below 0 (not known, as for a call another instance settled) keeps
// its output reserve.
var closeScript = redis.NewScript(`
local held = redis.call('HGET', KEYS[4], ARGV[1])
if held ~= ARGV[5] and held ~= ARGV[5] .. ':sent' then return false end
redis.call('HDEL', KEYS[4], ARGV[1])
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if not cur then return false end
cur = tonumber(cur)
local tokens = tonumber(ARGV[2])
if tokens == -1 then
  if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[3], 's ' .. cur .. ' ' .. ARGV[4]) end
  return cur
end
local ttl = redis.call('PTTL', KEYS[2])
if ttl < 1000 then ttl = 1000 end
local sum = tonumber(redis.call('GET', KEYS[3]) or '0') + tokens - cur
if sum < 0 then sum = 0 end
redis.call('HSET', KEYS[2], ARGV[1], tokens)
redis.call('SET', KEYS[3], sum, 'PX', ttl)
local freed = tokens < cur
local out = tonumber(ARGV[6] or '-1')
if #KEYS >= 7 and out >= 0 then
  local oc = redis.call('HGET', KEYS[6], ARGV[1])
  if oc then
    oc = tonumber(oc)
    local osum = tonumber(redis.call('GET', KEYS[7]) or '0') + out - oc
    if osum < 0 then osum = 0 end
    local ottl = redis.call('PTTL', KEYS[6]) -- the output window's own: a sum never outlives its entries
    if ottl < 1000 then ottl = 1000 end
    redis.call('HSET', KEYS[6], ARGV[1], out)
    redis.call('SET', KEYS[7], osum, 'PX', ottl)
    freed = freed or out < oc
  end
end
if freed then redis.call('PUBLISH', ARGV[3], 'r') end
if ARGV[4] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
return cur - tokens
`)

// sentScript: KEYS w t s o ow ot os; ARGV id at nonce ttl. Moves an open entry to at
// (ms), the time its call was sent, when it counts from earlier: the window
// then frees it when the provider does, and the window's keys live two
// windows from now, past the moved entry. A call is sent once: the first
// report marks the entry (its nonce gains ":sent"), and a later one — the
// same send reported again, to this instance or another — leaves it where the
// first put it. Returns 1 when it moved, 0 when the entry counts from at or
// later or was reported sent already, -1 when it is settled, gone or held
// under another nonce. An entry admitted more than a window before the send
// is moved too while it is still here (no admission since dropped it as
// expired): the provider counts the call from its send.
var sentScript = redis.NewScript(`
local held = redis.call('HGET', KEYS[4], ARGV[1])
if held == ARGV[3] .. ':sent' then return 0 end
if held ~= ARGV[3] then return -1 end
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur then return -1 end
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3] .. ':sent')
if tonumber(cur) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 'XX', ARGV[2], ARGV[1])
local ttl = tonumber(ARGV[4])
for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
if #KEYS >= 7 and redis.call('ZADD', KEYS[5], 'XX', 'CH', ARGV[2], ARGV[1]) == 1 then
  for i = 5, 7 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 1
`)

// outputWindowScript: KEYS ow ot os; ARGV now span ttl. The output window's
// sum at now, its entries older than span dropped; 0 when there is none.
var outputWindowScript = redis.NewScript(expireLua + `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return expire(KEYS[1], KEYS[2], KEYS[3], nil, tonumber(ARGV[1]) - tonumber(ARGV[2]), tonumber(ARGV[3]))
`)

// cooldownScript: KEYS cd s; ARGV until ttl. Extends the cooldown to until —
// a shorter cooldown never shortens a longer one — and returns the window's
// tokens.
var cooldownScript = redis.NewScript(`
local untilMs, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if untilMs > cur then
  redis.call('SET', KEYS[1], untilMs, 'PX', ttl)
end
return tonumber(redis.call('GET', KEYS[2]) or '0')
`)

// spendScript spends one round of a session's retry budget (retry.BudgetSpend:
// the same rules as BudgetSpend.Apply), with the limits checked here, so two
// instances planning a retry for the same session at once cannot both spend
// the last round. The record is the JSON of retry.Budget.
//
// KEYS: record. ARGV: turn, step, perStep (0|1), counter, limit (<0
// unbounded), kind, kindLimit (<0: no kind), updatedAt (RFC 3339), ttl ms.
// Returns {spent (0|1), the record's JSON after}.
var spendScript = redis.NewScript(`
local raw = redis.call('GET', KEYS[1])
local b = nil
if raw then
  local ok, v = pcall(cjson.decode, raw)
  if ok and type(v) == 'table' then b = v end
end
local step = tonumber(ARGV[2])
if not b or b.turn ~= ARGV[1] or (ARGV[3] == '1' and tonumber(b.step) ~= step) then
  b = {turn = ARGV[1], rounds = 0, mislabeled = 0, longTerm = 0}
end
b.step = step
local counter, limit = ARGV[4], tonumber(ARGV[5])
local kind, kindLimit = ARGV[6], tonumber(ARGV[7])
local n = tonumber(b[counter]) or 0
local spent = 0
local known = kind == 'dns' or kind == 'refused' or kind == 'reset' or kind == 'timeout'
if kindLimit >= 0 then
  if type(b.transport) ~= 'table' then b.transport = nil end
  local kn = 0
  if known and b.transport then kn = tonumber(b.transport[kind]) or 0 end
  if kn < kindLimit and (limit < 0 or n < limit) then
    if known then
      b.transport = b.transport or {}
      b.transport[kind] = kn + 1
    end
    spent = 1
  end
elseif limit < 0 or n < limit then
  spent = 1
end
if spent == 1 then
  b[counter] = n + 1
  b.updatedAt = ARGV[8]
  raw = cjson.encode(b)
  redis.call('SET', KEYS[1], raw, 'PX', ARGV[9])
  return {1, raw}
end
return {0, cjson.encode(b)}
`)
