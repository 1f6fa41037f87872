"""The Lua scripts of the Redis run store (:mod:`podium.store.redis`): each fenced write
is one script, so a check and its write are atomic in Redis."""

from __future__ import annotations

from podium.store.redis_expiry import EXPIRY_MEMBER_LUA

__all__ = ("FORGET_UNSUBMITTED_LUA", "REMOVE_AT_SCORE_LUA", "THREAD_WRITE_LUA", "WRITE_LUA")

# KEYS: run hash, journal stream.
# ARGV: mode (create|update), expected version, write id "writer:counter", record, bucket,
#       tenant, created_at, ttl_ms (applied when terminal = '1'), index prefix, terminal,
#       run id, entries payload ('' = none), entry count, to submit ('1': stored queued, a
#       submit must follow), the write's time (updated_at).
# Returns {version, journal length}.
WRITE_LUA = EXPIRY_MEMBER_LUA + """
local run, journal = KEYS[1], KEYS[2]
local mode, expected, wid, rec = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local bucket, tenant, created = ARGV[5], ARGV[6], ARGV[7]
local ttl, idx, terminal, id = tonumber(ARGV[8]), ARGV[9], ARGV[10], ARGV[11]
local payload, count = ARGV[12], tonumber(ARGV[13])
local submit, written = ARGV[14], ARGV[15]
local wp, wc = string.match(wid, '^(.*):(%d+)$')
wc = tonumber(wc)
local function length()
  local last = redis.call('XREVRANGE', journal, '+', '-', 'COUNT', 1)
  if last[1] then return tonumber(string.match(last[1][1], '%-(%d+)$')) - 1 end
  return 0
end
local v, n, old
if mode == 'create' then
  if redis.call('EXISTS', run) == 1 then
    local w = redis.call('HMGET', run, 'v', 'wp', 'wc')
    -- our own create, sent again after a lost reply: it did apply, say so
    if w[2] == wp and tonumber(w[3]) == wc then return {tonumber(w[1]), length()} end
    return redis.error_reply('PODIUM_EXISTS ' .. id)
  end
  v, n, old = expected, 0, false
  redis.call('XADD', journal, '0-1', 'e', '')  -- the stream exists (empty) from now on
  redis.call('XDEL', journal, '0-1')
else
  local cur = redis.call('HMGET', run, 'v', 'wp', 'wc', 'b')
  if not cur[1] then return redis.error_reply('PODIUM_NOTFOUND ' .. id) end
  v, old = tonumber(cur[1]), cur[4]
  if cur[2] == wp and tonumber(cur[3]) >= wc then return {v, length()} end  -- a retry
  if v ~= expected then
    return redis.error_reply('PODIUM_STALE ' .. id .. ' is at version ' .. v ..
      ', this writer holds ' .. expected)
  end
  v = v + 1
  n = length()
  if redis.call('EXISTS', journal) == 1 then
    redis.call('XSETID', journal, v .. '-0')  -- journal appends of older versions now fail
  elseif terminal ~= '1' then
    -- evicted or deleted under a live run: resuming it would repeat its finished calls.
    -- Only its end may still be written.
    return redis.error_reply('PODIUM_NOTFOUND ' .. id .. ': its journal is gone from Redis')
  end
  if count > 0 then
    n = n + count
    redis.call('XADD', journal, v .. '-' .. (n + 1), 'e', payload)
  end
end
redis.call('HSET', run, 'r', rec, 'v', v, 'wp', wp, 'wc', wc, 'b', bucket)
if old ~= bucket then
  local score = tonumber(created)
  if old then
    redis.call('ZREM', idx .. 's:' .. old, id)
    redis.call('ZREM', idx .. 'ts:' .. tenant .. ':' .. old, id)
    if old == 'completed' or old == 'failed' or old == 'cancelled' then
      -- it had ended (its expiry names the old bucket): re-recorded below if it still ends
      redis.call('ZREM', idx .. 'exp', expiry_member('r', old, id, tenant))
      if terminal ~= '1' then
        redis.call('PERSIST', run)
        redis.call('PERSIST', journal)
      end
    end
  else
    redis.call('ZADD', idx .. 'all', score, id)
    redis.call('ZADD', idx .. 't:' .. tenant, score, id)
  end
  redis.call('ZADD', idx .. 's:' .. bucket, score, id)
  redis.call('ZADD', idx .. 'ts:' .. tenant .. ':' .. bucket, score, id)
end
-- queued and waiting for its submit (the queue's removes it), or moved on
if submit == '1' then
  redis.call('ZADD', idx .. 'enq', tonumber(written), id)
else
  redis.call('ZREM', idx .. 'enq', id)
end
if terminal == '1' and ttl > 0 then
  -- one expiry, on Redis's clock, for the keys and for the reaper that tidies the indexes
  local at = now_ms() + ttl
  redis.call('PEXPIREAT', run, at)
  redis.call('PEXPIREAT', journal, at)
  redis.call('ZADD', idx .. 'exp', at, expiry_member('r', bucket, id, tenant))
end
return {v, n}
"""

# A thread: KEYS: its hash. ARGV: mode (create|update), expected version, record, expiry
# (unix ms, 0 = none), index prefix, tenant, thread id, score (updated_at). Returns the
# version written. Indexes (by tenant, and all) are sorted sets; a thread that expires is
# in the expiry set too, so the reaper removes it from them.
THREAD_WRITE_LUA = EXPIRY_MEMBER_LUA + """
local key, mode, expected, rec = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3]
local exp, idx, tenant, id, score = tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local v = expected
if mode == 'create' then
  if redis.call('EXISTS', key) == 1 then
    return redis.error_reply('PODIUM_EXISTS thread ' .. id)
  end
else
  local cur = redis.call('HGET', key, 'v')
  if not cur then return redis.error_reply('PODIUM_THREAD_NOTFOUND ' .. id) end
  if tonumber(cur) ~= expected then
    return redis.error_reply('PODIUM_STALE thread ' .. id .. ' is at version ' .. cur ..
      ', this writer holds ' .. expected)
  end
  v = expected + 1
end
redis.call('HSET', key, 'r', rec, 'v', v)
if exp > 0 then
  redis.call('PEXPIREAT', key, exp)
  redis.call('ZADD', idx .. 'exp', exp, expiry_member('t', '', id, tenant))
elseif redis.call('PERSIST', key) == 1 then  -- it had an expiry until this write
  redis.call('ZREM', idx .. 'exp', expiry_member('t', '', id, tenant))
end
redis.call('ZADD', idx .. 'th:' .. tenant, score, id)
redis.call('ZADD', idx .. 'thall', score, id)
return v
"""

# KEYS: a sorted set. ARGV: pairs of member and the score it was read with. Removes each
# one still at that score (one added again since is kept): the unsubmitted runs (one queued
# again since), the runs waiting to be archived (one finished again since).
REMOVE_AT_SCORE_LUA = """
local n = 0
for i = 1, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) == tonumber(ARGV[i + 1]) then
    n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  end
end
return n
"""

FORGET_UNSUBMITTED_LUA = REMOVE_AT_SCORE_LUA
