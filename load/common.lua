-- common.lua: what the wrk scripts in load/ share (events, auth, answer counting, the report).
-- Each script loads it with require, relative to its own path, so any working directory works.

local M = {}

local threads = {} -- in wrk's main Lua state: setup() fills it, done() reads it

function M.setup(thread)
    thread:set("thread_no", #threads + 1)
    table.insert(threads, thread)
end

function M.base64(s)
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

-- A prefix that is new for every thread and run, so ids never repeat across them; also the
-- 8 random bytes it was made from (for seeding).
function M.random_prefix(tag)
    local f = assert(io.open("/dev/urandom", "rb"))
    local rnd = f:read(8)
    f:close()
    local hex = rnd:gsub(".", function(c) return string.format("%02x", c:byte()) end)
    return tag .. "-" .. tostring(_G.thread_no or 0) .. "-" .. hex, rnd
end

local pad = string.rep("x", 180) -- brings one event to ~400 bytes of JSON

-- The bytes of event n depend on prefix and n alone, so a re-send is exact.
function M.event(prefix, n)
    return string.format(
        '{"type":"track","event":"Load Test","userId":"user-%d","messageId":"%s-%d",' ..
        '"timestamp":"2026-01-01T00:00:00.000Z","properties":{"n":%d,"pad":"%s"},' ..
        '"context":{"library":{"name":"wrk","version":"4"}}}',
        n % 1000, prefix, n, n, pad)
end

function M.batch(events)
    return '{"batch":[' .. table.concat(events, ",") .. ']}'
end

-- POST /v1/batch with HTTP Basic auth for `key`.
function M.post_batches(key)
    wrk.method = "POST"
    wrk.path = "/v1/batch"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Basic " .. M.base64(key .. ":")
end

-- Use as wrk's response(): counts an answer into the thread's globals non200, accepted, duplicates.
function M.count(status, headers, body)
    if status ~= 200 then
        non200 = (non200 or 0) + 1
        if non200 <= 5 then
            io.stderr:write(string.format("HTTP %d: %s\n", status, body))
        end
        return
    end
    accepted = (accepted or 0) + tonumber(body:match('"accepted":(%d+)') or "0")
    duplicates = (duplicates or 0) + tonumber(body:match('"duplicates":(%d+)') or "0")
end

-- Sum of a global over all threads (done() runs in the main state: values via thread:get()).
function M.total(name)
    local sum = 0
    for _, t in ipairs(threads) do
        sum = sum + (t:get(name) or 0)
    end
    return sum
end

function M.first(name)
    return threads[1]:get(name)
end

function M.report(summary, latency, extra)
    local acc, dup = M.total("accepted"), M.total("duplicates")
    io.write(string.format("requests: %d (%d events each%s), non-200: %d\n", summary.requests,
        M.first("per_batch"), extra or "", M.total("non200")))
    io.write(string.format("accepted: %d, duplicates: %d (%.2f%%)\n", acc, dup,
        acc + dup > 0 and 100 * dup / (acc + dup) or 0))
    io.write(string.format("latency p50 %.2f ms, p99 %.2f ms\n",
        latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end

return M
