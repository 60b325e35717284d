-- wrk script: POST /v1/batch with gzip-compressed bodies (Content-Encoding: gzip).
--
-- Usage:
--   wrk -t2 -c64 -d30s -s load/gzip.lua http://127.0.0.1:8080 -- WRITE_KEY [EVENTS_PER_BATCH] [POOL]
-- (WRITE_KEY defaults to demo-write-key, EVENTS_PER_BATCH to 50, POOL to 2000.)
-- Lua has no zlib, so before the run each wrk thread renders POOL batches of unique ~400-byte
-- track events and compresses them with the gzip command (one call per thread, `gzip -1`);
-- the run then sends the pool round-robin. The first pass is new events; once a thread has sent
-- its whole pool it starts over, and those answers are duplicates (the gzip + JSON + dedupe path
-- without log writes). The totals printed at the end say which share was which: size POOL to
-- the run (requests/s x seconds / threads) when you want new events only.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path
local common = require("common")

setup = common.setup
local pool, next_req = {}, 1
per_batch, pool_size, non200, accepted, duplicates, raw_bytes, gz_bytes = 50, 2000, 0, 0, 0, 0, 0

function init(args)
    local key = args[1] or "demo-write-key"
    per_batch = tonumber(args[2] or "50")
    pool_size = tonumber(args[3] or "2000")
    local prefix = common.random_prefix("wrkz")
    local dir = "/tmp/ingestd-wrk-gzip-" .. prefix
    assert(os.execute("mkdir -p " .. dir))
    local counter = 0
    for b = 1, pool_size do
        local events = {}
        for i = 1, per_batch do
            counter = counter + 1
            events[i] = common.event(prefix, counter)
        end
        local body = common.batch(events)
        raw_bytes = raw_bytes + #body
        local out = assert(io.open(string.format("%s/%06d.json", dir, b), "wb"))
        out:write(body)
        out:close()
    end
    assert(os.execute("gzip -1 -f " .. dir .. "/*.json"))
    common.post_batches(key)
    wrk.headers["Content-Encoding"] = "gzip"
    for b = 1, pool_size do
        local name = string.format("%s/%06d.json.gz", dir, b)
        local inp = assert(io.open(name, "rb"))
        local gz = inp:read("*a")
        inp:close()
        os.remove(name)
        gz_bytes = gz_bytes + #gz
        -- wrk sends Lua strings as they are: binary bodies are fine.
        pool[b] = wrk.format(nil, nil, nil, gz)
    end
    os.remove(dir)
end

function request()
    local r = pool[next_req]
    next_req = next_req % pool_size + 1
    return r
end

response = common.count

function done(summary, latency, requests)
    local raw, gz = common.total("raw_bytes"), common.total("gz_bytes")
    common.report(summary, latency, string.format(", gzip %.1fx smaller, pool of %d batches per thread",
        gz > 0 and raw / gz or 0, common.first("pool_size")))
end
