-- wrk script: POST /v1/batch with 50 track events of ~400 bytes each, every messageId unique.
--
-- Usage:
--   wrk -t2 -c32 -d30s -s load/batch.lua http://127.0.0.1:8080 -- WRITE_KEY [EVENTS_PER_BATCH]
-- (WRITE_KEY defaults to demo-write-key, EVENTS_PER_BATCH to 50.)
-- Each wrk thread gets its own random prefix, so ids never repeat across threads or runs:
-- every event should come back "accepted", none "duplicates".

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path
local common = require("common")

setup = common.setup
local prefix, counter
per_batch, non200, accepted, duplicates = 50, 0, 0, 0 -- globals: done() reads them

function init(args)
    local key = args[1] or "demo-write-key"
    per_batch = tonumber(args[2] or "50")
    prefix = common.random_prefix("wrk")
    counter = 0
    common.post_batches(key)
end

function request()
    local events = {}
    for i = 1, per_batch do
        counter = counter + 1
        events[i] = common.event(prefix, counter)
    end
    return wrk.format(nil, nil, nil, common.batch(events))
end

response = common.count

function done(summary, latency, requests)
    common.report(summary, latency)
end
