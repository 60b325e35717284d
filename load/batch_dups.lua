-- wrk script: POST /v1/batch with batches of ~400-byte track events, a share of them exact
-- re-sends of events this thread sent before (same messageId, same bytes), as client retries are.
--
-- Usage:
--   wrk -t2 -c64 -d30s -s load/batch_dups.lua http://127.0.0.1:8080 -- WRITE_KEY [DUP_RATIO] [EVENTS_PER_BATCH]
-- (WRITE_KEY defaults to demo-write-key, DUP_RATIO to 0.01, EVENTS_PER_BATCH to 50.)
-- At the end it prints the accepted and duplicates totals parsed from the 200 bodies; with
-- DUP_RATIO r about r of the events should come back as duplicates. A response() function
-- makes wrk parse every answer, which costs wrk some CPU: use batch.lua for the plain figure.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
package.path = here .. "?.lua;" .. package.path
local common = require("common")

setup = common.setup
local prefix, counter, dup_ratio
per_batch, non200, accepted, duplicates = 50, 0, 0, 0 -- globals: done() reads them

function init(args)
    local key = args[1] or "demo-write-key"
    dup_ratio = tonumber(args[2] or "0.01")
    per_batch = tonumber(args[3] or "50")
    local rnd
    prefix, rnd = common.random_prefix("wrkd")
    -- Seeded per thread so the threads choose different ids to re-send.
    math.randomseed(rnd:byte(1) * 16777216 + rnd:byte(2) * 65536 + rnd:byte(3) * 256 + rnd:byte(4))
    counter = 0
    common.post_batches(key)
end

function request()
    local events = {}
    for i = 1, per_batch do
        local n
        if counter > 0 and math.random() < dup_ratio then
            n = math.random(1, counter) -- an event this thread sent before: an exact re-send
        else
            counter = counter + 1
            n = counter
        end
        events[i] = common.event(prefix, n)
    end
    return wrk.format(nil, nil, nil, common.batch(events))
end

response = common.count

function done(summary, latency, requests)
    common.report(summary, latency)
end
