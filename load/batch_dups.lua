-- wrk script: POST /v1/batch with batches of ~400-byte track events, a share of them exact
-- re-sends of events this thread sent before (same messageId, same bytes), as client retries are.
--
-- Usage:
--   wrk -t2 -c64 -d30s -s load/batch_dups.lua http://127.0.0.1:8080 -- WRITE_KEY [DUP_RATIO] [EVENTS_PER_BATCH]
-- (WRITE_KEY defaults to demo-write-key, DUP_RATIO to 0.01, EVENTS_PER_BATCH to 50.)
-- At the end it prints the accepted and duplicates totals parsed from the 200 bodies; with
-- DUP_RATIO r about r of the events should come back as duplicates. A response() function
-- makes wrk parse every answer, which costs wrk some CPU: use batch.lua for the plain figure.

local threads = {}

function setup(thread)
    thread:set("thread_no", #threads + 1)
    table.insert(threads, thread)
end

local function base64(s)
    local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    local out = {}
    for i = 1, #s, 3 do
        local a, b, c = s:byte(i, i + 2)
        local n = a * 65536 + (b or 0) * 256 + (c or 0)
        local c1, c2 = math.floor(n / 262144) % 64, math.floor(n / 4096) % 64
        local c3, c4 = math.floor(n / 64) % 64, n % 64
        out[#out + 1] = chars:sub(c1 + 1, c1 + 1) .. chars:sub(c2 + 1, c2 + 1) ..
            (b and chars:sub(c3 + 1, c3 + 1) or "=") .. (c and chars:sub(c4 + 1, c4 + 1) or "=")
    end
    return table.concat(out)
end

local prefix, counter, dup_ratio
local pad = string.rep("x", 180) -- brings one event to ~400 bytes of JSON
per_batch = 50
non200, accepted, duplicates = 0, 0, 0

function init(args)
    local key = args[1] or "demo-write-key"
    dup_ratio = tonumber(args[2] or "0.01")
    per_batch = tonumber(args[3] or "50")
    local f = assert(io.open("/dev/urandom", "rb"))
    local rnd = f:read(8)
    f:close()
    prefix = "wrkd-" .. tostring(_G.thread_no or 0) .. "-" ..
        rnd:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    -- Seeded per thread so the threads choose different ids to re-send.
    math.randomseed(rnd:byte(1) * 16777216 + rnd:byte(2) * 65536 + rnd:byte(3) * 256 + rnd:byte(4))
    counter = 0
    wrk.method = "POST"
    wrk.path = "/v1/batch"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Basic " .. base64(key .. ":")
end

-- The bytes of event n depend on n alone, so a re-send is exact.
local function event(n)
    return string.format(
        '{"type":"track","event":"Load Test","userId":"user-%d","messageId":"%s-%d",' ..
        '"timestamp":"2026-01-01T00:00:00.000Z","properties":{"n":%d,"pad":"%s"},' ..
        '"context":{"library":{"name":"wrk","version":"4"}}}',
        n % 1000, prefix, n, n, pad)
end

function request()
    local events = {}
    for i = 1, per_batch do
        local n
        if counter > 0 and math.random() < dup_ratio then
            n = math.random(1, counter) -- an event this thread sent before
        else
            counter = counter + 1
            n = counter
        end
        events[i] = event(n)
    end
    return wrk.format(nil, nil, nil, '{"batch":[' .. table.concat(events, ",") .. ']}')
end

function response(status, headers, body)
    if status ~= 200 then
        non200 = non200 + 1
        if non200 <= 5 then
            io.stderr:write(string.format("HTTP %d: %s\n", status, body))
        end
        return
    end
    accepted = accepted + tonumber(body:match('"accepted":(%d+)') or "0")
    duplicates = duplicates + tonumber(body:match('"duplicates":(%d+)') or "0")
end

function done(summary, latency, requests)
    local n, bad, acc, dup = threads[1]:get("per_batch"), 0, 0, 0
    for _, t in ipairs(threads) do
        bad = bad + t:get("non200")
        acc = acc + t:get("accepted")
        dup = dup + t:get("duplicates")
    end
    io.write(string.format("requests: %d (%d events each), non-200: %d\n",
        summary.requests, n, bad))
    io.write(string.format("accepted: %d, duplicates: %d (%.2f%%)\n", acc, dup,
        acc + dup > 0 and 100 * dup / (acc + dup) or 0))
    io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
