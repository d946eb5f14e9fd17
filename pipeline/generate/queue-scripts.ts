/**
 * The queue's Lua scripts (queue.ts runs them). Each is one step that must not come apart, run
 * atomically by Redis: putting planned samples on the stream, claiming, renewing and handing
 * back leases, accepting a record, and setting a bad entry aside. Keys are named in each
 * script's comment; queue.ts documents what each key holds.
 *
 * A stream entry is trusted only as far as it goes: one without a sample id, one whose sample
 * was never planned (a "ghost" someone else added), or one whose sample cannot be read is moved
 * to the dead-letter stream, once, by the worker that met it, and counted, instead of stopping
 * every worker that claims it.
 */

/**
 * KEYS planned, queued, stream, accepted, dead_ids; ARGV id1, json1, id2, json2 …: puts on the
 * stream each sample that is planned, not accepted and not on it yet. Returns how many it added.
 */
export const QUEUE_SAMPLES = `
local added = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[1], id) == 1 and redis.call('HEXISTS', KEYS[4], id) == 0 and redis.call('SADD', KEYS[2], id) == 1 then
    redis.call('XADD', KEYS[3], '*', 'id', id, 'sample', ARGV[i + 1])
    redis.call('SREM', KEYS[5], id)
    added = added + 1
  end
end
return added`;

/** Entries kept in the dead-letter stream at most (the count in `stats` goes on). */
export const DEAD_LETTER_KEEP = 10_000;

/**
 * The step both CLAIM and SET_ASIDE end with, as a Lua function. `id`: the entry; `fields`: its
 * fields as read; `sid`: its sample id when the entry names a planned one (that sample is then
 * counted as set aside, and may be put on the stream again by another enqueue). KEYS[1] stream,
 * KEYS[3] planned, KEYS[4] dead, KEYS[5] stats, KEYS[6] queued, KEYS[7] dead_ids; ARGV[1] group,
 * ARGV[2] consumer.
 */
const SET_ASIDE_FN = `
local function setAside(id, fields, sid, why)
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ${DEAD_LETTER_KEEP}, '*', 'entry', id, 'reason', why, 'worker', ARGV[2], 'fields', cjson.encode(fields))
  redis.call('XACK', KEYS[1], ARGV[1], id)
  redis.call('XDEL', KEYS[1], id)
  redis.call('HINCRBY', KEYS[5], 'set_aside', 1)
  if sid and redis.call('SISMEMBER', KEYS[3], sid) == 1 then
    redis.call('SREM', KEYS[6], sid)
    redis.call('SADD', KEYS[7], sid)
  end
end`;

/**
 * KEYS stream, accepted, planned, dead, stats, queued, dead_ids; ARGV group, consumer, min idle
 * ms, count, XAUTOCLAIM cursor. Entries idle past the visibility timeout first (XAUTOCLAIM:
 * Redis's clock, not the worker's), then new ones. Returns {next cursor, claimed, set aside}:
 * claimed is a flat list (entry id, sample id, sample JSON, deliveries), set aside one of
 * (entry id, why). An entry whose sample is already accepted (a second delivery) is acknowledged,
 * deleted and left out; one without a sample id, or whose sample was never planned, is set aside.
 */
export const CLAIM = `${SET_ASIDE_FN}
local out = {}
local aside = {}
local function take(id, fields)
  if not fields then return end
  local sid, json
  for i = 1, #fields, 2 do
    if fields[i] == 'id' then sid = fields[i + 1] elseif fields[i] == 'sample' then json = fields[i + 1] end
  end
  local why
  if not sid or sid == '' then why = 'the entry names no sample id'
  elseif redis.call('SISMEMBER', KEYS[3], sid) == 0 then why = 'sample ' .. string.sub(sid, 1, 200) .. ' was never planned (enqueue did not add it)'
  elseif not json then why = 'the entry holds no sample' end
  if why then
    setAside(id, fields, sid, why)
    table.insert(aside, id); table.insert(aside, why)
    return
  end
  if redis.call('HEXISTS', KEYS[2], sid) == 1 then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    redis.call('XDEL', KEYS[1], id)
    return
  end
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  local n = 1
  if p[1] then n = p[1][4] end
  table.insert(out, id); table.insert(out, sid); table.insert(out, json); table.insert(out, n)
end
local want = tonumber(ARGV[4])
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5], 'COUNT', want)
for _, e in ipairs(r[2]) do take(e[1], e[2]) end
if #out < want * 4 then
  local fresh = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', want - #out / 4, 'STREAMS', KEYS[1], '>')
  if fresh then
    for _, e in ipairs(fresh[1][2]) do take(e[1], e[2]) end
  end
end
return {r[1], out, aside}`;

/**
 * KEYS stream, accepted, planned, dead, stats, queued, dead_ids; ARGV group, consumer, entry id,
 * why, sample id (may be ''): sets aside an entry this consumer holds whose sample it could not
 * read. Returns 1, or 0 when the consumer no longer holds it (another worker will meet it).
 */
export const SET_ASIDE = `${SET_ASIDE_FN}
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if not p[1] or p[1][2] ~= ARGV[2] then return 0 end
local e = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
local fields = {}
if e[1] then fields = e[1][2] end
local sid = nil
if ARGV[5] ~= '' then sid = ARGV[5] end
setAside(ARGV[3], fields, sid, ARGV[4])
return 1`;

/**
 * KEYS stream, workers; ARGV group, consumer, worker info JSON, entry ids …: renews the leases
 * this consumer still holds (XCLAIM JUSTID resets the idle time without counting a delivery)
 * and notes when Redis last heard from it. Returns the ids it no longer holds.
 */
export const RENEW = `
local lost = {}
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    table.insert(lost, ARGV[i])
  end
end
local t = redis.call('TIME')
local info = cjson.decode(ARGV[3])
info['seen'] = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[2], cjson.encode(info))
return lost`;

/**
 * KEYS accepted, stream, stats, planned, dead_ids; ARGV group, entry id, sample id, worker, mark
 * JSON, status. Only a planned sample is accepted (an error reply NOTPLANNED otherwise: its run
 * is gone from Redis). The first mark of a sample wins; the delivery is acknowledged either way,
 * and the entry deleted (the planned set keeps the id; the stream need not keep the question).
 * A sample accepted is no longer counted as set aside (a bad copy of its entry was). Returns nil
 * when this mark was taken, or the mark that was there before (the same one when a retry of this
 * very accept follows a reply lost on the way).
 */
export const ACCEPT = `
if redis.call('SISMEMBER', KEYS[4], ARGV[3]) == 0 then return redis.error_reply('NOTPLANNED sample ' .. ARGV[3] .. ' is not planned') end
local prev = redis.call('HGET', KEYS[1], ARGV[3])
redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[2], ARGV[2])
if prev then return prev end
redis.call('HSET', KEYS[1], ARGV[3], ARGV[5])
redis.call('SREM', KEYS[5], ARGV[3])
redis.call('HINCRBY', KEYS[3], ARGV[6], 1)
redis.call('HINCRBY', KEYS[3], ARGV[4] .. '|' .. ARGV[6], 1)
return false`;

/**
 * KEYS stream; ARGV group, consumer, idle ms, entry ids …: hands back leases this consumer
 * holds (a worker stopping cleanly), marked idle so the next claim takes them at once.
 */
export const RELEASE = `
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'IDLE', ARGV[3], 'JUSTID')
  end
end
return 1`;
