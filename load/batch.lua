-- wrk script: POST /v1/batch with 50 track events of ~400 bytes each, every messageId unique.
--
-- Usage:
--   wrk -t2 -c32 -d30s -s load/batch.lua http://127.0.0.1:8080 -- WRITE_KEY [EVENTS_PER_BATCH]
-- (WRITE_KEY defaults to demo-write-key, EVENTS_PER_BATCH to 50.)
-- Each wrk thread gets its own random prefix, so ids never repeat across threads or runs:
-- every event should come back "accepted", none "duplicates".

local threads = {}

function setup(thread)
    -- Runs in the main Lua state; thread:set() makes a global in that thread's state.
    thread:set("thread_no", #threads + 1)
    table.insert(threads, thread)
end

local function base64(s)
    local chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return ((s:gsub(".", function(c)
        local bits, byte = "", c:byte()
        for i = 8, 1, -1 do
            bits = bits .. (byte % 2 ^ i - byte % 2 ^ (i - 1) > 0 and "1" or "0")
        end
        return bits
    end) .. "0000"):gsub("%d%d%d?%d?%d?%d?", function(bits)
        if #bits < 6 then
            return ""
        end
        local n = 0
        for i = 1, 6 do
            n = n + (bits:sub(i, i) == "1" and 2 ^ (6 - i) or 0)
        end
        return chars:sub(n + 1, n + 1)
    end) .. ({ "", "==", "=" })[#s % 3 + 1])
end

local prefix, counter
local pad = string.rep("x", 180) -- brings one event to ~400 bytes of JSON
per_batch = 50 -- global: done() reads it from a thread
non200 = 0

function init(args)
    local key = args[1] or "demo-write-key"
    per_batch = tonumber(args[2] or "50")
    -- A random prefix per thread and run: ids never repeat across threads or runs.
    local f = assert(io.open("/dev/urandom", "rb"))
    local rnd = f:read(8)
    f:close()
    prefix = "wrk-" .. tostring(_G.thread_no or 0) .. "-" ..
        rnd:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    counter = 0
    wrk.method = "POST"
    wrk.path = "/v1/batch"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Basic " .. base64(key .. ":")
end

function request()
    local events = {}
    for i = 1, per_batch do
        counter = counter + 1
        events[i] = string.format(
            '{"type":"track","event":"Load Test","userId":"user-%d","messageId":"%s-%d",' ..
            '"timestamp":"2026-01-01T00:00:00.000Z","properties":{"n":%d,"pad":"%s"},' ..
            '"context":{"library":{"name":"wrk","version":"4"}}}',
            counter % 1000, prefix, counter, counter, pad)
    end
    return wrk.format(nil, nil, nil, '{"batch":[' .. table.concat(events, ",") .. ']}')
end

function response(status, headers, body)
    if status ~= 200 then
        non200 = non200 + 1
        if non200 <= 5 then
            io.stderr:write(string.format("HTTP %d: %s\n", status, body))
        end
    end
end

function done(summary, latency, requests)
    -- done() runs in the main Lua state: per-thread values come through thread:get().
    local n, bad = threads[1]:get("per_batch"), 0
    for _, t in ipairs(threads) do
        bad = bad + t:get("non200")
    end
    io.write(string.format("requests: %d (%d events each), non-200: %d\n",
        summary.requests, n, bad))
    io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
