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

local pool, next_req = {}, 1
local pad = string.rep("x", 180)
per_batch, pool_size = 50, 2000
non200, accepted, duplicates, raw_bytes, gz_bytes = 0, 0, 0, 0, 0

function init(args)
    local key = args[1] or "demo-write-key"
    per_batch = tonumber(args[2] or "50")
    pool_size = tonumber(args[3] or "2000")
    local f = assert(io.open("/dev/urandom", "rb"))
    local hex = f:read(8):gsub(".", function(c) return string.format("%02x", c:byte()) end)
    f:close()
    local prefix = "wrkz-" .. tostring(_G.thread_no or 0) .. "-" .. hex
    local dir = "/tmp/ingestd-wrk-gzip-" .. hex
    assert(os.execute("mkdir -p " .. dir))
    local counter = 0
    for b = 1, pool_size do
        local events = {}
        for i = 1, per_batch do
            counter = counter + 1
            events[i] = string.format(
                '{"type":"track","event":"Load Test","userId":"user-%d","messageId":"%s-%d",' ..
                '"timestamp":"2026-01-01T00:00:00.000Z","properties":{"n":%d,"pad":"%s"},' ..
                '"context":{"library":{"name":"wrk","version":"4"}}}',
                counter % 1000, prefix, counter, counter, pad)
        end
        local body = '{"batch":[' .. table.concat(events, ",") .. ']}'
        raw_bytes = raw_bytes + #body
        local out = assert(io.open(string.format("%s/%06d.json", dir, b), "wb"))
        out:write(body)
        out:close()
    end
    assert(os.execute("gzip -1 -f " .. dir .. "/*.json"))
    wrk.method = "POST"
    wrk.path = "/v1/batch"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Content-Encoding"] = "gzip"
    wrk.headers["Authorization"] = "Basic " .. base64(key .. ":")
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
    local n, bad, acc, dup, raw, gz = threads[1]:get("per_batch"), 0, 0, 0, 0, 0
    for _, t in ipairs(threads) do
        bad = bad + t:get("non200")
        acc = acc + t:get("accepted")
        dup = dup + t:get("duplicates")
        raw = raw + t:get("raw_bytes")
        gz = gz + t:get("gz_bytes")
    end
    io.write(string.format("requests: %d (%d events each, gzip %.1fx smaller), non-200: %d\n",
        summary.requests, n, gz > 0 and raw / gz or 0, bad))
    io.write(string.format("accepted: %d, duplicates: %d (pool of %d batches per thread)\n",
        acc, dup, threads[1]:get("pool_size")))
    io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
